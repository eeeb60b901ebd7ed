#![cfg(unix)]
//! The real binary: exit codes, a second daemon, metrics after real calls.

mod common;

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
fn unknown_logging_format_exits_2_naming_it_and_the_allowed_ones() {
    let out = Command::new(BIN).arg("-logging-format=xml").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(r#"invalid value "xml" for flag -logging-format: expected one of text, json"#), "{err}");
}

#[test]
fn json_logging_writes_one_object_per_line() {
    let log = startup_log("json", &["-logging-format=json"]);
    let lines: Vec<serde_json::Value> =
        log.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}"))).collect();
    let start = lines.iter().find(|l| l["msg"] == "starting csi-proxy").unwrap_or_else(|| panic!("{log}"));
    assert_eq!(start["level"], "info");
    assert_eq!(start["v"], 0);
    assert!(start["ts"].is_f64(), "{start}");
    assert_eq!(start["version"], env!("CARGO_PKG_VERSION"));
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
    csi_proxy_client::connect_socket(path, Duration::ZERO).await.unwrap()
}

/// Runs the daemon until its sockets exist, stops it, and returns what it logged.
fn startup_log(tag: &str, extra: &[&str]) -> String {
    let dir = tempdir(tag);
    let mut daemon = Command::new(BIN);
    daemon.arg("-socket-dir").arg(&dir).args(extra);
    let log = common::stderr_until_socket(&mut daemon, &dir.join("csi-proxy-system-v1alpha1.sock"));
    let _ = std::fs::remove_dir_all(&dir);
    log
}

#[test]
fn startup_warns_when_any_service_may_be_controlled() {
    let log = startup_log("warn", &[]);
    let warning = log.lines().find(|l| l.starts_with('W') && l.contains("any host service can be started or stopped"));
    let warning = warning.unwrap_or_else(|| panic!("no warning in {log}"));
    assert!(warning.contains("-allowed-service"), "{warning}");

    let log = startup_log("nowarn", &["-allowed-service", "iscsid", "-allowed-service=multipathd"]);
    assert!(!log.contains("any host service"), "{log}");
    assert!(log.contains(r#"allowed_services="iscsid,multipathd""#), "{log}");
}

/// The allow-list is enforced by the real daemon before any host work: a service not on it is
/// PermissionDenied naming it and the list; one on it reaches the Linux backend (systemd, which
/// answers FailedPrecondition where it is not running, or NotFound for this made-up name).
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
        assert!(matches!(s.code(), tonic::Code::FailedPrecondition | tonic::Code::NotFound), "{s:?}");
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
    // Lines are written by a background thread, soon after the call: wait for them before the
    // daemon is killed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&log).is_ok_and(|t| t.contains("Mkdir") && t.contains("PathExists"))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(d);
    let text = std::fs::read_to_string(&log).unwrap();
    let ok = text.lines().find(|l| l.contains("Mkdir")).unwrap_or_else(|| panic!("no Mkdir line in {text}"));
    assert!(ok.contains("v1.Filesystem") && ok.contains(made.to_str().unwrap()) && ok.contains("ok"), "{ok}");
    let refused = text.lines().find(|l| l.contains("PathExists")).unwrap_or_else(|| panic!("no PathExists line"));
    assert!(refused.contains("/etc/passwd") && refused.contains("PermissionDenied"), "{refused}");
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_file(&log);
}

/// `-version` and `--version` print `csi-proxy <version> (commit <12 hex>[, dirty])` and exit 0;
/// the commit is the checkout's HEAD, or `unknown` when not built from a checkout.
#[test]
fn version_names_the_package_version_and_commit() {
    let head = Command::new("git")
        .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "--verify", "--quiet", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim()[..12].to_string());
    for flag in ["-version", "--version"] {
        let out = Command::new(BIN).arg(flag).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{flag}");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.strip_suffix('\n').unwrap_or_else(|| panic!("{text:?}"));
        let prefix = format!("csi-proxy {} (commit ", env!("CARGO_PKG_VERSION"));
        let rest = line.strip_prefix(&prefix).unwrap_or_else(|| panic!("{line:?}"));
        let commit =
            rest.strip_suffix(", dirty)").or_else(|| rest.strip_suffix(')')).unwrap_or_else(|| panic!("{line}"));
        assert_eq!(commit, head.as_deref().unwrap_or("unknown"), "{line}");
    }
}

/// The daemon's output going into a pipe whose reader is gone (`csi-proxy --help | head -1`) is a
/// clean exit, not a panic (exit 101).
#[test]
fn help_and_version_into_a_closed_pipe_exit_0() {
    for flag in ["--help", "-version"] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(BIN).arg(flag).stdout(writer).stderr(Stdio::piped()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{flag}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// Runs `cmd` to its end, or kills it after `limit` (a daemon that started when it should not
/// have then fails the test instead of hanging it).
fn output_within(cmd: &mut Command, limit: Duration) -> std::process::Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait_with_output().unwrap()
}

/// Relative roots are refused before anything starts: exit 2, naming the flag and the value.
#[test]
fn relative_roots_are_refused_with_exit_2() {
    let dir = tempdir("relative");
    for args in [&["-kubelet-path", "var/lib/kubelet"][..], &["-working-dir=/ok", "-working-dir", "./pods"]] {
        let out = output_within(Command::new(BIN).arg("-socket-dir").arg(&dir).args(args), Duration::from_secs(10));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let (flag, value) =
            if args[0] == "-kubelet-path" { ("-kubelet-path", args[1]) } else { ("-working-dir", args[2]) };
        assert!(
            err.contains(&format!(
                "invalid value {value:?} for flag {flag}: expected an absolute path (starting with /)"
            )),
            "{err}"
        );
        assert!(!dir.exists(), "nothing started");
    }
}

/// An allowed root that does not exist is worth a warning at start, naming it.
#[test]
fn missing_root_is_warned_about() {
    let missing = tempdir("missing-root");
    let log = startup_log("missing-root-sock", &["-working-dir", missing.to_str().unwrap()]);
    let warning = log.lines().find(|l| l.starts_with('W') && l.contains(missing.to_str().unwrap()));
    let warning = warning.unwrap_or_else(|| panic!("no warning in {log}"));
    assert!(warning.contains("-working-dir") && warning.contains("does not exist"), "{warning}");

    std::fs::create_dir_all(&missing).unwrap();
    let log = startup_log("present-root-sock", &["-working-dir", missing.to_str().unwrap()]);
    assert!(!log.lines().any(|l| l.starts_with('W') && l.contains(missing.to_str().unwrap())), "{log}");
    let _ = std::fs::remove_dir_all(&missing);
}

/// A regular file where the socket directory should be is named as such, once (it used to be
/// `creating socket directory …: File exists (os error 17): File exists (os error 17)`).
#[test]
fn socket_dir_that_is_a_file_is_named_once() {
    let file = tempdir("socket-file");
    std::fs::write(&file, b"").unwrap();
    let out = Command::new(BIN).arg("-socket-dir").arg(&file).output().unwrap();
    let _ = std::fs::remove_file(&file);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().find(|l| l.starts_with("csi-proxy: ")).unwrap_or_else(|| panic!("{err}"));
    assert_eq!(
        line,
        format!(
            "csi-proxy: cannot serve the API endpoints: socket directory {} is a regular file, but a directory is \
             expected there",
            file.display()
        )
    );
}

/// An error whose message already carries its cause prints the cause once.
#[test]
fn error_causes_are_printed_once() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempdir("cause-once");
    let out = Command::new(BIN).arg("-socket-dir").arg(&dir).args(["-metrics-bind-address", &addr]).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().find(|l| l.starts_with("csi-proxy: ")).unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains(&addr) && line.contains("os error"), "{line}");
    assert_eq!(line.matches("os error").count(), 1, "{line}");
}

/// `/metrics` carries the build-info gauge with the same version and commit as `-version`.
#[test]
fn metrics_carry_build_info() {
    let version = Command::new(BIN).arg("-version").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let dir = tempdir("build-info");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let _d = start(&dir, &["-metrics-bind-address", &addr]);
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    let line = body.lines().find(|l| l.starts_with("csi_proxy_build_info{")).unwrap_or_else(|| panic!("{body}"));
    let dirty = version.ends_with(", dirty)");
    let commit = version.rsplit("(commit ").next().unwrap().trim_end_matches(')').trim_end_matches(", dirty");
    assert_eq!(
        line,
        format!(
            r#"csi_proxy_build_info{{commit="{commit}",dirty="{dirty}",version="{}"}} 1"#,
            env!("CARGO_PKG_VERSION")
        ),
        "{version}"
    );
    assert!(body.contains("# TYPE csi_proxy_build_info gauge"), "{body}");
}

fn socket_count(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| d.filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "sock")).count())
        .unwrap_or(0)
}

/// A daemon killed on drop (so that a failing test leaves none behind).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the daemon on `dir` with stderr captured; returns it and a reader of its log.
fn start_logged(dir: &Path, env: &[(&str, &Path)]) -> (Killed, std::thread::JoinHandle<String>) {
    let mut cmd = Command::new(BIN);
    cmd.arg("-socket-dir").arg(dir).stderr(Stdio::piped()).env_remove("NOTIFY_SOCKET");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    (Killed(child), reader)
}

fn sigterm(child: &Child) {
    let status = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(status.success());
}

fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("daemon did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A clean stop (SIGTERM) removes the sockets and the lock file the daemon made, so the next
/// start finds nothing stale to replace.
#[test]
fn clean_stop_removes_sockets_and_lock_file() {
    let dir = tempdir("cleanstop");
    let (mut child, log) = start_logged(&dir, &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while socket_count(&dir) < 23 {
        assert!(Instant::now() < deadline, "daemon did not create its sockets");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(dir.join("csi-proxy.lock").exists());
    sigterm(&child.0);
    let status = wait_exit(&mut child.0, Duration::from_secs(30));
    let log = log.join().unwrap();
    assert_eq!(status.code(), Some(0), "{log}");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "left behind after a clean stop: {left:?}\n{log}");

    let (mut again, log) = start_logged(&dir, &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while socket_count(&dir) < 23 {
        assert!(Instant::now() < deadline, "daemon did not create its sockets again");
        std::thread::sleep(Duration::from_millis(20));
    }
    sigterm(&again.0);
    let status = wait_exit(&mut again.0, Duration::from_secs(30));
    let log = log.join().unwrap();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(!log.contains("stale socket"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// With NOTIFY_SOCKET set (systemd `Type=notify`), READY=1 arrives only once all 23 sockets
/// exist, and STOPPING=1 on SIGTERM.
#[test]
fn systemd_is_notified_when_every_socket_is_bound_and_when_stopping() {
    let dir = tempdir("notify");
    let notify_path = std::env::temp_dir().join(format!("csi-proxy-cli-notify-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&notify_path);
    let rx = std::os::unix::net::UnixDatagram::bind(&notify_path).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let (mut child, log) = start_logged(&dir, &[("NOTIFY_SOCKET", &notify_path)]);
    let mut buf = [0u8; 256];
    let n = rx.recv(&mut buf).expect("no READY=1 from the daemon");
    // Counted the moment the datagram is here: the daemon must not have sent it any earlier.
    let sockets = socket_count(&dir);
    assert_eq!(&buf[..n], b"READY=1");
    assert_eq!(sockets, 23, "READY=1 came before every socket was bound");
    sigterm(&child.0);
    let n = rx.recv(&mut buf).expect("no STOPPING=1 from the daemon");
    assert_eq!(&buf[..n], b"STOPPING=1");
    let status = wait_exit(&mut child.0, Duration::from_secs(30));
    let log = log.join().unwrap();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(!log.contains("cannot notify"), "{log}");
    let _ = std::fs::remove_file(&notify_path);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The probes on the metrics listener: /healthz answers 200 while the daemon runs; /readyz turns
/// 200 only once every API socket is bound (before that it is 503).
#[test]
fn readyz_follows_the_endpoints() {
    let dir = tempdir("readyz");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let get = |path: &str| -> Option<String> {
        let mut s = std::net::TcpStream::connect(&addr).ok()?;
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        Some(out)
    };
    let _d = start(&dir, &["-metrics-bind-address", &addr]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let ready = loop {
        let r = get("/readyz").unwrap_or_default();
        if r.starts_with("HTTP/1.1 200 ") {
            break r;
        }
        assert!(r.is_empty() || r.starts_with("HTTP/1.1 503 "), "{r}");
        assert!(Instant::now() < deadline, "never ready: {r}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(ready.ends_with("\r\n\r\nok\n"), "{ready}");
    assert_eq!(socket_count(&dir), 23);
    let health = get("/healthz").unwrap();
    assert!(health.starts_with("HTTP/1.1 200 ") && health.ends_with("ok\n"), "{health}");
}

/// `-audit-log`: the real daemon records each changing call twice (start, end) with the calling
/// process as the kernel reports it, lines never interleave under concurrent calls, read-only
/// calls are left out at the default verbosity, and no secret from a request reaches the file.
#[test]
fn audit_log_records_who_called_what_and_no_secret() {
    let dir = tempdir("audit");
    let root = tempdir("audit-root");
    std::fs::create_dir_all(&root).unwrap();
    // In a directory of its own: /tmp, which everyone can write to, is refused.
    let audit = root.with_extension("audit").join("audit.log");
    let _ = std::fs::remove_dir_all(audit.parent().unwrap());
    std::fs::create_dir_all(audit.parent().unwrap()).unwrap();
    std::fs::write(&audit, "kept from before\n").unwrap();
    let smb_dir = root.with_extension("smb");
    let args = [
        "-kubelet-path",
        root.to_str().unwrap(),
        "-audit-log",
        audit.to_str().unwrap(),
        "-linux-smb-dir",
        smb_dir.to_str().unwrap(),
    ];
    let d = start(&dir, &args);
    let (password, chap) = ("Tr0ub4dor&3-audit", "chap-secret-5d1c99");
    const CALLS: usize = 48;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        use csi_proxy_wire::v1::filesystem_client::FilesystemClient;
        use csi_proxy_wire::v1::{MkdirRequest, PathExistsRequest};
        let mut calls = tokio::task::JoinSet::new();
        for conn in 0..4 {
            let ch = unix_channel(dir.join("csi-proxy-filesystem-v1.sock")).await;
            for i in 0..CALLS / 4 {
                let mut c = FilesystemClient::new(ch.clone());
                let path = root.join(format!("c{conn}/d{i}")).to_str().unwrap().to_string();
                calls.spawn(async move { c.mkdir(MkdirRequest { path }).await.map(drop) });
            }
        }
        while let Some(r) = calls.join_next().await {
            r.unwrap().unwrap();
        }
        let ch = unix_channel(dir.join("csi-proxy-filesystem-v1.sock")).await;
        let path = root.to_str().unwrap().to_string();
        FilesystemClient::new(ch).path_exists(PathExistsRequest { path }).await.unwrap();

        let ch = unix_channel(dir.join("csi-proxy-smb-v1.sock")).await;
        let req = csi_proxy_wire::v1::NewSmbGlobalMappingRequest {
            remote_path: r"\\192.0.2.1\share".into(),
            local_path: "/etc/csi-proxy-audit-test".into(),
            username: "alice".into(),
            password: password.into(),
        };
        let s = csi_proxy_wire::v1::smb_client::SmbClient::new(ch).new_smb_global_mapping(req).await.unwrap_err();
        assert!(!s.message().contains(password), "{s:?}");
        let ch = unix_channel(dir.join("csi-proxy-iscsi-v1alpha2.sock")).await;
        use csi_proxy_wire::v1alpha2::{iscsi_client::IscsiClient, ConnectTargetRequest, TargetPortal};
        let req = ConnectTargetRequest {
            target_portal: Some(TargetPortal { target_address: "192.0.2.1".into(), target_port: 3260 }),
            iqn: "not an iqn".into(),
            auth_type: 1,
            chap_username: "initiator".into(),
            chap_secret: chap.into(),
        };
        let s = IscsiClient::new(ch).connect_target(req).await.unwrap_err();
        assert!(!s.message().contains(chap), "{s:?}");
    });
    drop(d);
    let text = std::fs::read_to_string(&audit).unwrap();
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_dir_all(audit.parent().unwrap());
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("kept from before"), "appended, not truncated");
    assert!(!text.contains(password) && !text.contains(chap), "a secret in the audit log:\n{text}");
    let records: Vec<serde_json::Value> =
        lines.map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}"))).collect();
    let me = std::env::current_exe().unwrap();
    let uid = String::from_utf8(Command::new("id").arg("-u").output().unwrap().stdout).unwrap();
    let mut calls = std::collections::BTreeMap::<u64, Vec<&str>>::new();
    for r in &records {
        assert_eq!(r["peer_at_connect"]["pid"], u64::from(std::process::id()), "{r}");
        assert_eq!(r["peer_at_connect"]["uid"].to_string(), uid.trim(), "{r}");
        assert_eq!(r["peer_at_connect"]["exe"], me.to_str().unwrap(), "{r}");
        assert!(r["method"] != "PathExists", "a read-only call was recorded: {r}");
        calls.entry(r["call"].as_u64().unwrap()).or_default().push(r["event"].as_str().unwrap());
    }
    // Every Mkdir, the SMB mapping and the iSCSI connection: a start, then an end.
    assert_eq!(calls.len(), CALLS + 2, "{text}");
    for (call, events) in &calls {
        assert_eq!(events, &["start", "end"], "call {call}");
    }
    let mkdirs = records.iter().filter(|r| r["method"] == "Mkdir" && r["event"] == "end").count();
    assert_eq!(mkdirs, CALLS);
    assert!(records.iter().all(|r| r["event"] != "end" || r["duration_seconds"].is_f64()));
    let smb = records.iter().find(|r| r["method"] == "NewSmbGlobalMapping" && r["event"] == "start").unwrap();
    assert_eq!(smb["request"]["password"], "<redacted>", "the request as a JSON object: {smb}");
    assert_eq!(smb["request"]["username"], "alice", "{smb}");
    let iscsi = records.iter().find(|r| r["method"] == "ConnectTarget" && r["event"] == "start").unwrap();
    assert_eq!(iscsi["request"]["chapSecret"], "<redacted>", "{iscsi}");
    assert_eq!(iscsi["request"]["chapUsername"], "<redacted>", "{iscsi}");
}

/// `-audit-log-maxsize` and `-audit-log-maxbackup` on the real daemon: past a megabyte of records
/// the audit file rotates into `<file>.1`, and with one backup kept no `<file>.2` appears however
/// often it rotates; every file holds whole records. (It rotated by `-log_file_max_size`, 1800
/// MB, keeping five.)
#[test]
fn the_audit_file_rotates_by_its_own_flags() {
    let dir = tempdir("audit-rotate");
    let root = tempdir("audit-rotate-root");
    std::fs::create_dir_all(&root).unwrap();
    // In a directory of its own: /tmp, which everyone can write to, is refused.
    let audit = root.with_extension("audit").join("audit.log");
    let args = [
        "-kubelet-path",
        root.to_str().unwrap(),
        "-audit-log",
        audit.to_str().unwrap(),
        "-audit-log-maxsize=1",
        "-audit-log-maxbackup=1",
    ];
    let d = start(&dir, &args);
    // A long path (four 200-byte names) makes each start record about 1 KB.
    let path = (0..4).fold(root.clone(), |p, i| p.join(format!("{i}{}", "x".repeat(199))));
    let path = path.to_str().unwrap().to_string();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        use csi_proxy_wire::v1::{filesystem_client::FilesystemClient, MkdirRequest};
        let ch = unix_channel(dir.join("csi-proxy-filesystem-v1.sock")).await;
        let mut c = FilesystemClient::new(ch);
        for _ in 0..2_400 {
            c.mkdir(MkdirRequest { path: path.clone() }).await.unwrap();
        }
    });
    drop(d);
    let name = |n: usize| PathBuf::from(format!("{}.{n}", audit.display()));
    let files = [audit.clone(), name(1)];
    let mut records = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(text.len() <= 1024 * 1024, "{}: {} bytes", f.display(), text.len());
        for line in text.lines() {
            let r: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            assert_eq!(r["method"], "Mkdir");
            records += 1;
        }
    }
    assert!(std::fs::metadata(name(1)).unwrap().len() > 1000 * 1024, "rotated only when full");
    assert!(!name(2).exists(), "-audit-log-maxbackup=1 keeps one rotated file");
    assert!(records < 2 * 2_400, "older records were rotated away: {records}");
    let _ = std::fs::remove_dir_all(audit.parent().unwrap());
    let _ = std::fs::remove_dir_all(&root);
}

/// The audit record names what the kernel guarantees, under a name that says so: a child process
/// connects the socket and exits, this process then sends the call on that connection, and the
/// records' `peer_at_connect` is the child (SO_PEERCRED is fixed at connect), not the sender.
#[cfg(target_os = "linux")]
#[test]
#[allow(unsafe_code)] // pre_exec: the child connects between fork and exec
fn the_audit_record_names_the_peer_as_it_connected() {
    use rustix::net::{connect, socket_with, AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    use std::os::unix::process::CommandExt;
    let dir = tempdir("audit-peer");
    let root = tempdir("audit-peer-root");
    std::fs::create_dir_all(&root).unwrap();
    // In a directory of its own: /tmp, which everyone can write to, is refused.
    let audit = root.with_extension("audit").join("audit.log");
    let _ = std::fs::remove_dir_all(audit.parent().unwrap());
    let d = start(&dir, &["-kubelet-path", root.to_str().unwrap(), "-audit-log", audit.to_str().unwrap()]);

    let socket = socket_with(AddressFamily::UNIX, SocketType::STREAM, SocketFlags::CLOEXEC, None).unwrap();
    let (theirs, addr) =
        (socket.try_clone().unwrap(), SocketAddrUnix::new(dir.join("csi-proxy-filesystem-v1.sock")).unwrap());
    let mut child = Command::new("true");
    // SAFETY: the hook makes one syscall, connect, on a descriptor and an address made before the
    // fork; it allocates nothing and takes no lock.
    unsafe {
        child.pre_exec(move || connect(&theirs, &addr).map_err(std::io::Error::from));
    }
    let mut child = child.spawn().unwrap();
    let child_pid = child.id();
    assert!(child.wait().unwrap().success());

    let made = root.join("made-by-the-parent");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let stream = std::os::unix::net::UnixStream::from(socket);
        stream.set_nonblocking(true).unwrap();
        let stream = std::sync::Mutex::new(Some(tokio::net::UnixStream::from_std(stream).unwrap()));
        let ch = tonic::transport::Endpoint::from_static("http://[::]:50051")
            .connect_with_connector(tower::service_fn(move |_| {
                let stream = stream.lock().unwrap().take();
                async move { stream.map(hyper_util::rt::TokioIo::new).ok_or_else(|| std::io::Error::other("one only")) }
            }))
            .await
            .unwrap();
        let path = made.to_str().unwrap().to_string();
        let mut fs = csi_proxy_wire::v1::filesystem_client::FilesystemClient::new(ch);
        fs.mkdir(csi_proxy_wire::v1::MkdirRequest { path }).await.unwrap();
    });
    drop(d);
    assert!(made.is_dir());
    let text = std::fs::read_to_string(&audit).unwrap();
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_dir_all(audit.parent().unwrap());
    let records: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let events: Vec<_> = records.iter().map(|r| (r["method"].as_str(), r["event"].as_str())).collect();
    assert_eq!(events, [(Some("Mkdir"), Some("start")), (Some("Mkdir"), Some("end"))], "{text}");
    let uid = u64::from(rustix::process::getuid().as_raw());
    for r in &records {
        assert_eq!(r["peer_at_connect"]["pid"], u64::from(child_pid), "the connecting child: {r}");
        assert_ne!(child_pid, std::process::id());
        assert_eq!(r["peer_at_connect"]["uid"], uid, "{r}");
        // Named while it lived (the daemon may accept before the child exits), else unknown:
        // once it has exited its pid may be another process's, so nothing is read.
        match r["caller"]["kind"].as_str() {
            Some("host") => {}
            Some("unknown") => assert!(r["caller"]["why"].as_str().unwrap().contains("may have exited"), "{r}"),
            _ => panic!("{r}"),
        }
    }
}

/// Returns from the calling test, with a note, unless it runs as root (loop mounts and
/// `fsfreeze` need it; CI runs as root).
macro_rules! needs_root {
    () => {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: needs root for loop mounts and fsfreeze (CI runs as root)");
            return;
        }
    };
}

/// A small ext4 filesystem on a loop device, mounted at `dir`; unmounted and removed on drop.
struct LoopFs {
    dir: PathBuf,
    image: PathBuf,
}

impl LoopFs {
    fn new(tag: &str) -> LoopFs {
        let dir = tempdir(tag);
        std::fs::create_dir_all(&dir).unwrap();
        let image = dir.with_extension("img");
        std::fs::File::create(&image).unwrap().set_len(16 << 20).unwrap();
        let run = |c: &mut Command| assert!(c.status().unwrap().success(), "{c:?}");
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image));
        run(Command::new("mount").args(["-o", "loop"]).arg(&image).arg(&dir));
        LoopFs { dir, image }
    }

    /// Freezes the filesystem (every write to it blocks) until the guard is dropped.
    fn freeze(&self) -> Frozen<'_> {
        assert!(Command::new("fsfreeze").arg("-f").arg(&self.dir).status().unwrap().success());
        Frozen(self)
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(&self.image);
    }
}

struct Frozen<'a>(&'a LoopFs);

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        let _ = Command::new("fsfreeze").arg("-u").arg(&self.0.dir).status();
    }
}

/// An HTTP GET on the metrics listener, answered within a second or `None`.
fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// The audit file on a frozen filesystem (`fsfreeze -f`) stalls nothing but the audited calls:
/// with more Mkdir calls waiting on it than the daemon has async workers, PathExists on another
/// API, ListDiskIDs and `/healthz` each answer within a second (they all hung until the thaw,
/// as the records were written on the workers), and each Mkdir is refused, unrun, once its start
/// record has waited the bound. After the thaw the trail is whole lines, every start paired with
/// its end. Root only.
#[test]
fn a_frozen_audit_file_stalls_no_other_call() {
    needs_root!();
    let fs = LoopFs::new("frozen-audit");
    let dir = tempdir("frozen-sock");
    let root = tempdir("frozen-root");
    std::fs::create_dir_all(&root).unwrap();
    let audit = fs.dir.join("audit.log");
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("127.0.0.1:{}", l.local_addr().unwrap().port())
    };
    let args = ["-kubelet-path", root.to_str().unwrap(), "-audit-log", audit.to_str().unwrap()];
    let _d = start(&dir, &[&args[..], &["-metrics-bind-address", &addr]].concat());
    // More than the daemon's workers (one per CPU).
    let stuck = std::thread::available_parallelism().map_or(2, |n| n.get()) + 2;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mkdir = |name: String| {
        let (sock, path) = (dir.join("csi-proxy-filesystem-v1.sock"), root.join(name).to_str().unwrap().to_string());
        async move {
            use csi_proxy_wire::v1::{filesystem_client::FilesystemClient, MkdirRequest};
            FilesystemClient::new(unix_channel(sock).await).mkdir(MkdirRequest { path }).await
        }
    };
    rt.block_on(mkdir("before".into())).unwrap();
    let frozen = fs.freeze();
    let calls: Vec<_> = (0..stuck).map(|i| rt.spawn(mkdir(format!("frozen{i}")))).collect();
    // Until the daemon has taken every Mkdir (counted before its audit record is written).
    let started = format!(
        "grpc_server_started_total{{grpc_method=\"Mkdir\",grpc_service=\"v1.Filesystem\",grpc_type=\"unary\"}} {}",
        stuck + 1
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while !http_get(&addr, "/metrics").expect("/metrics answers within 1 s").contains(&started) {
        assert!(Instant::now() < deadline, "the Mkdir calls never reached the daemon");
        std::thread::sleep(Duration::from_millis(20));
    }
    rt.block_on(async {
        let within = Duration::from_secs(1);
        for _ in 0..3 {
            use csi_proxy_wire::v1beta2::{filesystem_client::FilesystemClient, PathExistsRequest};
            let sock = dir.join("csi-proxy-filesystem-v1beta2.sock");
            let path = root.to_str().unwrap().to_string();
            let answer = tokio::time::timeout(within, async {
                FilesystemClient::new(unix_channel(sock).await).path_exists(PathExistsRequest { path }).await
            });
            assert!(answer.await.expect("PathExists answers within 1 s").unwrap().into_inner().exists);
            use csi_proxy_wire::v1::{disk_client::DiskClient, ListDiskIDsRequest};
            let sock = dir.join("csi-proxy-disk-v1.sock");
            let answer = tokio::time::timeout(within, async {
                DiskClient::new(unix_channel(sock).await).list_disk_i_ds(ListDiskIDsRequest {}).await
            });
            answer.await.expect("ListDiskIDs answers within 1 s").unwrap();
            let health = tokio::task::spawn_blocking({
                let addr = addr.clone();
                move || http_get(&addr, "/healthz")
            });
            let health = health.await.unwrap().expect("/healthz answers within 1 s");
            assert!(health.starts_with("HTTP/1.1 200 "), "{health}");
        }
        for call in calls {
            let e = tokio::time::timeout(Duration::from_secs(20), call).await.expect("refused in time").unwrap();
            let e = e.unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
            assert!(e.message().contains("audit record could not be written within 5 s"), "{e:?}");
        }
    });
    drop(frozen);
    rt.block_on(mkdir("after".into())).unwrap();
    for i in 0..stuck {
        assert!(!root.join(format!("frozen{i}")).exists(), "a refused call ran");
    }
    let text = std::fs::read_to_string(&audit).unwrap();
    let mut calls = std::collections::BTreeMap::<u64, Vec<(String, String)>>::new();
    for line in text.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        let code = r["code"].as_str().unwrap_or("-").to_string();
        calls.entry(r["call"].as_u64().unwrap()).or_default().push((r["event"].as_str().unwrap().into(), code));
    }
    let ok = [("start".to_string(), "-".to_string()), ("end".to_string(), "OK".to_string())];
    let not_run = [("start".to_string(), "-".to_string()), ("end".to_string(), "Unavailable".to_string())];
    let (first, last) = (calls.values().next().unwrap(), calls.values().last().unwrap());
    assert!(first == &ok && last == &ok, "{text}");
    // The record being written when the filesystem froze lands after the thaw, with an end
    // record saying its call did not run; the others never reach the file.
    assert!(calls.values().filter(|c| *c != &ok).all(|c| c == &not_run), "{text}");
    let _ = std::fs::remove_dir_all(&root);
}

/// Runs the daemon with `flag value` until it exits (or 20 s): its exit code and what it printed.
fn start_with(base: &Path, flag: &str, value: &Path) -> (Option<i32>, String) {
    let dir = base.join("sock");
    let mut c = Command::new(BIN);
    c.arg("-socket-dir").arg(&dir).arg(flag).arg(value).arg("-kubelet-path").arg(base);
    let out = output_within(&mut c, Duration::from_secs(20));
    let _ = std::fs::remove_dir_all(&dir);
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// An audit file others could change, or a link in its place, is refused at start, naming the
/// path and why, as the socket directory is (it was used as it was, the link followed).
#[test]
fn unsafe_audit_files_are_refused_at_start() {
    use std::os::unix::fs::PermissionsExt;
    let base = tempdir("unsafe-audit");
    std::fs::create_dir_all(&base).unwrap();
    let audit = base.join("audit.log");
    std::fs::write(&audit, "").unwrap();
    std::fs::set_permissions(&audit, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, err) = start_with(&base, "-audit-log", &audit);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&format!("audit file {} has mode 0666", audit.display())), "{err}");
    std::fs::remove_file(&audit).unwrap();
    std::os::unix::fs::symlink(base.join("elsewhere"), &audit).unwrap();
    let (code, err) = start_with(&base, "-audit-log", &audit);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("is a symbolic link"), "{err}");
    assert!(!base.join("elsewhere").exists(), "the link was followed");
    // Its directory is checked too.
    std::fs::remove_file(&audit).unwrap();
    let logs = base.join("logs");
    std::fs::create_dir(&logs).unwrap();
    std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (code, err) = start_with(&base, "-audit-log", &logs.join("audit.log"));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("directory {} of audit file", logs.display())) && err.contains("has mode 0777"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// A `-linux-smb-dir` others can write to, or a link in its place, is refused at start, as the
/// socket directory is (it was used as it was).
#[test]
fn unsafe_smb_directories_are_refused_at_start() {
    use std::os::unix::fs::PermissionsExt;
    let base = tempdir("unsafe-smb");
    std::fs::create_dir_all(&base).unwrap();
    let smb = base.join("smb");
    std::fs::create_dir(&smb).unwrap();
    std::fs::set_permissions(&smb, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (code, err) = start_with(&base, "-linux-smb-dir", &smb);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&format!("-linux-smb-dir {} has mode 0777", smb.display())), "{err}");
    std::fs::remove_dir(&smb).unwrap();
    std::os::unix::fs::symlink(&base, &smb).unwrap();
    let (code, err) = start_with(&base, "-linux-smb-dir", &smb);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("is a symbolic link"), "{err}");
    let _ = std::fs::remove_dir_all(&base);
}

/// A `-linux-smb-dir` others can read or enter (0755, as the kubelet makes a missing hostPath
/// directory) is made 0700 at start and said so: the shares below are mounted open to every
/// user, so this directory is what keeps other local users out. It stayed 0755 before.
#[test]
fn a_readable_smb_directory_is_made_owner_only_at_start() {
    use std::os::unix::fs::PermissionsExt;
    let base = tempdir("readable-smb");
    std::fs::create_dir_all(&base).unwrap();
    let smb = base.join("smb");
    std::fs::create_dir(&smb).unwrap();
    std::fs::set_permissions(&smb, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A socket directory that is a file: the daemon stops at its bind, after the SMB check.
    let not_a_dir = base.join("sock-file");
    std::fs::write(&not_a_dir, "").unwrap();
    let mut c = Command::new(BIN);
    c.arg("-socket-dir").arg(&not_a_dir).arg("-linux-smb-dir").arg(&smb).arg("-kubelet-path").arg(&base);
    let out = output_within(&mut c, Duration::from_secs(20));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(std::fs::metadata(&smb).unwrap().permissions().mode() & 0o7777, 0o700, "{err}");
    assert!(err.contains("made -linux-smb-dir owner-only (0700)") && err.contains("0755"), "{err}");
    let _ = std::fs::remove_dir_all(&base);
}
