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
//! Process metrics: on Linux the `prometheus` crate's collector (CPU seconds, resident and
//! virtual memory, open and max fds, threads, start time). Elsewhere only
//! `process_start_time_seconds`, taken when [`Metrics::new`] runs.
//!
//! Our own: `csi_proxy_build_info` (version, commit, dirty), once the daemon calls
//! [`Metrics::set_build_info`].

mod build_info;

pub use build_info::BUILD_INFO;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

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

/// Largest request head (request line plus headers) we read before answering 431.
const MAX_HEAD_BYTES: usize = 8 * 1024;
/// Time a client has to send its request head, and then to take our response.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long, and how many bytes, we keep reading after the response before closing.
const LINGER_TIMEOUT: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 64 * 1024;
/// Connections handled at once; further ones wait in the accept backlog.
const MAX_CONNECTIONS: usize = 16;
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

struct Inner {
    registry: Registry,
    started: IntCounterVec,
    handled: IntCounterVec,
    msg_received: IntCounterVec,
    msg_sent: IntCounterVec,
    handling_seconds: HistogramVec,
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
        register_process_metrics(&registry)?;

        Ok(Metrics {
            inner: Arc::new(Inner {
                registry,
                started,
                handled,
                msg_received,
                msg_sent,
                handling_seconds,
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
    let collector = prometheus::process_collector::ProcessCollector::for_self();
    registry.register(Box::new(collector))?;
    Ok(())
}

#[cfg(not(target_os = "linux"))]
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
                    tokio::spawn(async move {
                        if let Err(e) = handle_connection(stream, &metrics).await {
                            tracing::debug!(%peer, error = %e, "metrics connection failed");
                        }
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

/// Outcome of reading a request head.
enum Head {
    /// Length of the head, terminator included.
    Complete(usize),
    TooLarge,
    /// The peer closed the connection before finishing its request.
    Closed,
}

async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Head> {
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(Head::Closed);
        }
        // Look for the blank line again only where the new bytes can complete it.
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = find_head_end(&buf[from..]) {
            return Ok(Head::Complete(from + end));
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Ok(Head::TooLarge);
        }
    }
}

/// End of the first blank line (`\r\n\r\n`, or a bare `\n\n` from lax clients).
fn find_head_end(bytes: &[u8]) -> Option<usize> {
    let crlf = bytes.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = bytes.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

async fn handle_connection(mut stream: TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(512);
    let response = match tokio::time::timeout(IO_TIMEOUT, read_head(&mut stream, &mut buf)).await {
        Err(_) => response(408, "Request Timeout", "text/plain", b"request timeout\n", true),
        Ok(Err(e)) => return Err(e),
        Ok(Ok(Head::Closed)) => return Ok(()),
        Ok(Ok(Head::TooLarge)) => {
            response(431, "Request Header Fields Too Large", "text/plain", b"request header too large\n", true)
        }
        Ok(Ok(Head::Complete(len))) => route(&buf[..len], metrics),
    };
    match tokio::time::timeout(IO_TIMEOUT, async {
        stream.write_all(&response).await?;
        stream.shutdown().await
    })
    .await
    {
        Ok(result) => result?,
        Err(_) => return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "writing the response timed out")),
    }
    // Closing a socket with unread input makes the kernel reset the connection, which can
    // destroy the response before the client reads it. Swallow what the client still sends
    // (a request body, the rest of an oversized head) until it closes, within limits.
    let _ = tokio::time::timeout(LINGER_TIMEOUT, async {
        let mut sink = [0u8; 1024];
        let mut left = LINGER_BYTES;
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
    Ok(())
}

/// The full response for one request head.
fn route(head: &[u8], metrics: &Metrics) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let request_line = text.lines().next().unwrap_or("");
    let mut parts = request_line.split_ascii_whitespace();
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return response(400, "Bad Request", "text/plain", b"bad request\n", true);
    };
    if !version.starts_with("HTTP/1.") {
        return response(400, "Bad Request", "text/plain", b"bad request\n", true);
    }
    let path = target.split(['?', '#']).next().unwrap_or("");
    // Probes: alive whenever this answers; ready once every API endpoint is bound and served,
    // and no longer while stopping.
    let probe = match path {
        HEALTHZ_PATH => Some((200, "OK", "ok\n".as_bytes())),
        READYZ_PATH if metrics.inner.ready.load(std::sync::atomic::Ordering::SeqCst) => {
            Some((200, "OK", "ok\n".as_bytes()))
        }
        READYZ_PATH => {
            Some((503, "Service Unavailable", "not ready: the API endpoints are not all bound and served\n".as_bytes()))
        }
        _ => None,
    };
    if let Some((status, reason, body)) = probe {
        return match method {
            "GET" | "HEAD" => response(status, reason, "text/plain; charset=utf-8", body, method == "GET"),
            _ => response(405, "Method Not Allowed", "text/plain", b"method not allowed\n", true),
        };
    }
    if path != METRICS_PATH {
        // Same body as Go's default "not found" handler.
        return response(404, "Not Found", "text/plain; charset=utf-8", b"404 page not found\n", true);
    }
    match method {
        "GET" => response(200, "OK", CONTENT_TYPE, metrics.render().as_bytes(), true),
        "HEAD" => response(200, "OK", CONTENT_TYPE, metrics.render().as_bytes(), false),
        _ => {
            let mut r = response(405, "Method Not Allowed", "text/plain", b"method not allowed\n", true);
            // Squeeze an Allow header in before the blank line ending the head.
            let at = r.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(0) + 2;
            r.splice(at..at, b"Allow: GET, HEAD\r\n".iter().copied());
            r
        }
    }
}

fn response(status: u16, reason: &str, content_type: &str, body: &[u8], with_body: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if with_body {
        out.extend_from_slice(body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
        if cfg!(target_os = "linux") {
            want.extend([
                "process_cpu_seconds_total",
                "process_resident_memory_bytes",
                "process_open_fds",
                "process_max_fds",
            ]);
        }
        for name in want {
            assert_eq!(samples(&text, name).len(), 1, "{name} in:\n{text}");
        }
    }

    #[test]
    fn clones_share_counters() {
        let a = Metrics::new().unwrap();
        let b = a.clone();
        b.started("v1.Disk", "Rescan");
        assert!(a.render().contains(r#"grpc_server_started_total{grpc_method="Rescan""#));
    }

    #[test]
    fn head_terminator() {
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n\r\n"), Some(18));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
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
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");

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
