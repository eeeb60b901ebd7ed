//! Server layer: one gRPC service per (group, version), all funnelled into one internal operation
//! per RPC.
//!
//! - [`versions`]: for every API version, conversions from its wire messages into the internal
//!   operations of [`ops`] and back. Older versions are data mapped onto the newest semantics;
//!   there is no per-version copy of server logic.
//! - [`ops`]: the version-less operations: request validation, then one host call.
//! - [`call`]: the single path every unary call takes (conversion, blocking host work, panic
//!   isolation, logging, metrics hooks).
//! - [`status`]: the one mapping from host errors to gRPC status codes.

pub mod audit;
pub mod call;
pub mod locks;
pub mod ops;
mod pool;
pub mod shown;
pub mod status;
pub mod versions;

use csi_proxy_host::Hosts;

/// The largest request message a call accepts (gRPC's default is 4 MiB). The largest real
/// requests hold two paths of at most 32,000 UTF-16 units each; anything bigger is refused (tonic
/// answers OutOfRange, naming both sizes) before it is decoded.
pub const MAX_REQUEST_BYTES: usize = 1 << 20;
use csi_proxy_wire::Api;
use std::sync::Arc;
use std::time::Duration;

/// One API's gRPC service over request bodies of type `B`, ready for any HTTP/2 server.
pub type ApiService<B> =
    tower::util::BoxCloneSyncService<http::Request<B>, http::Response<tonic::body::Body>, std::convert::Infallible>;

/// Receives every handled call; the daemon plugs its Prometheus metrics in here.
pub trait CallObserver: Send + Sync {
    fn started(&self, service: &str, method: &str);
    /// `code` is the gRPC code name as Go spells it (`OK`, `InvalidArgument`, ...).
    fn handled(&self, service: &str, method: &str, code: &str, elapsed: Duration);
}

/// Settings of the server layer that come from the command line.
#[derive(Debug, Clone)]
pub struct Config {
    /// `RequirePrivacy` of new SMB global mappings (`-require-privacy`).
    pub require_privacy: bool,
    /// The services StartService and StopService may act on (`-allowed-service`, repeatable);
    /// `None` allows any service, as upstream. Names compare as the OS compares service names
    /// (see [`ops::system::service_allowed`]). GetService is never restricted.
    pub allowed_services: Option<Vec<String>>,
}

impl Default for Config {
    fn default() -> Self {
        Config { require_privacy: true, allowed_services: None }
    }
}

struct Inner {
    hosts: Hosts,
    locks: locks::Locks,
    config: Config,
    observer: Option<Arc<dyn CallObserver>>,
    audit: Option<Arc<audit::Writer>>,
}

/// Shared state of every service: the host backends, configuration and observers.
#[derive(Clone)]
pub struct Context(Arc<Inner>);

impl Context {
    pub fn new(hosts: Hosts, config: Config) -> Self {
        Context(Arc::new(Inner { hosts, locks: Default::default(), config, observer: None, audit: None }))
    }

    pub fn with_observer(hosts: Hosts, config: Config, observer: Arc<dyn CallObserver>) -> Self {
        Context(Arc::new(Inner { hosts, locks: Default::default(), config, observer: Some(observer), audit: None }))
    }

    /// This context with an audit trail: every call that may change the host gets a start and
    /// an end record in `sink` (see [`audit`]). Call before serving: the copy starts with fresh
    /// disk locks.
    pub fn with_audit(self, sink: Arc<dyn audit::AuditSink>) -> Self {
        self.with_audit_within(sink, audit::RECORD_WAIT)
    }

    /// The same, waiting at most `wait` for each record (see [`audit`]) instead of
    /// [`audit::RECORD_WAIT`].
    pub fn with_audit_within(self, sink: Arc<dyn audit::AuditSink>, wait: Duration) -> Self {
        let inner = &self.0;
        Context(Arc::new(Inner {
            hosts: inner.hosts.clone(),
            locks: Default::default(),
            config: inner.config.clone(),
            observer: inner.observer.clone(),
            audit: Some(Arc::new(audit::Writer::start(sink, wait))),
        }))
    }

    pub fn hosts(&self) -> &Hosts {
        &self.0.hosts
    }

    /// Per-disk serialisation of mutating calls.
    pub fn locks(&self) -> &locks::Locks {
        &self.0.locks
    }

    pub fn config(&self) -> &Config {
        &self.0.config
    }

    /// The HTTP service that answers gRPC calls for `api`: exactly that version's service, as
    /// upstream serves one service per pipe; any other path answers `Unimplemented`.
    pub fn service<B>(&self, api: Api) -> ApiService<B>
    where
        B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
    {
        versions::service(api, self.clone())
    }
}
