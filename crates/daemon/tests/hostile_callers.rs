#![cfg(target_os = "linux")]
//! The real daemon against 1, 2, 3 and 10 hostile local users at once (issue 38). Each attacker
//! is this test binary run again as its own uid (so each is its own principal), holding the
//! endpoint's connections at its cap: idle ones, silent ones (never a byte), half-open calls
//! (HEADERS on every stream, never a body) and churn (connect, preface, close), at 50 new
//! connections a second each, and 3 and 10 of them at 500 (a flood). Meanwhile a victim
//! (root, another principal) calls PathExists on a long-lived channel and on fresh connections:
//! every call must succeed. The latencies are printed beside the unloaded ones (figures, not
//! assertions). Needs root (other uids); skipped otherwise.

mod common;

use common::half_open_headers;
use csi_proxy_transport::frame::{write_frame, PREFACE, TYPE_SETTINGS};
use csi_proxy_wire::v1::{filesystem_client::FilesystemClient, PathExistsRequest};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_csi-proxy");
/// Where an attacker process finds its orders: `<socket>|<seconds>|<cap>|<pause in µs>`.
const ORDERS: &str = "CSI_PROXY_TEST_ATTACK";
/// Slots of the endpoint under attack (the default is 256; fewer keep the test quick).
const SLOTS: usize = 64;

/// The attacker's body, run in a child process as another uid; does nothing in a normal run.
#[test]
fn attacker() {
    let Ok(orders) = std::env::var(ORDERS) else { return };
    let mut parts = orders.split('|');
    let socket = PathBuf::from(parts.next().unwrap());
    let until = Instant::now() + Duration::from_secs(parts.next().unwrap().parse().unwrap());
    let cap: usize = parts.next().unwrap().parse().unwrap();
    let pause = Duration::from_micros(parts.next().unwrap().parse().unwrap());
    let mut settings = PREFACE.to_vec();
    write_frame(TYPE_SETTINGS, 0, 0, &[], &mut settings);
    let mut half_open = settings.clone();
    for id in (1..32).step_by(2) {
        half_open.extend(half_open_headers(id));
    }
    let mut held: std::collections::VecDeque<UnixStream> = Default::default();
    let mut n = 0u64;
    while Instant::now() < until {
        n += 1;
        let Ok(mut s) = UnixStream::connect(&socket) else {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        // A refused or evicted connection may be closed already: that is the daemon's right.
        match n % 4 {
            0 => drop(s.write_all(&settings)),  // idle after its handshake
            1 => {}                             // silent
            2 => drop(s.write_all(&half_open)), // every stream a call whose body never comes
            _ => {
                let _ = s.write_all(&settings); // churn
                continue;
            }
        }
        held.push_back(s);
        if held.len() > cap {
            held.pop_front();
        }
        // At most one connection per pause: unthrottled, 10 processes on this machine's 2 cores
        // fill the kernel's accept queue whatever the daemon does, and connect() answers EAGAIN
        // to everyone alike.
        std::thread::sleep(pause);
    }
}

/// A running daemon; killed, and its directory removed, on drop.
struct Daemon(Child, PathBuf);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

fn start(tag: &str) -> (Daemon, PathBuf, PathBuf) {
    let base = std::env::temp_dir().join(format!("csi-proxy-hostile-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (dir, root) = (base.join("sock"), base.join("root"));
    std::fs::create_dir_all(&root).unwrap();
    let child = Command::new(BIN)
        .arg("-socket-dir")
        .arg(&dir)
        .arg("-kubelet-path")
        .arg(&root)
        .arg(format!("-max-connections-per-endpoint={SLOTS}"))
        .arg("-progress-timeout=2s")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let d = Daemon(child, base.clone());
    let socket = dir.join("csi-proxy-filesystem-v1.sock");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "daemon did not create its sockets");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Let the other uids in, as an operator granting several drivers access would.
    for p in [&base, &dir, &socket] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    (d, socket, root)
}

fn attackers(socket: &Path, count: u32, seconds: u64, pause: Duration) -> Vec<Child> {
    // A copy of this binary the other uids can run wherever the build tree is.
    let me = socket.parent().unwrap().parent().unwrap().join("attacker");
    std::fs::copy(std::env::current_exe().unwrap(), &me).unwrap();
    std::fs::set_permissions(&me, std::fs::Permissions::from_mode(0o755)).unwrap();
    (0..count)
        .map(|i| {
            Command::new(&me)
                .args(["attacker", "--exact", "--nocapture", "--test-threads=1"])
                .env(ORDERS, format!("{}|{seconds}|{SLOTS}|{}", socket.display(), pause.as_micros()))
                .uid(20_000 + i)
                .gid(20_000 + i)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect()
}

/// `calls` PathExists calls on one channel, then `fresh` each on a new connection; the time of
/// each. Panics naming the call that failed.
async fn victim(socket: &Path, root: &Path, calls: usize, fresh: usize, pause: Duration) -> Vec<Duration> {
    let req = || PathExistsRequest { path: root.join("nothing-here").to_str().unwrap().into() };
    let connect = || csi_proxy_client::connect_socket(socket.to_path_buf(), Duration::ZERO);
    let mut times = Vec::new();
    let mut long = FilesystemClient::new(connect().await.unwrap());
    for i in 0..calls {
        let t = Instant::now();
        match tokio::time::timeout(Duration::from_secs(10), long.path_exists(req())).await {
            Ok(Ok(r)) => assert!(!r.into_inner().exists),
            other => panic!("call {i} on the long-lived channel failed after {:?}: {other:?}", t.elapsed()),
        }
        times.push(t.elapsed());
        tokio::time::sleep(pause).await;
    }
    for i in 0..fresh {
        let t = Instant::now();
        let call = async { FilesystemClient::new(connect().await?).path_exists(req()).await.map_err(Into::into) };
        let r: Result<_, Box<dyn std::error::Error + Send + Sync>> =
            tokio::time::timeout(Duration::from_secs(10), call)
                .await
                .unwrap_or_else(|_| Err("no answer in 10 s".into()));
        if let Err(e) = r {
            panic!("call {i} on a fresh connection failed after {:?}: {e}", t.elapsed());
        }
        times.push(t.elapsed());
        tokio::time::sleep(pause).await;
    }
    times
}

fn percentile(times: &mut [Duration], p: f64) -> Duration {
    times.sort();
    times[((times.len() as f64 * p).ceil() as usize).clamp(1, times.len()) - 1]
}

/// Latencies are printed per case, against the same daemon's unloaded ones: figures, not
/// assertions.
#[test]
fn a_victim_is_served_whatever_1_2_3_or_10_attacker_uids_hold() {
    if std::env::var_os(ORDERS).is_some() {
        return;
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root (attackers run as other uids)");
        return;
    }
    csi_proxy_transport::limits::raise_nofile_limit().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // Each attacker opening 50 connections a second (churn), then 500 (a flood).
    for (count, pause) in [1u32, 2, 3, 10].map(|c| (c, 20)).into_iter().chain([(3, 2), (10, 2)]) {
        let pause = Duration::from_millis(pause);
        let rate = 1000 / pause.as_millis();
        let (_d, socket, root) = start(&format!("k{count}-{rate}"));
        let mut base = rt.block_on(victim(&socket, &root, 80, 40, Duration::ZERO));
        let mut hostile = attackers(&socket, count, 8, pause);
        // Let them fill the endpoint.
        std::thread::sleep(Duration::from_secs(2));
        let mut loaded = rt.block_on(victim(&socket, &root, 80, 40, Duration::from_millis(20)));
        for a in &mut hostile {
            let _ = a.kill();
            let _ = a.wait();
        }
        // The first 80 on the long-lived channel, the last 40 each on a fresh connection.
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (mut base_fresh, mut loaded_fresh) = (base.split_off(80), loaded.split_off(80));
        for (what, b, l) in [("long-lived", &mut base, &mut loaded), ("fresh", &mut base_fresh, &mut loaded_fresh)] {
            let (b50, b99, l50, l99) =
                (percentile(b, 0.5), percentile(b, 0.99), percentile(l, 0.5), percentile(l, 0.99));
            eprintln!(
                "{count:>2} attacker uid(s) at {rate:>3} connections/s each, {what:>10}: all {} calls succeeded; \
                 p50 {:.2} -> {:.2} ms, p99 {:.2} -> {:.2} ms ({:.1}x)",
                l.len(),
                ms(b50),
                ms(l50),
                ms(b99),
                ms(l99),
                l99.as_secs_f64() / b99.as_secs_f64()
            );
        }
    }
}
