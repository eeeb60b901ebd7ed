#![cfg(target_os = "linux")]
//! The real `csi-proxyctl` binary against the real `csi-proxy` daemon on a socket directory of
//! its own: discovery, a JSON call's round trip, an error's code and message, a mutating call
//! refused without a terminal and run with --yes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const CTL: &str = env!("CARGO_BIN_EXE_csi-proxyctl");

/// The daemon's binary, next to ours in the target directory (`cargo test --workspace` builds
/// it; built here when only this package's tests were built).
fn daemon_binary() -> PathBuf {
    let bin = Path::new(CTL).with_file_name("csi-proxy");
    if !bin.exists() {
        let target = Path::new(CTL).parent().and_then(Path::parent).expect("target/<profile>/");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let profile = Path::new(CTL).parent().unwrap().file_name().unwrap().to_str().unwrap().to_string();
        let mut build = Command::new(cargo);
        build.args(["build", "-p", "csi-proxy", "--bin", "csi-proxy", "--target-dir"]).arg(target);
        if profile == "release" {
            build.arg("--release");
        }
        let status = build.status().expect("running cargo build -p csi-proxy");
        assert!(status.success() && bin.exists(), "could not build {}", bin.display());
    }
    bin
}

/// A running daemon serving every API in `dir/sock`, with `dir/kubelet` as its kubelet path;
/// killed, and `dir` removed, on drop.
struct Daemon {
    child: Child,
    dir: PathBuf,
}

impl Daemon {
    fn start(tag: &str) -> Daemon {
        let dir = std::env::temp_dir().join(format!("csi-proxyctl-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("kubelet")).unwrap();
        let child = Command::new(daemon_binary())
            .arg("-socket-dir")
            .arg(dir.join("sock"))
            .arg("-kubelet-path")
            .arg(dir.join("kubelet"))
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
    fn ctl(&self, args: &[&str]) -> Output {
        Command::new(CTL)
            .arg("-socket-dir")
            .arg(self.dir.join("sock"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn kubelet(&self, name: &str) -> String {
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

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn discovery_lists_the_23_apis_and_a_json_call_round_trips() {
    let d = Daemon::start("discover");
    let out = d.ctl(&["apis"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert_eq!(stdout.lines().filter(|l| l.contains(" SERVING ")).count(), 23, "{stdout}");
    assert!(stdout.contains("volume/v2alpha1") && stdout.contains("23 of 23 APIs answer"), "{stdout}");

    let out = d.ctl(&["--json", "apis"]);
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), 23);
    assert!(all.iter().all(|a| a["state"] == "SERVING"), "{all:?}");

    std::fs::create_dir(d.kubelet("here")).unwrap();
    for (name, exists) in [("here", true), ("absent", false)] {
        let req = serde_json::json!({"path": d.kubelet(name)}).to_string();
        let out = d.ctl(&["call", "filesystem/v1", "PathExists", &req]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(answer, serde_json::json!({"exists": exists}));
    }
}

#[test]
fn errors_show_the_grpc_code_and_message() {
    let d = Daemon::start("errors");
    let out = d.ctl(&["call", "disk/v1", "GetDiskStats", r#"{"diskNumber": 12345}"#]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("v1.Disk/GetDiskStats: code NotFound (5): disk 12345"), "{err}");

    let out = d.ctl(&["call", "disk/v1", "GetDiskStats", r#"{"disk": 1}"#]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("not a valid v1.GetDiskStatsRequest"), "{}", text(&out.stderr));

    let out = Command::new(CTL).args(["-socket-dir", "/nonexistent-csi-proxy", "disks"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("/nonexistent-csi-proxy/csi-proxy-disk-v1.sock"), "{}", text(&out.stderr));
}

#[test]
fn a_mutating_call_without_a_terminal_needs_yes() {
    let d = Daemon::start("mutating");
    let target = d.kubelet("made");
    let req = serde_json::json!({"path": target}).to_string();
    let out = d.ctl(&["call", "filesystem/v1", "Mkdir", &req]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("add --yes"), "{}", text(&out.stderr));
    assert!(!Path::new(&target).exists(), "refused, not run");

    let out = d.ctl(&["--yes", "call", "filesystem/v1", "Mkdir", &req]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(Path::new(&target).is_dir());
}

#[test]
fn help_names_every_command() {
    let out = Command::new(CTL).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    for word in [
        "apis",
        "disks",
        "volumes",
        "iscsi-portals",
        "bios-serial",
        "service <name>",
        "call <group>/<version>",
        "--yes",
        "-socket-dir",
        "-json",
    ] {
        assert!(help.contains(word), "--help does not mention {word}");
    }
    let out = Command::new(CTL).arg("frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("unknown command \"frobnicate\""));
}
