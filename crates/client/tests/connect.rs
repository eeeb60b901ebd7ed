//! The connector against real endpoints: the daemon's transport on unix sockets, and raw named
//! pipes on Windows.

use csi_proxy_client::{Connector, Error, Group};
use std::time::Duration;

#[cfg(unix)]
mod unix {
    use super::*;
    use csi_proxy_transport::{serve_apis, ConnPolicy, Endpoints};
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};

    fn dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("csi-proxy-client-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// Answers anything with an empty HTTP response (the health service is what the test calls).
    fn nothing() -> impl tower::Service<
        http::Request<csi_proxy_transport::CallBody>,
        Response = http::Response<String>,
        Error = std::convert::Infallible,
        Future: Send,
    > + Clone
           + Send
           + 'static {
        tower::service_fn(|_| async { Ok(http::Response::new(String::new())) })
    }

    /// A server started after the client began waiting: `wait_for_server` connects once the
    /// socket appears, and the channel carries real gRPC calls (the endpoint's health service).
    #[tokio::test]
    async fn connects_by_group_and_version_once_the_server_is_there() {
        let dir = dir("wait");
        let api = csi_proxy_client::find_api("volume", "v2alpha1").unwrap();
        let connector = Connector::new().socket_dir(&dir).wait_for_server(Duration::from_secs(10));
        let connecting = tokio::spawn({
            let c = connector.clone();
            async move { c.connect_to(Group::Volume, "v2alpha1").await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!connecting.is_finished(), "no server yet");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let endpoints = Endpoints::UnixDir(dir.clone());
        let server = tokio::spawn(async move {
            serve_apis(&[api], &endpoints, |_| nothing(), ConnPolicy::default(), async {
                let _ = stopped.await;
            })
            .await
        });
        let channel = connecting.await.unwrap().expect("connected");
        let status = HealthClient::new(channel)
            .check(HealthCheckRequest { service: api.service_name() })
            .await
            .expect("health check over the channel")
            .into_inner()
            .status;
        assert_eq!(status, tonic_health::pb::health_check_response::ServingStatus::Serving as i32);
        let _ = stop.send(());
        server.await.unwrap().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// No daemon: the error names the socket and the OS's reason, at once.
    #[tokio::test]
    async fn a_missing_socket_is_an_error_naming_it() {
        let dir = dir("missing");
        let start = std::time::Instant::now();
        let e = Connector::new().socket_dir(&dir).connect_to(Group::Disk, "v1").await.unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(2));
        assert!(matches!(e, Error::Connect { .. }), "{e:?}");
        let text = e.to_string();
        assert!(text.contains(&dir.join("csi-proxy-disk-v1.sock").display().to_string()), "{text}");
        assert!(text.contains("No such file"), "{text}");
        let e = Connector::new().connect_to(Group::Iscsi, "v1").await.unwrap_err().to_string();
        assert!(e.contains("iscsi/v1") && e.contains("v1alpha2"), "{e}");
    }
}

/// A pipe whose only instance is taken: the client retries while it is busy, gets the instance
/// the server creates meanwhile, and gives up with a clear error after `busy_timeout` when none
/// comes.
#[cfg(windows)]
#[tokio::test]
async fn a_busy_pipe_is_retried_for_a_bounded_time() {
    use tokio::net::windows::named_pipe::ServerOptions;
    let path = format!(r"\\.\pipe\csi-proxy-client-test-{}", std::process::id());
    let first = ServerOptions::new().first_pipe_instance(true).create(&path).unwrap();
    let _taken = csi_proxy_client::open_pipe(path.clone(), Duration::ZERO, Duration::ZERO).await.unwrap();
    first.connect().await.unwrap();

    let start = std::time::Instant::now();
    let e = csi_proxy_client::open_pipe(path.clone(), Duration::from_millis(300), Duration::ZERO).await.unwrap_err();
    assert!(start.elapsed() >= Duration::from_millis(300), "{:?}", start.elapsed());
    assert!(e.to_string().contains("busy"), "{e}");

    let waiting = tokio::spawn(csi_proxy_client::open_pipe(path.clone(), Duration::from_secs(10), Duration::ZERO));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished(), "still busy");
    let second = ServerOptions::new().create(&path).unwrap();
    waiting.await.unwrap().expect("the new instance");
    second.connect().await.unwrap();

    let e = Connector::new().connect_to(Group::Disk, "v1").await;
    assert!(matches!(e, Err(Error::Connect { .. })), "no daemon here: {e:?}");
}
