//! Filesystems on volumes: probing, mkfs, mount/unmount, stats, resize and target-path lookup.

use super::Block;
use crate::sys::unimplemented;
use crate::types::VolumeStats;
use crate::Result;

impl Block {
    pub fn mount_volume(&self, _volume_id: &str, _target_path: &str) -> Result<()> {
        Err(unimplemented("Volume.MountVolume"))
    }
    pub fn unmount_volume(&self, _volume_id: &str, _target_path: &str) -> Result<()> {
        Err(unimplemented("Volume.UnmountVolume"))
    }
    pub fn is_volume_formatted(&self, _volume_id: &str) -> Result<bool> {
        Err(unimplemented("Volume.IsVolumeFormatted"))
    }
    pub fn format_volume(&self, _volume_id: &str) -> Result<()> {
        Err(unimplemented("Volume.FormatVolume"))
    }
    pub fn resize_volume(&self, _volume_id: &str, _size_bytes: u64) -> Result<()> {
        Err(unimplemented("Volume.ResizeVolume"))
    }
    pub fn volume_stats(&self, _volume_id: &str) -> Result<VolumeStats> {
        Err(unimplemented("Volume.GetVolumeStats"))
    }
    pub fn volume_at_path(&self, _target_path: &str) -> Result<String> {
        Err(unimplemented("Volume.GetVolumeIDFromTargetPath"))
    }
    pub fn closest_volume_to_path(&self, _target_path: &str) -> Result<String> {
        Err(unimplemented("Volume.GetClosestVolumeIDFromTargetPath"))
    }
    pub fn flush_volume(&self, _volume_id: &str) -> Result<()> {
        Err(unimplemented("Volume.WriteVolumeCache"))
    }
}
