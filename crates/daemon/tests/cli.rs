#![cfg(unix)]
//! The real binary: exit codes, a second daemon, metrics after real calls.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_csi-proxy");

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("csi-proxy-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A running daemon; killed, and its socket directory removed, on drop.
struct Daemon(Child, PathBuf);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

fn start(dir: &Path, extra: &[&str]) -> Daemon {
    let child = Command::new(BIN).arg("-socket-dir").arg(dir).args(extra).stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_dir(dir)
        .map(|d| d.filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "sock")).count())
        .unwrap_or(0)
        < 23
    {
        assert!(Instant::now() < deadline, "daemon did not create its sockets");
        std::thread::sleep(Duration::from_millis(20));
    }
    Daemon(child, dir.to_path_buf())
}

#[test]
fn unknown_flag_exits_2_naming_it() {
    let out = Command::new(BIN).arg("-kubelet-pod-path=/x").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("-kubelet-pod-path"), "{err}");
    assert!(err.contains("-kubelet-path"), "usage should follow: {err}");
}

#[test]
fn help_lists_every_flag_and_exits_0() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "-kubelet-path",
        "-working-dir",
        "-windows-service",
        "-require-privacy",
        "-metrics-bind-address",
        "-v ",
        "-log_file",
        "-log_dir",
        "-logtostderr",
        "-alsologtostderr",
        "-socket-dir",
        "-pipe-sddl",
        "-allowed-service",
    ] {
        assert!(text.contains(flag), "--help does not list {flag}");
    }
}

#[test]
fn a_second_daemon_on_the_same_directory_fails_clearly() {
    let dir = tempdir("second");
    let _first = start(&dir, &[]);
    let out = Command::new(BIN).arg("-socket-dir").arg(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&dir.display().to_string()) && err.contains("another running csi-proxy"), "{err}");
}

#[test]
fn metrics_count_real_calls_with_upstream_labels() {
    let dir = tempdir("metrics");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let _d = start(&dir, &["-metrics-bind-address", &addr]);

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let ch = unix_channel(dir.join("csi-proxy-disk-v1.sock")).await;
        let mut c = csi_proxy_wire::v1::disk_client::DiskClient::new(ch);
        for _ in 0..2 {
            // No disk has number 12345 (major 0 is never a block device): NotFound, from the backend.
            let req = csi_proxy_wire::v1::GetDiskStatsRequest { disk_number: 12345 };
            let s = c.get_disk_stats(req).await.unwrap_err();
            assert_eq!(s.code(), tonic::Code::NotFound, "{s:?}");
        }
    });

    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    let labels = r#"grpc_method="GetDiskStats",grpc_service="v1.Disk",grpc_type="unary""#;
    assert!(body.contains(&format!("grpc_server_started_total{{{labels}}} 2")), "{body}");
    assert!(body.contains(&format!("grpc_server_handled_total{{grpc_code=\"NotFound\",{labels}}} 2")), "{body}");
    assert!(body.contains(&format!("grpc_server_handling_seconds_count{{{labels}}} 2")), "{body}");
    assert!(body.contains(r#"grpc_server_handling_seconds_bucket{grpc_method="GetDiskStats""#), "{body}");
    assert!(body.contains("process_resident_memory_bytes"), "{body}");
}

async fn unix_channel(path: PathBuf) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tokio::net::UnixStream::connect(path).await?))
            }
        }))
        .await
        .unwrap()
}

/// Runs the daemon until its sockets exist, stops it, and returns what it logged.
fn startup_log(tag: &str, extra: &[&str]) -> String {
    let dir = tempdir(tag);
    let mut child = Command::new(BIN).arg("-socket-dir").arg(&dir).args(extra).stderr(Stdio::piped()).spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !dir.join("csi-proxy-system-v1alpha1.sock").exists() {
        assert!(Instant::now() < deadline, "daemon did not create its sockets");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    reader.join().unwrap()
}

#[test]
fn startup_warns_when_any_service_may_be_controlled() {
    let log = startup_log("warn", &[]);
    let warning = log.lines().find(|l| l.contains("WARN") && l.contains("any host service can be started or stopped"));
    let warning = warning.unwrap_or_else(|| panic!("no warning in {log}"));
    assert!(warning.contains("-allowed-service"), "{warning}");

    let log = startup_log("nowarn", &["-allowed-service", "iscsid", "-allowed-service=multipathd"]);
    assert!(!log.contains("any host service"), "{log}");
    assert!(log.contains(r#"allowed_services=Some(["iscsid", "multipathd"])"#), "{log}");
}

/// The allow-list is enforced by the real daemon before any host work: a service not on it is
/// PermissionDenied naming it and the list; one on it reaches the Linux backend (systemd, which
/// answers Unavailable where it is not running, or NotFound for this made-up name).
#[test]
fn allowed_service_flag_is_enforced() {
    let dir = tempdir("allowed");
    let _d = start(&dir, &["-allowed-service", "csi-proxy-test-allowed"]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let ch = unix_channel(dir.join("csi-proxy-system-v1alpha1.sock")).await;
        use csi_proxy_wire::v1alpha1::{system_client::SystemClient, StartServiceRequest, StopServiceRequest};
        let mut c = SystemClient::new(ch);
        let s = c.start_service(StartServiceRequest { name: "kubelet".into() }).await.unwrap_err();
        assert_eq!(s.code(), tonic::Code::PermissionDenied, "{s:?}");
        assert!(s.message().contains("\"kubelet\"") && s.message().contains("csi-proxy-test-allowed"), "{s:?}");
        let s = c.stop_service(StopServiceRequest { name: "kubelet".into(), force: true }).await.unwrap_err();
        assert_eq!(s.code(), tonic::Code::PermissionDenied, "{s:?}");

        let s = c.start_service(StartServiceRequest { name: "csi-proxy-test-allowed".into() }).await.unwrap_err();
        assert!(matches!(s.code(), tonic::Code::Unavailable | tonic::Code::NotFound), "{s:?}");
    });
}

/// The real daemon on the native filesystem backend: at `-v=2` every call is logged with its
/// group, version, method, path and outcome; refusals are logged at the default level.
#[test]
fn filesystem_calls_are_contained_and_logged_at_v2() {
    let dir = tempdir("fslog");
    let root = tempdir("fslog-root");
    std::fs::create_dir_all(&root).unwrap();
    let log = root.with_extension("log");
    let _ = std::fs::remove_file(&log);
    let args =
        ["-v=2", "-logtostderr=false", "-kubelet-path", root.to_str().unwrap(), "-log_file", log.to_str().unwrap()];
    let d = start(&dir, &args);
    let made = root.join("pods/p1/volumes");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let ch = unix_channel(dir.join("csi-proxy-filesystem-v1.sock")).await;
        use csi_proxy_wire::v1::{filesystem_client::FilesystemClient, MkdirRequest, PathExistsRequest};
        let mut c = FilesystemClient::new(ch);
        c.mkdir(MkdirRequest { path: made.to_str().unwrap().into() }).await.unwrap();
        let s = c.path_exists(PathExistsRequest { path: "/etc/passwd".into() }).await.unwrap_err();
        assert_eq!(s.code(), tonic::Code::PermissionDenied, "{s:?}");
        assert!(s.message().contains(root.to_str().unwrap()), "the refusal names the roots: {s:?}");
    });
    assert!(made.is_dir());
    drop(d);
    let text = std::fs::read_to_string(&log).unwrap();
    let ok = text.lines().find(|l| l.contains("Mkdir")).unwrap_or_else(|| panic!("no Mkdir line in {text}"));
    assert!(ok.contains("v1.Filesystem") && ok.contains(made.to_str().unwrap()) && ok.contains("ok"), "{ok}");
    let refused = text.lines().find(|l| l.contains("PathExists")).unwrap_or_else(|| panic!("no PathExists line"));
    assert!(refused.contains("/etc/passwd") && refused.contains("PermissionDenied"), "{refused}");
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_file(&log);
}
