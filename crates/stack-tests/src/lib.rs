//! Fixtures of the whole-stack tests and benchmarks: the daemon's stack (transport, gRPC services,
//! host backends) served on real endpoints, clients for it, and what the Linux block tests run on.
//!
//! - `TestServer` (unix): every API, or some, on unix sockets in a directory of its own, over the
//!   in-memory host or the native backend;
//! - `pipes` (Windows): clients for the real named pipes and `PipeServer`, which serves them;
//! - `disks` (Linux): loop disks over sparse files, a udev simulator, `lsblk`; `mounts` (Linux):
//!   the mount table as the tests read it;
//! - [`Scratch`]: a directory of a test's own under the temp directory, gone afterwards;
//! - [`logs`]: what the server logged; [`latency`]: the per-RPC benchmarks' figures;
//!   [`sibling`]: another package's binary, built beside the tested one.
//! - [`flows`]: the Windows CSI drivers' call sequences (the `csi-proxy-flows` crate, which
//!   `csi-proxyctl conformance` runs too), run by the driver-flow tests in every environment.
//!
//! The tests are in `tests/`, the benchmarks in `benches/`.

pub use csi_proxy_flows as flows;
pub mod latency;
pub mod logs;
pub mod scratch;
pub mod sibling;

#[cfg(target_os = "linux")]
pub mod disks;
#[cfg(target_os = "linux")]
pub mod mounts;
#[cfg(windows)]
pub mod pipes;
#[cfg(target_os = "linux")]
pub mod procs;
#[cfg(unix)]
pub mod server;
#[cfg(windows)]
pub mod winproc;

pub use scratch::Scratch;
#[cfg(unix)]
pub use server::{Answer, TestServer};

use csi_proxy_wire::{Api, Group, APIS};
use std::future::Future;
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::transport::{Channel, Endpoint};

/// The API of `group` at `version`.
pub fn api(group: Group, version: &str) -> Api {
    *APIS.iter().find(|a| a.group == group && a.version == version).expect("known API")
}

/// One HTTP/2 connection (a tonic channel) over the byte stream `open` makes, for `uri` (whose
/// authority tonic sends as `:authority`). tonic calls `open` again to reconnect.
pub async fn channel_over<F, Fut, IO>(uri: &'static str, open: F) -> Result<Channel, tonic::transport::Error>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = std::io::Result<IO>> + Send,
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    Endpoint::from_static(uri)
        .connect_with_connector(tower::service_fn(move |_| {
            let io = open();
            async move { Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(io.await?)) }
        }))
        .await
}

/// Asserts a failed call's code and that its message mentions `needle`.
#[track_caller]
pub fn assert_status<T: std::fmt::Debug>(r: Result<T, tonic::Status>, code: tonic::Code, needle: &str) {
    let s = r.expect_err("expected the call to fail");
    assert_eq!(s.code(), code, "{s:?}");
    assert!(s.message().contains(needle), "message {:?} should mention {needle:?}", s.message());
}
