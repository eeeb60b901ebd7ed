#![cfg(target_os = "linux")]
//! The daemon under a real container runtime: Debian's containerd (its CRI plugin) and runc run a
//! pod as the kubelet would, from an image built here, and the pod's container calls the daemon
//! through the socket directory mounted into it, with the real `csi-proxyctl`. The daemon asks
//! that containerd (`-cri-endpoint`) who the caller is.
//!
//! Root only (containerd, runc, cgroups). In CI (`CI` set) a missing tool fails the test; elsewhere
//! it is skipped with the reason.

mod containerd;

use containerd::{caller_image, host_mounts, ro, rw, Containerd, Killed};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_csi-proxy");

/// Whether to go on: false (after saying why) where the test cannot run and may be skipped.
fn can_run() -> bool {
    let Some(why) = containerd::missing() else { return true };
    if std::env::var_os("CI").is_some() {
        panic!("CI must run the containerd test: {why}");
    }
    eprintln!("skipped: {why}");
    false
}

/// The daemon serving on `socket_dir`, its audit file.
struct Daemon {
    _process: Killed,
    socket_dir: PathBuf,
    audit: PathBuf,
}

fn start_daemon(dir: &Path, tag: &str, extra: &[&str], cri: &Path) -> Daemon {
    let socket_dir = dir.join(format!("sock-{tag}"));
    let audit = dir.join(format!("audit-{tag}.log"));
    let log = std::fs::File::create(dir.join(format!("daemon-{tag}.log"))).unwrap();
    let child = Command::new(BIN)
        .arg("-socket-dir")
        .arg(&socket_dir)
        .arg("-kubelet-path")
        .arg(dir.join("kubelet"))
        .arg("-linux-smb-dir")
        .arg(dir.join("smb"))
        .arg("-allowed-service=")
        .arg(format!("-audit-log={}", audit.display()))
        .arg(format!("-cri-endpoint={}", cri.display()))
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let process = Killed(child);
    let socket = socket_dir.join("csi-proxy-filesystem-v1.sock");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "the daemon made no socket: {}",
            std::fs::read_to_string(dir.join(format!("daemon-{tag}.log"))).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Daemon { _process: process, socket_dir, audit }
}

/// The audit file's records.
fn records(audit: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(audit)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The cgroup lines of a `/proc/<pid>/cgroup` text that name a pod's container.
fn container_cgroups(text: &str) -> Vec<&str> {
    text.lines().filter_map(|l| l.splitn(3, ':').nth(2)).filter(|p| p.contains("/kubepods/")).collect()
}

#[test]
fn a_pods_container_calls_the_daemon_through_its_socket() {
    if !can_run() {
        return;
    }
    let ctl = csi_proxy_stack_tests::sibling::binary(BIN, "csi-proxyctl", "csi-proxyctl", true);
    let began = Instant::now();
    let runtime = Containerd::start("csi-proxy-containerd");
    let image = runtime.import(&caller_image("caller"));
    let dir = runtime.dir.path();
    let root = dir.join("kubelet/plugins/test-driver");
    std::fs::create_dir_all(&root).unwrap();
    let daemon = start_daemon(dir, "plain", &[], &runtime.socket);

    let pod = runtime.run_pod("csi-test", "allowed-1");
    let made = root.join("made-by-allowed-1");
    let mut mounts = host_mounts();
    mounts.push(ro(ctl.to_str().unwrap(), "/csi-proxyctl"));
    mounts.push(rw(daemon.socket_dir.to_str().unwrap(), "/csi"));
    let request = serde_json::json!({ "path": made.to_str().unwrap() }).to_string();
    // The process's cgroup first, then the same process becomes csi-proxyctl (the script is fixed;
    // the call's arguments come as its own arguments).
    let command = [
        "/bin/busybox",
        "sh",
        "-c",
        "cat /proc/self/cgroup && exec /csi-proxyctl \"$@\"",
        "sh",
        "-socket-dir",
        "/csi",
        "-y",
        "call",
        "filesystem/v1",
        "Mkdir",
        &request,
    ];
    let exited = pod.run("caller", &image, &command, mounts);
    assert_eq!(exited.exit_code, 0, "{exited:?}");
    assert!(made.is_dir(), "the container's call made {}: {exited:?}", made.display());
    let expected = format!("{}/{}", pod.cgroup_parent(), exited.id);
    let cgroups = container_cgroups(&exited.output);
    assert!(!cgroups.is_empty() && cgroups.iter().all(|c| *c == expected), "cgroups {cgroups:?}, expected {expected}");

    let records = records(&daemon.audit);
    let mkdir: Vec<_> = records.iter().filter(|r| r["method"] == "Mkdir").collect();
    assert_eq!(mkdir.len(), 2, "a start and an end record: {records:#?}");
    eprintln!("{mkdir:#?}");
    drop(pod);
    eprintln!("containerd test: {:.1} s", began.elapsed().as_secs_f64());
}
