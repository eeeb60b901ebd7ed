//! Disk: v1alpha1–v1beta2 name disks by decimal strings and use older RPC names;
//! v1beta3 and v1 are identical and carry u32 disk numbers.

use super::{empty_responses, from_output, grpc_service, into_op};
use crate::fields::{parse_disk_number, to_i64};
use crate::ops::disk::*;
use csi_proxy_host::types::{DiskIds, DiskLocation};
use csi_proxy_wire::{v1, v1alpha1, v1beta1, v1beta2, v1beta3};
use std::collections::BTreeMap;

// What each version serves: `RpcName => Op: trait_method(Request) -> Response;` (see grpc_service!).

grpc_service!(v1alpha1::disk_server::Disk {
    ListDiskLocations => ListDiskLocations: list_disk_locations(ListDiskLocationsRequest) -> ListDiskLocationsResponse;
    PartitionDisk => PartitionDisk: partition_disk(PartitionDiskRequest) -> PartitionDiskResponse;
    Rescan => Rescan: rescan(RescanRequest) -> RescanResponse;
    GetDiskNumberByName => GetDiskNumberByName:
        get_disk_number_by_name(GetDiskNumberByNameRequest) -> GetDiskNumberByNameResponse;
});

grpc_service!(v1beta1::disk_server::Disk {
    ListDiskLocations => ListDiskLocations: list_disk_locations(ListDiskLocationsRequest) -> ListDiskLocationsResponse;
    PartitionDisk => PartitionDisk: partition_disk(PartitionDiskRequest) -> PartitionDiskResponse;
    Rescan => Rescan: rescan(RescanRequest) -> RescanResponse;
    ListDiskIDs => ListDiskIds: list_disk_i_ds(ListDiskIDsRequest) -> ListDiskIDsResponse;
    DiskStats => GetDiskStats: disk_stats(DiskStatsRequest) -> DiskStatsResponse;
});

grpc_service!(v1beta2::disk_server::Disk {
    ListDiskLocations => ListDiskLocations: list_disk_locations(ListDiskLocationsRequest) -> ListDiskLocationsResponse;
    PartitionDisk => PartitionDisk: partition_disk(PartitionDiskRequest) -> PartitionDiskResponse;
    Rescan => Rescan: rescan(RescanRequest) -> RescanResponse;
    ListDiskIDs => ListDiskIds: list_disk_i_ds(ListDiskIDsRequest) -> ListDiskIDsResponse;
    DiskStats => GetDiskStats: disk_stats(DiskStatsRequest) -> DiskStatsResponse;
    SetAttachState => SetDiskState: set_attach_state(SetAttachStateRequest) -> SetAttachStateResponse;
    GetAttachState => GetDiskState: get_attach_state(GetAttachStateRequest) -> GetAttachStateResponse;
});

grpc_service!(v1beta3::disk_server::Disk {
    ListDiskLocations => ListDiskLocations: list_disk_locations(ListDiskLocationsRequest) -> ListDiskLocationsResponse;
    PartitionDisk => PartitionDisk: partition_disk(PartitionDiskRequest) -> PartitionDiskResponse;
    Rescan => Rescan: rescan(RescanRequest) -> RescanResponse;
    ListDiskIDs => ListDiskIds: list_disk_i_ds(ListDiskIDsRequest) -> ListDiskIDsResponse;
    GetDiskStats => GetDiskStats: get_disk_stats(GetDiskStatsRequest) -> GetDiskStatsResponse;
    SetDiskState => SetDiskState: set_disk_state(SetDiskStateRequest) -> SetDiskStateResponse;
    GetDiskState => GetDiskState: get_disk_state(GetDiskStateRequest) -> GetDiskStateResponse;
});

grpc_service!(v1::disk_server::Disk {
    ListDiskLocations => ListDiskLocations: list_disk_locations(ListDiskLocationsRequest) -> ListDiskLocationsResponse;
    PartitionDisk => PartitionDisk: partition_disk(PartitionDiskRequest) -> PartitionDiskResponse;
    Rescan => Rescan: rescan(RescanRequest) -> RescanResponse;
    ListDiskIDs => ListDiskIds: list_disk_i_ds(ListDiskIDsRequest) -> ListDiskIDsResponse;
    GetDiskStats => GetDiskStats: get_disk_stats(GetDiskStatsRequest) -> GetDiskStatsResponse;
    SetDiskState => SetDiskState: set_disk_state(SetDiskStateRequest) -> SetDiskStateResponse;
    GetDiskState => GetDiskState: get_disk_state(GetDiskStateRequest) -> GetDiskStateResponse;
});

// How each version's messages convert.

type Locations = BTreeMap<u32, DiskLocation>;
type Ids = BTreeMap<u32, DiskIds>;

macro_rules! location {
    ($v:ident, $l:expr) => {
        $v::DiskLocation { adapter: $l.adapter, bus: $l.bus, target: $l.target, lunid: $l.lun_id }
    };
}

/// In every version.
macro_rules! common {
    ($($v:ident),*) => {$(
        into_op!($v::ListDiskLocationsRequest => ListDiskLocations, |r| ListDiskLocations {});
        into_op!($v::RescanRequest => Rescan, |r| Rescan {});
        empty_responses!($v::PartitionDiskResponse, $v::RescanResponse);
    )*};
}
common!(v1alpha1, v1beta1, v1beta2, v1beta3, v1);

/// Disk IDs as decimal strings.
macro_rules! string_ids {
    ($($v:ident),*) => {$(
        from_output!($v::ListDiskLocationsResponse, Locations, |o| $v::ListDiskLocationsResponse {
            disk_locations: o.into_iter().map(|(n, l)| (n.to_string(), location!($v, l))).collect(),
        });
        into_op!($v::PartitionDiskRequest => PartitionDisk,
            |r| PartitionDisk { disk: parse_disk_number("diskID", &r.disk_id)? });
    )*};
}
string_ids!(v1alpha1, v1beta1, v1beta2);

into_op!(v1alpha1::GetDiskNumberByNameRequest => GetDiskNumberByName,
    |r| GetDiskNumberByName { page83: r.disk_name });
from_output!(v1alpha1::GetDiskNumberByNameResponse, u32, |o| v1alpha1::GetDiskNumberByNameResponse {
    disk_number: o.to_string()
});

/// v1beta1 and v1beta2: identifiers as a string map with keys `page83` and `serialNumber`,
/// both always present; stats under the older name.
macro_rules! beta_ids {
    ($($v:ident),*) => {$(
        from_output!($v::ListDiskIDsResponse, Ids, |o| $v::ListDiskIDsResponse {
            disk_i_ds: o
                .into_iter()
                .map(|(n, ids)| {
                    let identifiers = BTreeMap::from([
                        ("page83".to_string(), ids.page83),
                        ("serialNumber".to_string(), ids.serial_number),
                    ]);
                    (n.to_string(), $v::DiskIDs { identifiers })
                })
                .collect(),
        });
        into_op!($v::ListDiskIDsRequest => ListDiskIds, |r| ListDiskIds {});
        into_op!($v::DiskStatsRequest => GetDiskStats,
            |r| GetDiskStats { disk: parse_disk_number("diskID", &r.disk_id)? });
        from_output!($v::DiskStatsResponse, u64, |o| $v::DiskStatsResponse { disk_size: to_i64("diskSize", o)? });
    )*};
}
beta_ids!(v1beta1, v1beta2);

into_op!(v1beta2::SetAttachStateRequest => SetDiskState,
    |r| SetDiskState { disk: parse_disk_number("diskID", &r.disk_id)?, online: r.is_online });
empty_responses!(v1beta2::SetAttachStateResponse);
into_op!(v1beta2::GetAttachStateRequest => GetDiskState,
    |r| GetDiskState { disk: parse_disk_number("diskID", &r.disk_id)? });
from_output!(v1beta2::GetAttachStateResponse, bool, |o| v1beta2::GetAttachStateResponse { is_online: o });

/// v1beta3 and v1: the current shape.
macro_rules! current {
    ($($v:ident),*) => {$(
        from_output!($v::ListDiskLocationsResponse, Locations, |o| $v::ListDiskLocationsResponse {
            disk_locations: o.into_iter().map(|(n, l)| (n, location!($v, l))).collect(),
        });
        into_op!($v::PartitionDiskRequest => PartitionDisk, |r| PartitionDisk { disk: r.disk_number });
        into_op!($v::ListDiskIDsRequest => ListDiskIds, |r| ListDiskIds {});
        from_output!($v::ListDiskIDsResponse, Ids, |o| $v::ListDiskIDsResponse {
            disk_i_ds: o
                .into_iter()
                .map(|(n, ids)| (n, $v::DiskIDs { page83: ids.page83, serial_number: ids.serial_number }))
                .collect(),
        });
        into_op!($v::GetDiskStatsRequest => GetDiskStats, |r| GetDiskStats { disk: r.disk_number });
        from_output!($v::GetDiskStatsResponse, u64, |o| $v::GetDiskStatsResponse { total_bytes: to_i64("total_bytes", o)? });
        into_op!($v::SetDiskStateRequest => SetDiskState, |r| SetDiskState { disk: r.disk_number, online: r.is_online });
        empty_responses!($v::SetDiskStateResponse);
        into_op!($v::GetDiskStateRequest => GetDiskState, |r| GetDiskState { disk: r.disk_number });
        from_output!($v::GetDiskStateResponse, bool, |o| $v::GetDiskStateResponse { is_online: o });
    )*};
}
current!(v1beta3, v1);
