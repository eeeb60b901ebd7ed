//! The real named pipes (`\\.\pipe\csi-proxy-<group>-<version>`): a server on them and clients
//! for them. Pipe names are global on the machine (under Wine: per prefix), so a test binary that
//! serves them holds ONE test; cargo runs test binaries one at a time.

use csi_proxy_server::Context;
use csi_proxy_transport::{serve_apis, ConnPolicy, Endpoints, ServeError};
use csi_proxy_wire::{Api, Group};
use std::time::Duration;
use tokio::net::windows::named_pipe::NamedPipeClient;
use tokio::sync::oneshot;
use tonic::transport::Channel;

/// How long a client retries a busy pipe, and one that does not exist yet (the server starting).
const RETRY_FOR: Duration = Duration::from_secs(5);

/// `serve_apis` on the real pipes of some APIs, with the default security descriptor and
/// connection policy, as the daemon serves them.
pub struct PipeServer {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), ServeError>>,
}

impl PipeServer {
    /// Serves `apis` with `ctx`'s services. Clients may connect at once: [`open_pipe`] waits for a
    /// pipe that does not exist yet.
    pub fn start(apis: &[Api], ctx: Context) -> PipeServer {
        let apis = apis.to_vec();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            serve_apis(
                &apis,
                &Endpoints::Pipes { sddl: None },
                |a| csi_proxy_server::service(&ctx, a),
                ConnPolicy::default(),
                async {
                    let _ = stopped.await;
                },
            )
            .await
        });
        PipeServer { stop, task }
    }

    /// Stops serving; fails unless the server had served without error and stops within 20 s.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("serve_apis stops")
            .expect("server task")
            .expect("serve_apis result");
    }
}

/// Opens a pipe like go-winio's `DialPipe` (the client crate's [`csi_proxy_client::open_pipe`]):
/// retries while all instances are busy, and (only while the server starts) while the pipe does
/// not exist yet.
pub async fn open_pipe(path: &str) -> std::io::Result<NamedPipeClient> {
    csi_proxy_client::open_pipe(path.to_string(), RETRY_FOR, RETRY_FOR).await
}

/// A connection to the real pipe of (group, version), made by the client crate.
pub async fn channel(group: Group, version: &str) -> Channel {
    let connector = csi_proxy_client::Connector::new().busy_timeout(RETRY_FOR).wait_for_server(RETRY_FOR);
    connector.connect_to(group, version).await.unwrap_or_else(|e| panic!("{e}"))
}
