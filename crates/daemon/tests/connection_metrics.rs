#![cfg(target_os = "linux")]
//! The real daemon's `/metrics` (issue 32): open connections per endpoint, refused and evicted
//! connections per endpoint and reason, and `process_cpu_seconds_total` in fractions of a second.

mod common;

use common::half_open_headers;
use csi_proxy_transport::frame::{EMPTY_SETTINGS, PREFACE};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_csi-proxy");
const FS: &str = "csi-proxy-filesystem-v1";

struct Daemon {
    child: Child,
    dir: PathBuf,
    metrics: String,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start(tag: &str, extra: &[&str]) -> Daemon {
    let dir = std::env::temp_dir().join(format!("csi-proxy-connmetrics-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("root")).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let metrics = format!("127.0.0.1:{port}");
    let child = Command::new(BIN)
        .arg("-socket-dir")
        .arg(dir.join("sock"))
        .arg("-kubelet-path")
        .arg(dir.join("root"))
        .args(["-metrics-bind-address", &metrics])
        .args(extra)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let d = Daemon { child, dir, metrics };
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(&d.metrics).is_err() || !d.socket(FS).exists() {
        assert!(Instant::now() < deadline, "the daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    d
}

impl Daemon {
    fn socket(&self, endpoint: &str) -> PathBuf {
        self.dir.join("sock").join(format!("{endpoint}.sock"))
    }

    fn scrape(&self) -> String {
        let mut s = TcpStream::connect(&self.metrics).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        assert!(body.starts_with("HTTP/1.1 200"), "{body}");
        body
    }

    /// The value of the sample `series` (name and labels as written), 0 when absent.
    fn value(&self, series: &str) -> f64 {
        sample(&self.scrape(), series).unwrap_or(0.0)
    }

    /// Scrapes until `series` is `want` (the daemon accepts and closes connections on its own
    /// time); panics with the last scrape after 10 s.
    fn wait_for(&self, series: &str, want: f64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = self.scrape();
            if sample(&text, series).unwrap_or(0.0) == want {
                return;
            }
            assert!(Instant::now() < deadline, "{series} is not {want}:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn open(endpoint: &str) -> String {
    format!("csi_proxy_connections_open{{endpoint=\"{endpoint}\"}}")
}

/// A PathExists call opened on stream 1 without END_STREAM: its body never comes, so it never
/// gets a permit and never counts as in flight (the progress timeout ends it).
fn half_open_call() -> Vec<u8> {
    let mut bytes = PREFACE.to_vec();
    bytes.extend_from_slice(&EMPTY_SETTINGS);
    bytes.extend(half_open_headers(1));
    bytes
}

/// Whether the daemon closed `s` (a read sees the end, or an error).
fn closed_by_daemon(s: &mut UnixStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return true,
            Ok(_) => continue, // the daemon's SETTINGS and such
        }
    }
}

/// Connections opened on an endpoint show in its gauge, and leave it when they close; the other
/// endpoints' gauges are untouched.
#[test]
fn open_connections_are_counted_per_endpoint() {
    let d = start("open", &[]);
    let before = d.scrape();
    assert_eq!(sample(&before, &open(FS)).unwrap_or(0.0), 0.0, "{before}");
    let held: Vec<UnixStream> = (0..5).map(|_| UnixStream::connect(d.socket(FS)).unwrap()).collect();
    let disk = UnixStream::connect(d.socket("csi-proxy-disk-v1")).unwrap();
    d.wait_for(&open(FS), 5.0);
    d.wait_for(&open("csi-proxy-disk-v1"), 1.0);
    drop(held);
    d.wait_for(&open(FS), 0.0);
    assert_eq!(d.value(&open("csi-proxy-disk-v1")), 1.0);
    drop(disk);
    d.wait_for(&open("csi-proxy-disk-v1"), 0.0);
    // The metrics listener counts itself: the scrape being answered is open. An earlier scrape's
    // connection closes on the daemon's time, so it may still be counted for a moment.
    d.wait_for(&open("metrics"), 1.0);
}

/// With one slot per endpoint, a connection whose only call is half-open (HEADERS without a
/// body) does not hold it: the next connection from the same user takes its place, counted as an
/// eviction with its endpoint and reason, and nothing is refused. (Before, the half-open call
/// counted as in flight and every new connection was refused for `-progress-timeout`.)
#[test]
fn a_half_open_call_holds_no_slot_and_its_eviction_is_counted() {
    let d = start("evicted", &["-max-connections-per-endpoint=1", "-progress-timeout=60s"]);
    let refused = format!("csi_proxy_connections_refused_total{{endpoint=\"{FS}\",reason=\"caller_share\"}}");
    let evicted = format!("csi_proxy_connections_evicted_total{{endpoint=\"{FS}\",reason=\"idle\"}}");
    assert_eq!(d.value(&evicted), 0.0);
    let mut half_open = UnixStream::connect(d.socket(FS)).unwrap();
    half_open.write_all(&half_open_call()).unwrap();
    d.wait_for(&open(FS), 1.0);
    // Give the daemon the call's HEADERS before the next connection arrives.
    std::thread::sleep(Duration::from_millis(300));
    let mut next = UnixStream::connect(d.socket(FS)).unwrap();
    next.write_all(PREFACE).unwrap();
    next.write_all(&EMPTY_SETTINGS).unwrap();
    assert!(closed_by_daemon(&mut half_open), "the half-open call's connection was kept");
    d.wait_for(&evicted, 1.0);
    assert_eq!(d.value(&refused), 0.0);
    d.wait_for(&open(FS), 1.0);
    drop(next);
    d.wait_for(&open(FS), 0.0);
}

/// The metrics listener closes a connection that sent nothing when 64 newer ones wait for their
/// request: counted as evicted on endpoint "metrics", reason "no_request".
#[test]
fn the_metrics_listener_counts_the_silent_connections_it_closes() {
    let d = start("silent", &[]);
    let evicted = r#"csi_proxy_connections_evicted_total{endpoint="metrics",reason="no_request"}"#;
    let silent: Vec<TcpStream> = (0..70).map(|_| TcpStream::connect(&d.metrics).unwrap()).collect();
    // 70 silent ones and each scrape's own: at least 6 closed, and each scrape that finds them
    // queued adds one more. Wait for the first 6.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = d.scrape();
        if sample(&text, evicted).unwrap_or(0.0) >= 6.0 {
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(silent);
    d.wait_for(&open("metrics"), 1.0);
}

/// `process_cpu_seconds_total` is the daemon's utime + stime from /proc in fractions of a second
/// (the prometheus crate's collector counted whole seconds: 0 for a daemon that used 0.4 s).
#[test]
fn cpu_seconds_are_fractional_and_match_proc() {
    let d = start("cpu", &[]);
    // Some work for the daemon: scrapes and connections.
    for _ in 0..200 {
        let _ = d.scrape();
        drop(UnixStream::connect(d.socket(FS)).unwrap());
    }
    let ticks = |pid: u32| -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
        // After the command: state is field 3, utime 14 and stime 15 (1-based).
        fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap()
    };
    let hz: f64 = {
        let out = Command::new("getconf").arg("CLK_TCK").output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    let mut seen = Vec::new();
    for _ in 0..10 {
        let low = ticks(d.child.id()) / hz;
        let cpu = d.value("process_cpu_seconds_total");
        let high = ticks(d.child.id()) / hz;
        assert!(cpu >= low && cpu <= high, "{low} <= {cpu} <= {high}");
        seen.push(cpu);
        if cpu.fract() != 0.0 {
            break;
        }
        // 10 ms ticks: a whole number one time in a hundred. More work, and look again.
        for _ in 0..20 {
            let _ = d.scrape();
        }
    }
    assert!(seen.iter().any(|c| c.fract() != 0.0 && *c > 0.0), "{seen:?}");
}
