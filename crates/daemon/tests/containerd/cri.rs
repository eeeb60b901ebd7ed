//! The CRI calls the test makes as the kubelet would (`runtime.v1.RuntimeService` of
//! kubernetes/cri-api `pkg/apis/runtime/v1/api.proto`): run a pod sandbox, create and start a
//! container in it, read its status, stop and remove the sandbox. Only the fields set or read are
//! declared, with the proto's field numbers; protobuf skips the rest.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;
use tonic::transport::Channel;

#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxRequest {
    #[prost(message, optional, tag = "1")]
    pub config: Option<PodSandboxConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxResponse {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxConfig {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<PodSandboxMetadata>,
    #[prost(string, tag = "2")]
    pub hostname: String,
    #[prost(string, tag = "3")]
    pub log_directory: String,
    #[prost(map = "string, string", tag = "6")]
    pub labels: HashMap<String, String>,
    #[prost(message, optional, tag = "8")]
    pub linux: Option<LinuxPodSandboxConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub uid: String,
    #[prost(string, tag = "3")]
    pub namespace: String,
    #[prost(uint32, tag = "4")]
    pub attempt: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxPodSandboxConfig {
    #[prost(string, tag = "1")]
    pub cgroup_parent: String,
    #[prost(message, optional, tag = "2")]
    pub security_context: Option<LinuxSandboxSecurityContext>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxSandboxSecurityContext {
    #[prost(message, optional, tag = "1")]
    pub namespace_options: Option<NamespaceOption>,
}

/// `NamespaceMode`: POD = 0, CONTAINER = 1, NODE = 2, TARGET = 3.
pub const NODE: i32 = 2;

#[derive(Clone, PartialEq, prost::Message)]
pub struct NamespaceOption {
    #[prost(int32, tag = "1")]
    pub network: i32,
    #[prost(int32, tag = "2")]
    pub pid: i32,
    #[prost(int32, tag = "3")]
    pub ipc: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerRequest {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
    #[prost(message, optional, tag = "2")]
    pub config: Option<ContainerConfig>,
    #[prost(message, optional, tag = "3")]
    pub sandbox_config: Option<PodSandboxConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerResponse {
    #[prost(string, tag = "1")]
    pub container_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerConfig {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ContainerMetadata>,
    #[prost(message, optional, tag = "2")]
    pub image: Option<ImageSpec>,
    #[prost(string, repeated, tag = "3")]
    pub command: Vec<String>,
    #[prost(string, repeated, tag = "4")]
    pub args: Vec<String>,
    #[prost(message, repeated, tag = "7")]
    pub mounts: Vec<Mount>,
    #[prost(string, tag = "11")]
    pub log_path: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(uint32, tag = "2")]
    pub attempt: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageSpec {
    #[prost(string, tag = "1")]
    pub image: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Mount {
    #[prost(string, tag = "1")]
    pub container_path: String,
    #[prost(string, tag = "2")]
    pub host_path: String,
    #[prost(bool, tag = "3")]
    pub readonly: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StartContainerRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StartContainerResponse {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStatusRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStatusResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<ContainerStatus>,
}

/// `ContainerState`: CREATED = 0, RUNNING = 1, EXITED = 2, UNKNOWN = 3.
pub const CONTAINER_EXITED: i32 = 2;

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStatus {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(int32, tag = "3")]
    pub state: i32,
    #[prost(int32, tag = "7")]
    pub exit_code: i32,
    #[prost(string, tag = "10")]
    pub reason: String,
    #[prost(string, tag = "11")]
    pub message: String,
    #[prost(string, tag = "15")]
    pub log_path: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxIdRequest {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

/// A CRI client on the runtime's socket.
#[derive(Clone)]
pub struct Client {
    channel: Channel,
}

impl Client {
    pub async fn connect(socket: PathBuf) -> Client {
        let channel = csi_proxy_client::connect_socket(socket.clone(), Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", socket.display()));
        Client { channel }
    }

    /// `RuntimeService/<call>` with `request`.
    pub async fn unary<Req, Resp>(&self, call: &str, request: Req) -> Result<Resp, tonic::Status>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let path = http::uri::PathAndQuery::try_from(format!("/runtime.v1.RuntimeService/{call}")).unwrap();
        grpc.unary(tonic::Request::new(request), path, tonic_prost::ProstCodec::default()).await.map(|r| r.into_inner())
    }

    pub async fn run_pod_sandbox(&self, config: PodSandboxConfig) -> Result<String, tonic::Status> {
        let r: RunPodSandboxResponse =
            self.unary("RunPodSandbox", RunPodSandboxRequest { config: Some(config) }).await?;
        Ok(r.pod_sandbox_id)
    }

    pub async fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: ContainerConfig,
        sandbox_config: PodSandboxConfig,
    ) -> Result<String, tonic::Status> {
        let request = CreateContainerRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        let r: CreateContainerResponse = self.unary("CreateContainer", request).await?;
        Ok(r.container_id)
    }

    pub async fn start_container(&self, id: &str) -> Result<(), tonic::Status> {
        let _: StartContainerResponse =
            self.unary("StartContainer", StartContainerRequest { container_id: id.to_string() }).await?;
        Ok(())
    }

    pub async fn container_status(&self, id: &str) -> Result<ContainerStatus, tonic::Status> {
        let r: ContainerStatusResponse =
            self.unary("ContainerStatus", ContainerStatusRequest { container_id: id.to_string() }).await?;
        r.status.ok_or_else(|| tonic::Status::not_found(format!("no status of container {id}")))
    }

    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<(), tonic::Status> {
        let _: Empty = self.unary("StopPodSandbox", PodSandboxIdRequest { pod_sandbox_id: id.to_string() }).await?;
        Ok(())
    }

    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<(), tonic::Status> {
        let _: Empty = self.unary("RemovePodSandbox", PodSandboxIdRequest { pod_sandbox_id: id.to_string() }).await?;
        Ok(())
    }
}
