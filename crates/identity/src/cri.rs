//! The container runtime's answers about a container and its pod: two read-only calls of the
//! Container Runtime Interface (`runtime.v1.RuntimeService`, kubernetes/cri-api
//! `pkg/apis/runtime/v1/api.proto`), `ListContainers` and `ListPodSandbox`, each filtered by ID.
//! Only the fields read are declared, with the proto's field numbers; protobuf skips the rest.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;
use tokio::sync::Mutex;
use tonic::transport::Channel;

/// What the runtime says of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerInfo {
    pub sandbox_id: String,
    /// Its name in the pod spec (`metadata.name`).
    pub name: String,
    /// The image as asked for (`image.image`, e.g. `registry/name:tag`), else the image
    /// reference the runtime resolved it to.
    pub image: String,
}

/// What the runtime says of a pod sandbox (`metadata`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxInfo {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot connect to {endpoint}: {why}")]
    Connect { endpoint: String, why: String },
    #[error("{call} on {endpoint} failed: {status}")]
    Call { endpoint: String, call: &'static str, status: String },
    #[error("{call} on {endpoint} took longer than {after:?}")]
    Timeout { endpoint: String, call: &'static str, after: Duration },
}

pub type Answer<'a, T> = Pin<Box<dyn Future<Output = Result<Option<T>, RuntimeError>> + Send + 'a>>;

/// The runtime's two questions; `Ok(None)` when it knows no such container or sandbox.
pub trait Runtime: Send + Sync {
    fn container<'a>(&'a self, id: &'a str) -> Answer<'a, ContainerInfo>;
    fn sandbox<'a>(&'a self, id: &'a str) -> Answer<'a, SandboxInfo>;
}

/// How long one question may take.
pub const CALL_WAIT: Duration = Duration::from_secs(1);

/// The runtime on its socket (Linux: containerd's `/run/containerd/containerd.sock`, CRI-O's
/// `/var/run/crio/crio.sock`) or pipe (Windows: `\\.\pipe\containerd-containerd`). One
/// connection, made at the first question and again after a failure.
pub struct Cri {
    endpoint: PathBuf,
    channel: Mutex<Option<Channel>>,
}

impl Cri {
    pub fn new(endpoint: impl Into<PathBuf>) -> Self {
        Cri { endpoint: endpoint.into(), channel: Mutex::new(None) }
    }

    fn shown(&self) -> String {
        self.endpoint.display().to_string()
    }

    async fn channel(&self) -> Result<Channel, RuntimeError> {
        let mut held = self.channel.lock().await;
        if let Some(c) = held.as_ref() {
            return Ok(c.clone());
        }
        let connect = connect(self.endpoint.clone());
        let channel = tokio::time::timeout(CALL_WAIT, connect)
            .await
            .map_err(|_| RuntimeError::Timeout { endpoint: self.shown(), call: "connect", after: CALL_WAIT })?
            .map_err(|why| RuntimeError::Connect { endpoint: self.shown(), why })?;
        *held = Some(channel.clone());
        Ok(channel)
    }

    async fn unary<Req, Resp>(&self, call: &'static str, request: Req) -> Result<Resp, RuntimeError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let channel = self.channel().await?;
        let path = format!("/runtime.v1.RuntimeService/{call}");
        let asked = async move {
            let mut grpc = tonic::client::Grpc::new(channel);
            grpc.ready().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
            let path = http_path(&path);
            grpc.unary(tonic::Request::new(request), path, tonic_prost::ProstCodec::default()).await
        };
        let answered = tokio::time::timeout(CALL_WAIT, asked).await;
        let failed = |status: String| RuntimeError::Call {
            endpoint: self.shown(),
            call,
            status: crate::cgroup::bounded(&status),
        };
        match answered {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(status)) => {
                // A broken connection is made again at the next question.
                if status.code() == tonic::Code::Unavailable {
                    *self.channel.lock().await = None;
                }
                Err(failed(format!("{:?}: {}", status.code(), status.message())))
            }
            Err(_) => {
                *self.channel.lock().await = None;
                Err(RuntimeError::Timeout { endpoint: self.shown(), call, after: CALL_WAIT })
            }
        }
    }
}

fn http_path(path: &str) -> http::uri::PathAndQuery {
    http::uri::PathAndQuery::try_from(path).expect("a fixed gRPC path")
}

#[cfg(unix)]
async fn connect(endpoint: PathBuf) -> Result<Channel, String> {
    csi_proxy_client::connect_socket(endpoint, Duration::ZERO).await.map_err(|e| e.to_string())
}

#[cfg(windows)]
async fn connect(endpoint: PathBuf) -> Result<Channel, String> {
    let path = endpoint.display().to_string();
    csi_proxy_client::connect_pipe(path, CALL_WAIT).await.map_err(|e| e.to_string())
}

impl Runtime for Cri {
    fn container<'a>(&'a self, id: &'a str) -> Answer<'a, ContainerInfo> {
        Box::pin(async move {
            let request = ListContainersRequest { filter: Some(ContainerFilter { id: id.to_string() }) };
            let answer: ListContainersResponse = self.unary("ListContainers", request).await?;
            // The runtime may match the ID as a prefix: only the exact one counts.
            Ok(answer.containers.into_iter().find(|c| c.id == id).map(|c| ContainerInfo {
                sandbox_id: c.pod_sandbox_id,
                name: c.metadata.map(|m| m.name).unwrap_or_default(),
                image: image_of(c.image, c.image_ref),
            }))
        })
    }

    fn sandbox<'a>(&'a self, id: &'a str) -> Answer<'a, SandboxInfo> {
        Box::pin(async move {
            let request = ListPodSandboxRequest { filter: Some(PodSandboxFilter { id: id.to_string() }) };
            let answer: ListPodSandboxResponse = self.unary("ListPodSandbox", request).await?;
            Ok(answer.items.into_iter().find(|s| s.id == id).and_then(|s| s.metadata).map(|m| SandboxInfo {
                name: m.name,
                namespace: m.namespace,
                uid: m.uid,
            }))
        })
    }
}

/// The image a container was made from, as a pod spec names it where the runtime says
/// (`user_specified_image`), else as asked for (`image`: a name, or with some kubelets the
/// resolved `sha256:` ID, which then is what policies see), else the runtime's reference.
fn image_of(spec: Option<ImageSpec>, image_ref: String) -> String {
    let spec = spec.unwrap_or_default();
    [spec.user_specified_image, spec.image].into_iter().find(|i| !i.is_empty()).unwrap_or(image_ref)
}

// The messages, as far as they are read (field numbers from api.proto).

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListContainersRequest {
    #[prost(message, optional, tag = "1")]
    pub filter: Option<ContainerFilter>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerFilter {
    #[prost(string, tag = "1")]
    pub id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListContainersResponse {
    #[prost(message, repeated, tag = "1")]
    pub containers: Vec<Container>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Container {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub pod_sandbox_id: String,
    #[prost(message, optional, tag = "3")]
    pub metadata: Option<ContainerMetadata>,
    #[prost(message, optional, tag = "4")]
    pub image: Option<ImageSpec>,
    #[prost(string, tag = "5")]
    pub image_ref: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageSpec {
    #[prost(string, tag = "1")]
    pub image: String,
    /// The image as the pod spec names it, where the kubelet passes the resolved ID as `image`
    /// (newer kubelets and runtimes fill it).
    #[prost(string, tag = "18")]
    pub user_specified_image: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodSandboxRequest {
    #[prost(message, optional, tag = "1")]
    pub filter: Option<PodSandboxFilter>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxFilter {
    #[prost(string, tag = "1")]
    pub id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodSandboxResponse {
    #[prost(message, repeated, tag = "1")]
    pub items: Vec<PodSandbox>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandbox {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(message, optional, tag = "2")]
    pub metadata: Option<PodSandboxMetadata>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub uid: String,
    #[prost(string, tag = "3")]
    pub namespace: String,
}
