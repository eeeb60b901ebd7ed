//! Server layer: one gRPC service per (group, version), all funnelled into one internal operation
//! per RPC.
//!
//! - [`versions`]: for every API version, conversions from its wire messages into the internal
//!   operations of [`ops`] and back. Older versions are data mapped onto the newest semantics;
//!   there is no per-version copy of server logic.
//! - [`ops`]: the version-less operations: request validation, then one host call.
//! - [`fields`]: reading request fields (decimal disk numbers, sizes, required strings).
//! - [`call`]: the single path every unary call takes (conversion, the call's lock, host work on
//!   a pool thread, panic isolation, logging, metrics hooks) and the [`Context`] it runs in; what
//!   it uses has a module each: [`locks`] (per-disk queues), `pool` (host-work threads), `inline`
//!   (quick calls on the async worker), [`audit`] (the records, and [`audit::call`], one call's
//!   trail), `outcome` (the code and message a result ends with).
//! - [`dry_run`]: a mutating call's plan, answered instead of doing it, and the read-only view
//!   of the host a plan is made with.
//! - [`status`]: the one mapping from host errors to gRPC status codes.

pub mod audit;
pub mod call;
pub mod dry_run;
pub mod fields;
mod inline;
pub mod join;
pub mod locks;
pub mod ops;
mod outcome;
pub mod policy;
mod pool;
pub mod shown;
pub mod status;
pub mod versions;

pub use call::Context;
use std::time::Duration;
pub use versions::service;

/// The largest request message a call accepts (gRPC's default is 4 MiB). The largest real
/// requests hold two paths of at most 32,000 UTF-16 units each; anything bigger is refused (tonic
/// answers OutOfRange, naming both sizes) before it is decoded.
pub const MAX_REQUEST_BYTES: usize = 1 << 20;

/// One API's gRPC service over request bodies of type `B`, ready for any HTTP/2 server.
pub type ApiService<B> =
    tower::util::BoxCloneSyncService<http::Request<B>, http::Response<tonic::body::Body>, std::convert::Infallible>;

/// Receives every handled call; the daemon plugs its Prometheus metrics in here.
pub trait CallObserver: Send + Sync {
    fn started(&self, service: &str, method: &str);
    /// `code` is the gRPC code name as Go spells it (`OK`, `InvalidArgument`, ...).
    fn handled(&self, service: &str, method: &str, code: &str, elapsed: Duration);
    /// A call joined an identical one in flight instead of running ([`join`]).
    fn joined(&self, _service: &str, _method: &str) {}
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
