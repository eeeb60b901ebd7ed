#![cfg(target_os = "linux")]
//! The real daemon with `-authorization-policy`, called by the real `csi-proxyctl` (a host
//! process): a policy with a fault stops the daemon at start naming its line and field; a call
//! the policy grants runs and one it does not is PermissionDenied naming the caller; the policy
//! is reloaded when its file changes, and a broken change keeps the one in force; `whoami` says
//! what the daemon takes the caller to be.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_csi-proxy");

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(name: &str) -> Dir {
    let d = std::env::temp_dir().join(format!("csi-proxy-authz-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("work")).unwrap();
    Dir(d)
}

fn policy(work: &Path, methods: &str) -> String {
    format!(
        "rules:\n- name: admin\n  callers:\n  - host: {{exe: \"*/csi-proxyctl\"}}\n  allow:\n  - {{api: filesystem, methods: [{methods}]}}\n  paths: [{}]\n",
        work.display()
    )
}

fn ctl(dir: &Path, args: &[&str]) -> Output {
    let ctl = csi_proxy_stack_tests::sibling::binary(BIN, "csi-proxyctl", "csi-proxyctl", true);
    Command::new(ctl).arg("-socket-dir").arg(dir.join("sock")).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn a_fault_in_the_policy_stops_the_start_naming_its_line() {
    let dir = scratch("fault");
    let file = dir.0.join("policy.yaml");
    std::fs::write(&file, policy(&dir.0.join("work"), "PathExists, Mkdri")).unwrap();
    let out = Command::new(BIN)
        .arg("-socket-dir")
        .arg(dir.0.join("sock"))
        .arg("-authorization-policy")
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("-authorization-policy") && err.contains("line 6, methods") && err.contains("Mkdri"), "{err}");
    assert!(!dir.0.join("sock").join("csi-proxy-filesystem-v1.sock").exists(), "it served anyway");
}

#[test]
fn calls_are_judged_by_the_policy_in_force_and_changes_are_taken() {
    let dir = scratch("reload");
    let work = dir.0.join("work");
    let file = dir.0.join("policy.yaml");
    std::fs::write(&file, policy(&work, "PathExists")).unwrap();
    let log = dir.0.join("daemon.log");
    let mut cmd = Command::new(BIN);
    cmd.arg("-socket-dir")
        .arg(dir.0.join("sock"))
        .arg("-working-dir")
        .arg(&work)
        .arg("-authorization-policy")
        .arg(&file)
        .arg("-cri-endpoint=")
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let _daemon = Killed(cmd.spawn().unwrap());
    let socket = dir.0.join("sock").join("csi-proxy-filesystem-v1.sock");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "no socket: {}", std::fs::read_to_string(&log).unwrap_or_default());
        std::thread::sleep(Duration::from_millis(20));
    }
    let exists =
        |p: &Path| ctl(&dir.0, &["call", "filesystem/v1", "PathExists", &format!(r#"{{"path":"{}"}}"#, p.display())]);
    let mkdir =
        |p: &Path| ctl(&dir.0, &["-y", "call", "filesystem/v1", "Mkdir", &format!(r#"{{"path":"{}"}}"#, p.display())]);
    let ok = exists(&work);
    assert!(ok.status.success(), "{}", text(&ok));
    let outside = exists(Path::new("/etc"));
    assert!(!outside.status.success());
    assert!(
        text(&outside).contains("PermissionDenied") && text(&outside).contains(r#"does not admit path "/etc""#),
        "{}",
        text(&outside)
    );
    let made = work.join("made");
    let refused = mkdir(&made);
    assert!(
        text(&refused).contains("host process") && text(&refused).contains("allows filesystem/v1 Mkdir"),
        "{}",
        text(&refused)
    );
    assert!(!made.exists());

    // The file changes: the new policy is taken within a few seconds.
    std::fs::write(&file, policy(&work, "PathExists, Mkdir")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let o = mkdir(&made);
        if o.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "the changed policy was never taken: {}", text(&o));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(made.is_dir());
    // A broken change keeps the policy in force, and says so.
    std::fs::write(&file, "rules: [").unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !std::fs::read_to_string(&log).unwrap().contains("was not taken") {
        assert!(Instant::now() < deadline, "{}", std::fs::read_to_string(&log).unwrap());
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = mkdir(&work.join("again"));
    assert!(o.status.success(), "{}", text(&o));
    let who = ctl(&dir.0, &["whoami"]);
    assert_eq!(String::from_utf8_lossy(&who.stdout).trim(), "host", "{}", text(&who));
}
