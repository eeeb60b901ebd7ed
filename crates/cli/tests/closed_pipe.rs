//! The commands that need no daemon, their output into a pipe whose reader is gone, on every OS
//! (under Wine for Windows, where a closed pipe's write fails with ERROR_NO_DATA rather than
//! EPIPE): no panic, the status the command has with a reader. The commands that call the daemon
//! are checked against the real daemon in tests/behaviour.rs.

use std::process::{Command, Stdio};

/// The CLI cargo built beside this test (`target/<triple>/debug/`; the test is in `deps/`): the
/// Windows cross build does not set CARGO_BIN_EXE_*.
fn ctl() -> std::path::PathBuf {
    let me = std::env::current_exe().unwrap();
    let exe = me
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join(format!("csi-proxyctl{}", std::env::consts::EXE_SUFFIX));
    assert!(exe.exists(), "{} not built", exe.display());
    exe
}

#[test]
fn output_into_a_closed_pipe_is_dropped_quietly() {
    for args in [&["--help"][..], &["-version"], &["methods"], &["-o", "json", "methods"], &["-o", "wide", "methods"]] {
        let with_reader = Command::new(ctl()).args(args).stdin(Stdio::null()).output().unwrap();
        assert_eq!(with_reader.status.code(), Some(0), "{args:?}");
        assert!(!with_reader.stdout.is_empty(), "{args:?}");

        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let closed =
            Command::new(ctl()).args(args).stdin(Stdio::null()).stdout(writer).stderr(Stdio::piped()).output().unwrap();
        let stderr = String::from_utf8_lossy(&closed.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(closed.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}
