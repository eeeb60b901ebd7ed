//! Transport: where the 23 APIs listen and how each accepted byte stream reaches HTTP/2.
//!
//! - [`unix`]: `<dir>/csi-proxy-<group>-<version>.sock` (Linux and other unixes).
//! - [`pipe`]: `\\.\pipe\csi-proxy-<group>-<version>` (Windows).
//! - [`authority`]: rewrites the `:authority` values that Go and Python clients send on pipes and
//!   sockets, which stock `h2` would reject, before the bytes reach the HTTP/2 server.
//! - [`frame`]: the HTTP/2 connection preface and frame header, for everything here that reads
//!   raw frames.
//! - [`conn`]: per-connection handshake, progress and idle timeouts and the in-flight count
//!   they respect; [`ServeOptions`] adds the limits on connections.
//! - [`limits`]: the process's open-file limit.
//! - [`health`]: `grpc.health.v1.Health`, served by [`serve_apis`] beside each endpoint's API.
//! - [`reflection`]: gRPC server reflection (v1 and v1alpha), likewise beside each API.
//!
//! Apart from the health and reflection services this crate knows HTTP/2 (hyper) but not gRPC: it
//! serves any `tower` service over `http::Request`, which the server crate builds from the
//! generated gRPC code.

pub mod admission;
pub mod authority;
pub mod body;
pub mod caller;
mod calls;
pub mod conn;
pub mod frame;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod health;
pub mod limits;
#[cfg(windows)]
pub mod pipe;
pub mod reflection;
#[cfg(unix)]
pub mod unix;

pub use admission::{set_connection_observer, ConnectionObserver};
pub use body::CallBody;
pub use conn::ConnPolicy;

use admission::{Admission, CallerKey, ConnShared};
use body::Answer;
use bytes::Bytes;
use conn::{effective, Watch, Watched};
use csi_proxy_sync::LockExt;
use csi_proxy_wire::{Caller, Workload};
use futures_util::future::Either;
use health::{EndpointHealth, WithHealth};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tower::{Service, ServiceExt};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A source of connected byte streams (a unix listener, a named pipe server).
pub trait Listener: Send + 'static {
    type Io: AsyncRead + AsyncWrite + Send + Unpin + 'static;
    fn accept(&mut self) -> impl Future<Output = io::Result<Self::Io>> + Send;
    /// The client of an accepted connection, as the OS reports it; asked once per connection,
    /// on a blocking thread (it may make slow OS calls), before the connection is admitted.
    fn caller(_io: &Self::Io) -> Caller {
        Caller::default()
    }
    /// Where this listener listens, for logs.
    fn describe(&self) -> String;
}

/// Names the caller of a connection in Kubernetes terms (the daemon's identifier, over the
/// container runtime), once per connection, before its first request is read.
pub trait Identify: Send + Sync + 'static {
    fn identify(&self, caller: &Caller) -> std::pin::Pin<Box<dyn Future<Output = Workload> + Send + 'static>>;
}

static IDENTIFIER: std::sync::OnceLock<Arc<dyn Identify>> = std::sync::OnceLock::new();

/// Sets the process's [`Identify`]; false if one was already set. Process-wide, as the
/// connection observer is: the daemon serves one set of endpoints.
pub fn set_identifier(identifier: Arc<dyn Identify>) -> bool {
    IDENTIFIER.set(identifier).is_ok()
}

/// How long a connection's caller may take to be named; past it the caller is unknown for the
/// whole connection (a runtime that does not answer must not hold connections up for long).
pub const IDENTIFY_WAIT: Duration = Duration::from_secs(2);

/// `caller` with its workload, if an identifier is set.
async fn identified(caller: Arc<Caller>) -> Arc<Caller> {
    let Some(identifier) = IDENTIFIER.get() else { return caller };
    let workload = tokio::time::timeout(IDENTIFY_WAIT, identifier.identify(&caller)).await.unwrap_or_else(|_| {
        Workload::Unknown { why: format!("the container runtime did not answer within {IDENTIFY_WAIT:?}") }
    });
    Arc::new(Caller { workload: Some(workload), ..(*caller).clone() })
}

/// Connections of one endpoint whose client is being asked who it is, at most (see
/// [`Listener::caller`]); the next accepted one waits for one of them.
pub const IDENTIFYING: usize = 32;

/// How long open connections may finish their calls once shutdown starts.
pub const DRAIN: Duration = Duration::from_secs(5);

/// Everything that bounds connections: their timeouts and how many may be open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeOptions {
    pub conn: ConnPolicy,
    /// Time a started frame may take to arrive in full, and a write may wait for the client
    /// to take data; also how long a connection told to go away (idle) may linger without a
    /// call in flight. Zero disables it.
    pub progress_timeout: Duration,
    /// Open connections allowed per endpoint; more are accepted and closed at once.
    pub max_connections_per_endpoint: usize,
    /// Open connections allowed over all endpoints of [`serve_apis`].
    pub max_connections: usize,
}

impl ServeOptions {
    pub const DEFAULT_PROGRESS_TIMEOUT: Duration = Duration::from_secs(10);
    pub const DEFAULT_MAX_CONNECTIONS_PER_ENDPOINT: usize = 256;
    pub const DEFAULT_MAX_CONNECTIONS: usize = 2048;
}

impl Default for ServeOptions {
    fn default() -> Self {
        ConnPolicy::default().into()
    }
}

impl From<ConnPolicy> for ServeOptions {
    fn from(conn: ConnPolicy) -> Self {
        ServeOptions {
            conn,
            progress_timeout: Self::DEFAULT_PROGRESS_TIMEOUT,
            max_connections_per_endpoint: Self::DEFAULT_MAX_CONNECTIONS_PER_ENDPOINT,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Calls in flight (their requests arrived) over all endpoints of one [`serve`] or
/// [`serve_apis`], shared fairly among the callers (see [`calls`]): a caller at its share when
/// none is free is answered RESOURCE_EXHAUSTED at once, one below it waits for the next one freed.
pub const MAX_CALLS: usize = 4096;

/// What every connection of one [`serve`] or [`serve_apis`] shares: the slots and the calls.
#[derive(Debug, Clone)]
struct Shared {
    admission: Arc<Admission>,
    calls: Arc<calls::Calls>,
}

impl Shared {
    fn new(options: &ServeOptions) -> Self {
        Shared {
            admission: Admission::new(options.max_connections_per_endpoint, options.max_connections),
            calls: calls::Calls::new(MAX_CALLS),
        }
    }
}

/// Serves `service` on every connection `listener` accepts until `shutdown` completes; then
/// stops accepting, asks open connections to finish (HTTP/2 GOAWAY) and waits briefly for them.
/// `options` is a [`ConnPolicy`] or full [`ServeOptions`].
pub async fn serve<L, S, B>(
    listener: L,
    service: S,
    options: impl Into<ServeOptions>,
    shutdown: impl Future<Output = ()>,
) where
    L: Listener,
    S: Service<http::Request<CallBody>, Response = http::Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let options = options.into();
    let shared = Shared::new(&options);
    serve_limited(listener, service, options, shared, shutdown).await
}

async fn serve_limited<L, S, B>(
    mut listener: L,
    service: S,
    options: ServeOptions,
    shared: Shared,
    shutdown: impl Future<Output = ()>,
) where
    L: Listener,
    S: Service<http::Request<CallBody>, Response = http::Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conns = tokio::task::JoinSet::new();
    let identifying = Arc::new(tokio::sync::Semaphore::new(IDENTIFYING));
    let name = listener.describe();
    let endpoint = admission::endpoint_label(&name);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(io) => {
                    // Who the client is takes OS calls that may block (on Windows the host
                    // compute service is asked which container a process is in): they run on a
                    // blocking thread, so one slow answer holds up no other connection, and at
                    // most IDENTIFYING at a time, so a flood of connects waits here instead of
                    // piling up threads.
                    let Ok(permit) = identifying.clone().acquire_owned().await else { continue };
                    let (endpoint, shared, service, stop_rx) =
                        (endpoint.clone(), shared.clone(), service.clone(), stop_rx.clone());
                    conns.spawn(async move {
                        let asked = tokio::task::spawn_blocking(move || {
                            let caller = L::caller(&io);
                            (io, caller)
                        });
                        let Ok((io, caller)) = asked.await else { return };
                        drop(permit);
                        // Asked before admission: the slot a connection may take depends on who
                        // it is.
                        let caller = Arc::new(caller);
                        let Ok(slot) = shared.admission.admit(&endpoint, CallerKey::of(&caller)) else {
                            return; // dropping `io` closes it; `admit` counted and logged it
                        };
                        let conn = slot.conn.clone();
                        let ctx = ConnCtx { endpoint, shared, conn, _slot: Some(slot) };
                        serve_connection(io, service, options, stop_rx, ctx, caller).await
                    });
                }
                Err(e) => {
                    // Accept errors (e.g. out of descriptors) are transient: log, pause, go on.
                    tracing::warn!(listener = %name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    // Stop listening at once (a unix socket's file goes with it): a client connecting now is
    // refused instead of waiting in the backlog for a server that is going away.
    drop(listener);
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(DRAIN, async { while conns.join_next().await.is_some() {} }).await;
    conns.shutdown().await;
}

/// Settings hyper's HTTP/2 server gets; the `:authority` adapter must agree on the limits.
///
/// Memory streams can hold: per connection at most [`MAX_STREAMS`] open streams, each with a
/// header list of at most 16 KiB (`max_header_list_size`) and some 10 KiB of state (measured:
/// ~9 KB per half-open stream), and at most 1 MiB of request data not yet read (the connection's
/// flow-control window; 1 MiB per stream within it); so about 1.4 MiB per connection and, with
/// `-max-connections` of them (2,048 by default), at most about 2.8 GiB in the worst case the
/// limits allow, which every stream waiting for its request at most `-progress-timeout` keeps
/// from lasting.
fn http2_builder() -> hyper::server::conn::http2::Builder<TokioExecutor> {
    let limits = authority::H2Limits::SERVER;
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    // Message sizes are enforced by the gRPC codec. Streams per connection and the windows
    // bound the memory a connection holds (see above); the frame and header-list limits are the
    // ones the `:authority` adapter assumes (`H2Limits::SERVER`).
    // No Date header: gRPC answers do not carry one (grpc-go's, upstream's, do not), and hyper's
    // costs a header to fill in and encode on every answer.
    builder
        .auto_date_header(false)
        .max_concurrent_streams(MAX_STREAMS)
        .initial_connection_window_size(1 << 20)
        .initial_stream_window_size(1 << 20)
        .max_frame_size(limits.max_frame_size as u32)
        .max_header_list_size(limits.max_header_list_size as u32);
    builder
}

/// Concurrent streams per connection (SETTINGS_MAX_CONCURRENT_STREAMS): a handful is what a
/// driver's client uses at once (a gRPC client queues calls beyond it on its side), and it bounds
/// the half-open streams one connection can hold.
pub const MAX_STREAMS: u32 = 16;

/// A connection's share of the server: its slot (dropping it frees the slot), its state in the
/// admission table, and the calls semaphore.
struct ConnCtx {
    endpoint: Arc<str>,
    shared: Shared,
    conn: Arc<ConnShared>,
    _slot: Option<admission::Slot>,
}

/// gRPC codes the transport answers with itself.
const CANCELLED: u16 = 1;
const RESOURCE_EXHAUSTED: u16 = 8;

async fn serve_connection<IO, S, B>(
    io: IO,
    service: S,
    options: ServeOptions,
    mut stop: watch::Receiver<bool>,
    ctx: ConnCtx,
    caller: Arc<Caller>,
) where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    S: Service<http::Request<CallBody>, Response = http::Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let caller = identified(caller).await;
    let caller_value = caller.workload.as_ref().map(caller_header);
    let in_flight = ctx.conn.in_flight.clone();
    let watch = Watch { handshake: options.conn.handshake_timeout, progress: options.progress_timeout };
    let io = authority::AuthorityFix::new(Watched::new(io, watch).with_handshake_flag(ctx.conn.handshake_done.clone()));
    let calls = in_flight.clone();
    let (endpoint, shared) = (ctx.endpoint.clone(), ctx.shared.clone());
    let wait_limit = effective(options.progress_timeout);
    // The connection's own copy; hyper creates every call on the connection's task, so the lock
    // is never contended.
    let service = std::sync::Mutex::new(service);
    let key = CallerKey::of(&caller);
    let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
        // Reflection's request is a stream whose next message may come any time; every other
        // request is one message, which must arrive whole in time. A reflection stream does no
        // host work: it takes no permit and does not keep its connection from being taken.
        let unary = !reflection::PATH_PREFIXES.iter().any(|p| req.uri().path().starts_with(p));
        let (mut parts, body) = req.into_parts();
        parts.extensions.insert(caller.clone());
        let (body, wait) = CallBody::new(body, unary);
        let call = start_call(&service, http::Request::from_parts(parts, body));
        let (endpoint, shared, calls, key) = (endpoint.clone(), shared.clone(), calls.clone(), key.clone());
        let caller_value = caller_value.clone();
        async move {
            tokio::pin!(call);
            // The permit, once the request has arrived; the call counts as in flight from then.
            let admitted = async {
                wait.request_arrived().await;
                shared.calls.take(&key, wait_limit).await
            };
            tokio::pin!(admitted);
            let mut held = None;
            let mut answer = loop {
                tokio::select! {
                    r = &mut call => break r.map(|r| r.map(|body| Answer::Service { body })),
                    () = wait.stalled(wait_limit, unary) => {
                        shared.admission.reports.cancelled(&endpoint, "request_timeout");
                        break Ok(body::grpc_status(CANCELLED, "the request did not arrive within the progress timeout"));
                    }
                    permit = &mut admitted, if unary && held.is_none() => match permit {
                        Ok(permit) => {
                            held = Some((permit, calls.enter()));
                            wait.open();
                        }
                        Err(why) => {
                            shared.admission.reports.cancelled(&endpoint, why.label());
                            break Ok(body::grpc_status(RESOURCE_EXHAUSTED, why.message()));
                        }
                    },
                }
            };
            if let Ok(r) = &mut answer {
                r.headers_mut().insert(VERSION_HEADER_NAME, version_value());
                r.headers_mut().insert(FEATURES_HEADER_NAME, http::HeaderValue::from_static(csi_proxy_wire::FEATURES));
                if let Some(v) = &caller_value {
                    r.headers_mut().insert(CALLER_HEADER_NAME, v.clone());
                }
            }
            drop(held);
            answer
        }
    });
    let conn = http2_builder().serve_connection(TokioIo::new(io), svc);
    tokio::pin!(conn);

    let idle = effective(options.conn.idle_timeout);
    let grace = effective(options.progress_timeout);
    // Fires when the connection may have been idle long enough; checked against `in_flight`.
    let timer = tokio::time::sleep(idle);
    tokio::pin!(timer);
    let mut going_away = false;
    let mut evicted = false;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = async { let _ = stop.wait_for(|s| *s).await; } => {
                conn.as_mut().graceful_shutdown();
                let _ = conn.await;
                return;
            }
            _ = ctx.conn.evicted.notified() => {
                // Its slot is already another connection's. One that never shook hands has no
                // client to tell; otherwise GOAWAY (a call sent meanwhile is still served), and
                // close soon: it no longer counts against the limits, so it must not linger.
                if !ctx.conn.handshake_done.load(std::sync::atomic::Ordering::Acquire) {
                    return;
                }
                conn.as_mut().graceful_shutdown();
                (going_away, evicted) = (true, true);
                timer.as_mut().reset(tokio::time::Instant::now() + grace.min(EVICTED_LINGER));
            }
            _ = &mut timer => {
                let wait = if going_away { grace } else { idle };
                match in_flight.idle_since() {
                    Some(_) if evicted => {
                        tracing::debug!("closing an evicted connection");
                        return;
                    }
                    None => timer.as_mut().reset(tokio::time::Instant::now() + wait),
                    Some(since) if since.elapsed() < wait => timer.as_mut().reset(since + wait),
                    Some(_) if going_away => {
                        tracing::debug!("closing a connection that did not finish after being told to go away");
                        return;
                    }
                    Some(_) => {
                        // GOAWAY first, so that a call the client sends meanwhile is still
                        // served and the client reconnects for the next one (a plain close
                        // loses such a call with an EOF error).
                        tracing::debug!(timeout_ms = options.conn.idle_timeout.as_secs_f64() * 1000.0, "closing an idle connection gracefully");
                        conn.as_mut().graceful_shutdown();
                        going_away = true;
                        timer.as_mut().reset(tokio::time::Instant::now() + grace);
                    }
                }
            }
        }
    }
}

/// Starts a call on the connection's service: at once when the service is ready (the APIs'
/// services always are), which saves cloning it (with health and reflection beside it) per call;
/// otherwise on a clone that waits for readiness, as `oneshot` does.
fn start_call<S, R>(service: &std::sync::Mutex<S>, req: R) -> Either<S::Future, tower::util::Oneshot<S, R>>
where
    S: Service<R> + Clone,
{
    let mut service = service.lock_ignoring_poison();
    match service.poll_ready(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
        std::task::Poll::Ready(Ok(())) => Either::Left(service.call(req)),
        _ => Either::Right(service.clone().oneshot(req)),
    }
}

/// The response header every answer on every endpoint carries (health, reflection and the APIs'
/// calls, failed ones too): the daemon's version, as `csi-proxy -version` prints it after the
/// program's name. `csi-proxyctl version` reads it from a health check. One static value, cloned
/// per answer.
pub const VERSION_HEADER: &str = "csi-proxy-version";

/// [`VERSION_HEADER`] as a header name, made once (from a `&str` it is parsed per answer).
const VERSION_HEADER_NAME: http::HeaderName = http::HeaderName::from_static(VERSION_HEADER);

/// [`csi_proxy_wire::FEATURES_HEADER`] as a header name, on every answer beside the version.
const FEATURES_HEADER_NAME: http::HeaderName = http::HeaderName::from_static(csi_proxy_wire::FEATURES_HEADER);

/// [`csi_proxy_wire::CALLER_HEADER`] as a header name.
const CALLER_HEADER_NAME: http::HeaderName = http::HeaderName::from_static(csi_proxy_wire::CALLER_HEADER);

/// The longest [`csi_proxy_wire::CALLER_HEADER`] value, before encoding.
const CALLER_HEADER_MAX: usize = 1024;

/// `workload` as the caller header says it: its text, bounded, with `%`, controls and non-ASCII
/// percent-encoded (as gRPC encodes `grpc-message`), so any name makes a valid header value.
fn caller_header(workload: &Workload) -> http::HeaderValue {
    const ENCODED: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS.add(b'%');
    let text = workload.to_string();
    let mut end = text.len().min(CALLER_HEADER_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let encoded = percent_encoding::utf8_percent_encode(&text[..end], ENCODED).to_string();
    http::HeaderValue::from_str(&encoded).unwrap_or_else(|_| http::HeaderValue::from_static("unknown"))
}

static VERSION: std::sync::OnceLock<http::HeaderValue> = std::sync::OnceLock::new();

/// Sets the value of [`VERSION_HEADER`] for this process (the daemon calls it once, before
/// serving); until then it is this crate's version. False if already set, or if `text` cannot be
/// a header value (it is then left as it was).
pub fn set_version(text: &str) -> bool {
    match http::HeaderValue::from_str(text) {
        Ok(v) => VERSION.set(v).is_ok(),
        Err(_) => false,
    }
}

fn version_value() -> http::HeaderValue {
    VERSION.get_or_init(|| http::HeaderValue::from_static(env!("CARGO_PKG_VERSION"))).clone()
}

/// Longest an evicted connection stays open after its GOAWAY while it has no call in flight.
const EVICTED_LINGER: Duration = Duration::from_secs(1);

/// Where the APIs listen.
#[derive(Debug, Clone)]
pub enum Endpoints {
    /// `<dir>/csi-proxy-<group>-<version>.sock`
    #[cfg(unix)]
    UnixDir(std::path::PathBuf),
    /// `\\.\pipe\csi-proxy-<group>-<version>`, with an SDDL security descriptor (`None`: the
    /// default of [`pipe::DEFAULT_SDDL`]).
    #[cfg(windows)]
    Pipes { sddl: Option<String> },
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[cfg(unix)]
    #[error(transparent)]
    Unix(#[from] unix::BindError),
    #[cfg(windows)]
    #[error(transparent)]
    Pipe(#[from] pipe::PipeError),
}

/// Binds every API's endpoint first — all or nothing, so a second daemon fails before serving
/// anything — then serves each with the service `make(api)` until `shutdown` completes. Each
/// endpoint also answers `grpc.health.v1.Health` (see [`health`]) and gRPC server reflection
/// (see [`reflection`]).
pub async fn serve_apis<F, S, B>(
    apis: &[csi_proxy_wire::Api],
    endpoints: &Endpoints,
    make: F,
    options: impl Into<ServeOptions>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError>
where
    F: Fn(csi_proxy_wire::Api) -> S,
    S: Service<http::Request<CallBody>, Response = http::Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    serve_apis_then(apis, endpoints, make, options, || {}, shutdown).await
}

/// [`serve_apis`], calling `bound` once every endpoint exists and is being served (every unix
/// socket bound and listening, every pipe's first instance created) — the moment to tell a
/// supervisor (systemd, the Windows service control manager) that the daemon is ready; the
/// health service turns `SERVING` just before. Not called if binding fails. When `shutdown`
/// completes the health service turns `NOT_SERVING` (its `Watch` streams get that, then end).
/// On return every endpoint is closed; the unix sockets and the directory's lock file this call
/// created are removed.
pub async fn serve_apis_then<F, S, B>(
    apis: &[csi_proxy_wire::Api],
    endpoints: &Endpoints,
    make: F,
    options: impl Into<ServeOptions>,
    bound: impl FnOnce(),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError>
where
    F: Fn(csi_proxy_wire::Api) -> S,
    S: Service<http::Request<CallBody>, Response = http::Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let options = options.into();
    // One pool of connections for all endpoints, and one place that reports refusals.
    let shared = Shared::new(&options);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut servers = tokio::task::JoinSet::new();
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    // Held until every server has stopped and removed its socket; dropped last, it removes the
    // lock file.
    #[cfg(unix)]
    let mut _lock = None;
    let mut healths = Vec::with_capacity(apis.len());
    match endpoints {
        #[cfg(unix)]
        Endpoints::UnixDir(dir) => {
            _lock = Some(unix::lock_dir(dir)?);
            let mut listeners = Vec::with_capacity(apis.len());
            for api in apis {
                listeners.push((*api, unix::bind(dir, api)?));
            }
            for (api, l) in listeners {
                tracing::info!(api = %api.service_name(), socket = %l.path().display(), "listening");
                let (health, service) = with_health(api, &make).await;
                healths.push(health);
                servers.spawn(serve_limited(l, service, options, shared.clone(), stopped()));
            }
        }
        #[cfg(windows)]
        Endpoints::Pipes { sddl } => {
            let mut listeners = Vec::with_capacity(apis.len());
            for api in apis {
                listeners.push((*api, pipe::bind(&api.pipe_path(), sddl.as_deref())?));
            }
            for (api, l) in listeners {
                tracing::info!(api = %api.service_name(), pipe = %api.pipe_path(), "listening");
                let (health, service) = with_health(api, &make).await;
                healths.push(health);
                servers.spawn(serve_limited(l, service, options, shared.clone(), stopped()));
            }
        }
    }
    for h in &healths {
        h.set(tonic_health::ServingStatus::Serving).await;
    }
    bound();
    shutdown.await;
    for h in &healths {
        h.set(tonic_health::ServingStatus::NotServing).await;
    }
    let _ = stop_tx.send(true);
    // After the stop signal (listeners closed, connections told to go away), so that no call
    // can find the statuses gone.
    for h in healths {
        h.close().await;
    }
    while servers.join_next().await.is_some() {}
    Ok(())
}

/// `make(api)` with the health service beside it, and the statuses that service reports.
async fn with_health<F, S>(api: csi_proxy_wire::Api, make: &F) -> (EndpointHealth, WithHealth<S>)
where
    F: Fn(csi_proxy_wire::Api) -> S,
{
    let (health, server) = EndpointHealth::new(api.service_name()).await;
    (health, WithHealth { api: make(api), health: server, reflection: reflection::services(&api) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    use crate::frame::{EMPTY_SETTINGS, PREFACE};

    fn options(idle: Duration) -> ServeOptions {
        ServeOptions {
            conn: ConnPolicy { handshake_timeout: Duration::from_secs(10), idle_timeout: idle },
            progress_timeout: Duration::from_secs(5),
            ..ServeOptions::default()
        }
    }

    /// A connection's context outside any admission table.
    fn permits() -> ConnCtx {
        let shared = Shared::new(&ServeOptions::default());
        ConnCtx { endpoint: "test".into(), shared, conn: Arc::default(), _slot: None }
    }

    /// Answers every request with `size` octets.
    fn service(
        size: usize,
    ) -> impl Service<http::Request<CallBody>, Response = http::Response<String>, Error = Infallible, Future: Send>
           + Clone
           + Send
           + 'static {
        tower::service_fn(move |_req: http::Request<CallBody>| async move {
            Ok::<_, Infallible>(http::Response::new("y".repeat(size)))
        })
    }

    /// A server connection on one end of an in-memory pipe; the other end is returned.
    fn connect(options: ServeOptions, size: usize) -> (tokio::io::DuplexStream, tokio::task::JoinHandle<()>) {
        let (client, server) = tokio::io::duplex(1 << 16);
        let (_stop_tx, stop_rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            let _keep = _stop_tx;
            serve_connection(server, service(size), options, stop_rx, permits(), Default::default()).await
        });
        (client, task)
    }

    /// A unary-style call; `Err(true)` if it failed in a way a gRPC client retries on a new
    /// connection (the request was refused before the server processed it), `Err(false)` if
    /// the call was lost.
    async fn call(send: &mut h2::client::SendRequest<Bytes>) -> Result<(), bool> {
        let ready = send.clone().ready().await.map_err(|_| true)?;
        *send = ready;
        let req = http::Request::post("http://localhost/x").body(()).unwrap();
        let (resp, _body) = send.send_request(req, true).map_err(|_| true)?;
        match resp.await {
            Ok(r) => {
                let mut body = r.into_body();
                while let Some(chunk) = body.data().await {
                    chunk.map_err(|_| false)?;
                }
                Ok(())
            }
            Err(e) if e.reason() == Some(h2::Reason::REFUSED_STREAM) => Err(true),
            Err(e) if e.is_go_away() && e.is_remote() && e.reason() == Some(h2::Reason::NO_ERROR) => Err(true),
            Err(_) => Err(false),
        }
    }

    async fn client(io: tokio::io::DuplexStream) -> h2::client::SendRequest<Bytes> {
        let (send, conn) = h2::client::handshake(io).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        send
    }

    /// A service that is ready only every other time it is asked, and counts the calls made on
    /// it while it was not.
    #[derive(Clone, Default)]
    struct Reluctant {
        asked: Arc<std::sync::atomic::AtomicUsize>,
        ready: bool,
        unready_calls: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Service<http::Request<CallBody>> for Reluctant {
        type Response = http::Response<String>;
        type Error = Infallible;
        type Future = std::future::Ready<Result<http::Response<String>, Infallible>>;

        fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Infallible>> {
            use std::sync::atomic::Ordering::SeqCst;
            if self.asked.fetch_add(1, SeqCst).is_multiple_of(2) {
                cx.waker().wake_by_ref();
                return std::task::Poll::Pending;
            }
            self.ready = true;
            std::task::Poll::Ready(Ok(()))
        }

        fn call(&mut self, _req: http::Request<CallBody>) -> Self::Future {
            if !std::mem::take(&mut self.ready) {
                self.unready_calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            std::future::ready(Ok(http::Response::new("y".to_string())))
        }
    }

    /// The connection starts a call at once only on a service that says it is ready; one that
    /// is not gets the call once it is (tower's contract), and every call is answered.
    #[tokio::test]
    async fn a_service_not_ready_gets_its_calls_once_ready() {
        let (io, server) = tokio::io::duplex(1 << 16);
        let (_stop_tx, stop_rx) = watch::channel(false);
        let reluctant = Reluctant::default();
        let (asked, unready_calls) = (reluctant.asked.clone(), reluctant.unready_calls.clone());
        let opts = options(Duration::from_secs(300));
        let task = tokio::spawn(serve_connection(server, reluctant, opts, stop_rx, permits(), Default::default()));
        let mut send = client(io).await;
        for i in 0..6 {
            call(&mut send).await.unwrap_or_else(|retry| panic!("call {i} failed (retryable: {retry})"));
        }
        use std::sync::atomic::Ordering::SeqCst;
        assert_eq!(unready_calls.load(SeqCst), 0, "a call was made on a service not ready");
        assert!(asked.load(SeqCst) >= 12, "each call asked for readiness");
        drop(send);
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }

    /// Like grpc-go with one long-lived client: a call made just as the idle timeout expires
    /// succeeds, on the same connection or (after a GOAWAY refused it) on a new one.
    #[tokio::test(start_paused = true)]
    async fn a_call_made_as_the_idle_timeout_expires_is_not_lost() {
        let idle = Duration::from_secs(1);
        let ms = Duration::from_millis(1);
        let offsets = [idle - ms * 2, idle - ms, idle, idle + ms, idle + ms * 2, idle * 2];
        let mut reconnects = 0;
        for round in 0..4 {
            for &after in &offsets {
                let (io, _server) = connect(options(idle), 10);
                let mut send = client(io).await;
                call(&mut send).await.expect("first call");
                tokio::time::sleep(after).await;
                match call(&mut send).await {
                    Ok(()) => {}
                    Err(true) => {
                        reconnects += 1;
                        let (io, _server) = connect(options(idle), 10);
                        let mut send = client(io).await;
                        call(&mut send).await.expect("call on a new connection");
                    }
                    Err(false) => panic!("round {round}: a call made {after:?} after the last was lost"),
                }
            }
        }
        // Calls well after the timeout found the connection gone away and reconnected.
        assert!(reconnects >= 4, "{reconnects}");
    }

    /// An idle connection ends with a GOAWAY the client sees, then closes.
    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_gets_a_goaway_and_closes() {
        let (io, server) = connect(options(Duration::from_secs(1)), 10);
        let (mut send, conn) = h2::client::handshake(io).await.unwrap();
        let driver = tokio::spawn(conn);
        call(&mut send).await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(30), driver).await.expect("connection not closed").unwrap();
        // h2's client ends cleanly after a graceful GOAWAY; an abrupt close is an error.
        assert!(r.is_ok(), "{r:?}");
        tokio::time::timeout(Duration::from_secs(30), server).await.unwrap().unwrap();
    }

    /// A client sending a frame a byte at a time is dropped at the progress timeout.
    #[tokio::test(start_paused = true)]
    async fn a_slowloris_client_is_dropped() {
        let (mut io, server) = connect(options(Duration::from_secs(300)), 10);
        io.write_all(PREFACE).await.unwrap();
        io.write_all(&EMPTY_SETTINGS).await.unwrap();
        let trickle = tokio::spawn(async move {
            for b in [0u8, 0, 5, 1, 4, 0, 0, 0, 1, 0x82, 0x86, 0x84, 0x41, 0x80].iter().cycle() {
                if io.write_all(&[*b]).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        });
        let start = tokio::time::Instant::now();
        tokio::time::timeout(Duration::from_secs(60), server).await.expect("slowloris kept open").unwrap();
        assert!(start.elapsed() <= Duration::from_secs(10), "{:?}", start.elapsed());
        trickle.abort();
    }

    /// A client that sends a request and never reads the answer is dropped at the progress
    /// timeout, idle timeout or not.
    #[tokio::test(start_paused = true)]
    async fn a_client_that_never_reads_is_dropped() {
        let (client_io, server) = tokio::io::duplex(1024);
        let (_stop_tx, stop_rx) = watch::channel(false);
        let server = tokio::spawn(async move {
            serve_connection(
                server,
                service(4 << 20),
                options(Duration::from_secs(5)),
                stop_rx,
                permits(),
                Default::default(),
            )
            .await
        });
        let (_rx, mut tx) = tokio::io::split(client_io);
        tx.write_all(PREFACE).await.unwrap();
        tx.write_all(&EMPTY_SETTINGS).await.unwrap();
        // HEADERS, stream 1, END_STREAM | END_HEADERS: POST http / :authority localhost.
        let mut block = vec![0x83, 0x86, 0x84, 0x41, 0x09];
        block.extend_from_slice(b"localhost");
        let mut frame = vec![0, 0, block.len() as u8, 1, 5, 0, 0, 0, 1];
        frame.extend(block);
        tx.write_all(&frame).await.unwrap();
        tokio::time::timeout(Duration::from_secs(120), server).await.expect("a non-reading client kept open").unwrap();
    }

    /// The first two APIs served on sockets in a fresh directory, until `true` is sent on the
    /// returned sender; returns once every socket is bound and served.
    #[cfg(unix)]
    async fn serve_two_apis(
        tag: &str,
    ) -> (
        std::path::PathBuf,
        &'static [csi_proxy_wire::Api],
        watch::Sender<bool>,
        tokio::task::JoinHandle<Result<(), ServeError>>,
    ) {
        let dir = std::env::temp_dir().join(format!("csi-proxy-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let apis = &csi_proxy_wire::APIS[..2];
        let (stop_tx, stop_rx) = watch::channel(false);
        let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
        let endpoints = Endpoints::UnixDir(dir.clone());
        let server = tokio::spawn(async move {
            let mut rx = stop_rx;
            let bound = move || bound_tx.send(()).unwrap();
            serve_apis_then(apis, &endpoints, |_| service(3), options(Duration::from_secs(300)), bound, async move {
                let _ = rx.wait_for(|s| *s).await;
            })
            .await
        });
        bound_rx.await.expect("bound is called");
        (dir, apis, stop_tx, server)
    }

    /// A tonic channel over the unix socket at `path`.
    #[cfg(unix)]
    async fn socket_channel(path: std::path::PathBuf) -> tonic::transport::Channel {
        tonic::transport::Endpoint::from_static("http://localhost")
            .connect_with_connector(tower::service_fn(move |_| {
                let path = path.clone();
                async move { Ok::<_, io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?)) }
            }))
            .await
            .unwrap()
    }

    /// `grpc.health.v1.Health` over a real socket: `""` and the endpoint's own API are
    /// `SERVING` once `bound` has been called, another API's name is unknown there, the API's
    /// own calls still reach its service, and at the stop a `Watch` gets `NOT_SERVING` and ends.
    #[cfg(unix)]
    #[tokio::test]
    async fn every_endpoint_answers_the_health_service() {
        use tonic_health::pb::health_check_response::ServingStatus as Wire;
        use tonic_health::pb::health_client::HealthClient;
        use tonic_health::pb::HealthCheckRequest;

        let (dir, apis, stop_tx, server) = serve_two_apis("health").await;
        let channel = socket_channel(apis[0].socket_path(&dir)).await;
        let client = HealthClient::new(channel.clone());
        let check = |name: String| {
            let mut client = client.clone();
            async move { client.check(HealthCheckRequest { service: name }).await.map(|r| r.into_inner().status) }
        };
        assert_eq!(check(String::new()).await.unwrap(), Wire::Serving as i32);
        assert_eq!(check(apis[0].service_name()).await.unwrap(), Wire::Serving as i32);
        let other = check(apis[1].service_name()).await.unwrap_err();
        assert_eq!(other.code(), tonic::Code::NotFound, "{other:?}");

        // Any other path is the API's own service, answered as before.
        let api_path = format!("/{}/Anything", apis[0].service_name());
        let req = http::Request::post(api_path).body(tonic::body::Body::empty()).unwrap();
        let body = channel.oneshot(req).await.unwrap().into_body();
        let mut body = std::pin::pin!(body);
        let mut got = Vec::new();
        while let Some(frame) = std::future::poll_fn(|cx| http_body::Body::poll_frame(body.as_mut(), cx)).await {
            got.extend_from_slice(&frame.unwrap().into_data().unwrap_or_default());
        }
        assert_eq!(got, b"yyy");

        let mut watch = client.clone().watch(HealthCheckRequest { service: String::new() }).await.unwrap().into_inner();
        assert_eq!(watch.message().await.unwrap().unwrap().status, Wire::Serving as i32);
        let _ = stop_tx.send(true);
        assert_eq!(watch.message().await.unwrap().unwrap().status, Wire::NotServing as i32);
        assert!(watch.message().await.unwrap().is_none(), "the watch ends at the stop");
        server.await.unwrap().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Every answer names the daemon's version in its `csi-proxy-version` header: a health
    /// check, a failed one, and a call of the API's own service.
    #[cfg(unix)]
    #[tokio::test]
    async fn every_answer_names_the_version() {
        use tonic_health::pb::health_client::HealthClient;
        use tonic_health::pb::HealthCheckRequest;

        let (dir, apis, stop_tx, server) = serve_two_apis("version").await;
        let channel = socket_channel(apis[0].socket_path(&dir)).await;
        let want = env!("CARGO_PKG_VERSION");
        let mut client = HealthClient::new(channel.clone());
        let ok = client.check(HealthCheckRequest { service: String::new() }).await.unwrap();
        assert_eq!(ok.metadata().get(VERSION_HEADER).map(|v| v.to_str().unwrap()), Some(want));
        let failed = client.check(HealthCheckRequest { service: apis[1].service_name() }).await.unwrap_err();
        assert_eq!(failed.code(), tonic::Code::NotFound);
        assert_eq!(failed.metadata().get(VERSION_HEADER).map(|v| v.to_str().unwrap()), Some(want));
        let api_path = format!("/{}/Anything", apis[0].service_name());
        let req = http::Request::post(api_path).body(tonic::body::Body::empty()).unwrap();
        let answer = channel.oneshot(req).await.unwrap();
        assert_eq!(answer.headers().get(VERSION_HEADER).map(|v| v.to_str().unwrap()), Some(want));
        let _ = stop_tx.send(true);
        server.await.unwrap().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Answers carry no Date header: gRPC servers (grpc-go, so upstream) send none, and hyper's
    /// would cost a header per answer.
    #[cfg(unix)]
    #[tokio::test]
    async fn answers_carry_no_date_header() {
        let (dir, apis, stop_tx, server) = serve_two_apis("date").await;
        let channel = socket_channel(apis[0].socket_path(&dir)).await;
        let api_path = format!("/{}/Anything", apis[0].service_name());
        let req = http::Request::post(api_path).body(tonic::body::Body::empty()).unwrap();
        let answer = channel.oneshot(req).await.unwrap();
        assert!(answer.headers().contains_key(VERSION_HEADER), "{:?}", answer.headers());
        assert_eq!(answer.headers().get(http::header::DATE), None, "{:?}", answer.headers());
        let _ = stop_tx.send(true);
        server.await.unwrap().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A reflection request over the limit gets an error status, not an empty OK stream.
    #[cfg(unix)]
    #[tokio::test]
    async fn an_oversized_reflection_request_is_refused_with_a_status() {
        use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1::ServerReflectionRequest;

        let (dir, apis, stop_tx, server) = serve_two_apis("reflection-big").await;
        let channel = socket_channel(apis[1].socket_path(&dir)).await;
        let mut client = ServerReflectionClient::new(channel.clone());
        let big = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::FileByFilename("x".repeat(5000))),
        };
        let answer = match client.server_reflection_info(tokio_stream::iter([big])).await {
            Ok(r) => r.into_inner().message().await,
            Err(e) => Err(e),
        };
        let e = answer.expect_err("an oversized request got an OK answer");
        assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
        assert!(e.message().contains("4096"), "{e:?}");
        // The endpoint still answers a request of the right size.
        let small = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut answers = client.server_reflection_info(tokio_stream::iter([small])).await.unwrap().into_inner();
        assert!(answers.message().await.unwrap().is_some());
        let _ = stop_tx.send(true);
        server.await.unwrap().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Server reflection over a real socket, as grpcurl asks: v1 and v1alpha list the endpoint's
    /// own API (not another endpoint's), health and reflection; the API's file comes back by
    /// symbol with its methods; another API's symbol is NOT_FOUND there.
    #[cfg(unix)]
    #[tokio::test]
    async fn every_endpoint_answers_reflection_for_its_own_api() {
        use prost::Message;
        use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
        use tonic_reflection::pb::v1::ServerReflectionRequest;
        use tonic_reflection::pb::v1alpha;

        let (dir, apis, stop_tx, server) = serve_two_apis("reflection").await;
        let channel = socket_channel(apis[1].socket_path(&dir)).await;
        let ask = |m: MessageRequest| {
            let mut client = ServerReflectionClient::new(channel.clone());
            async move {
                let req = ServerReflectionRequest { host: String::new(), message_request: Some(m) };
                let mut answers = client.server_reflection_info(tokio_stream::iter([req])).await?.into_inner();
                Ok::<_, tonic::Status>(answers.message().await?.unwrap().message_response.unwrap())
            }
        };
        let MessageResponse::ListServicesResponse(list) =
            ask(MessageRequest::ListServices(String::new())).await.unwrap()
        else {
            panic!("not a service list")
        };
        let mut names: Vec<_> = list.service.into_iter().map(|s| s.name).collect();
        names.sort();
        let mut want =
            [apis[1].service_name(), "grpc.health.v1.Health".into(), "grpc.reflection.v1.ServerReflection".into()];
        want.sort();
        assert_eq!(names, want);

        let symbol = format!("{}.ListDiskIDsRequest", apis[1].version);
        let MessageResponse::FileDescriptorResponse(files) =
            ask(MessageRequest::FileContainingSymbol(apis[1].service_name())).await.unwrap()
        else {
            panic!("not a file")
        };
        let file = prost_types::FileDescriptorProto::decode(&files.file_descriptor_proto[0][..]).unwrap();
        assert_eq!(file.package(), apis[1].version);
        assert!(file.message_type.iter().any(|m| format!("{}.{}", apis[1].version, m.name()) == symbol), "{file:?}");
        assert!(file.service[0].method.iter().any(|m| m.name() == "ListDiskIDs"));

        let e = ask(MessageRequest::FileContainingSymbol(apis[0].service_name())).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound, "another endpoint's API is not described here: {e:?}");

        // The older v1alpha protocol, which some tools still use first.
        let mut alpha = v1alpha::server_reflection_client::ServerReflectionClient::new(channel.clone());
        let req = v1alpha::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(v1alpha::server_reflection_request::MessageRequest::ListServices(String::new())),
        };
        let answer =
            alpha.server_reflection_info(tokio_stream::iter([req])).await.unwrap().into_inner().message().await;
        let Some(v1alpha::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
            answer.unwrap().unwrap().message_response
        else {
            panic!("not a service list")
        };
        assert!(list.service.iter().any(|s| s.name == apis[1].service_name()), "{list:?}");
        assert!(list.service.iter().any(|s| s.name == "grpc.reflection.v1alpha.ServerReflection"), "{list:?}");

        let _ = stop_tx.send(true);
        server.await.unwrap().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Over a socket: a caller at its share of an endpoint gets a new connection in the place of
    /// its own connection idle longest, which is closed; the others stay (the choices themselves
    /// are tested in `admission`).
    #[cfg(unix)]
    #[tokio::test]
    async fn a_new_connection_takes_the_place_of_the_idlest() {
        use tokio::io::AsyncReadExt;
        let dir = std::env::temp_dir().join(format!("csi-proxy-limits-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let apis = &csi_proxy_wire::APIS[..1];
        // Two slots, both this process's uid's (no one else is there): its third connection
        // takes its oldest's place.
        let opts = ServeOptions { max_connections_per_endpoint: 2, ..options(Duration::from_secs(300)) };
        let (stop_tx, stop_rx) = watch::channel(false);
        let endpoints = Endpoints::UnixDir(dir.clone());
        let server = tokio::spawn(async move {
            let mut rx = stop_rx;
            serve_apis(apis, &endpoints, |_| service(1), opts, async move {
                let _ = rx.wait_for(|s| *s).await;
            })
            .await
        });
        let path = apis[0].socket_path(&dir);
        while !path.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Served: the server's SETTINGS arrive. Refused: end of stream and nothing else.
        let open = || async {
            let mut s = tokio::net::UnixStream::connect(&path).await.unwrap();
            s.write_all(PREFACE).await.unwrap();
            s.write_all(&EMPTY_SETTINGS).await.unwrap();
            let mut b = [0u8; 9];
            let served =
                tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut b)).await.expect("no answer").is_ok();
            (s, served)
        };
        // Whether the server closed `s` (EOF or reset, after whatever it sent).
        async fn closed(s: &mut tokio::net::UnixStream) -> bool {
            let mut b = [0u8; 256];
            loop {
                match tokio::time::timeout(Duration::from_secs(5), s.read(&mut b)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => return true,
                    Ok(Ok(_)) => continue,
                    Err(_) => return false,
                }
            }
        }
        let (mut a1, ok1) = open().await;
        let (mut a2, ok2) = open().await;
        let (_a3, ok3) = open().await;
        assert_eq!((ok1, ok2, ok3), (true, true, true));
        assert!(closed(&mut a1).await, "the idlest connection was not closed");
        assert!(!closed(&mut a2).await, "a newer idle connection was closed");
        drop(a1);
        let _ = stop_tx.send(true);
        server.await.unwrap().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
