//! Unary round-trip benchmark (not a test): p50/p99/max latency and calls/s of
//! `v1.Disk/GetDiskStats` through the whole stack (transport, HTTP/2, gRPC codec, version
//! conversion, `spawn_blocking` host call on the in-memory host, response), for
//!
//! - 1 client calling sequentially,
//! - N concurrent callers sharing one connection (clones of one tonic `Channel`),
//! - N concurrent callers, each on its own connection,
//!
//! over a unix socket (unix) or a named pipe (Windows; run under Wine with
//! `shared/tools/windows-cross cargo bench -p csi-proxy-server --bench rtt`).
//!
//! The server runs on its own multi-thread runtime (its own worker and blocking threads), the
//! clients on another, as a separate daemon process would.
//!
//! Environment:
//! - `RTT_CALLS` (20000): measured calls per scenario, split evenly among the callers;
//! - `RTT_WARMUP` (2000): unmeasured calls before each scenario, split likewise;
//! - `RTT_CALLERS` (16): callers of the concurrent scenarios;
//! - `RTT_SERVER_THREADS` (number of CPUs, as the daemon): server runtime worker threads;
//! - `RTT_CLIENT_THREADS` (1): client runtime worker threads.

use csi_proxy_host::memory::MemoryHost;
use csi_proxy_host::Hosts;
use csi_proxy_server::{Config, Context};
use csi_proxy_transport::ConnPolicy;
use csi_proxy_wire::v1::disk_client::DiskClient;
use csi_proxy_wire::v1::GetDiskStatsRequest;
use csi_proxy_wire::{Api, Group, APIS};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tokio::sync::{oneshot, Barrier};
use tonic::transport::{Channel, Endpoint};

fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

fn disk_v1() -> Api {
    *APIS
        .iter()
        .find(|a| a.group == Group::Disk && a.version == "v1")
        .expect("disk v1 API")
}

// ---------------------------------------------------------------------------------------------
// Transports: where the server listens and how a client opens one connection.
// ---------------------------------------------------------------------------------------------

#[cfg(unix)]
mod transport {
    use super::*;
    use std::path::PathBuf;

    pub const NAME: &str = "unix socket";

    /// The socket directory, removed on drop.
    pub struct Server {
        pub dir: PathBuf,
        stop: Option<oneshot::Sender<()>>,
        task: Option<tokio::task::JoinHandle<()>>,
    }

    /// Serves every API on `<tmp>/csi-proxy-bench-<pid>/*.sock`, as the daemon does.
    pub fn start(rt: &Runtime, ctx: Context) -> Server {
        let dir = std::env::temp_dir().join(format!("csi-proxy-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (tx, rx) = oneshot::channel::<()>();
        let endpoints = csi_proxy_transport::Endpoints::UnixDir(dir.clone());
        let task = rt.spawn(async move {
            csi_proxy_transport::serve_apis(
                APIS,
                &endpoints,
                |api| ctx.service(api),
                ConnPolicy::default(),
                async {
                    let _ = rx.await;
                },
            )
            .await
            .expect("serve_apis");
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while !dir
            .join(format!("{}.sock", disk_v1().endpoint_name()))
            .exists()
        {
            assert!(Instant::now() < deadline, "the sockets did not appear");
            std::thread::sleep(Duration::from_millis(5));
        }
        Server {
            dir,
            stop: Some(tx),
            task: Some(task),
        }
    }

    impl Server {
        pub fn target(&self) -> PathBuf {
            self.dir.join(format!("{}.sock", disk_v1().endpoint_name()))
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

    /// One new HTTP/2 connection.
    pub async fn connect(path: PathBuf) -> Channel {
        Endpoint::from_static("http://localhost")
            .connect_with_connector(tower::service_fn(move |_| {
                let path = path.clone();
                async move {
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                        tokio::net::UnixStream::connect(path).await?,
                    ))
                }
            }))
            .await
            .expect("connect")
    }
}

#[cfg(windows)]
mod transport {
    use super::*;
    use tokio::net::windows::named_pipe::ClientOptions;

    pub const NAME: &str = "named pipe (Wine)";

    /// `ERROR_PIPE_BUSY`: every instance is taken; the listener is creating the next one.
    const ERROR_PIPE_BUSY: i32 = 231;

    pub struct Server {
        path: String,
        stop: Option<oneshot::Sender<()>>,
        task: Option<tokio::task::JoinHandle<()>>,
    }

    /// Serves the disk v1 API on a named pipe, through the same per-connection path as
    /// `serve_apis(.., &Endpoints::Pipes { sddl: None }, ..)` (`pipe::bind` with the default SDDL,
    /// then `serve`), but under a per-process name so that it never collides with a daemon or a
    /// test serving the real `\\.\pipe\csi-proxy-disk-v1` in the same Wine prefix.
    pub fn start(rt: &Runtime, ctx: Context) -> Server {
        let path = format!(
            r"\\.\pipe\csi-proxy-bench-{}-{}",
            disk_v1().endpoint_name(),
            std::process::id()
        );
        let (tx, rx) = oneshot::channel::<()>();
        let listener = {
            let _enter = rt.enter(); // pipe::bind registers the pipe with the runtime's reactor
            csi_proxy_transport::pipe::bind(&path, None).expect("pipe::bind")
        };
        let service = ctx.service(disk_v1());
        let task = rt.spawn(csi_proxy_transport::serve(
            listener,
            service,
            ConnPolicy::default(),
            async {
                let _ = rx.await;
            },
        ));
        Server {
            path,
            stop: Some(tx),
            task: Some(task),
        }
    }

    impl Server {
        pub fn target(&self) -> String {
            self.path.clone()
        }

        pub fn stop(mut self, rt: &Runtime) {
            let _ = self.stop.take().map(|tx| tx.send(()));
            if let Some(t) = self.task.take() {
                rt.block_on(t).expect("server task");
            }
        }
    }

    /// One new HTTP/2 connection; retries on ERROR_PIPE_BUSY as go-winio's `DialPipe` does.
    pub async fn connect(path: String) -> Channel {
        Endpoint::from_static("http://localhost")
            .connect_with_connector(tower::service_fn(move |_| {
                let path = path.clone();
                async move {
                    let deadline = Instant::now() + Duration::from_secs(5);
                    loop {
                        match ClientOptions::new().open(&path) {
                            Ok(c) => {
                                return Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(c))
                            }
                            Err(e)
                                if e.raw_os_error() == Some(ERROR_PIPE_BUSY)
                                    && Instant::now() < deadline =>
                            {
                                tokio::time::sleep(Duration::from_millis(1)).await;
                            }
                            Err(e) => return Err(e),
                        }
                    }
                }
            }))
            .await
            .expect("connect")
    }
}

// ---------------------------------------------------------------------------------------------
// Measuring: the same for every transport.
// ---------------------------------------------------------------------------------------------

struct Outcome {
    /// Per-call latencies, sorted.
    latencies: Vec<Duration>,
    wall: Duration,
}

/// `calls` calls on each client, all clients concurrently, started together.
async fn run(clients: Vec<DiskClient<Channel>>, calls: usize) -> Outcome {
    let start_line = Arc::new(Barrier::new(clients.len() + 1));
    let mut tasks = Vec::with_capacity(clients.len());
    for mut client in clients {
        let start_line = start_line.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(calls);
            start_line.wait().await;
            for _ in 0..calls {
                let t = Instant::now();
                let r = client
                    .get_disk_stats(GetDiskStatsRequest { disk_number: 0 })
                    .await;
                lat.push(t.elapsed());
                let r = r.expect("GetDiskStats");
                assert!(r.get_ref().total_bytes > 0);
            }
            (lat, Instant::now())
        }));
    }
    start_line.wait().await;
    let begin = Instant::now();
    let mut latencies = Vec::with_capacity(calls * tasks.len());
    let mut end = begin;
    for t in tasks {
        let (lat, done) = t.await.expect("caller task");
        latencies.extend(lat);
        end = end.max(done);
    }
    latencies.sort_unstable();
    Outcome {
        latencies,
        wall: end - begin,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

fn print_header() {
    println!(
        "{:<18} {:<28} {:>7} {:>9} {:>9} {:>9} {:>9}",
        "transport", "scenario", "calls", "p50 µs", "p99 µs", "max µs", "calls/s"
    );
}

fn print_row(scenario: &str, o: &Outcome) {
    let l = &o.latencies;
    println!(
        "{:<18} {:<28} {:>7} {:>9} {:>9} {:>9} {:>9.0}",
        transport::NAME,
        scenario,
        l.len(),
        us(percentile(l, 0.50)),
        us(percentile(l, 0.99)),
        us(*l.last().expect("some calls")),
        l.len() as f64 / o.wall.as_secs_f64()
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` would too, but also runs nothing
    // else. Skip when invoked as a test (`cargo test` passes no `--bench`) to keep tests fast.
    if !std::env::args().any(|a| a == "--bench") {
        println!("rtt: not run (pass --bench, as `cargo bench` does)");
        return;
    }
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let calls = env_usize("RTT_CALLS", 20_000).max(1);
    let warmup = env_usize("RTT_WARMUP", 2_000);
    let callers = env_usize("RTT_CALLERS", 16).max(1);
    let server_threads = env_usize("RTT_SERVER_THREADS", cpus).max(1);
    let client_threads = env_usize("RTT_CLIENT_THREADS", 1).max(1);

    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(server_threads)
        .thread_name("server")
        .enable_all()
        .build()
        .expect("server runtime");
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(client_threads)
        .thread_name("client")
        .enable_all()
        .build()
        .expect("client runtime");

    let host = Arc::new(MemoryHost::sample());
    let ctx = Context::new(Hosts::from_one(host), Config::default());
    let server = transport::start(&server_rt, ctx);
    let target = server.target();

    println!(
        "rtt: v1.Disk/GetDiskStats, {calls} calls per scenario (+{warmup} warm-up), {callers} concurrent callers, \
         {cpus} CPUs, server runtime {server_threads} workers, client runtime {client_threads} workers"
    );
    print_header();
    client_rt.block_on(async {
        let per = |n: usize, k: usize| n.div_ceil(k);

        // (a) one client, sequential calls.
        let one = DiskClient::new(transport::connect(target.clone()).await);
        run(vec![one.clone()], warmup).await;
        print_row("1 client, sequential", &run(vec![one], calls).await);

        // (b) `callers` callers sharing one connection.
        let shared = transport::connect(target.clone()).await;
        let clients: Vec<_> = (0..callers)
            .map(|_| DiskClient::new(shared.clone()))
            .collect();
        run(clients.clone(), per(warmup, callers)).await;
        print_row(
            &format!("{callers} callers, 1 connection"),
            &run(clients, per(calls, callers)).await,
        );

        // (c) `callers` callers, one connection each.
        let mut clients = Vec::with_capacity(callers);
        for _ in 0..callers {
            clients.push(DiskClient::new(transport::connect(target.clone()).await));
        }
        run(clients.clone(), per(warmup, callers)).await;
        print_row(
            &format!("{callers} callers, {callers} connections"),
            &run(clients, per(calls, callers)).await,
        );
    });
    drop(client_rt);
    server.stop(&server_rt);
}
