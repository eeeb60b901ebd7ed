//! Transport: where the 23 APIs listen and how each accepted byte stream reaches HTTP/2.
//!
//! - [`unix`]: `<dir>/csi-proxy-<group>-<version>.sock` (Linux and other unixes).
//! - [`pipe`]: `\\.\pipe\csi-proxy-<group>-<version>` (Windows).
//! - [`authority`]: rewrites the `:authority` values that Go and Python clients send on pipes and
//!   sockets, which stock `h2` would reject, before the bytes reach the HTTP/2 server.
//! - [`conn`]: per-connection handshake/idle timeouts and the in-flight count they respect.
//!
//! This crate knows HTTP/2 (hyper) but not gRPC: it serves any `tower` service over
//! `http::Request`, which the server crate builds from the generated gRPC code.

pub mod authority;
pub mod conn;
#[cfg(windows)]
pub mod pipe;
#[cfg(unix)]
pub mod unix;

pub use conn::ConnPolicy;

use bytes::Bytes;
use conn::{IdleGuard, InFlight};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tower::{Service, ServiceExt};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A source of connected byte streams (a unix listener, a named pipe server).
pub trait Listener: Send + 'static {
    type Io: AsyncRead + AsyncWrite + Send + Unpin + 'static;
    fn accept(&mut self) -> impl Future<Output = io::Result<Self::Io>> + Send;
    /// Where this listener listens, for logs.
    fn describe(&self) -> String;
}

/// How long open connections may finish their calls once shutdown starts.
const DRAIN: Duration = Duration::from_secs(5);

/// Serves `service` on every connection `listener` accepts until `shutdown` completes; then
/// stops accepting, asks open connections to finish (HTTP/2 GOAWAY) and waits briefly for them.
pub async fn serve<L, S, B>(mut listener: L, service: S, policy: ConnPolicy, shutdown: impl Future<Output = ()>)
where
    L: Listener,
    S: Service<http::Request<Incoming>, Response = http::Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conns = tokio::task::JoinSet::new();
    let name = listener.describe();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(io) => {
                    conns.spawn(serve_connection(io, service.clone(), policy, stop_rx.clone()));
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
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(DRAIN, async { while conns.join_next().await.is_some() {} }).await;
    conns.shutdown().await;
}

async fn serve_connection<IO, S, B>(io: IO, service: S, policy: ConnPolicy, mut stop: watch::Receiver<bool>)
where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    S: Service<http::Request<Incoming>, Response = http::Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let in_flight = InFlight::default();
    let io = authority::AuthorityFix::new(IdleGuard::new(io, policy, in_flight.clone()));
    let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
        let guard = in_flight.enter();
        let call = service.clone().oneshot(req);
        async move {
            let resp = call.await;
            drop(guard);
            resp
        }
    });
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    // grpc-go's default limits: 4 MiB messages are enforced by the gRPC codec; here we only
    // bound concurrent streams per connection so one client cannot exhaust the blocking pool.
    builder.max_concurrent_streams(256);
    let conn = builder.serve_connection(TokioIo::new(io), svc);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        _ = async { let _ = stop.wait_for(|s| *s).await; } => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

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
/// anything — then serves each with the service `make(api)` until `shutdown` completes.
pub async fn serve_apis<F, S, B>(
    apis: &[csi_proxy_wire::Api],
    endpoints: &Endpoints,
    make: F,
    policy: ConnPolicy,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError>
where
    F: Fn(csi_proxy_wire::Api) -> S,
    S: Service<http::Request<Incoming>, Response = http::Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut servers = tokio::task::JoinSet::new();
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    match endpoints {
        #[cfg(unix)]
        Endpoints::UnixDir(dir) => {
            let lock = unix::lock_dir(dir)?;
            let mut listeners = Vec::with_capacity(apis.len());
            for api in apis {
                listeners.push((*api, unix::bind(dir, api)?));
            }
            for (api, l) in listeners {
                tracing::info!(api = %api.service_name(), socket = %l.path().display(), "listening");
                servers.spawn(serve(l, make(api), policy, stopped()));
            }
            // The lock lives as long as the servers.
            let stop = stopped();
            servers.spawn(async move {
                stop.await;
                drop(lock);
            });
        }
        #[cfg(windows)]
        Endpoints::Pipes { sddl } => {
            let mut listeners = Vec::with_capacity(apis.len());
            for api in apis {
                listeners.push((*api, pipe::bind(&api.pipe_path(), sddl.as_deref())?));
            }
            for (api, l) in listeners {
                tracing::info!(api = %api.service_name(), pipe = %api.pipe_path(), "listening");
                servers.spawn(serve(l, make(api), policy, stopped()));
            }
        }
    }
    shutdown.await;
    let _ = stop_tx.send(true);
    while servers.join_next().await.is_some() {}
    Ok(())
}
