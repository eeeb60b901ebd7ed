//! The real named pipes (`\\.\pipe\csi-proxy-<group>-<version>`): a server on them and clients
//! for them. Pipe names are global on the machine (under Wine: per prefix), so a test binary that
//! serves them holds ONE test; cargo runs test binaries one at a time.

use crate::{api, channel_over};
use csi_proxy_server::Context;
use csi_proxy_transport::{serve_apis, ConnPolicy, Endpoints, ServeError};
use csi_proxy_wire::{Api, Group};
use std::time::{Duration, Instant};
use tokio::net::windows::named_pipe::{ClientOptions, NamedPipeClient};
use tokio::sync::oneshot;
use tonic::transport::Channel;

const ERROR_FILE_NOT_FOUND: i32 = 2;
const ERROR_PIPE_BUSY: i32 = 231;

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
            serve_apis(&apis, &Endpoints::Pipes { sddl: None }, |a| ctx.service(a), ConnPolicy::default(), async {
                let _ = stopped.await;
            })
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

/// Opens a pipe like go-winio's `DialPipe`: retries while all instances are busy, and (only while
/// the server starts) while the pipe does not exist yet.
pub async fn open_pipe(path: &str) -> std::io::Result<NamedPipeClient> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match ClientOptions::new().open(path) {
            Err(e)
                if matches!(e.raw_os_error(), Some(ERROR_PIPE_BUSY | ERROR_FILE_NOT_FOUND))
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => return other,
        }
    }
}

/// A connection to the real pipe of (group, version).
pub async fn channel(group: Group, version: &str) -> Channel {
    let path = api(group, version).pipe_path();
    let open = {
        let path = path.clone();
        move || {
            let path = path.clone();
            async move { open_pipe(&path).await }
        }
    };
    // tonic sends `:authority: pipe` from this URI; a valid authority, unlike grpc-go's pipe paths.
    channel_over("http://pipe", open).await.unwrap_or_else(|e| panic!("connecting to {path}: {e}"))
}
