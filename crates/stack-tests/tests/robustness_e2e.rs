#![cfg(unix)]
//! Failure isolation through real sockets: a panicking handler, silent and idle connections.

use csi_proxy_host::memory::MemoryHost;
use csi_proxy_host::types::ServiceInfo;
use csi_proxy_host::{Hosts, SystemHost};
use csi_proxy_stack_tests::server::connect;
use csi_proxy_stack_tests::{assert_status, TestServer};
use csi_proxy_transport::ConnPolicy;
use csi_proxy_wire::{v1, v1alpha1, Group};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tonic::Code;

/// A system host whose serial-number lookup has a bug.
struct Buggy;

impl SystemHost for Buggy {
    fn get_bios_serial_number(&self) -> csi_proxy_host::Result<String> {
        let v: Vec<u8> = Vec::new();
        // An out-of-bounds index, the kind of bug that killed upstream's whole process.
        Ok(format!("{}", v[v.len() + 3]))
    }
    fn start_service(&self, _: &str) -> csi_proxy_host::Result<()> {
        panic!("simulated bug in StartService")
    }
    fn stop_service(&self, _: &str, _: bool, _: &dyn Fn(&str) -> bool) -> csi_proxy_host::Result<()> {
        Ok(())
    }
    fn get_service(&self, name: &str) -> csi_proxy_host::Result<ServiceInfo> {
        Err(csi_proxy_host::Error::not_found(format!("service {name:?} not found")))
    }
}

// Both flavours: the daemon's multi-thread runtime runs host work with block_in_place, a
// current-thread runtime with spawn_blocking; each must contain a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_fails_only_its_call_multi_thread() {
    panicking_handler_fails_only_its_call().await
}

#[tokio::test]
async fn a_panicking_handler_fails_only_its_call_current_thread() {
    panicking_handler_fails_only_its_call().await
}

async fn panicking_handler_fails_only_its_call() {
    let host = Arc::new(MemoryHost::sample());
    let mut hosts = Hosts::from_one(host.clone());
    hosts.system = Arc::new(Buggy);
    let s = TestServer::start_with(host, hosts, ConnPolicy::default()).await;

    let ch = s.channel(Group::System, "v1alpha1").await;
    let mut sys = v1alpha1::system_client::SystemClient::new(ch.clone());
    assert_status(
        sys.get_bios_serial_number(v1alpha1::GetBiosSerialNumberRequest {}).await,
        Code::Internal,
        "v1alpha1.System/GetBIOSSerialNumber failed: the handler panicked (index out of bounds",
    );
    assert_status(
        sys.start_service(v1alpha1::StartServiceRequest { name: "x".into() }).await,
        Code::Internal,
        "simulated bug in StartService",
    );
    // The same connection still serves, and so does everything else.
    sys.stop_service(v1alpha1::StopServiceRequest { name: "x".into(), force: false }).await.unwrap();
    assert_status(sys.get_service(v1alpha1::GetServiceRequest { name: "y".into() }).await, Code::NotFound, "\"y\"");
    let mut disk = v1::disk_client::DiskClient::new(s.channel(Group::Disk, "v1").await);
    disk.list_disk_locations(v1::ListDiskLocationsRequest {}).await.unwrap();
    // And new connections to the panicking API are accepted.
    let mut sys2 = v1alpha1::system_client::SystemClient::new(s.channel(Group::System, "v1alpha1").await);
    sys2.stop_service(v1alpha1::StopServiceRequest { name: "x".into(), force: true }).await.unwrap();
}

#[tokio::test]
async fn silent_connections_never_delay_others_and_are_closed() {
    let host = Arc::new(MemoryHost::sample());
    let policy = ConnPolicy { handshake_timeout: Duration::from_millis(400), idle_timeout: Duration::from_secs(30) };
    let s = TestServer::start_with(host.clone(), Hosts::from_one(host), policy).await;
    let path = s.socket(Group::Disk, "v1");

    // What upstream's Go client does on every NewClient(): connect, then never speak.
    let mut silent = Vec::new();
    for _ in 0..64 {
        silent.push(tokio::net::UnixStream::connect(&path).await.unwrap());
    }
    let start = Instant::now();
    let mut c = v1::disk_client::DiskClient::new(connect(path.clone()).await);
    c.list_disk_locations(v1::ListDiskLocationsRequest {}).await.unwrap();
    assert!(start.elapsed() < Duration::from_millis(400), "a silent connection delayed a client");

    // Every silent connection is closed by the server once the handshake timeout passes.
    for mut conn in silent {
        let mut b = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), async {
            let mut total = 0;
            loop {
                // The server may send its SETTINGS first; read until end of stream.
                match conn.read(&mut b).await {
                    Ok(0) | Err(_) => return total,
                    Ok(k) => total += k,
                }
            }
        })
        .await
        .expect("silent connection was not closed");
        assert!(n < 64, "unexpected data on a silent connection");
    }
    // The working client's connection is still usable after the handshake timeout.
    c.list_disk_locations(v1::ListDiskLocationsRequest {}).await.unwrap();
}

#[tokio::test]
async fn idle_connections_are_closed_and_clients_reconnect() {
    let host = Arc::new(MemoryHost::sample());
    let policy = ConnPolicy { handshake_timeout: Duration::from_secs(5), idle_timeout: Duration::from_millis(300) };
    let s = TestServer::start_with(host.clone(), Hosts::from_one(host), policy).await;
    let path = s.socket(Group::Disk, "v1");

    // A raw HTTP/2 client that completes the handshake and then goes quiet.
    let io = tokio::net::UnixStream::connect(&path).await.unwrap();
    let (_send, conn) = hyper::client::conn::http2::handshake::<_, _, String>(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(io),
    )
    .await
    .unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(5), conn).await;
    assert!(ended.is_ok(), "an idle HTTP/2 connection was kept open past the idle timeout");

    // tonic's channel reconnects transparently after the server closed an idle connection.
    let mut c = v1::disk_client::DiskClient::new(connect(path).await);
    c.list_disk_locations(v1::ListDiskLocationsRequest {}).await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    c.list_disk_locations(v1::ListDiskLocationsRequest {}).await.unwrap();
}
