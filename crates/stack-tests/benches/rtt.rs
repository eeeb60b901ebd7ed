//! Unary round-trip benchmark (not a test): p50/p99/max latency and calls/s of
//! `v1.Disk/GetDiskStats` through the whole stack (transport, HTTP/2, gRPC codec, version
//! conversion, host call on the in-memory host, response), for
//!
//! - 1 client calling sequentially,
//! - N concurrent callers sharing one connection (clones of one tonic `Channel`),
//! - N concurrent callers, each on its own connection,
//!
//! over a unix socket (unix: `cargo bench -p csi-proxy-stack-tests --bench rtt`) or a named pipe
//! (Windows; under Wine: `shared/tools/windows-cross cargo bench -p csi-proxy-stack-tests --bench rtt`).
//! `scripts/bench.sh` runs both.
//!
//! The server is a child process (this program again, with `--serve`), on its own multi-thread
//! runtime, as the daemon is; the clients run on another runtime here. Besides latency, each row
//! gives the server's CPU time per call (user + system, during the measured calls), its threads
//! (at the start of the measured calls → most seen while they ran, sampled every 10 ms) and its
//! peak resident memory.
//!
//! Syscalls per call are counted from outside, with `strace -f -c` on the server alone:
//! `rtt --bench --serve` prints the endpoint and serves until its standard input closes, and
//! `RTT_ONLY=<scenario> rtt --bench --connect <endpoint>` runs the clients against it and prints
//! `rtt: calls made <n>` (warm-up included); `scripts/bench.sh` does this for every scenario.
//!
//! The last row, "raw echo (floor)", is the same thread arrangement without HTTP/2, gRPC or the
//! host: 64 bytes written to, and echoed back by, a task on the server runtime over the same kind
//! of endpoint (bound by the transport's own listener). It is what one round trip costs on this
//! machine before csi-proxy does anything. On VMs whose idle vCPUs halt, it is dominated by
//! cross-CPU wake-ups; `taskset -c 0` (everything on one CPU) shows the CPU cost instead. The row
//! after it, "raw echo, 2 writes", sends the same 64 bytes in two writes (33 + 31), as the tonic
//! client sends a unary call's HEADERS and DATA frames: the server may then wake once per write,
//! a cost of every call from such a client that no server can avoid.
//!
//! Environment:
//! - `RTT_CALLS` (20000): measured calls per scenario, split evenly among the callers;
//! - `RTT_WARMUP` (2000): unmeasured calls before each scenario, split likewise;
//! - `RTT_CALLERS` (16): callers of the concurrent scenarios;
//! - `RTT_SERVER_THREADS` (number of CPUs, as the daemon): server runtime worker threads;
//! - `RTT_CLIENT_THREADS` (1): client runtime worker threads;
//! - `RTT_ONLY` (all): `sequential`, `shared` or `connections` runs that scenario alone; `echo`
//!   with `--connect <the echo endpoint the server printed second>` runs the raw echo alone.
//! - `RTT_PATH_EXISTS` (unset): with `--connect <filesystem v1 endpoint>`, the callers make
//!   `v1.Filesystem/PathExists` calls on this path instead, against any daemon serving that
//!   endpoint: this is how one client measures our daemon and upstream's side by side.

use csi_proxy_host::memory::MemoryHost;
use csi_proxy_host::Hosts;
use csi_proxy_server::{Config, Context};
use csi_proxy_stack_tests::{api, channel_over};
use csi_proxy_transport::{ConnPolicy, Listener};
use csi_proxy_wire::v1::disk_client::DiskClient;
use csi_proxy_wire::v1::filesystem_client::FilesystemClient;
use csi_proxy_wire::v1::{GetDiskStatsRequest, PathExistsRequest};
use csi_proxy_wire::{Api, Group};
use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::runtime::Runtime;
use tokio::sync::{oneshot, Barrier};
use tonic::transport::Channel;

fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

fn disk_v1() -> Api {
    api(Group::Disk, "v1")
}

/// One new HTTP/2 connection over the byte stream `open` makes.
async fn connect<F, Fut, IO>(open: F) -> Channel
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = std::io::Result<IO>> + Send,
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    channel_over("http://localhost", open).await.expect("connect")
}

// ---------------------------------------------------------------------------------------------
// Transports: where the server listens and how a client opens one byte stream.
// ---------------------------------------------------------------------------------------------

#[cfg(unix)]
mod transport {
    use super::*;
    use std::path::PathBuf;

    pub const NAME: &str = "unix socket";

    pub type Target = PathBuf;

    pub fn parse_target(s: &str) -> Target {
        PathBuf::from(s)
    }

    pub fn show_target(t: &Target) -> String {
        t.display().to_string()
    }

    pub struct Server {
        dir: PathBuf,
        stop: Option<oneshot::Sender<()>>,
        task: Option<tokio::task::JoinHandle<()>>,
    }

    /// Serves every API on `<tmp>/csi-proxy-bench-<pid>/*.sock` with `serve_apis`, as the daemon
    /// does.
    pub fn start(rt: &Runtime, ctx: Context) -> Server {
        let dir = std::env::temp_dir().join(format!("csi-proxy-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (tx, rx) = oneshot::channel::<()>();
        let endpoints = csi_proxy_transport::Endpoints::UnixDir(dir.clone());
        let task = rt.spawn(async move {
            let shutdown = async {
                let _ = rx.await;
            };
            csi_proxy_transport::serve_apis(
                csi_proxy_wire::APIS,
                &endpoints,
                |api| csi_proxy_server::service(&ctx, api),
                ConnPolicy::default(),
                shutdown,
            )
            .await
            .expect("serve_apis");
        });
        let server = Server { dir, stop: Some(tx), task: Some(task) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !server.target().exists() {
            assert!(Instant::now() < deadline, "the sockets did not appear");
            std::thread::sleep(Duration::from_millis(5));
        }
        server
    }

    impl Server {
        pub fn target(&self) -> Target {
            disk_v1().socket_path(&self.dir)
        }

        /// A listener for the raw echo, bound like the API sockets (in a subdirectory).
        pub fn echo_listener(&self, rt: &Runtime) -> (impl Listener, Target) {
            let dir = self.dir.join("echo");
            std::fs::create_dir_all(&dir).expect("create the echo directory");
            let _enter = rt.enter();
            let l = csi_proxy_transport::unix::bind(&dir, &disk_v1()).expect("bind the echo socket");
            let path = l.path().to_path_buf();
            (l, path)
        }

        pub fn stop(mut self, rt: &Runtime) {
            let _ = self.stop.take().map(|tx| tx.send(()));
            if let Some(t) = self.task.take() {
                rt.block_on(t).expect("server task");
            }
        }
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.stop.take().map(|tx| tx.send(()));
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// One new byte stream to `path`.
    pub async fn open(path: Target) -> std::io::Result<tokio::net::UnixStream> {
        tokio::net::UnixStream::connect(path).await
    }
}

#[cfg(windows)]
mod transport {
    use super::*;
    use tokio::net::windows::named_pipe::NamedPipeClient;

    pub const NAME: &str = "named pipe (Wine)";

    pub type Target = String;

    pub fn parse_target(s: &str) -> Target {
        s.to_string()
    }

    pub fn show_target(t: &Target) -> String {
        t.clone()
    }

    pub struct Server {
        path: String,
        stop: Option<oneshot::Sender<()>>,
        task: Option<tokio::task::JoinHandle<()>>,
    }

    /// Serves the disk v1 API on a named pipe through the same code as
    /// `serve_apis(.., &Endpoints::Pipes { sddl: None }, ..)` does per API (`pipe::bind` with the
    /// default SDDL, then `serve`), but under a per-process name, so that it never collides with
    /// a daemon or a test serving the real `\\.\pipe\csi-proxy-disk-v1` in the same Wine prefix.
    pub fn start(rt: &Runtime, ctx: Context) -> Server {
        let path = format!(r"\\.\pipe\csi-proxy-bench-{}-{}", disk_v1().endpoint_name(), std::process::id());
        let (tx, rx) = oneshot::channel::<()>();
        let listener = {
            let _enter = rt.enter(); // the pipe registers with the runtime's reactor
            csi_proxy_transport::pipe::bind(&path, None).expect("pipe::bind")
        };
        let shutdown = async {
            let _ = rx.await;
        };
        let task = rt.spawn(csi_proxy_transport::serve(
            listener,
            csi_proxy_server::service(&ctx, disk_v1()),
            ConnPolicy::default(),
            shutdown,
        ));
        Server { path, stop: Some(tx), task: Some(task) }
    }

    impl Server {
        pub fn target(&self) -> Target {
            self.path.clone()
        }

        /// A listener for the raw echo, bound like the API pipe.
        pub fn echo_listener(&self, rt: &Runtime) -> (impl Listener, Target) {
            let path = format!("{}-echo", self.path);
            let _enter = rt.enter();
            (csi_proxy_transport::pipe::bind(&path, None).expect("bind the echo pipe"), path)
        }

        pub fn stop(mut self, rt: &Runtime) {
            let _ = self.stop.take().map(|tx| tx.send(()));
            if let Some(t) = self.task.take() {
                rt.block_on(t).expect("server task");
            }
        }
    }

    /// One new byte stream to `path`; retries while every instance is busy, as the client crate
    /// (and go-winio's `DialPipe`) does.
    pub async fn open(path: Target) -> std::io::Result<NamedPipeClient> {
        csi_proxy_client::open_pipe(path, Duration::from_secs(5), Duration::ZERO).await
    }
}

// ---------------------------------------------------------------------------------------------
// Measuring: the same for every transport.
// ---------------------------------------------------------------------------------------------

/// Something that makes one round trip per `call`.
trait Caller: Send + 'static {
    fn call(&mut self) -> impl Future<Output = ()> + Send;
}

impl Caller for DiskClient<Channel> {
    async fn call(&mut self) {
        let r = self.get_disk_stats(GetDiskStatsRequest { disk_number: 0 }).await.expect("GetDiskStats");
        assert!(r.get_ref().total_bytes > 0);
    }
}

/// A filesystem v1 client asking whether one path exists (`RTT_PATH_EXISTS`).
struct PathExists(FilesystemClient<Channel>, String);

impl Caller for PathExists {
    async fn call(&mut self) {
        let r = self.0.path_exists(PathExistsRequest { path: self.1.clone() }).await.expect("PathExists");
        assert!(r.get_ref().exists, "PathExists({:?}) answered false", self.1);
    }
}

/// The clients of a scenario: every caller makes the same kind of call.
enum Calls {
    Disk(DiskClient<Channel>),
    Path(PathExists),
}

impl Caller for Calls {
    async fn call(&mut self) {
        match self {
            Calls::Disk(c) => c.call().await,
            Calls::Path(c) => c.call().await,
        }
    }
}

const ECHO_LEN: usize = 64;

/// One connection to the raw echo.
struct Echo<IO>(IO, [u8; ECHO_LEN]);

impl<IO: AsyncRead + AsyncWrite + Unpin + Send + 'static> Caller for Echo<IO> {
    async fn call(&mut self) {
        self.0.write_all(&self.1).await.expect("echo write");
        self.0.read_exact(&mut self.1).await.expect("echo read");
    }
}

/// One connection to the raw echo whose request goes out in two writes, as the tonic client
/// sends a unary call: its HEADERS frame (33 octets for GetDiskStats) in one write, its DATA
/// frames in the next. The server may wake for each, which the one-write echo never shows.
struct SplitEcho<IO>(IO, [u8; ECHO_LEN]);

/// Where [`SplitEcho`] splits its request.
const ECHO_SPLIT: usize = 33;

impl<IO: AsyncRead + AsyncWrite + Unpin + Send + 'static> Caller for SplitEcho<IO> {
    async fn call(&mut self) {
        self.0.write_all(&self.1[..ECHO_SPLIT]).await.expect("echo write");
        self.0.write_all(&self.1[ECHO_SPLIT..]).await.expect("echo write");
        self.0.read_exact(&mut self.1).await.expect("echo read");
    }
}

/// Echoes every accepted connection's bytes, in a task per connection, on the server runtime.
fn serve_echo(rt: &Runtime, mut listener: impl Listener) {
    rt.spawn(async move {
        while let Ok(mut io) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; ECHO_LEN];
                while io.read_exact(&mut buf).await.is_ok() {
                    if io.write_all(&buf).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
}

struct Outcome {
    /// Per-call latencies, sorted.
    latencies: Vec<Duration>,
    /// From the common start to the last caller's last reply.
    wall: Duration,
}

/// `calls` calls by each client, all clients concurrently from a common start; hands the
/// clients back (so that one set serves warm-up and measurement).
async fn run<C: Caller>(clients: Vec<C>, calls: usize) -> (Outcome, Vec<C>) {
    let start_line = Arc::new(Barrier::new(clients.len() + 1));
    let mut tasks = Vec::with_capacity(clients.len());
    for mut client in clients {
        let start_line = start_line.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(calls);
            start_line.wait().await;
            for _ in 0..calls {
                let t = Instant::now();
                client.call().await;
                lat.push(t.elapsed());
            }
            (lat, Instant::now(), client)
        }));
    }
    start_line.wait().await;
    let begin = Instant::now();
    let mut latencies = Vec::with_capacity(calls * tasks.len());
    let mut end = begin;
    let mut clients = Vec::with_capacity(tasks.len());
    for t in tasks {
        let (lat, done, client) = t.await.expect("caller task");
        latencies.extend(lat);
        end = end.max(done);
        clients.push(client);
    }
    latencies.sort_unstable();
    (Outcome { latencies, wall: end - begin }, clients)
}

/// Warms up with `warmup` calls in all, then measures `calls` calls in all, split among `clients`.
async fn scenario<C: Caller>(name: &str, clients: Vec<C>, warmup: usize, calls: usize, server: &mut Option<Stats>) {
    let n = clients.len();
    let (_, clients) = run(clients, warmup.div_ceil(n)).await;
    let before = server.as_mut().map(Stats::take);
    let (outcome, _) = run(clients, calls.div_ceil(n)).await;
    let after = server.as_mut().map(Stats::take);
    MADE.fetch_add(n * (warmup.div_ceil(n) + calls.div_ceil(n)), Ordering::Relaxed);
    print_row(name, &outcome, before.zip(after));
}

/// Calls made by this process, warm-up included.
static MADE: AtomicUsize = AtomicUsize::new(0);

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

fn print_header() {
    println!(
        "{:<18} {:<28} {:>7} {:>9} {:>9} {:>9} {:>9} {:>12} {:>11} {:>8}",
        "transport",
        "scenario",
        "calls",
        "p50 µs",
        "p99 µs",
        "max µs",
        "calls/s",
        "srv CPU µs/c",
        "srv threads",
        "srv MiB"
    );
}

fn print_row(scenario: &str, o: &Outcome, server: Option<(Sample, Sample)>) {
    let l = &o.latencies;
    let (cpu, threads, rss) = match server {
        Some((a, b)) => (
            format!("{:.1}", (b.cpu_ns.saturating_sub(a.cpu_ns)) as f64 / 1e3 / l.len() as f64),
            format!("{} → {}", a.threads, b.peak_threads),
            format!("{:.1}", b.peak_rss as f64 / (1 << 20) as f64),
        ),
        None => ("-".into(), "-".into(), "-".into()),
    };
    println!(
        "{:<18} {:<28} {:>7} {:>9} {:>9} {:>9} {:>9.0} {:>12} {:>11} {:>8}",
        transport::NAME,
        scenario,
        l.len(),
        us(percentile(l, 0.50)),
        us(percentile(l, 0.99)),
        us(*l.last().expect("some calls")),
        l.len() as f64 / o.wall.as_secs_f64(),
        cpu,
        threads,
        rss
    );
}

// ---------------------------------------------------------------------------------------------
// The server process: serves, and reports its own CPU time, threads and memory on request.
// ---------------------------------------------------------------------------------------------

/// One reading of the server process.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// User + system CPU time since the process started.
    cpu_ns: u64,
    /// Threads now.
    threads: usize,
    /// Most threads seen since the previous reading.
    peak_threads: usize,
    /// Peak resident memory (working set) since the process started.
    peak_rss: u64,
}

impl Sample {
    fn parse(line: &str) -> Sample {
        let v: Vec<u64> = line.split_whitespace().map(|w| w.parse().expect("a stats number")).collect();
        assert_eq!(v.len(), 4, "stats line {line:?}");
        Sample { cpu_ns: v[0], threads: v[1] as usize, peak_threads: v[2] as usize, peak_rss: v[3] }
    }
}

/// The child process serving the benchmark.
struct Stats {
    child: Child,
    ask: ChildStdin,
    answers: BufReader<ChildStdout>,
}

impl Stats {
    /// Starts `<this program> --bench --serve`; returns it with the API and echo endpoints.
    fn spawn() -> (Stats, transport::Target, transport::Target) {
        let exe = std::env::current_exe().expect("this program's path");
        let mut child = Command::new(exe)
            .args(["--bench", "--serve"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the server process");
        let ask = child.stdin.take().expect("stdin");
        let mut answers = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = || {
            let mut l = String::new();
            answers.read_line(&mut l).expect("read from the server process");
            assert!(!l.is_empty(), "the server process ended");
            transport::parse_target(l.trim_end())
        };
        let (api, echo) = (line(), line());
        (Stats { child, ask, answers }, api, echo)
    }

    fn take(&mut self) -> Sample {
        writeln!(self.ask, "stats").and_then(|()| self.ask.flush()).expect("ask the server process");
        let mut l = String::new();
        self.answers.read_line(&mut l).expect("read from the server process");
        Sample::parse(&l)
    }

    fn stop(self) {
        let Stats { mut child, ask, answers } = self;
        drop(ask);
        drop(answers);
        let status = child.wait().expect("wait for the server process");
        assert!(status.success(), "server process: {status}");
    }
}

/// `--serve`: the server side, until standard input closes.
fn serve(server_threads: usize) {
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(server_threads)
        .thread_name("server")
        .enable_all()
        .build()
        .expect("tokio runtime");
    let host = Arc::new(MemoryHost::sample());
    let server = transport::start(&server_rt, Context::new(Hosts::from_one(host), Config::default()));
    let (echo_listener, echo) = server.echo_listener(&server_rt);
    serve_echo(&server_rt, echo_listener);

    // Sampled from the first request for figures on (not in the runs strace counts).
    let peak = Arc::new(AtomicUsize::new(0));
    let mut sampler = None;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}\n{}", transport::show_target(&server.target()), transport::show_target(&echo))
        .and_then(|()| out.flush())
        .expect("print the endpoints");
    for line in std::io::stdin().lock().lines() {
        if line.expect("read a request") == "stats" {
            sampler.get_or_insert_with(|| {
                let peak = peak.clone();
                std::thread::Builder::new()
                    .name("sampler".into())
                    .spawn(move || loop {
                        peak.fetch_max(procstat::threads(), Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(10));
                    })
                    .expect("start the sampler")
            });
            let threads = procstat::threads();
            let peak = peak.swap(threads, Ordering::Relaxed).max(threads);
            writeln!(out, "{} {} {} {}", procstat::cpu_ns(), threads, peak, procstat::peak_rss())
                .and_then(|()| out.flush())
                .expect("answer");
        }
    }
    server.stop(&server_rt);
}

#[cfg(target_os = "linux")]
mod procstat {
    fn status(key: &str) -> u64 {
        let text = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        let line = text.lines().find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("no {key} in /proc/self/status"));
        line[key.len()..].trim().trim_end_matches(" kB").trim().parse().expect("a number")
    }

    pub fn threads() -> usize {
        status("Threads:") as usize
    }

    pub fn peak_rss() -> u64 {
        status("VmHWM:") * 1024
    }

    /// utime + stime from /proc/self/stat, in clock ticks of 10 ms (USER_HZ is 100 on Linux).
    pub fn cpu_ns() -> u64 {
        let text = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
        let rest = &text[text.rfind(')').expect("comm") + 2..];
        let f: Vec<&str> = rest.split(' ').collect();
        let ticks: u64 = f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime");
        ticks * 10_000_000
    }
}

#[cfg(all(unix, not(target_os = "linux")))]
mod procstat {
    pub fn threads() -> usize {
        0
    }
    pub fn peak_rss() -> u64 {
        0
    }
    pub fn cpu_ns() -> u64 {
        0
    }
}

#[cfg(windows)]
#[allow(unsafe_code)] // FFI: the process's own times, threads and working set
mod procstat {
    use windows_sys::Win32::Foundation::FILETIME;
    use windows_sys::Win32::System::ProcessStatus::{K32GetProcessMemoryInfo, PROCESS_MEMORY_COUNTERS};
    use windows_sys::Win32::System::Threading::{GetCurrentProcess, GetProcessTimes};

    pub fn threads() -> usize {
        csi_proxy_stack_tests::winproc::threads()
    }

    pub fn peak_rss() -> u64 {
        // SAFETY: the counters are plain data, sized by cb.
        unsafe {
            let mut c: PROCESS_MEMORY_COUNTERS = std::mem::zeroed();
            let cb = std::mem::size_of::<PROCESS_MEMORY_COUNTERS>() as u32;
            c.cb = cb;
            assert!(K32GetProcessMemoryInfo(GetCurrentProcess(), &mut c, cb) != 0, "GetProcessMemoryInfo failed");
            c.PeakWorkingSetSize as u64
        }
    }

    pub fn cpu_ns() -> u64 {
        let zero = FILETIME { dwLowDateTime: 0, dwHighDateTime: 0 };
        let (mut created, mut exited, mut kernel, mut user) = (zero, zero, zero, zero);
        // SAFETY: four out-parameters of ours, for the pseudo handle of this process.
        let ok = unsafe { GetProcessTimes(GetCurrentProcess(), &mut created, &mut exited, &mut kernel, &mut user) };
        assert!(ok != 0, "GetProcessTimes failed");
        let t = |f: FILETIME| (u64::from(f.dwHighDateTime) << 32 | u64::from(f.dwLowDateTime)) * 100;
        t(kernel) + t(user)
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches`/`--all-targets` does not: then only
    // check that the benchmark builds, without spending a minute measuring.
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--bench") {
        println!("rtt: not run (pass --bench, as `cargo bench` does)");
        return;
    }
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let server_threads = env_usize("RTT_SERVER_THREADS", cpus).max(1);
    if args.iter().any(|a| a == "--serve") {
        return serve(server_threads);
    }
    let connect_to = args
        .iter()
        .position(|a| a == "--connect")
        .map(|i| transport::parse_target(args.get(i + 1).expect("--connect takes the endpoint the server printed")));
    let calls = env_usize("RTT_CALLS", 20_000).max(1);
    let warmup = env_usize("RTT_WARMUP", 2_000);
    let callers = env_usize("RTT_CALLERS", 16).max(1);
    let client_threads = env_usize("RTT_CLIENT_THREADS", 1).max(1);
    let only = std::env::var("RTT_ONLY").ok();
    let runs = |name: &str| only.as_deref().is_none_or(|o| o == name);

    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(client_threads)
        .thread_name("client")
        .enable_all()
        .build()
        .expect("tokio runtime");
    let path_exists = std::env::var("RTT_PATH_EXISTS").ok();
    assert!(path_exists.is_none() || connect_to.is_some(), "RTT_PATH_EXISTS needs --connect <filesystem v1 endpoint>");
    let method = if path_exists.is_some() { "v1.Filesystem/PathExists" } else { "v1.Disk/GetDiskStats" };
    let client = move |channel: Channel| match &path_exists {
        Some(path) => Calls::Path(PathExists(FilesystemClient::new(channel), path.clone())),
        None => Calls::Disk(DiskClient::new(channel)),
    };
    let (mut server, target, echo) = match connect_to {
        Some(target) => (None, target, None),
        None => {
            let (stats, target, echo) = Stats::spawn();
            (Some(stats), target, Some(echo))
        }
    };

    println!(
        "rtt: {method}, {calls} calls per scenario (+{warmup} warm-up), {callers} concurrent callers; \
         {cpus} CPUs, server process runtime {server_threads} workers, client runtime {client_threads} workers"
    );
    print_header();
    client_rt.block_on(async {
        let open = |t: &transport::Target| {
            let t = t.clone();
            move || transport::open(t.clone())
        };

        // `RTT_ONLY=echo --connect <echo endpoint>`: the raw echo alone, against the endpoint the
        // server printed second (for counting the floor's syscalls and wake-ups from outside).
        if only.as_deref() == Some("echo") {
            let raw = Echo(transport::open(target.clone()).await.expect("open the echo endpoint"), [7; ECHO_LEN]);
            scenario("raw echo (floor), 1 client", vec![raw], warmup, calls, &mut server).await;
            let split =
                SplitEcho(transport::open(target.clone()).await.expect("open the echo endpoint"), [7; ECHO_LEN]);
            scenario("raw echo, 2 writes, 1 client", vec![split], warmup, calls, &mut server).await;
            return;
        }

        // (a) one client, sequential calls.
        if runs("sequential") {
            let one = client(connect(open(&target)).await);
            scenario("1 client, sequential", vec![one], warmup, calls, &mut server).await;
        }

        // (b) `callers` callers sharing one connection.
        if runs("shared") {
            let shared = connect(open(&target)).await;
            let clients = (0..callers).map(|_| client(shared.clone())).collect();
            scenario(&format!("{callers} callers, 1 connection"), clients, warmup, calls, &mut server).await;
        }

        // (c) `callers` callers, one connection each.
        if runs("connections") {
            let mut clients = Vec::with_capacity(callers);
            for _ in 0..callers {
                clients.push(client(connect(open(&target)).await));
            }
            scenario(&format!("{callers} callers, {callers} connections"), clients, warmup, calls, &mut server).await;
        }

        // The floor: the same round trip without HTTP/2, gRPC or the host.
        if let Some(echo) = echo.filter(|_| only.is_none()) {
            let raw = Echo(transport::open(echo.clone()).await.expect("open the echo endpoint"), [7; ECHO_LEN]);
            scenario("raw echo (floor), 1 client", vec![raw], warmup, calls, &mut server).await;
            let split = SplitEcho(transport::open(echo).await.expect("open the echo endpoint"), [7; ECHO_LEN]);
            scenario("raw echo, 2 writes, 1 client", vec![split], warmup, calls, &mut server).await;
        }
    });
    println!("rtt: calls made {}", MADE.load(Ordering::Relaxed));
    drop(client_rt);
    if let Some(server) = server {
        server.stop();
    }
}
