#![cfg(unix)]
//! The real daemon on a unix socket: one client holding an endpoint's connections (idle ones, or
//! calls whose body never comes) does not lock another client out (issue 28).

mod common;

use common::half_open_headers;
use csi_proxy_transport::frame::{write_frame, PREFACE, TYPE_SETTINGS};
use csi_proxy_wire::v1::{filesystem_client::FilesystemClient, PathExistsRequest};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_csi-proxy");

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("csi-proxy-fair-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A running daemon; killed, and its directories removed, on drop.
struct Daemon(Child, Vec<PathBuf>);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        for d in &self.1 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// The daemon serving `dir` with `root` as its kubelet directory, once its sockets exist.
fn start(dir: &Path, root: &Path, extra: &[&str]) -> Daemon {
    std::fs::create_dir_all(root).unwrap();
    let child = Command::new(BIN)
        .arg("-socket-dir")
        .arg(dir)
        .arg("-kubelet-path")
        .arg(root)
        .args(extra)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let d = Daemon(child, vec![dir.to_path_buf(), root.to_path_buf()]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !dir.join("csi-proxy-filesystem-v1.sock").exists() {
        assert!(Instant::now() < deadline, "daemon did not create its sockets");
        std::thread::sleep(Duration::from_millis(20));
    }
    d
}

/// A new client's PathExists, timed from its connect to its answer; panics if it fails.
fn path_exists(socket: &Path, root: &Path) -> Duration {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let start = Instant::now();
    rt.block_on(async {
        let call = async {
            let ch = csi_proxy_client::connect_socket(socket.to_path_buf(), Duration::ZERO).await.unwrap();
            let req = PathExistsRequest { path: root.join("nothing-here").to_str().unwrap().into() };
            FilesystemClient::new(ch).path_exists(req).await
        };
        match tokio::time::timeout(Duration::from_secs(5), call).await {
            Ok(Ok(r)) => assert!(!r.into_inner().exists),
            Ok(Err(s)) => panic!("PathExists failed after {:?}: {s:?}", start.elapsed()),
            Err(_) => panic!("PathExists got no answer in 5 s"),
        }
    });
    start.elapsed()
}

fn raise_fd_limit() {
    let limit = csi_proxy_transport::limits::raise_nofile_limit().unwrap();
    assert!(limit.soft.is_none_or(|s| s > 3500), "this test needs 3,500 descriptors: {limit:?}");
}

/// 3,000 connections that never send a byte, held by one client on filesystem-v1 (256 slots):
/// another client's PathExists still succeeds within a second. Before issue 28 the slots were
/// full and every new connection was closed at once.
#[test]
fn three_thousand_idle_connections_do_not_lock_out_another_client() {
    raise_fd_limit();
    let (dir, root) = (tempdir("idle"), tempdir("idle-root"));
    let _d = start(&dir, &root, &[]);
    let socket = dir.join("csi-proxy-filesystem-v1.sock");
    let mut held = Vec::with_capacity(3000);
    for _ in 0..3000 {
        held.push(UnixStream::connect(&socket).unwrap());
    }
    // Let the daemon accept them all.
    std::thread::sleep(Duration::from_millis(500));
    let took = path_exists(&socket, &root);
    eprintln!("PathExists with 3,000 idle connections held: {took:?}");
    assert!(took <= Duration::from_secs(1), "{took:?}");
    drop(held);
}

/// 256 connections (every slot of the endpoint), each with 16 calls (every stream) whose HEADERS
/// came and whose body never does: another client's PathExists succeeds at once, without waiting
/// for `-progress-timeout` (2 s here). Such calls hold no permit and keep no connection from being
/// taken (issue 38); before, they counted as in flight until the timeout (before issue 28,
/// forever).
#[test]
fn four_thousand_half_open_calls_do_not_lock_out_another_client() {
    raise_fd_limit();
    let (dir, root) = (tempdir("halfopen"), tempdir("halfopen-root"));
    let _d = start(&dir, &root, &["-progress-timeout=2s"]);
    let socket = dir.join("csi-proxy-filesystem-v1.sock");
    let mut held = Vec::with_capacity(256);
    for _ in 0..256 {
        let mut s = UnixStream::connect(&socket).unwrap();
        let mut bytes = PREFACE.to_vec();
        write_frame(TYPE_SETTINGS, 0, 0, &[], &mut bytes);
        for id in (1..32).step_by(2) {
            bytes.extend(half_open_headers(id));
        }
        // A connection the daemon refused may already be closed: that is fine.
        let _ = s.write_all(&bytes);
        held.push(s);
    }
    // Long enough for the daemon to read every HEADERS, well short of the progress timeout.
    std::thread::sleep(Duration::from_millis(300));
    let took = path_exists(&socket, &root);
    eprintln!("PathExists with 4,096 half-open calls held: {took:?}");
    assert!(took <= Duration::from_secs(1), "{took:?}");
    drop(held);
}
