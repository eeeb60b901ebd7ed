use super::op;
use crate::call::{non_negative, required};
use crate::locks::Serial;
use csi_proxy_host::data_volume::disk_number_in;
use csi_proxy_host::types::VolumeStats;

op!(ListVolumesOnDisk { disk: u32, partition: u32 } -> Vec<String>,
    |s, ctx| ctx.hosts().volume.list_volumes_on_disk(s.disk, s.partition));
op!(MountVolume { volume_id: String, target_path: String } -> (), serial |s| {
    let v = required("volume_id", &s.volume_id)?;
    required("target_path", &s.target_path)?;
    Ok(Serial::Volume(v.to_string()))
}, |s, ctx| {
    let v = required("volume_id", &s.volume_id)?;
    let t = required("target_path", &s.target_path)?;
    ctx.hosts().volume.mount_volume(v, t)
});
op!(UnmountVolume { volume_id: String, target_path: String } -> (), serial |s| {
    let v = required("volume_id", &s.volume_id)?;
    required("target_path", &s.target_path)?;
    Ok(Serial::Volume(v.to_string()))
}, |s, ctx| {
    let v = required("volume_id", &s.volume_id)?;
    let t = required("target_path", &s.target_path)?;
    ctx.hosts().volume.unmount_volume(v, t)
});
op!(IsVolumeFormatted { volume_id: String } -> bool,
    |s, ctx| ctx.hosts().volume.is_volume_formatted(required("volume_id", &s.volume_id)?));
op!(FormatVolume { volume_id: String } -> (), serial |s| {
    required("volume_id", &s.volume_id)?;
    Ok(Serial::Volume(s.volume_id.clone()))
}, |s, ctx| {
    let v = required("volume_id", &s.volume_id)?;
    ctx.hosts().volume.format_volume(v)
});
op!(ResizeVolume { volume_id: String, size_bytes: i64 } -> (), serial |s| {
    required("volume_id", &s.volume_id)?;
    non_negative("size_bytes", s.size_bytes)?;
    // A disk number stands for that disk's data volume (azuredisk >= 1.32's NodeStageVolume):
    // the call holds that disk.
    Ok(match disk_number_in(&s.volume_id) {
        Some(disk) => Serial::Disk(disk),
        None => Serial::Volume(s.volume_id.clone()),
    })
}, |s, ctx| {
    let v = required("volume_id", &s.volume_id)?;
    let size = non_negative("size_bytes", s.size_bytes)?;
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
op!(WriteVolumeCache { volume_id: String } -> (), serial |s| {
    required("volume_id", &s.volume_id)?;
    Ok(Serial::Volume(s.volume_id.clone()))
}, |s, ctx| {
    let v = required("volume_id", &s.volume_id)?;
    ctx.hosts().volume.flush_volume(v)
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::Op;

    #[test]
    fn a_resize_by_disk_number_holds_that_disk() {
        let by_disk = ResizeVolume { volume_id: "2".into(), size_bytes: 0 };
        assert_eq!(by_disk.serial().unwrap(), Serial::Disk(2));
        let id = r"\\?\Volume{0a1b2c3d-0000-1111-2222-333344445555}\";
        let by_id = ResizeVolume { volume_id: id.into(), size_bytes: 0 };
        assert_eq!(by_id.serial().unwrap(), Serial::Volume(id.into()));
    }
}
