//! A real server on real unix sockets, backed by the in-memory host, and clients for it.
#![allow(dead_code)]

pub mod logs;

use csi_proxy_host::memory::MemoryHost;
use csi_proxy_host::Hosts;
use csi_proxy_server::{Config, Context};
use csi_proxy_transport::{ConnPolicy, Endpoints};
use csi_proxy_wire::{Api, Group, APIS};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::oneshot;
use tonic::transport::{Channel, Endpoint};

pub struct TestServer {
    pub dir: PathBuf,
    pub host: Arc<MemoryHost>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    pub async fn start() -> Self {
        let host = Arc::new(MemoryHost::sample());
        Self::start_with(host.clone(), Hosts::from_one(host), ConnPolicy::default()).await
    }

    /// The memory host for every group but the filesystem, which is the native backend
    /// confined to `roots`.
    pub async fn start_native_fs(roots: Vec<String>) -> Self {
        let host = Arc::new(MemoryHost::sample());
        let mut hosts = Hosts::from_one(host.clone());
        let roots = csi_proxy_host::paths::Roots::new(roots);
        hosts.filesystem = csi_proxy_host::native(csi_proxy_host::Config { roots, ..Default::default() }).filesystem;
        Self::start_with(host, hosts, ConnPolicy::default()).await
    }

    /// Every group on the native backend, with `roots` as the working directories and `fs_type`
    /// for FormatVolume (`host` is an unused memory host).
    pub async fn start_native(roots: Vec<String>, fs_type: csi_proxy_host::types::FsType) -> Self {
        let roots = csi_proxy_host::paths::Roots::new(roots);
        let hosts = csi_proxy_host::native(csi_proxy_host::Config { roots, fs_type });
        Self::start_with(Arc::new(MemoryHost::new()), hosts, ConnPolicy::default()).await
    }

    pub async fn start_with(host: Arc<MemoryHost>, hosts: Hosts, policy: ConnPolicy) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "csi-proxy-e2e-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let ctx = Context::new(hosts, Config::default());
        let (tx, rx) = oneshot::channel::<()>();
        let endpoints = Endpoints::UnixDir(dir.clone());
        let task = tokio::spawn(async move {
            csi_proxy_transport::serve_apis(APIS, &endpoints, |api| ctx.service(api), policy, async {
                let _ = rx.await;
            })
            .await
            .expect("serve_apis");
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while APIS.iter().any(|a| !socket(&dir, a).exists()) {
            assert!(std::time::Instant::now() < deadline, "sockets did not appear");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        TestServer { dir, host, stop: Some(tx), task: Some(task) }
    }

    pub fn socket(&self, group: Group, version: &str) -> PathBuf {
        socket(&self.dir, &api(group, version))
    }

    /// A fresh HTTP/2 connection to one API's socket.
    pub async fn channel(&self, group: Group, version: &str) -> Channel {
        connect(self.socket(group, version)).await
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

pub fn api(group: Group, version: &str) -> Api {
    *APIS.iter().find(|a| a.group == group && a.version == version).expect("known API")
}

pub fn socket(dir: &Path, api: &Api) -> PathBuf {
    dir.join(format!("{}.sock", api.endpoint_name()))
}

pub async fn connect(path: PathBuf) -> Channel {
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tokio::net::UnixStream::connect(path).await?))
            }
        }))
        .await
        .expect("connect")
}

/// Asserts a failed call's code and that its message mentions `needle`.
#[track_caller]
pub fn assert_status<T: std::fmt::Debug>(r: Result<T, tonic::Status>, code: tonic::Code, needle: &str) {
    let s = r.expect_err("expected the call to fail");
    assert_eq!(s.code(), code, "{s:?}");
    assert!(s.message().contains(needle), "message {:?} should mention {needle:?}", s.message());
}
