//! Clients for the named-pipe tests (Windows only).
#![allow(dead_code)]

use csi_proxy_wire::{Group, APIS};
use std::time::{Duration, Instant};
use tokio::net::windows::named_pipe::{ClientOptions, NamedPipeClient};
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

const ERROR_FILE_NOT_FOUND: i32 = 2;
const ERROR_PIPE_BUSY: i32 = 231;

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
    let api = APIS.iter().find(|a| a.group == group && a.version == version).expect("known API");
    let path = api.pipe_path();
    // tonic sends `:authority: pipe` from this URI; a valid authority, unlike grpc-go's pipe paths.
    Endpoint::from_static("http://pipe")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(open_pipe(&path).await?)) }
        }))
        .await
        .unwrap_or_else(|e| panic!("connecting to {}: {e}", api.pipe_path()))
}

#[track_caller]
pub fn assert_status<T: std::fmt::Debug>(r: Result<T, tonic::Status>, code: Code, needle: &str) {
    let s = r.expect_err("expected the call to fail");
    assert_eq!(s.code(), code, "{s:?}");
    assert!(s.message().contains(needle), "message {:?} should mention {needle:?}", s.message());
}
