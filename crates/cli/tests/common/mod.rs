//! The fixture the CLI's tests share: the real `csi-proxy` daemon on a socket directory of its
//! own, and the real `csi-proxyctl` against it.
#![allow(dead_code)] // each test file uses part of it

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const CTL: &str = env!("CARGO_BIN_EXE_csi-proxyctl");

/// A running daemon serving every API in `dir/sock`, with `dir/kubelet` as its kubelet path;
/// killed, and `dir` removed, on drop.
pub struct Daemon {
    pub child: Child,
    pub dir: PathBuf,
}

impl Daemon {
    pub fn start(tag: &str) -> Daemon {
        Self::start_with(tag, &[])
    }

    /// With more of the daemon's flags.
    pub fn start_with(tag: &str, flags: &[&str]) -> Daemon {
        let dir = std::env::temp_dir().join(format!("csi-proxyctl-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("kubelet")).unwrap();
        let child = Command::new(csi_proxy_stack_tests::sibling::binary(CTL, "csi-proxy", "csi-proxy", false))
            .arg("-socket-dir")
            .arg(dir.join("sock"))
            .arg("-kubelet-path")
            .arg(dir.join("kubelet"))
            .args(flags)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let d = Daemon { child, dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::fs::read_dir(d.dir.join("sock"))
            .map(|r| r.filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "sock")).count())
            .unwrap_or(0)
            < 23
        {
            assert!(Instant::now() < deadline, "the daemon did not create its sockets");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Health turns SERVING once every endpoint is served, a moment after the sockets exist.
        while text(&d.ctl(&["apis"]).stdout).contains("NOT_SERVING") {
            assert!(Instant::now() < deadline, "the daemon did not turn SERVING");
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    /// `csi-proxyctl -socket-dir <ours> <args>`, stdin not a terminal.
    pub fn ctl(&self, args: &[&str]) -> Output {
        Command::new(CTL)
            .arg("-socket-dir")
            .arg(self.dir.join("sock"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    pub fn kubelet(&self, name: &str) -> String {
        self.dir.join("kubelet").join(name).display().to_string()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
