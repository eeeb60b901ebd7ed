use super::op;
use crate::call::{non_negative, required};
use csi_proxy_host::types::VolumeStats;

op!(ListVolumesOnDisk { disk: u32, partition: u32 } -> Vec<String>,
    |s, ctx| ctx.hosts().volume.list_volumes_on_disk(s.disk, s.partition));
op!(MountVolume { volume_id: String, target_path: String } -> (), |s, ctx| {
    let v = required("volume_id", &s.volume_id)?;
    let t = required("target_path", &s.target_path)?;
    let _serial = ctx.locks().lock_volume(ctx.hosts(), v)?;
    ctx.hosts().volume.mount_volume(v, t)
});
op!(UnmountVolume { volume_id: String, target_path: String } -> (), |s, ctx| {
    let v = required("volume_id", &s.volume_id)?;
    let t = required("target_path", &s.target_path)?;
    let _serial = ctx.locks().lock_volume(ctx.hosts(), v)?;
    ctx.hosts().volume.unmount_volume(v, t)
});
op!(IsVolumeFormatted { volume_id: String } -> bool,
    |s, ctx| ctx.hosts().volume.is_volume_formatted(required("volume_id", &s.volume_id)?));
op!(FormatVolume { volume_id: String } -> (), |s, ctx| {
    let v = required("volume_id", &s.volume_id)?;
    let _serial = ctx.locks().lock_volume(ctx.hosts(), v)?;
    ctx.hosts().volume.format_volume(v)
});
op!(ResizeVolume { volume_id: String, size_bytes: i64 } -> (), |s, ctx| {
    let v = required("volume_id", &s.volume_id)?;
    let size = non_negative("size_bytes", s.size_bytes)?;
    let _serial = ctx.locks().lock_volume(ctx.hosts(), v)?;
    ctx.hosts().volume.resize_volume(v, size)
});
op!(GetVolumeStats { volume_id: String } -> VolumeStats,
    |s, ctx| ctx.hosts().volume.volume_stats(required("volume_id", &s.volume_id)?));
op!(GetDiskNumberFromVolumeId { volume_id: String } -> u32,
    |s, ctx| ctx.hosts().volume.disk_number_of_volume(required("volume_id", &s.volume_id)?));
op!(GetVolumeIdFromTargetPath { target_path: String } -> String,
    |s, ctx| ctx.hosts().volume.volume_at_path(required("target_path", &s.target_path)?));
op!(GetClosestVolumeIdFromTargetPath { target_path: String } -> String,
    |s, ctx| ctx.hosts().volume.closest_volume_to_path(required("target_path", &s.target_path)?));
op!(WriteVolumeCache { volume_id: String } -> (), |s, ctx| {
    let v = required("volume_id", &s.volume_id)?;
    let _serial = ctx.locks().lock_volume(ctx.hosts(), v)?;
    ctx.hosts().volume.flush_volume(v)
});
