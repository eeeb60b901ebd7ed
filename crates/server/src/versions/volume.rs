//! Volume: v1alpha1–v1beta2 use a string disk ID, `path`/`size` field names and older RPC names
//! (DismountVolume, VolumeStats, GetVolumeDiskNumber, GetVolumeIDFromMount); v1beta3 = v1 use
//! the current names; v2alpha1 adds GetClosestVolumeIDFromTargetPath.

use super::{empty_responses, from_output, grpc_service, into_op};
use crate::fields::{parse_disk_number, to_i64};
use crate::ops::volume::*;
use csi_proxy_host::types::VolumeStats;
use csi_proxy_wire::{v1, v1alpha1, v1beta1, v1beta2, v1beta3, v2alpha1};

// What each version serves: `RpcName => Op: trait_method(Request) -> Response;` (see grpc_service!).

grpc_service!(v1alpha1::volume_server::Volume {
    ListVolumesOnDisk => ListVolumesOnDisk: list_volumes_on_disk(ListVolumesOnDiskRequest) -> ListVolumesOnDiskResponse;
    MountVolume => MountVolume: mount_volume(MountVolumeRequest) -> MountVolumeResponse;
    DismountVolume => UnmountVolume: dismount_volume(DismountVolumeRequest) -> DismountVolumeResponse;
    IsVolumeFormatted => IsVolumeFormatted: is_volume_formatted(IsVolumeFormattedRequest) -> IsVolumeFormattedResponse;
    FormatVolume => FormatVolume: format_volume(FormatVolumeRequest) -> FormatVolumeResponse;
    ResizeVolume => ResizeVolume: resize_volume(ResizeVolumeRequest) -> ResizeVolumeResponse;
});

grpc_service!(v1beta1::volume_server::Volume {
    ListVolumesOnDisk => ListVolumesOnDisk: list_volumes_on_disk(ListVolumesOnDiskRequest) -> ListVolumesOnDiskResponse;
    MountVolume => MountVolume: mount_volume(MountVolumeRequest) -> MountVolumeResponse;
    DismountVolume => UnmountVolume: dismount_volume(DismountVolumeRequest) -> DismountVolumeResponse;
    IsVolumeFormatted => IsVolumeFormatted: is_volume_formatted(IsVolumeFormattedRequest) -> IsVolumeFormattedResponse;
    FormatVolume => FormatVolume: format_volume(FormatVolumeRequest) -> FormatVolumeResponse;
    ResizeVolume => ResizeVolume: resize_volume(ResizeVolumeRequest) -> ResizeVolumeResponse;
    VolumeStats => GetVolumeStats: volume_stats(VolumeStatsRequest) -> VolumeStatsResponse;
    GetVolumeDiskNumber => GetDiskNumberFromVolumeId:
        get_volume_disk_number(VolumeDiskNumberRequest) -> VolumeDiskNumberResponse;
    GetVolumeIDFromMount => GetVolumeIdFromTargetPath:
        get_volume_id_from_mount(VolumeIdFromMountRequest) -> VolumeIdFromMountResponse;
});

grpc_service!(v1beta2::volume_server::Volume {
    ListVolumesOnDisk => ListVolumesOnDisk: list_volumes_on_disk(ListVolumesOnDiskRequest) -> ListVolumesOnDiskResponse;
    MountVolume => MountVolume: mount_volume(MountVolumeRequest) -> MountVolumeResponse;
    DismountVolume => UnmountVolume: dismount_volume(DismountVolumeRequest) -> DismountVolumeResponse;
    IsVolumeFormatted => IsVolumeFormatted: is_volume_formatted(IsVolumeFormattedRequest) -> IsVolumeFormattedResponse;
    FormatVolume => FormatVolume: format_volume(FormatVolumeRequest) -> FormatVolumeResponse;
    ResizeVolume => ResizeVolume: resize_volume(ResizeVolumeRequest) -> ResizeVolumeResponse;
    VolumeStats => GetVolumeStats: volume_stats(VolumeStatsRequest) -> VolumeStatsResponse;
    GetVolumeDiskNumber => GetDiskNumberFromVolumeId:
        get_volume_disk_number(VolumeDiskNumberRequest) -> VolumeDiskNumberResponse;
    GetVolumeIDFromMount => GetVolumeIdFromTargetPath:
        get_volume_id_from_mount(VolumeIdFromMountRequest) -> VolumeIdFromMountResponse;
    WriteVolumeCache => WriteVolumeCache: write_volume_cache(WriteVolumeCacheRequest) -> WriteVolumeCacheResponse;
});

grpc_service!(v1beta3::volume_server::Volume {
    ListVolumesOnDisk => ListVolumesOnDisk: list_volumes_on_disk(ListVolumesOnDiskRequest) -> ListVolumesOnDiskResponse;
    MountVolume => MountVolume: mount_volume(MountVolumeRequest) -> MountVolumeResponse;
    UnmountVolume => UnmountVolume: unmount_volume(UnmountVolumeRequest) -> UnmountVolumeResponse;
    IsVolumeFormatted => IsVolumeFormatted: is_volume_formatted(IsVolumeFormattedRequest) -> IsVolumeFormattedResponse;
    FormatVolume => FormatVolume: format_volume(FormatVolumeRequest) -> FormatVolumeResponse;
    ResizeVolume => ResizeVolume: resize_volume(ResizeVolumeRequest) -> ResizeVolumeResponse;
    GetVolumeStats => GetVolumeStats: get_volume_stats(GetVolumeStatsRequest) -> GetVolumeStatsResponse;
    GetDiskNumberFromVolumeID => GetDiskNumberFromVolumeId:
        get_disk_number_from_volume_id(GetDiskNumberFromVolumeIdRequest) -> GetDiskNumberFromVolumeIdResponse;
    GetVolumeIDFromTargetPath => GetVolumeIdFromTargetPath:
        get_volume_id_from_target_path(GetVolumeIdFromTargetPathRequest) -> GetVolumeIdFromTargetPathResponse;
    WriteVolumeCache => WriteVolumeCache: write_volume_cache(WriteVolumeCacheRequest) -> WriteVolumeCacheResponse;
});

grpc_service!(v1::volume_server::Volume {
    ListVolumesOnDisk => ListVolumesOnDisk: list_volumes_on_disk(ListVolumesOnDiskRequest) -> ListVolumesOnDiskResponse;
    MountVolume => MountVolume: mount_volume(MountVolumeRequest) -> MountVolumeResponse;
    UnmountVolume => UnmountVolume: unmount_volume(UnmountVolumeRequest) -> UnmountVolumeResponse;
    IsVolumeFormatted => IsVolumeFormatted: is_volume_formatted(IsVolumeFormattedRequest) -> IsVolumeFormattedResponse;
    FormatVolume => FormatVolume: format_volume(FormatVolumeRequest) -> FormatVolumeResponse;
    ResizeVolume => ResizeVolume: resize_volume(ResizeVolumeRequest) -> ResizeVolumeResponse;
    GetVolumeStats => GetVolumeStats: get_volume_stats(GetVolumeStatsRequest) -> GetVolumeStatsResponse;
    GetDiskNumberFromVolumeID => GetDiskNumberFromVolumeId:
        get_disk_number_from_volume_id(GetDiskNumberFromVolumeIdRequest) -> GetDiskNumberFromVolumeIdResponse;
    GetVolumeIDFromTargetPath => GetVolumeIdFromTargetPath:
        get_volume_id_from_target_path(GetVolumeIdFromTargetPathRequest) -> GetVolumeIdFromTargetPathResponse;
    WriteVolumeCache => WriteVolumeCache: write_volume_cache(WriteVolumeCacheRequest) -> WriteVolumeCacheResponse;
});

grpc_service!(v2alpha1::volume_server::Volume {
    ListVolumesOnDisk => ListVolumesOnDisk: list_volumes_on_disk(ListVolumesOnDiskRequest) -> ListVolumesOnDiskResponse;
    MountVolume => MountVolume: mount_volume(MountVolumeRequest) -> MountVolumeResponse;
    UnmountVolume => UnmountVolume: unmount_volume(UnmountVolumeRequest) -> UnmountVolumeResponse;
    IsVolumeFormatted => IsVolumeFormatted: is_volume_formatted(IsVolumeFormattedRequest) -> IsVolumeFormattedResponse;
    FormatVolume => FormatVolume: format_volume(FormatVolumeRequest) -> FormatVolumeResponse;
    ResizeVolume => ResizeVolume: resize_volume(ResizeVolumeRequest) -> ResizeVolumeResponse;
    GetVolumeStats => GetVolumeStats: get_volume_stats(GetVolumeStatsRequest) -> GetVolumeStatsResponse;
    GetDiskNumberFromVolumeID => GetDiskNumberFromVolumeId:
        get_disk_number_from_volume_id(GetDiskNumberFromVolumeIdRequest) -> GetDiskNumberFromVolumeIdResponse;
    GetVolumeIDFromTargetPath => GetVolumeIdFromTargetPath:
        get_volume_id_from_target_path(GetVolumeIdFromTargetPathRequest) -> GetVolumeIdFromTargetPathResponse;
    GetClosestVolumeIDFromTargetPath => GetClosestVolumeIdFromTargetPath:
        get_closest_volume_id_from_target_path(GetClosestVolumeIdFromTargetPathRequest)
            -> GetClosestVolumeIdFromTargetPathResponse;
    WriteVolumeCache => WriteVolumeCache: write_volume_cache(WriteVolumeCacheRequest) -> WriteVolumeCacheResponse;
});

// How each version's messages convert.

macro_rules! common {
    ($($v:ident),*) => {$(
        from_output!($v::ListVolumesOnDiskResponse, Vec<String>, |o| $v::ListVolumesOnDiskResponse { volume_ids: o });
        into_op!($v::IsVolumeFormattedRequest => IsVolumeFormatted, |r| IsVolumeFormatted { volume_id: r.volume_id });
        from_output!($v::IsVolumeFormattedResponse, bool, |o| $v::IsVolumeFormattedResponse { formatted: o });
        into_op!($v::FormatVolumeRequest => FormatVolume, |r| FormatVolume { volume_id: r.volume_id });
        empty_responses!($v::MountVolumeResponse, $v::FormatVolumeResponse, $v::ResizeVolumeResponse);
    )*};
}
common!(v1alpha1, v1beta1, v1beta2, v1beta3, v1, v2alpha1);

macro_rules! old {
    ($($v:ident),*) => {$(
        // Older versions always list every partition of the disk.
        into_op!($v::ListVolumesOnDiskRequest => ListVolumesOnDisk,
            |r| ListVolumesOnDisk { disk: parse_disk_number("disk_id", &r.disk_id)?, partition: 0 });
        into_op!($v::MountVolumeRequest => MountVolume,
            |r| MountVolume { volume_id: r.volume_id, target_path: r.path });
        into_op!($v::DismountVolumeRequest => UnmountVolume,
            |r| UnmountVolume { volume_id: r.volume_id, target_path: r.path });
        empty_responses!($v::DismountVolumeResponse);
        into_op!($v::ResizeVolumeRequest => ResizeVolume,
            |r| ResizeVolume { volume_id: r.volume_id, size_bytes: r.size });
    )*};
}
old!(v1alpha1, v1beta1, v1beta2);

macro_rules! beta {
    ($($v:ident),*) => {$(
        into_op!($v::VolumeStatsRequest => GetVolumeStats, |r| GetVolumeStats { volume_id: r.volume_id });
        from_output!($v::VolumeStatsResponse, VolumeStats, |o| $v::VolumeStatsResponse {
            volume_size: to_i64("volumeSize", o.total_bytes)?,
            volume_used_size: to_i64("volumeUsedSize", o.used_bytes)?,
        });
        into_op!($v::VolumeDiskNumberRequest => GetDiskNumberFromVolumeId,
            |r| GetDiskNumberFromVolumeId { volume_id: r.volume_id });
        from_output!($v::VolumeDiskNumberResponse, u32, |o| $v::VolumeDiskNumberResponse { disk_number: o.into() });
        into_op!($v::VolumeIdFromMountRequest => GetVolumeIdFromTargetPath,
            |r| GetVolumeIdFromTargetPath { target_path: r.mount });
        from_output!($v::VolumeIdFromMountResponse, String, |o| $v::VolumeIdFromMountResponse { volume_id: o });
    )*};
}
beta!(v1beta1, v1beta2);

/// WriteVolumeCache exists from v1beta2 on.
macro_rules! write_cache {
    ($($v:ident),*) => {$(
        into_op!($v::WriteVolumeCacheRequest => WriteVolumeCache, |r| WriteVolumeCache { volume_id: r.volume_id });
        empty_responses!($v::WriteVolumeCacheResponse);
    )*};
}
write_cache!(v1beta2, v1beta3, v1, v2alpha1);

macro_rules! current {
    ($($v:ident),*) => {$(
        into_op!($v::ListVolumesOnDiskRequest => ListVolumesOnDisk,
            |r| ListVolumesOnDisk { disk: r.disk_number, partition: r.partition_number });
        into_op!($v::MountVolumeRequest => MountVolume,
            |r| MountVolume { volume_id: r.volume_id, target_path: r.target_path });
        into_op!($v::UnmountVolumeRequest => UnmountVolume,
            |r| UnmountVolume { volume_id: r.volume_id, target_path: r.target_path });
        empty_responses!($v::UnmountVolumeResponse);
        into_op!($v::ResizeVolumeRequest => ResizeVolume,
            |r| ResizeVolume { volume_id: r.volume_id, size_bytes: r.size_bytes });
        into_op!($v::GetVolumeStatsRequest => GetVolumeStats, |r| GetVolumeStats { volume_id: r.volume_id });
        from_output!($v::GetVolumeStatsResponse, VolumeStats, |o| $v::GetVolumeStatsResponse {
            total_bytes: to_i64("total_bytes", o.total_bytes)?,
            used_bytes: to_i64("used_bytes", o.used_bytes)?,
        });
        into_op!($v::GetDiskNumberFromVolumeIdRequest => GetDiskNumberFromVolumeId,
            |r| GetDiskNumberFromVolumeId { volume_id: r.volume_id });
        from_output!($v::GetDiskNumberFromVolumeIdResponse, u32,
            |o| $v::GetDiskNumberFromVolumeIdResponse { disk_number: o });
        into_op!($v::GetVolumeIdFromTargetPathRequest => GetVolumeIdFromTargetPath,
            |r| GetVolumeIdFromTargetPath { target_path: r.target_path });
        from_output!($v::GetVolumeIdFromTargetPathResponse, String,
            |o| $v::GetVolumeIdFromTargetPathResponse { volume_id: o });
    )*};
}
current!(v1beta3, v1, v2alpha1);

into_op!(v2alpha1::GetClosestVolumeIdFromTargetPathRequest => GetClosestVolumeIdFromTargetPath,
    |r| GetClosestVolumeIdFromTargetPath { target_path: r.target_path });
from_output!(v2alpha1::GetClosestVolumeIdFromTargetPathResponse, String, |o| {
    v2alpha1::GetClosestVolumeIdFromTargetPathResponse { volume_id: o }
});
