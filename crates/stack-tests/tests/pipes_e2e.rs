#![cfg(windows)]
//! All 23 APIs on their real named pipes (`\\.\pipe\csi-proxy-<group>-<version>`), served by
//! `serve_apis` over the in-memory host, called by the generated tonic clients.
//!
//! Pipe names are global on the machine (under Wine: per prefix), so this file holds ONE test that
//! owns the real names; nothing else may bind them while it runs.

use csi_proxy_host::memory::MemoryHost;
use csi_proxy_host::Hosts;
use csi_proxy_server::{Config, Context};
use csi_proxy_stack_tests::pipes::{channel, PipeServer};
use csi_proxy_transport::{serve_apis, ConnPolicy, Endpoints};
use csi_proxy_wire::{v1, v1alpha1, v1alpha2, v1beta1, v1beta2, v1beta3, v2alpha1, Group, APIS};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::Code;

/// One RPC on each of the 23 pipes; returns how many APIs answered.
async fn call_every_api() -> usize {
    let mut answered = 0;

    macro_rules! disk {
        ($($v:ident),*) => {$(
            let mut c = $v::disk_client::DiskClient::new(channel(Group::Disk, stringify!($v)).await);
            let r = c.list_disk_locations($v::ListDiskLocationsRequest {}).await.unwrap().into_inner();
            assert_eq!(r.disk_locations.len(), 2, "{}: {r:?}", stringify!($v));
            answered += 1;
        )*};
    }
    disk!(v1alpha1, v1beta1, v1beta2, v1beta3, v1);

    macro_rules! filesystem {
        (context: $($v:ident),*) => {$(
            let mut c = $v::filesystem_client::FilesystemClient::new(channel(Group::Filesystem, stringify!($v)).await);
            let r = c.path_exists($v::PathExistsRequest { path: "/".into(), context: 0 }).await.unwrap().into_inner();
            assert!(r.exists, "{}", stringify!($v));
            answered += 1;
        )*};
        ($($v:ident),*) => {$(
            let mut c = $v::filesystem_client::FilesystemClient::new(channel(Group::Filesystem, stringify!($v)).await);
            let r = c.path_exists($v::PathExistsRequest { path: "/".into() }).await.unwrap().into_inner();
            assert!(r.exists, "{}", stringify!($v));
            let r = c.path_exists($v::PathExistsRequest { path: "/nope".into() }).await.unwrap().into_inner();
            assert!(!r.exists, "{}", stringify!($v));
            answered += 1;
        )*};
    }
    filesystem!(context: v1alpha1, v1beta1);
    filesystem!(v1beta2, v1, v2alpha1);

    macro_rules! volume {
        (disk_id: $($v:ident),*) => {$(
            let mut c = $v::volume_client::VolumeClient::new(channel(Group::Volume, stringify!($v)).await);
            let r = c.list_volumes_on_disk($v::ListVolumesOnDiskRequest { disk_id: "0".into() }).await.unwrap();
            assert!(r.into_inner().volume_ids.is_empty(), "{}", stringify!($v));
            answered += 1;
        )*};
        ($($v:ident),*) => {$(
            let mut c = $v::volume_client::VolumeClient::new(channel(Group::Volume, stringify!($v)).await);
            let req = $v::ListVolumesOnDiskRequest { disk_number: 0, partition_number: 0 };
            let r = c.list_volumes_on_disk(req).await.unwrap();
            assert!(r.into_inner().volume_ids.is_empty(), "{}", stringify!($v));
            answered += 1;
        )*};
    }
    volume!(disk_id: v1alpha1, v1beta1, v1beta2);
    volume!(v1beta3, v1, v2alpha1);

    macro_rules! smb {
        ($($v:ident),*) => {$(
            let mut c = $v::smb_client::SmbClient::new(channel(Group::Smb, stringify!($v)).await);
            // Refused by the server's validation before the host: still an answer from this pipe.
            let s = c
                .remove_smb_global_mapping($v::RemoveSmbGlobalMappingRequest { remote_path: "not-a-share".into() })
                .await
                .unwrap_err();
            assert_eq!(s.code(), Code::InvalidArgument, "{}: {s:?}", stringify!($v));
            assert!(s.message().contains("remote_path"), "{}: {s:?}", stringify!($v));
            answered += 1;
        )*};
    }
    smb!(v1alpha1, v1beta1, v1beta2, v1);

    macro_rules! iscsi {
        ($($v:ident),*) => {$(
            let mut c = $v::iscsi_client::IscsiClient::new(channel(Group::Iscsi, stringify!($v)).await);
            let r = c.list_target_portals($v::ListTargetPortalsRequest {}).await.unwrap().into_inner();
            assert!(r.target_portals.is_empty(), "{}", stringify!($v));
            answered += 1;
        )*};
    }
    iscsi!(v1alpha1, v1alpha2);

    let mut c = v1alpha1::system_client::SystemClient::new(channel(Group::System, "v1alpha1").await);
    let r = c.get_bios_serial_number(v1alpha1::GetBiosSerialNumberRequest {}).await.unwrap().into_inner();
    assert_eq!(r.serial_number, "SIM-SERIAL-0001");
    answered += 1;

    answered
}

fn context() -> Context {
    Context::new(Hosts::from_one(Arc::new(MemoryHost::sample())), Config::default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_answers_on_its_pipe_and_a_second_server_is_refused() {
    let server = PipeServer::start(APIS, context());

    assert_eq!(call_every_api().await, 23);

    // A second daemon fails at its first pipe, before serving anything.
    let ctx2 = context();
    let e = serve_apis(
        APIS,
        &Endpoints::Pipes { sddl: None },
        |api| csi_proxy_server::service(&ctx2, api),
        ConnPolicy::default(),
        async {},
    )
    .await
    .expect_err("a second server on the same pipes must fail");
    let msg = e.to_string();
    assert!(msg.contains(r"\\.\pipe\csi-proxy-disk-v1alpha1"), "{msg}");
    assert!(msg.contains("already served"), "{msg}");

    // The first server is unaffected and still answers everywhere.
    assert_eq!(call_every_api().await, 23);

    server.stop().await;

    // Once stopped, the names are free again — as soon as the clients have closed their ends too
    // (a client handle keeps the pipe's name alive; tonic closes its connections in background
    // tasks after the clients were dropped).
    for api in APIS {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match csi_proxy_transport::pipe::bind(&api.pipe_path(), None) {
                Ok(l) => break drop(l),
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("pipe name is not free after shutdown: {e}"),
            }
        }
    }
}
