//! A client of csi-proxy: connects to one API, named by (group, version), where the daemon serves
//! it — the named pipe `\\.\pipe\csi-proxy-<group>-<version>` on Windows, the unix socket
//! `<dir>/csi-proxy-<group>-<version>.sock` elsewhere — and hands back a [`Channel`] for the typed
//! clients of that version, which this crate re-exports (`v1::disk_client::DiskClient`, ...).
//!
//! Like upstream's Go clients (go-winio's `DialPipe`), opening a pipe whose instances are all busy
//! is retried for a bounded time ([`Connector::busy_timeout`]); a pipe or socket that does not
//! exist is an error at once unless [`Connector::wait_for_server`] allows waiting for it.
//!
//! ```no_run
//! use csi_proxy_client::{v1::disk_client::DiskClient, v1::ListDiskIDsRequest, Connector, Group};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // The default location: the pipes on Windows, /run/csi-proxy on Linux.
//! let channel = Connector::new().connect_to(Group::Disk, "v1").await?;
//! let ids = DiskClient::new(channel).list_disk_i_ds(ListDiskIDsRequest {}).await?.into_inner();
//! for (number, id) in ids.disk_i_ds {
//!     println!("disk {number}: page83 {:?}, serial {:?}", id.page83, id.serial_number);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! `examples/disks.rs` is the same as a program.

#[cfg(windows)]
pub mod file_dacl;
pub mod go_bool;
pub mod go_duration;

use csi_proxy_sync::LockExt;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::transport::Endpoint;

pub use csi_proxy_wire::{self as wire, Api, Group, APIS};
/// The messages and typed clients of each version; every group of a version is in its module
/// (`v1::disk_client::DiskClient`, `v1::volume_client::VolumeClient`, ...).
pub use csi_proxy_wire::{v1, v1alpha1, v1alpha2, v1beta1, v1beta2, v1beta3, v2alpha1};
pub use tonic::transport::Channel;
pub use tonic::{Code, Status};

/// The URI whose authority the client sends as `:authority`; the daemon serves any.
const URI: &str = "http://localhost";

/// Pause between two attempts to open a busy (or not yet existing) endpoint.
const RETRY_EVERY: Duration = Duration::from_millis(10);

/// Why no connection could be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unknown API {api:?}: expected <group>/<version>, one of {known}")]
    UnknownApi { api: String, known: String },
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        endpoint: String,
        #[source]
        source: io::Error,
    },
    #[error("HTTP/2 connection to {endpoint} failed: {source}")]
    Transport {
        endpoint: String,
        #[source]
        source: tonic::transport::Error,
    },
}

/// The API `group`/`version` (`"disk"`, `"v1"`), if the daemon serves one by that name.
pub fn find_api(group: &str, version: &str) -> Option<Api> {
    APIS.iter().copied().find(|a| a.group.name() == group && a.version == version)
}

/// Parses `<group>/<version>` (`disk/v1`) into a served API.
pub fn parse_api(text: &str) -> Result<Api, Error> {
    text.split_once('/').and_then(|(g, v)| find_api(g, v)).ok_or_else(|| Error::UnknownApi {
        // Bounded: the value is quoted in the error.
        api: text.chars().take(64).collect(),
        known: APIS.iter().map(|a| format!("{}/{}", a.group, a.version)).collect::<Vec<_>>().join(", "),
    })
}

/// Where and how to connect. Cheap to clone; [`Connector::connect`] may be called any number of
/// times, each call making one new connection.
#[derive(Debug, Clone)]
pub struct Connector {
    #[cfg(unix)]
    socket_dir: std::path::PathBuf,
    busy_timeout: Duration,
    wait_for_server: Duration,
}

impl Default for Connector {
    fn default() -> Self {
        Self::new()
    }
}

impl Connector {
    /// The daemon's default socket directory (its `-socket-dir`).
    pub const DEFAULT_SOCKET_DIR: &'static str = "/run/csi-proxy";
    /// How long an all-busy pipe is retried by default: go-winio's `DialPipe` default.
    pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(2);

    /// The daemon's default endpoints, a busy pipe retried for [`Self::DEFAULT_BUSY_TIMEOUT`], a
    /// missing endpoint an error at once.
    pub fn new() -> Self {
        Connector {
            #[cfg(unix)]
            socket_dir: Self::DEFAULT_SOCKET_DIR.into(),
            busy_timeout: Self::DEFAULT_BUSY_TIMEOUT,
            wait_for_server: Duration::ZERO,
        }
    }

    /// The directory of the sockets (the daemon's `-socket-dir`).
    #[cfg(unix)]
    pub fn socket_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.socket_dir = dir.into();
        self
    }

    /// How long to retry opening a pipe while all its instances are busy (Windows).
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// How long to retry while the endpoint does not exist yet (or, on unix, refuses), e.g. while
    /// the daemon starts. Zero (the default): fail at once.
    pub fn wait_for_server(mut self, timeout: Duration) -> Self {
        self.wait_for_server = timeout;
        self
    }

    /// The pipe path or socket path of `api`, as this connector opens it.
    pub fn endpoint(&self, api: &Api) -> String {
        #[cfg(unix)]
        {
            self.socket_path(api).display().to_string()
        }
        #[cfg(not(unix))]
        {
            api.pipe_path()
        }
    }

    /// `<socket dir>/csi-proxy-<group>-<version>.sock`
    #[cfg(unix)]
    pub fn socket_path(&self, api: &Api) -> std::path::PathBuf {
        api.socket_path(&self.socket_dir)
    }

    /// A new connection to `api`'s endpoint. The channel reconnects by itself (with the same
    /// retries) if the daemon closes the connection, e.g. after it was idle.
    pub async fn connect(&self, api: Api) -> Result<Channel, Error> {
        let endpoint = self.endpoint(&api);
        #[cfg(unix)]
        {
            let (path, wait) = (self.socket_path(&api), self.wait_for_server);
            channel(endpoint, move || open_socket(path.clone(), wait)).await
        }
        #[cfg(windows)]
        {
            let (busy, wait) = (self.busy_timeout, self.wait_for_server);
            let path = endpoint.clone();
            channel(endpoint, move || open_pipe(path.clone(), busy, wait)).await
        }
    }

    /// [`Self::connect`] to the API of `group` at `version`.
    pub async fn connect_to(&self, group: Group, version: &str) -> Result<Channel, Error> {
        let api = find_api(group.name(), version).ok_or_else(|| Error::UnknownApi {
            api: format!("{group}/{}", version.chars().take(32).collect::<String>()),
            known: APIS.iter().filter(|a| a.group == group).map(|a| a.version).collect::<Vec<_>>().join(", "),
        })?;
        self.connect(api).await
    }
}

/// A connection to the unix socket `path` itself, wherever it is.
#[cfg(unix)]
pub async fn connect_socket(path: std::path::PathBuf, wait_for_server: Duration) -> Result<Channel, Error> {
    channel(path.display().to_string(), move || open_socket(path.clone(), wait_for_server)).await
}

/// A connection to the named pipe `path` itself (another daemon's, such as containerd's),
/// waiting up to `busy` while every instance is busy.
#[cfg(windows)]
pub async fn connect_pipe(path: String, busy: Duration) -> Result<Channel, Error> {
    channel(path.clone(), move || open_pipe(path.clone(), busy, Duration::ZERO)).await
}

/// One HTTP/2 connection over the streams `open` makes. The first is opened here, so that a
/// missing or refusing endpoint is reported with its own error (tonic would only say
/// "transport error"); tonic calls `open` again when it reconnects.
async fn channel<F, Fut, IO>(endpoint: String, open: F) -> Result<Channel, Error>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = io::Result<IO>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let first = open().await.map_err(|source| Error::Connect { endpoint: endpoint.clone(), source })?;
    let first = Arc::new(Mutex::new(Some(first)));
    let open = Arc::new(open);
    Endpoint::from_static(URI)
        .connect_with_connector(tower::service_fn(move |_| {
            let ready = first.lock_ignoring_poison().take();
            let next = ready.is_none().then(|| open());
            async move {
                let io = match (ready, next) {
                    (Some(io), _) => io,
                    (None, Some(next)) => next.await?,
                    (None, None) => unreachable!("one of the two is set"),
                };
                Ok::<_, io::Error>(hyper_util::rt::TokioIo::new(io))
            }
        }))
        .await
        .map_err(|source| Error::Transport { endpoint, source })
}

#[cfg(unix)]
async fn open_socket(path: std::path::PathBuf, wait: Duration) -> io::Result<tokio::net::UnixStream> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::net::UnixStream::connect(&path).await {
            Err(e)
                if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused)
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(RETRY_EVERY).await
            }
            other => return other,
        }
    }
}

/// Opens the pipe `path`, retrying while every instance is busy (up to `busy`) and while it does
/// not exist (up to `wait`), as Windows clients must: a pipe server has a free instance only
/// until a client takes it and creates the next one after that.
#[cfg(windows)]
pub async fn open_pipe(
    path: String,
    busy: Duration,
    wait: Duration,
) -> io::Result<tokio::net::windows::named_pipe::NamedPipeClient> {
    const ERROR_FILE_NOT_FOUND: i32 = 2;
    const ERROR_PIPE_BUSY: i32 = 231;
    let start = tokio::time::Instant::now();
    loop {
        let err = match tokio::net::windows::named_pipe::ClientOptions::new().open(&path) {
            Ok(pipe) => return Ok(pipe),
            Err(e) => e,
        };
        let limit = match err.raw_os_error() {
            Some(ERROR_PIPE_BUSY) => busy,
            Some(ERROR_FILE_NOT_FOUND) => wait,
            _ => return Err(err),
        };
        if start.elapsed() >= limit {
            if err.raw_os_error() == Some(ERROR_PIPE_BUSY) {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("every instance of the pipe stayed busy for {busy:?}: {err}"),
                ));
            }
            return Err(err);
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apis_are_found_by_name_and_unknown_ones_named() {
        assert_eq!(parse_api("volume/v2alpha1").unwrap(), find_api("volume", "v2alpha1").unwrap());
        let e = parse_api("disk/v9").unwrap_err().to_string();
        assert!(e.contains("\"disk/v9\"") && e.contains("disk/v1beta3"), "{e}");
        assert!(parse_api("disk").is_err());
    }
}
