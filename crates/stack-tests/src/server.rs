//! A real server on real unix sockets, backed by the in-memory host or the native backend, and
//! clients for it.

use crate::api;
use csi_proxy_host::memory::MemoryHost;
use csi_proxy_host::paths::Roots;
use csi_proxy_host::types::FsType;
use csi_proxy_host::Hosts;
use csi_proxy_server::policy::Authorizer;
use csi_proxy_server::{Config, Context};
use csi_proxy_transport::{ConnPolicy, Endpoints};
use csi_proxy_wire::Caller;
use csi_proxy_wire::{Api, Group, APIS};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tonic::transport::Channel;
use tower::ServiceExt;

/// `serve_apis` on `<temp>/csi-proxy-e2e-<pid>-<n>/`, as the daemon serves its socket directory;
/// stopped (and the directory removed) on drop.
pub struct TestServer {
    pub dir: PathBuf,
    /// The memory host behind the groups that are not native (every group for [`Self::start`]).
    pub host: Arc<MemoryHost>,
    /// What each call was answered, in the order the answers left (filled by
    /// [`Self::start_apis_as`] only).
    pub answers: Arc<Mutex<Vec<Answer>>>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    /// Every API over a sample memory host.
    pub async fn start() -> Self {
        let host = Arc::new(MemoryHost::sample());
        Self::start_with(host.clone(), Hosts::from_one(host), ConnPolicy::default()).await
    }

    /// The memory host for every group but the filesystem, which is the native backend
    /// confined to `roots`.
    pub async fn start_native_fs(roots: Vec<String>) -> Self {
        let host = Arc::new(MemoryHost::sample());
        let mut hosts = Hosts::from_one(host.clone());
        let roots = Roots::new(roots);
        hosts.filesystem = csi_proxy_host::native(csi_proxy_host::Config { roots, ..Default::default() }).filesystem;
        Self::start_with(host, hosts, ConnPolicy::default()).await
    }

    /// Every group on the native backend, with `roots` as the working directories and `fs_type`
    /// for FormatVolume (`host` is an unused memory host).
    pub async fn start_native(roots: Vec<String>, fs_type: FsType) -> Self {
        let hosts =
            csi_proxy_host::native(csi_proxy_host::Config { roots: Roots::new(roots), fs_type, ..Default::default() });
        Self::start_with(Arc::new(MemoryHost::new()), hosts, ConnPolicy::default()).await
    }

    /// Every group on the native backend, with `roots` as the working directories, SMB shares
    /// mounted under `smb_dir` and `require_privacy` for new SMB mappings.
    pub async fn start_native_smb(roots: Vec<String>, smb_dir: PathBuf, require_privacy: bool) -> Self {
        let hosts =
            csi_proxy_host::native(csi_proxy_host::Config { roots: Roots::new(roots), smb_dir, ..Default::default() });
        let config = Config { require_privacy, ..Config::default() };
        Self::start_apis(APIS, Arc::new(MemoryHost::new()), hosts, config, ConnPolicy::default()).await
    }

    /// Every API over `hosts` (`host` being the memory host among them), with `policy`.
    pub async fn start_with(host: Arc<MemoryHost>, hosts: Hosts, policy: ConnPolicy) -> Self {
        Self::start_apis(APIS, host, hosts, Config::default(), policy).await
    }

    /// `apis` alone over `hosts` (`host` being the memory host among them), with the server's
    /// `config` and the connections' `policy`. Returns once every socket is there.
    pub async fn start_apis(
        apis: &[Api],
        host: Arc<MemoryHost>,
        hosts: Hosts,
        config: Config,
        policy: ConnPolicy,
    ) -> Self {
        Self::serve(apis, host, Context::new(hosts, config), None, policy).await
    }

    /// [`Self::start_apis`] with `authorizer` in force and every call made as `caller` (the
    /// identity the daemon's identifier would have given the connection: inserted into each
    /// request after the transport's own, so it replaces it). What each call was answered is
    /// kept in [`Self::answers`].
    pub async fn start_apis_as(
        apis: &[Api],
        host: Arc<MemoryHost>,
        hosts: Hosts,
        config: Config,
        policy: ConnPolicy,
        caller: Arc<Caller>,
        authorizer: Arc<Authorizer>,
    ) -> Self {
        let ctx = Context::new(hosts, config).with_authorizer(authorizer);
        Self::serve(apis, host, ctx, Some(caller), policy).await
    }

    async fn serve(
        apis: &[Api],
        host: Arc<MemoryHost>,
        ctx: Context,
        caller: Option<Arc<Caller>>,
        policy: ConnPolicy,
    ) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "csi-proxy-e2e-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let answers: Arc<Mutex<Vec<Answer>>> = Arc::default();
        let kept = answers.clone();
        let make = move |api: Api| {
            let inner = csi_proxy_server::service(&ctx, api);
            let (caller, kept) = (caller.clone(), kept.clone());
            tower::service_fn(move |mut req: http::Request<csi_proxy_transport::CallBody>| {
                let (inner, caller, kept) = (inner.clone(), caller.clone(), kept.clone());
                async move {
                    let Some(caller) = caller else { return inner.oneshot(req).await };
                    req.extensions_mut().insert(caller);
                    let method = req.uri().path().to_owned();
                    let resp = inner.oneshot(req).await?;
                    kept.lock().unwrap().push(Answer::of(method, resp.headers()));
                    Ok(resp)
                }
            })
        };
        let (tx, rx) = oneshot::channel::<()>();
        let endpoints = Endpoints::UnixDir(dir.clone());
        let served = apis.to_vec();
        let task = tokio::spawn(async move {
            csi_proxy_transport::serve_apis(&served, &endpoints, make, policy, async {
                let _ = rx.await;
            })
            .await
            .expect("serve_apis");
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while apis.iter().any(|a| !socket(&dir, a).exists()) {
            assert!(Instant::now() < deadline, "sockets did not appear");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        TestServer { dir, host, answers, stop: Some(tx), task: Some(task) }
    }

    pub fn socket(&self, group: Group, version: &str) -> PathBuf {
        socket(&self.dir, &api(group, version))
    }

    /// A fresh HTTP/2 connection to one API's socket, made by the client crate.
    pub async fn channel(&self, group: Group, version: &str) -> Channel {
        let connector = csi_proxy_client::Connector::new().socket_dir(&self.dir);
        connector.connect(api(group, version)).await.expect("connect")
    }

    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What one call was answered, as [`TestServer::start_apis_as`] saw it leave the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// `/v1.Disk/PartitionDisk`.
    pub method: String,
    /// The status of a trailers-only answer (every refusal, every call that failed before it
    /// ran); a call that ran has its status in the trailers and is recorded here as `Ok`.
    pub code: tonic::Code,
    pub message: String,
}

impl Answer {
    fn of(method: String, headers: &http::HeaderMap) -> Answer {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let code = header("grpc-status").and_then(|c| c.parse::<i32>().ok()).unwrap_or(0);
        let message = header("grpc-message").map(percent_decode).unwrap_or_default();
        Answer { method, code: tonic::Code::from_i32(code), message }
    }
}

/// gRPC's grpc-message encoding undone (`%XX` for bytes outside printable ASCII and `%`).
fn percent_decode(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (b[i], b.get(i + 1).copied().and_then(hex), b.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The socket of `api` in the socket directory `dir`.
fn socket(dir: &Path, api: &Api) -> PathBuf {
    api.socket_path(dir)
}

/// A connection to the unix socket `path` (tonic reconnects to it when the server closed it).
pub async fn connect(path: PathBuf) -> Channel {
    csi_proxy_client::connect_socket(path, Duration::ZERO).await.expect("connect")
}
