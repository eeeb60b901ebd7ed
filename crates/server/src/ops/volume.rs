use super::op;
use crate::dry_run::{Look, Plan};
use crate::fields::{non_negative, required};
use crate::locks::Serial;
use crate::policy::args::{Arg, Args};
use csi_proxy_host::data_volume::disk_number_in;
use csi_proxy_host::types::VolumeStats;

#[derive(Debug, Clone, PartialEq)]
pub struct ListVolumesOnDisk {
    pub disk: u32,
    pub partition: u32,
}
op!(ListVolumesOnDisk -> Vec<String>, read_only, |s, ctx| ctx.hosts().volume.list_volumes_on_disk(s.disk, s.partition));

#[derive(Debug, Clone, PartialEq)]
pub struct MountVolume {
    pub volume_id: String,
    pub target_path: String,
}
op!(MountVolume -> (), serial |s| {
    let v = required("volume_id", &s.volume_id)?;
    required("target_path", &s.target_path)?;
    Ok(Serial::Volume(v.to_string()))
}, |s, ctx| {
    let v = required("volume_id", &s.volume_id)?;
    let t = required("target_path", &s.target_path)?;
    ctx.hosts().volume.mount_volume(v, t)
});

#[derive(Debug, Clone, PartialEq)]
pub struct UnmountVolume {
    pub volume_id: String,
    pub target_path: String,
}
op!(UnmountVolume -> (), serial |s| {
    let v = required("volume_id", &s.volume_id)?;
    required("target_path", &s.target_path)?;
    Ok(Serial::Volume(v.to_string()))
}, |s, ctx| {
    let v = required("volume_id", &s.volume_id)?;
    let t = required("target_path", &s.target_path)?;
    ctx.hosts().volume.unmount_volume(v, t)
});

#[derive(Debug, Clone, PartialEq)]
pub struct IsVolumeFormatted {
    pub volume_id: String,
}
op!(IsVolumeFormatted -> bool, read_only, |s, ctx| ctx.hosts().volume.is_volume_formatted(required("volume_id", &s.volume_id)?));

#[derive(Debug, Clone, PartialEq)]
pub struct FormatVolume {
    pub volume_id: String,
}
op!(FormatVolume -> (), serial |s| {
    required("volume_id", &s.volume_id)?;
    Ok(Serial::Volume(s.volume_id.clone()))
}, |s, ctx| {
    let v = required("volume_id", &s.volume_id)?;
    ctx.hosts().volume.format_volume(v)
});

#[derive(Debug, Clone, PartialEq)]
pub struct ResizeVolume {
    pub volume_id: String,
    pub size_bytes: i64,
}
op!(ResizeVolume -> (), serial |s| {
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

#[derive(Debug, Clone, PartialEq)]
pub struct GetVolumeStats {
    pub volume_id: String,
}
op!(GetVolumeStats -> VolumeStats, read_only, |s, ctx| ctx.hosts().volume.get_volume_stats(required("volume_id", &s.volume_id)?));

#[derive(Debug, Clone, PartialEq)]
pub struct GetDiskNumberFromVolumeId {
    pub volume_id: String,
}
op!(GetDiskNumberFromVolumeId -> u32, read_only, |s, ctx| ctx.hosts().volume.get_disk_number_from_volume_id(required("volume_id", &s.volume_id)?));

#[derive(Debug, Clone, PartialEq)]
pub struct GetVolumeIdFromTargetPath {
    pub target_path: String,
}
op!(GetVolumeIdFromTargetPath -> String, read_only, |s, ctx| ctx.hosts().volume.get_volume_id_from_target_path(required("target_path", &s.target_path)?));

#[derive(Debug, Clone, PartialEq)]
pub struct GetClosestVolumeIdFromTargetPath {
    pub target_path: String,
}
op!(GetClosestVolumeIdFromTargetPath -> String, read_only, |s, ctx| ctx.hosts().volume.get_closest_volume_id_from_target_path(required("target_path", &s.target_path)?));

#[derive(Debug, Clone, PartialEq)]
pub struct WriteVolumeCache {
    pub volume_id: String,
}
op!(WriteVolumeCache -> (), serial |s| {
    required("volume_id", &s.volume_id)?;
    Ok(Serial::Volume(s.volume_id.clone()))
}, |s, ctx| {
    let v = required("volume_id", &s.volume_id)?;
    ctx.hosts().volume.write_volume_cache(v)
});

// Dry runs (crate::dry_run).

/// Whether two volume IDs name the same volume as the backends write them (case and a trailing
/// `\` aside).
fn same_volume(a: &str, b: &str) -> bool {
    a.trim_end_matches('\\').eq_ignore_ascii_case(b.trim_end_matches('\\'))
}

impl Plan for MountVolume {
    fn plan(&self, look: &Look<'_>) -> csi_proxy_host::Result<String> {
        let v = required("volume_id", &self.volume_id)?;
        look.plan_mount_volume(v, required("target_path", &self.target_path)?)
    }
}

impl Plan for UnmountVolume {
    fn plan(&self, look: &Look<'_>) -> csi_proxy_host::Result<String> {
        let v = required("volume_id", &self.volume_id)?;
        let t = required("target_path", &self.target_path)?;
        look.disk_of_volume(v)?;
        Ok(match look.volume_at(t)? {
            Some(m) if same_volume(&m, v) => format!("would unmount volume {v} from {t}"),
            Some(m) => {
                return Err(csi_proxy_host::Error::precondition(format!(
                    "{t} has volume {m} mounted, not volume {v}; left alone"
                )))
            }
            None => format!("no volume is mounted at {t}: nothing would be unmounted"),
        })
    }
}

impl Plan for FormatVolume {
    fn plan(&self, look: &Look<'_>) -> csi_proxy_host::Result<String> {
        look.plan_format_volume(required("volume_id", &self.volume_id)?)
    }
}

impl Plan for ResizeVolume {
    fn plan(&self, look: &Look<'_>) -> csi_proxy_host::Result<String> {
        let v = required("volume_id", &self.volume_id)?;
        look.plan_resize_volume(v, non_negative("size_bytes", self.size_bytes)?)
    }
}

impl Plan for WriteVolumeCache {
    fn plan(&self, look: &Look<'_>) -> csi_proxy_host::Result<String> {
        let v = required("volume_id", &self.volume_id)?;
        let disk = look.disk_of_volume(v)?;
        Ok(format!("would flush the cached writes of volume {v} (disk {disk}) to the disk"))
    }
}

// What each operation names, for the authorization policy (crate::policy).

impl Args for ListVolumesOnDisk {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Disk(s.disk)]
    }
}

impl Args for MountVolume {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Volume(&s.volume_id), Arg::Path(&s.target_path)]
    }
}

impl Args for UnmountVolume {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Volume(&s.volume_id), Arg::Path(&s.target_path)]
    }
}

impl Args for IsVolumeFormatted {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Volume(&s.volume_id)]
    }
}

impl Args for FormatVolume {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Volume(&s.volume_id)]
    }
}

impl Args for ResizeVolume {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Volume(&s.volume_id)]
    }
}

impl Args for GetVolumeStats {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Volume(&s.volume_id)]
    }
}

impl Args for GetDiskNumberFromVolumeId {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Volume(&s.volume_id)]
    }
}

impl Args for GetVolumeIdFromTargetPath {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Path(&s.target_path)]
    }
}

impl Args for GetClosestVolumeIdFromTargetPath {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Path(&s.target_path)]
    }
}

impl Args for WriteVolumeCache {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Volume(&s.volume_id)]
    }
}

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
