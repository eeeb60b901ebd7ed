//! Prometheus metrics of csi-proxy (docs/upstream.md#metrics).
//!
//! Upstream exports the server-side series of go-grpc-middleware's Prometheus interceptor plus
//! the usual process metrics, as Prometheus text on `/metrics` of `-metrics-bind-address`. This
//! crate keeps the same metric names, label names, label values and histogram buckets, so
//! dashboards and alerts written for the Go daemon keep working:
//!
//! * `grpc_server_started_total`, `grpc_server_msg_received_total`: counted when a call starts;
//! * `grpc_server_handled_total` (with `grpc_code`, Go code names such as `OK`, `NotFound`),
//!   `grpc_server_handling_seconds` (histogram, no `grpc_code`): counted when it ends;
//! * `grpc_server_msg_sent_total`: counted when a call ends successfully (unary calls send their
//!   one response only then).
//!
//! Every series carries `grpc_type="unary"`, `grpc_service` (`<version>.<Service>`) and
//! `grpc_method`. Label names come out sorted alphabetically (the `prometheus` crate sorts them),
//! which an upstream integration test relies on. A series appears only after its first call.
//!
//! Process metrics: on Linux the `prometheus` crate's collector (resident and virtual memory,
//! open and max fds, threads, start time) with `process_cpu_seconds_total` read by us as a float
//! (`linux.rs`; the crate's counts whole seconds); on Windows the same names from the
//! process's own counters (`windows.rs`; open handles as `process_open_fds`). Elsewhere only
//! `process_start_time_seconds`, taken when [`Metrics::new`] runs.
//!
//! `/metrics` and the probes are served by hyper's HTTP/1.1 server, one request per connection.
//!
//! Our own: `csi_proxy_build_info` (version, commit, dirty), once the daemon calls
//! [`Metrics::set_build_info`]; `csi_proxy_connections_open` (label `endpoint`), and
//! `csi_proxy_connections_refused_total`, `csi_proxy_connections_evicted_total` and
//! `csi_proxy_calls_cancelled_total` (labels `endpoint`, `reason`), counted by the transport's fair
//! admission; `csi_proxy_calls_joined_total` (the gRPC labels), calls that joined an identical one
//! in flight. The metrics listener counts itself under `endpoint="metrics"`: its open connections,
//! and those it closes because they sent no request while newer ones waited (evicted,
//! `reason="no_request"`).

mod build_info;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(windows)]
mod windows;

pub use build_info::BUILD_INFO;

use csi_proxy_sync::LockExt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE as CONTENT_TYPE_HEADER};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};

/// Histogram buckets of `grpc_server_handling_seconds`, in seconds, as upstream configures them.
pub const HANDLING_BUCKETS: [f64; 14] = [0.001, 0.01, 0.1, 0.3, 0.6, 1.0, 3.0, 6.0, 9.0, 20.0, 30.0, 60.0, 90.0, 120.0];

/// `Content-Type` of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Path of the only resource the HTTP endpoint serves.
pub const METRICS_PATH: &str = "/metrics";
/// Liveness probe on the metrics listener: 200 whenever the daemon answers.
pub const HEALTHZ_PATH: &str = "/healthz";
/// Readiness probe on the metrics listener: 200 once every API endpoint is bound and served,
/// 503 before that and while stopping.
pub const READYZ_PATH: &str = "/readyz";

/// Largest request head (request line plus headers) we read: hyper answers 431 beyond it (8 KiB
/// is the least hyper accepts).
const MAX_HEAD_BYTES: usize = 8 * 1024;
/// Time a client has to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Time one connection may take in all: the head, the answer and the client taking it.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections handled at once; further ones wait in the accept backlog.
const MAX_CONNECTIONS: usize = 256;
/// Connections still waiting for their request head. At this many, a new connection closes the
/// silent one that has waited longest: a client that connects and says nothing can hold no slot a
/// probe needs (the kubelet sends its request at once, so a probe waits microseconds, not
/// seconds). Silent means read and found empty: a connection whose task has not read it yet may
/// have its whole request in the socket's buffer (the accept loop can run ahead of the tasks), so
/// it is never closed as silent; the queue then grows past this, within [`MAX_CONNECTIONS`].
const MAX_WAITING_FOR_HEAD: usize = 64;
/// Pause after a failed accept (for example when out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Failures of this crate.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// A metric could not be created or registered (a programming error, not a runtime one).
    #[error("cannot set up metric: {0}")]
    Register(#[from] prometheus::Error),
    /// The metrics endpoint could not listen on the requested address.
    #[error("cannot listen for metrics on {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
}

const GRPC_LABELS: [&str; 3] = ["grpc_type", "grpc_service", "grpc_method"];
const HANDLED_LABELS: [&str; 4] = ["grpc_type", "grpc_service", "grpc_method", "grpc_code"];
const UNARY: &str = "unary";
/// Labels of the transport's counters: the pipe's or socket's name, and a fixed reason word.
const CONNECTION_LABELS: [&str; 2] = ["endpoint", "reason"];
/// The `endpoint` label of the metrics listener's own connections.
pub const METRICS_ENDPOINT: &str = "metrics";
/// Why the metrics listener closed a connection: it sent no request head while
/// [`MAX_WAITING_FOR_HEAD`] newer connections waited.
const NO_REQUEST: &str = "no_request";

struct Inner {
    registry: Registry,
    started: IntCounterVec,
    handled: IntCounterVec,
    msg_received: IntCounterVec,
    msg_sent: IntCounterVec,
    handling_seconds: HistogramVec,
    connections_open: IntGaugeVec,
    connections_refused: IntCounterVec,
    connections_evicted: IntCounterVec,
    calls_cancelled: IntCounterVec,
    calls_joined: IntCounterVec,
    /// Whether every API endpoint is bound and served (what `/readyz` answers).
    ready: std::sync::atomic::AtomicBool,
}

/// The daemon's metrics registry. Cloning is cheap and clones share the same counters.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// A fresh registry with the gRPC series (still empty) and the process metrics.
    pub fn new() -> Result<Self, MetricsError> {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| -> Result<_, MetricsError> {
            let c = IntCounterVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let started =
            counter("grpc_server_started_total", "Number of RPCs the server has started handling.", &GRPC_LABELS)?;
        let handled = counter(
            "grpc_server_handled_total",
            "Number of RPCs the server has finished, by status code, whether they succeeded or not.",
            &HANDLED_LABELS,
        )?;
        let msg_received = counter(
            "grpc_server_msg_received_total",
            "Number of request messages the server has received.",
            &GRPC_LABELS,
        )?;
        let msg_sent =
            counter("grpc_server_msg_sent_total", "Number of response messages the server has sent.", &GRPC_LABELS)?;
        let handling_seconds = HistogramVec::new(
            HistogramOpts::new(
                "grpc_server_handling_seconds",
                "Time in seconds the server took to handle an RPC, from start to final status.",
            )
            .buckets(HANDLING_BUCKETS.to_vec()),
            &GRPC_LABELS,
        )?;
        registry.register(Box::new(handling_seconds.clone()))?;
        let connections_open = IntGaugeVec::new(
            Opts::new(
                "csi_proxy_connections_open",
                "Connections open on each endpoint (the API endpoints' admitted connections, and the metrics \
                 listener's as endpoint=\"metrics\").",
            ),
            &["endpoint"],
        )?;
        registry.register(Box::new(connections_open.clone()))?;
        let connections_refused = counter(
            "csi_proxy_connections_refused_total",
            "Connections closed at accept: no slot free and none to take (reason: caller_share, endpoint_full, \
             total_full).",
            &CONNECTION_LABELS,
        )?;
        let connections_evicted = counter(
            "csi_proxy_connections_evicted_total",
            "Connections closed to make room for a new one (reason: no_handshake, idle; on the metrics listener \
             no_request).",
            &CONNECTION_LABELS,
        )?;
        let calls_cancelled = counter(
            "csi_proxy_calls_cancelled_total",
            "Calls the transport ended itself (reason: request_timeout, too_many_calls, no_call_slot).",
            &CONNECTION_LABELS,
        )?;
        let calls_joined = counter(
            "csi_proxy_calls_joined_total",
            "Mutating calls that waited for an identical call in flight (same caller, method and request) \
             and got its result instead of running again.",
            &GRPC_LABELS,
        )?;
        register_process_metrics(&registry)?;

        Ok(Metrics {
            inner: Arc::new(Inner {
                registry,
                started,
                handled,
                msg_received,
                msg_sent,
                handling_seconds,
                connections_open,
                connections_refused,
                connections_evicted,
                calls_cancelled,
                calls_joined,
                ready: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }

    /// Marks the daemon ready (every API endpoint bound and served) or not (not yet, or
    /// stopping): what `/readyz` answers.
    pub fn set_ready(&self, ready: bool) {
        self.inner.ready.store(ready, std::sync::atomic::Ordering::SeqCst);
    }

    /// Records the start of a unary call: `service` is `<version>.<Service>` (for example
    /// `v1.Filesystem`), `method` the bare RPC name.
    pub fn started(&self, service: &str, method: &str) {
        let labels = [UNARY, service, method];
        self.inner.started.with_label_values(&labels).inc();
        self.inner.msg_received.with_label_values(&labels).inc();
    }

    /// Records the end of a unary call with its status `code` as Go names it (`OK`,
    /// `InvalidArgument`, `Unimplemented`, `Internal`, ...) and the time it took.
    pub fn handled(&self, service: &str, method: &str, code: &str, elapsed: Duration) {
        let labels = [UNARY, service, method];
        self.inner.handled.with_label_values(&[UNARY, service, method, code]).inc();
        if code == "OK" {
            self.inner.msg_sent.with_label_values(&labels).inc();
        }
        self.inner.handling_seconds.with_label_values(&labels).observe(elapsed.as_secs_f64());
    }

    /// A call joined an identical one in flight instead of running.
    pub fn joined(&self, service: &str, method: &str) {
        self.inner.calls_joined.with_label_values(&[UNARY, service, method]).inc();
    }

    /// A connection on `endpoint` was admitted: one more open there.
    pub fn connection_opened(&self, endpoint: &str) {
        self.inner.connections_open.with_label_values(&[endpoint]).inc();
    }

    /// A connection admitted on `endpoint` closed.
    pub fn connection_closed(&self, endpoint: &str) {
        self.inner.connections_open.with_label_values(&[endpoint]).dec();
    }

    /// Counts a connection refused at accept on `endpoint` (the pipe's or socket's name).
    pub fn connection_refused(&self, endpoint: &str, reason: &str) {
        self.inner.connections_refused.with_label_values(&[endpoint, reason]).inc();
    }

    /// Counts a connection on `endpoint` closed to make room for a new one.
    pub fn connection_evicted(&self, endpoint: &str, reason: &str) {
        self.inner.connections_evicted.with_label_values(&[endpoint, reason]).inc();
    }

    /// Counts a call on `endpoint` the transport ended itself.
    pub fn call_cancelled(&self, endpoint: &str, reason: &str) {
        self.inner.calls_cancelled.with_label_values(&[endpoint, reason]).inc();
    }

    /// Every metric in the Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let families = self.inner.registry.gather();
        match TextEncoder::new().encode_to_string(&families) {
            Ok(text) => text,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode metrics");
                format!("# cannot encode metrics: {e}\n")
            }
        }
    }

    /// Listens on `addr` without serving yet; see [`MetricsServer::serve`]. `addr` is a
    /// `host:port` as in Go: `localhost:8888`, `127.0.0.1:0`, `[::1]:9090`, or `:8888` for every
    /// IPv4 interface.
    pub async fn bind(&self, addr: &str) -> Result<MetricsServer, MetricsError> {
        let target = if addr.starts_with(':') { format!("0.0.0.0{addr}") } else { addr.to_string() };
        let listener =
            TcpListener::bind(&target).await.map_err(|source| MetricsError::Bind { addr: addr.to_string(), source })?;
        let local_addr =
            listener.local_addr().map_err(|source| MetricsError::Bind { addr: addr.to_string(), source })?;
        Ok(MetricsServer { metrics: self.clone(), listener, local_addr })
    }

    /// Serves `GET /metrics` on `addr` until `shutdown` completes. Fails only if it cannot
    /// listen; errors of single connections are logged and do not stop the server.
    pub async fn serve(self, addr: &str, shutdown: impl Future<Output = ()>) -> Result<(), MetricsError> {
        self.bind(addr).await?.serve(shutdown).await
    }
}

#[cfg(target_os = "linux")]
fn register_process_metrics(registry: &Registry) -> Result<(), MetricsError> {
    registry.register(Box::new(linux::ProcessCollector::new()?))?;
    Ok(())
}

#[cfg(windows)]
fn register_process_metrics(registry: &Registry) -> Result<(), MetricsError> {
    registry.register(Box::new(windows::ProcessCollector::new()?))?;
    Ok(())
}

#[cfg(not(any(target_os = "linux", windows)))]
fn register_process_metrics(registry: &Registry) -> Result<(), MetricsError> {
    let start = prometheus::Gauge::new(
        "process_start_time_seconds",
        "Start time of the process since the Unix epoch, in seconds.",
    )?;
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
    start.set(now);
    registry.register(Box::new(start))?;
    Ok(())
}

/// A bound but not yet serving metrics endpoint.
#[derive(Debug)]
pub struct MetricsServer {
    metrics: Metrics,
    listener: TcpListener,
    local_addr: SocketAddr,
}

impl MetricsServer {
    /// The address actually bound (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Accepts connections until `shutdown` completes. Each connection gets one response and is
    /// then closed; connections already accepted finish on their own.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<(), MetricsError> {
        tracing::info!(address = %self.local_addr, "serving metrics on {METRICS_PATH}");
        let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let waiting = Waiting::new(MAX_WAITING_FOR_HEAD);
        tokio::pin!(shutdown);
        loop {
            let permit = tokio::select! {
                () = &mut shutdown => break,
                permit = permits.clone().acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => break, // never closed; kept total for safety
                },
            };
            let accepted = tokio::select! {
                () = &mut shutdown => break,
                accepted = self.listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, peer)) => {
                    let metrics = self.metrics.clone();
                    let waiting = waiting.admit(&metrics);
                    metrics.connection_opened(METRICS_ENDPOINT);
                    tokio::spawn(async move {
                        if let Err(e) = handle_connection(stream, metrics.clone(), &waiting).await {
                            tracing::debug!(%peer, error = %e, "metrics connection failed");
                        }
                        metrics.connection_closed(METRICS_ENDPOINT);
                        drop(permit);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot accept metrics connection");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
        tracing::info!(address = %self.local_addr, "metrics endpoint stopped");
        Ok(())
    }
}

/// The connections waiting for their request head, oldest first.
#[derive(Clone)]
struct Waiting {
    inner: Arc<std::sync::Mutex<WaitingInner>>,
}

struct WaitingInner {
    cap: usize,
    next: u64,
    /// By arrival: a connection's number, what closes it and whether it was read and found empty.
    queue: std::collections::BTreeMap<u64, (Arc<Notify>, Arc<AtomicBool>)>,
}

/// One connection's place in [`Waiting`]: left when its head arrives or it ends.
struct WaitingTicket {
    waiting: Waiting,
    id: u64,
    evicted: Arc<Notify>,
    silent: Arc<AtomicBool>,
}

impl Waiting {
    fn new(cap: usize) -> Waiting {
        Waiting { inner: Arc::new(std::sync::Mutex::new(WaitingInner { cap, next: 0, queue: Default::default() })) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WaitingInner> {
        // Numbers and wakers only: nothing a panic could leave half-changed.
        self.inner.lock_ignoring_poison()
    }

    /// Queues a new connection, closing the silent one waiting longest if the queue is full
    /// (counted in `metrics`).
    fn admit(&self, metrics: &Metrics) -> WaitingTicket {
        let mut w = self.lock();
        if w.queue.len() >= w.cap {
            let oldest_silent =
                w.queue.iter().find(|(_, (_, silent))| silent.load(Ordering::Acquire)).map(|(id, _)| *id);
            if let Some((evicted, _)) = oldest_silent.and_then(|id| w.queue.remove(&id)) {
                // notify_one keeps the wake-up even if that task is not yet waiting for it.
                evicted.notify_one();
                metrics.connection_evicted(METRICS_ENDPOINT, NO_REQUEST);
            }
        }
        let id = w.next;
        w.next += 1;
        let (evicted, silent) = (Arc::new(Notify::new()), Arc::new(AtomicBool::new(false)));
        w.queue.insert(id, (evicted.clone(), silent.clone()));
        WaitingTicket { waiting: self.clone(), id, evicted, silent }
    }
}

/// A connection's stream that marks its ticket silent when a read finds nothing there.
struct Heard<'a> {
    inner: TcpStream,
    silent: &'a AtomicBool,
}

impl tokio::io::AsyncRead for Heard<'_> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let r = std::pin::Pin::new(&mut this.inner).poll_read(cx, buf);
        if r.is_pending() {
            this.silent.store(true, Ordering::Release);
        }
        r
    }
}

impl tokio::io::AsyncWrite for Heard<'_> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl WaitingTicket {
    /// Its head has arrived: no longer evictable.
    fn served(&self) {
        self.waiting.lock().queue.remove(&self.id);
    }
}

impl Drop for WaitingTicket {
    fn drop(&mut self) {
        self.served();
    }
}

/// Serves one connection with hyper's HTTP/1.1 server: one request, then the connection closes
/// (scrapes and probes come seconds apart; no idle connections to keep or bound). Closed early if
/// it is still waiting for its head when [`MAX_WAITING_FOR_HEAD`] newer connections have come.
async fn handle_connection(stream: TcpStream, metrics: Metrics, ticket: &WaitingTicket) -> Result<(), hyper::Error> {
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        ticket.served();
        std::future::ready(Ok::<_, std::convert::Infallible>(route(&req, &metrics)))
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // Header names as Go's net/http writes them (`Content-Type`), for scrapers that look.
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(false)
        .title_case_headers(true);
    let stream = Heard { inner: stream, silent: &ticket.silent };
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        done = tokio::time::timeout(CONNECTION_TIMEOUT, conn) => match done {
            Ok(result) => result,
            Err(_) => {
                tracing::debug!("metrics connection timed out");
                Ok(())
            }
        },
        () = ticket.evicted.notified() => {
            tracing::debug!("metrics connection closed: it sent no request while newer connections waited");
            Ok(())
        }
    }
}

/// The answer to one request. hyper leaves the body out of answers to HEAD.
fn route(req: &Request<Incoming>, metrics: &Metrics) -> Response<String> {
    let readable = matches!(*req.method(), Method::GET | Method::HEAD);
    match req.uri().path() {
        // Probes: alive whenever this answers; ready once every API endpoint is bound and served,
        // and no longer while stopping.
        HEALTHZ_PATH if readable => text(StatusCode::OK, "ok\n"),
        READYZ_PATH if readable => {
            if metrics.inner.ready.load(std::sync::atomic::Ordering::SeqCst) {
                text(StatusCode::OK, "ok\n")
            } else {
                text(StatusCode::SERVICE_UNAVAILABLE, "not ready: the API endpoints are not all bound and served\n")
            }
        }
        METRICS_PATH if readable => {
            let mut r = Response::new(metrics.render());
            r.headers_mut().insert(CONTENT_TYPE_HEADER, HeaderValue::from_static(CONTENT_TYPE));
            r
        }
        HEALTHZ_PATH | READYZ_PATH | METRICS_PATH => {
            let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
            r.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            r
        }
        // Same body as Go's default "not found" handler.
        _ => text(StatusCode::NOT_FOUND, "404 page not found\n"),
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<String> {
    let mut r = Response::new(body.to_string());
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE_HEADER, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Sample lines of one metric (name followed by `{` or a space).
    fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' ')))
            .collect()
    }

    /// Label names of a sample line, in the order written.
    fn label_names(line: &str) -> Vec<&str> {
        let Some(start) = line.find('{') else {
            return Vec::new();
        };
        let end = line.rfind('}').unwrap();
        line[start + 1..end].split(',').map(|pair| pair.split('=').next().unwrap()).collect()
    }

    fn sample_calls() -> Metrics {
        let m = Metrics::new().unwrap();
        m.started("v1.Filesystem", "CreateSymlink");
        m.handled("v1.Filesystem", "CreateSymlink", "OK", Duration::from_millis(5));
        m.started("v1.Filesystem", "CreateSymlink");
        m.handled("v1.Filesystem", "CreateSymlink", "OK", Duration::from_millis(200));
        m.started("v1.Volume", "MountVolume");
        m.handled("v1.Volume", "MountVolume", "Internal", Duration::from_secs(2));
        m
    }

    #[test]
    fn no_grpc_series_before_first_call() {
        let text = Metrics::new().unwrap().render();
        assert!(!text.contains("grpc_server"), "{text}");
    }

    #[test]
    fn counters_and_labels() {
        let text = sample_calls().render();
        let symlink = r#"grpc_method="CreateSymlink",grpc_service="v1.Filesystem",grpc_type="unary""#;
        let mount = r#"grpc_method="MountVolume",grpc_service="v1.Volume",grpc_type="unary""#;
        for line in [
            format!("grpc_server_started_total{{{symlink}}} 2"),
            format!("grpc_server_started_total{{{mount}}} 1"),
            format!("grpc_server_msg_received_total{{{symlink}}} 2"),
            format!("grpc_server_msg_received_total{{{mount}}} 1"),
            format!("grpc_server_msg_sent_total{{{symlink}}} 2"),
            format!("grpc_server_handled_total{{grpc_code=\"OK\",{symlink}}} 2"),
            format!("grpc_server_handled_total{{grpc_code=\"Internal\",{mount}}} 1"),
            format!("grpc_server_handling_seconds_count{{{symlink}}} 2"),
            format!("grpc_server_handling_seconds_count{{{mount}}} 1"),
        ] {
            assert!(text.lines().any(|l| l == line), "no line `{line}` in:\n{text}");
        }
        // A failed call sends no response message.
        assert_eq!(samples(&text, "grpc_server_msg_sent_total").len(), 1, "{text}");
        // The prefix the upstream integration test looks for.
        assert!(text.contains(r#"grpc_server_handling_seconds_bucket{grpc_method="CreateSymlink""#));
    }

    #[test]
    fn label_sets_are_alphabetical_and_exact() {
        let text = sample_calls().render();
        let grpc = ["grpc_method", "grpc_service", "grpc_type"];
        let with_code = ["grpc_code", "grpc_method", "grpc_service", "grpc_type"];
        let with_le = ["grpc_method", "grpc_service", "grpc_type", "le"];
        for (name, want) in [
            ("grpc_server_started_total", &grpc[..]),
            ("grpc_server_msg_received_total", &grpc[..]),
            ("grpc_server_msg_sent_total", &grpc[..]),
            ("grpc_server_handled_total", &with_code[..]),
            ("grpc_server_handling_seconds_bucket", &with_le[..]),
            ("grpc_server_handling_seconds_sum", &grpc[..]),
            ("grpc_server_handling_seconds_count", &grpc[..]),
        ] {
            let lines = samples(&text, name);
            assert!(!lines.is_empty(), "no {name} in:\n{text}");
            for line in lines {
                assert_eq!(label_names(line), want, "{line}");
            }
        }
        // Every label set in the whole output is sorted (the histogram's `le` goes last).
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let mut names = label_names(line);
            if names.last() == Some(&"le") {
                names.pop();
            }
            assert!(names.windows(2).all(|w| w[0] < w[1]), "{line}");
        }
    }

    #[test]
    fn histogram_buckets() {
        let text = sample_calls().render();
        let lines: Vec<&str> = samples(&text, "grpc_server_handling_seconds_bucket")
            .into_iter()
            .filter(|l| l.contains(r#"grpc_method="CreateSymlink""#))
            .collect();
        let les: Vec<&str> = lines
            .iter()
            .map(|l| {
                let start = l.find("le=\"").unwrap() + 4;
                let end = start + l[start..].find('"').unwrap();
                &l[start..end]
            })
            .collect();
        assert_eq!(
            les,
            ["0.001", "0.01", "0.1", "0.3", "0.6", "1", "3", "6", "9", "20", "30", "60", "90", "120", "+Inf"]
        );
        // 5 ms and 200 ms: cumulative counts 0, 1, 1, 2, 2, ...
        let counts: Vec<&str> = lines.iter().map(|l| l.rsplit(' ').next().unwrap()).collect();
        assert_eq!(&counts[..4], ["0", "1", "1", "2"]);
        assert_eq!(counts.last(), Some(&"2"));
        let sum = samples(&text, "grpc_server_handling_seconds_sum")
            .into_iter()
            .find(|l| l.contains("CreateSymlink"))
            .unwrap();
        let sum: f64 = sum.rsplit(' ').next().unwrap().parse().unwrap();
        assert!((sum - 0.205).abs() < 1e-9, "{sum}");
    }

    #[test]
    fn process_metrics() {
        let text = Metrics::new().unwrap().render();
        let mut want = vec!["process_start_time_seconds"];
        if cfg!(any(target_os = "linux", windows)) {
            want.extend([
                "process_cpu_seconds_total",
                "process_resident_memory_bytes",
                "process_virtual_memory_bytes",
                "process_open_fds",
                "process_max_fds",
            ]);
        }
        for name in want {
            assert_eq!(samples(&text, name).len(), 1, "{name} in:\n{text}");
        }
        // Read from the process, not placeholders.
        if cfg!(any(target_os = "linux", windows)) {
            let rss: f64 =
                samples(&text, "process_resident_memory_bytes")[0].rsplit(' ').next().unwrap().parse().unwrap();
            assert!(rss > 1e6, "{text}");
        }
    }

    #[test]
    fn clones_share_counters() {
        let a = Metrics::new().unwrap();
        let b = a.clone();
        b.started("v1.Disk", "Rescan");
        assert!(a.render().contains(r#"grpc_server_started_total{grpc_method="Rescan""#));
    }

    /// Sends `request` raw and returns the whole response as text.
    async fn exchange(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
            .await
            .expect("response in time")
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[tokio::test]
    async fn http_endpoint() {
        let metrics = sample_calls();
        let server = metrics.bind("127.0.0.1:0").await.unwrap();
        let addr = server.local_addr();
        assert_ne!(addr.port(), 0);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(async {
            let _ = stopped.await;
        }));

        let r = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n").await;
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("\r\nContent-Type: text/plain; version=0.0.4"), "{head}");
        assert!(head.contains(&format!("\r\nContent-Length: {}", body.len())), "{head}");
        assert!(
            body.contains(r#"grpc_server_handling_seconds_bucket{grpc_method="CreateSymlink",grpc_service="v1.Filesystem",grpc_type="unary",le="0.01"} 1"#),
            "{body}"
        );
        assert!(body.contains("grpc_server_handled_total{grpc_code=\"Internal\""), "{body}");

        // A query string does not matter; a body arriving with the head is ignored.
        let r = exchange(addr, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.0 200 OK\r\n"), "{r}");

        let r = exchange(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("\r\n\r\n"), "{r}");

        // Probes: alive at once, ready only when told.
        let r = exchange(addr, b"GET /healthz HTTP/1.1\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("\r\n\r\nok\n"), "{r}");
        let r = exchange(addr, b"GET /readyz HTTP/1.1\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 503 Service Unavailable\r\n") && r.contains("not ready"), "{r}");
        metrics.set_ready(true);
        let r = exchange(addr, b"GET /readyz HTTP/1.1\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("\r\n\r\nok\n"), "{r}");
        metrics.set_ready(false);
        let r = exchange(addr, b"HEAD /readyz HTTP/1.1\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 503 ") && r.ends_with("\r\n\r\n"), "{r}");

        for path in ["/", "/metrics/", "/metricsx", "/other"] {
            let r = exchange(addr, format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes()).await;
            assert!(r.starts_with("HTTP/1.1 404 Not Found\r\n"), "{path}: {r}");
            assert!(r.ends_with("404 page not found\n"), "{path}: {r}");
        }

        let r = exchange(addr, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 405 "), "{r}");
        assert!(r.contains("\r\nAllow: GET, HEAD\r\n"), "{r}");

        let r = exchange(addr, b"garbage\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 400 "), "{r}");

        let mut big = b"GET /metrics HTTP/1.1\r\n".to_vec();
        big.extend(std::iter::repeat_n(b'a', MAX_HEAD_BYTES + 10));
        let r = exchange(addr, &big).await;
        assert!(r.starts_with("HTTP/1.1 431 "), "{r}");

        // A client that connects and leaves gets nothing and does not disturb the server.
        drop(TcpStream::connect(addr).await.unwrap());
        let r = exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");

        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), task).await.expect("server stops on shutdown").unwrap().unwrap();
        assert!(TcpStream::connect(addr).await.is_err(), "listener closed");
    }

    /// A client that never finishes its request head is dropped at the head timeout; it does not
    /// hold one of the few connection slots for longer.
    #[tokio::test(start_paused = true)]
    async fn a_slow_request_head_is_dropped() {
        let metrics = Metrics::new().unwrap();
        let server = metrics.bind("127.0.0.1:0").await.unwrap();
        let addr = server.local_addr();
        tokio::spawn(server.serve(std::future::pending()));
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\n").await.unwrap();
        let start = tokio::time::Instant::now();
        let mut out = Vec::new();
        tokio::time::timeout(CONNECTION_TIMEOUT * 2, s.read_to_end(&mut out))
            .await
            .expect("the connection was kept open")
            .unwrap();
        // The clock is paused (it jumps to the next timer): the head timeout, not the one of the
        // whole connection, closed it.
        assert!(start.elapsed() >= HEAD_TIMEOUT && start.elapsed() < CONNECTION_TIMEOUT, "{:?}", start.elapsed());
        assert!(!String::from_utf8_lossy(&out).contains("200 OK"), "{}", String::from_utf8_lossy(&out));
    }

    /// Silent connections (connect, send nothing) cannot starve the probes: with 200 of them
    /// open, each probe is answered within the kubelet's default 1-second timeout. (With the
    /// 16 slots each held for the 10-second head timeout, nearly every probe failed.)
    #[tokio::test]
    async fn silent_connections_do_not_starve_the_probes() {
        let metrics = Metrics::new().unwrap();
        let server = metrics.bind("127.0.0.1:0").await.unwrap();
        let addr = server.local_addr();
        tokio::spawn(server.serve(std::future::pending()));
        let mut silent = Vec::new();
        for _ in 0..200 {
            silent.push(TcpStream::connect(addr).await.unwrap());
        }
        for probe in 0..22 {
            let request = format!("GET {HEALTHZ_PATH} HTTP/1.1\r\nHost: x\r\n\r\n");
            let answer = tokio::time::timeout(Duration::from_secs(1), exchange(addr, request.as_bytes())).await;
            let answer = answer.unwrap_or_else(|_| panic!("probe {probe} got no answer within 1 s"));
            assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "probe {probe}: {answer}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(silent);
    }

    /// A full queue closes the silent connection waiting longest, never one not read yet: its
    /// request may be in the socket's buffer (the probe's was, while one process opened 8,000
    /// silent connections a second and the oldest waiting was closed whatever it held).
    #[test]
    fn a_connection_not_read_yet_is_never_closed_as_silent() {
        let metrics = Metrics::new().unwrap();
        let w = Waiting::new(2);
        let unread: Vec<_> = (0..3).map(|_| w.admit(&metrics)).collect();
        assert_eq!(w.lock().queue.len(), 3, "an unread connection was closed to make room");
        unread[1].silent.store(true, Ordering::Release);
        let _fourth = w.admit(&metrics);
        let q = w.lock();
        assert!(!q.queue.contains_key(&unread[1].id) && q.queue.contains_key(&unread[0].id));
    }

    #[tokio::test]
    async fn bind_failure_names_the_address() {
        let metrics = Metrics::new().unwrap();
        let first = metrics.bind("127.0.0.1:0").await.unwrap();
        let taken = first.local_addr().to_string();
        let err = metrics.clone().serve(&taken, std::future::pending()).await.unwrap_err();
        assert!(matches!(err, MetricsError::Bind { .. }));
        assert!(err.to_string().contains(&taken), "{err}");

        let err = metrics.bind("not-an-address").await.unwrap_err();
        assert!(err.to_string().contains("not-an-address"), "{err}");
    }
}
