//! `csi-proxyctl conformance -list`, the real binary, with no daemon anywhere: the table of
//! checks (name, OS, what a pass settles) as text and as JSON, exit status 0, and nothing made
//! under the kubelet path or at the socket directory.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// The CLI cargo built beside this test (`target/<triple>/debug/`; the test is in `deps/`): the
/// Windows cross build does not set CARGO_BIN_EXE_*.
fn ctl() -> PathBuf {
    let me = std::env::current_exe().unwrap();
    let exe = me
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join(format!("csi-proxyctl{}", std::env::consts::EXE_SUFFIX));
    assert!(exe.exists(), "{} not built", exe.display());
    exe
}

/// `conformance -list` and `more`, pointed at a socket directory and a kubelet path that do not
/// exist: any connection or run would fail, or make them.
fn list(more: &[&str]) -> (Output, PathBuf) {
    let base = std::env::temp_dir().join(format!("csi-proxyctl-list-{}-{}", std::process::id(), more.len()));
    let _ = std::fs::remove_dir_all(&base);
    let out = Command::new(ctl())
        .args(["conformance", "-list"])
        .args(more)
        .arg("-socket-dir")
        .arg(base.join("sock"))
        .arg("-kubelet-path")
        .arg(base.join("kubelet"))
        .arg("-timeout=2s")
        .env("CSI_PROXY_SOCKET_DIR", base.join("sock"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{more:?}: {stderr}");
    assert!(stderr.is_empty(), "{more:?}: {stderr}");
    assert!(!base.exists(), "{more:?}: -list made {}", base.display());
    (out, base)
}

/// The checks anyone would look for, with the OS each applies to.
const KNOWN: [(&str, &str); 7] = [
    ("filesystem", "both"),
    ("flow ebs", "both"),
    ("smb", "both"),
    ("online-clears-read-only", "windows"),
    ("audit-file-dacl", "windows"),
    ("caller-identity", "both"),
    ("cleanup", "both"),
];

#[test]
fn conformance_list_prints_every_check_as_text_and_json_without_a_daemon() {
    let (out, _) = list(&[]);
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["CHECK", "OS", "SETTLES"], "{text}");
    let rows: Vec<&str> = lines.collect();
    for (name, os) in KNOWN {
        let row = rows
            .iter()
            .find(|r| r.strip_prefix(name).is_some_and(|rest| rest.starts_with("  ")))
            .unwrap_or_else(|| panic!("no row for {name}:\n{text}"));
        let rest: Vec<&str> = row[name.len()..].split_whitespace().collect();
        assert_eq!(rest[0], os, "{row}");
        assert!(rest.len() > 2, "{name} settles nothing: {row}");
    }

    let (out, _) = list(&["-json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = doc.as_array().expect("an array");
    assert_eq!(checks.len(), rows.len(), "one entry per text row: {doc:#}");
    let mut names = Vec::new();
    for c in checks {
        let o = c.as_object().unwrap();
        assert_eq!(o.keys().map(String::as_str).collect::<Vec<_>>(), ["name", "os", "settles"], "{c}");
        assert!(["linux", "windows", "both"].contains(&o["os"].as_str().unwrap()), "{c}");
        assert!(!o["settles"].as_str().unwrap().trim().is_empty(), "{c}");
        names.push(o["name"].as_str().unwrap());
    }
    for (name, os) in KNOWN {
        let c = checks.iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no {name} in {doc:#}"));
        assert_eq!(c["os"], os, "{c}");
    }
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "{names:?}");
    // The text lists the same checks, in the same order.
    for (row, name) in rows.iter().zip(&names) {
        assert!(row.starts_with(&format!("{name}  ")), "{row} is not {name}");
    }
}
