//! A real server on real unix sockets, backed by the in-memory host or the native backend, and
//! clients for it.

use crate::api;
use csi_proxy_host::memory::MemoryHost;
use csi_proxy_host::paths::Roots;
use csi_proxy_host::types::FsType;
use csi_proxy_host::Hosts;
use csi_proxy_server::{Config, Context};
use csi_proxy_transport::{ConnPolicy, Endpoints};
use csi_proxy_wire::{Api, Group, APIS};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tonic::transport::Channel;

/// `serve_apis` on `<temp>/csi-proxy-e2e-<pid>-<n>/`, as the daemon serves its socket directory;
/// stopped (and the directory removed) on drop.
pub struct TestServer {
    pub dir: PathBuf,
    /// The memory host behind the groups that are not native (every group for [`Self::start`]).
    pub host: Arc<MemoryHost>,
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
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "csi-proxy-e2e-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let ctx = Context::new(hosts, config);
        let (tx, rx) = oneshot::channel::<()>();
        let endpoints = Endpoints::UnixDir(dir.clone());
        let served = apis.to_vec();
        let task = tokio::spawn(async move {
            csi_proxy_transport::serve_apis(
                &served,
                &endpoints,
                |api| csi_proxy_server::service(&ctx, api),
                policy,
                async {
                    let _ = rx.await;
                },
            )
            .await
            .expect("serve_apis");
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while apis.iter().any(|a| !socket(&dir, a).exists()) {
            assert!(Instant::now() < deadline, "sockets did not appear");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        TestServer { dir, host, stop: Some(tx), task: Some(task) }
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

/// The socket of `api` in the socket directory `dir`.
fn socket(dir: &Path, api: &Api) -> PathBuf {
    api.socket_path(dir)
}

/// A connection to the unix socket `path` (tonic reconnects to it when the server closed it).
pub async fn connect(path: PathBuf) -> Channel {
    csi_proxy_client::connect_socket(path, Duration::ZERO).await.expect("connect")
}
