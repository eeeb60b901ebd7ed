#![cfg(unix)]
//! Every disk RPC of every version, through a real socket, against the in-memory host.

use csi_proxy_stack_tests::{assert_status, TestServer};
use csi_proxy_wire::{v1, v1alpha1, v1beta1, v1beta2, v1beta3, Group};
use tonic::Code;

#[tokio::test]
async fn v1alpha1_string_ids_and_page83_lookup() {
    let s = TestServer::start().await;
    let mut c = v1alpha1::disk_client::DiskClient::new(s.channel(Group::Disk, "v1alpha1").await);
    let locs = c.list_disk_locations(v1alpha1::ListDiskLocationsRequest {}).await.unwrap().into_inner();
    assert_eq!(locs.disk_locations.keys().cloned().collect::<Vec<_>>(), vec!["0", "1"]);
    assert_eq!(locs.disk_locations["1"].target, "1");

    c.partition_disk(v1alpha1::PartitionDiskRequest { disk_id: "1".into() }).await.unwrap();
    assert_eq!(s.host.with(|st| st.disks[&1].partitions.len()), 1);
    assert_status(
        c.partition_disk(v1alpha1::PartitionDiskRequest { disk_id: "4294967296".into() }).await,
        Code::InvalidArgument,
        "diskID \"4294967296\" is out of range",
    );
    assert_status(
        c.partition_disk(v1alpha1::PartitionDiskRequest { disk_id: "one".into() }).await,
        Code::InvalidArgument,
        "diskID \"one\"",
    );
    assert_status(
        c.partition_disk(v1alpha1::PartitionDiskRequest { disk_id: "7".into() }).await,
        Code::NotFound,
        "disk 7",
    );

    c.rescan(v1alpha1::RescanRequest {}).await.unwrap();
    assert_eq!(s.host.with(|st| st.rescans), 1);

    let page83 = s.host.with(|st| st.disks[&1].ids.page83.clone());
    let n = c
        .get_disk_number_by_name(v1alpha1::GetDiskNumberByNameRequest { disk_name: page83 })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(n.disk_number, "1");
    assert_status(
        c.get_disk_number_by_name(v1alpha1::GetDiskNumberByNameRequest { disk_name: "nope".into() }).await,
        Code::NotFound,
        "\"nope\"",
    );
}

#[tokio::test]
async fn v1beta1_identifier_maps_and_disk_stats() {
    let s = TestServer::start().await;
    let mut c = v1beta1::disk_client::DiskClient::new(s.channel(Group::Disk, "v1beta1").await);
    let ids = c.list_disk_i_ds(v1beta1::ListDiskIDsRequest {}).await.unwrap().into_inner();
    let d0 = &ids.disk_i_ds["0"].identifiers;
    assert_eq!(d0.len(), 2);
    assert_eq!(d0["page83"], s.host.with(|st| st.disks[&0].ids.page83.clone()));
    assert_eq!(d0["serialNumber"], "SERIAL-0");
    // Both keys are present even when a disk has no page83.
    s.host.with(|st| st.disks.get_mut(&1).unwrap().ids.page83.clear());
    let ids = c.list_disk_i_ds(v1beta1::ListDiskIDsRequest {}).await.unwrap().into_inner();
    assert_eq!(ids.disk_i_ds["1"].identifiers["page83"], "");

    let st = c.disk_stats(v1beta1::DiskStatsRequest { disk_id: "0".into() }).await.unwrap().into_inner();
    assert_eq!(st.disk_size, 1 << 30);
    assert_status(
        c.disk_stats(v1beta1::DiskStatsRequest { disk_id: "".into() }).await,
        Code::InvalidArgument,
        "diskID is empty",
    );
    c.partition_disk(v1beta1::PartitionDiskRequest { disk_id: "0".into() }).await.unwrap();
    c.rescan(v1beta1::RescanRequest {}).await.unwrap();
    let locs = c.list_disk_locations(v1beta1::ListDiskLocationsRequest {}).await.unwrap().into_inner();
    assert_eq!(locs.disk_locations.len(), 2);
}

#[tokio::test]
async fn v1beta2_attach_state() {
    let s = TestServer::start().await;
    let mut c = v1beta2::disk_client::DiskClient::new(s.channel(Group::Disk, "v1beta2").await);
    c.set_attach_state(v1beta2::SetAttachStateRequest { disk_id: "1".into(), is_online: false }).await.unwrap();
    assert!(!s.host.with(|st| st.disks[&1].online));
    let r = c.get_attach_state(v1beta2::GetAttachStateRequest { disk_id: "1".into() }).await.unwrap().into_inner();
    assert!(!r.is_online);
    c.set_attach_state(v1beta2::SetAttachStateRequest { disk_id: "1".into(), is_online: true }).await.unwrap();
    assert!(
        c.get_attach_state(v1beta2::GetAttachStateRequest { disk_id: "1".into() })
            .await
            .unwrap()
            .into_inner()
            .is_online
    );
    assert_status(
        c.get_attach_state(v1beta2::GetAttachStateRequest { disk_id: "-1".into() }).await,
        Code::InvalidArgument,
        "\"-1\"",
    );
    let ids = c.list_disk_i_ds(v1beta2::ListDiskIDsRequest {}).await.unwrap().into_inner();
    assert_eq!(ids.disk_i_ds["1"].identifiers["serialNumber"], "SERIAL-1");
    assert_eq!(
        c.disk_stats(v1beta2::DiskStatsRequest { disk_id: "1".into() }).await.unwrap().into_inner().disk_size,
        1 << 30
    );
    c.partition_disk(v1beta2::PartitionDiskRequest { disk_id: "1".into() }).await.unwrap();
    c.rescan(v1beta2::RescanRequest {}).await.unwrap();
    assert_eq!(
        c.list_disk_locations(v1beta2::ListDiskLocationsRequest {}).await.unwrap().into_inner().disk_locations["0"]
            .lunid,
        "0"
    );
}

macro_rules! current_version_test {
    ($name:ident, $v:ident) => {
        #[tokio::test]
        async fn $name() {
            let s = TestServer::start().await;
            let mut c = $v::disk_client::DiskClient::new(s.channel(Group::Disk, stringify!($v)).await);
            let locs = c.list_disk_locations($v::ListDiskLocationsRequest {}).await.unwrap().into_inner();
            assert_eq!(locs.disk_locations.keys().cloned().collect::<Vec<u32>>(), vec![0, 1]);
            c.partition_disk($v::PartitionDiskRequest { disk_number: 0 }).await.unwrap();
            c.partition_disk($v::PartitionDiskRequest { disk_number: 0 }).await.unwrap();
            assert_eq!(s.host.with(|st| st.disks[&0].partitions.len()), 1);
            c.rescan($v::RescanRequest {}).await.unwrap();
            let ids = c.list_disk_i_ds($v::ListDiskIDsRequest {}).await.unwrap().into_inner();
            assert_eq!(ids.disk_i_ds[&1].serial_number, "SERIAL-1");
            assert_eq!(ids.disk_i_ds[&1].page83, s.host.with(|st| st.disks[&1].ids.page83.clone()));
            let st = c.get_disk_stats($v::GetDiskStatsRequest { disk_number: 1 }).await.unwrap().into_inner();
            assert_eq!(st.total_bytes, 1 << 30);
            assert_status(c.get_disk_stats($v::GetDiskStatsRequest { disk_number: 9 }).await, Code::NotFound, "disk 9");
            c.set_disk_state($v::SetDiskStateRequest { disk_number: 0, is_online: false }).await.unwrap();
            c.set_disk_state($v::SetDiskStateRequest { disk_number: 0, is_online: false }).await.unwrap();
            assert!(
                !c.get_disk_state($v::GetDiskStateRequest { disk_number: 0 }).await.unwrap().into_inner().is_online
            );
            assert!(c.get_disk_state($v::GetDiskStateRequest { disk_number: 1 }).await.unwrap().into_inner().is_online);
        }
    };
}
current_version_test!(v1beta3_current_shape, v1beta3);
current_version_test!(v1_current_shape, v1);
