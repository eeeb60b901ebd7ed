//! Disk and volume groups on Windows (not implemented yet: each call says so).

use crate::paths::Roots;
use crate::sys::unimplemented;
use crate::types::{DiskIds, DiskLocation, FsType, VolumeStats};
use crate::Result;
use std::collections::BTreeMap;

pub struct Block {}

impl Block {
    pub fn new(_roots: Roots, _fs_type: FsType) -> Self {
        Block {}
    }
    pub fn list_disk_locations(&self) -> Result<BTreeMap<u32, DiskLocation>> {
        Err(unimplemented("Disk.ListDiskLocations"))
    }
    pub fn list_disk_ids(&self) -> Result<BTreeMap<u32, DiskIds>> {
        Err(unimplemented("Disk.ListDiskIDs"))
    }
    pub fn disk_size(&self, _disk: u32) -> Result<u64> {
        Err(unimplemented("Disk.GetDiskStats"))
    }
    pub fn set_disk_online(&self, _disk: u32, _online: bool) -> Result<()> {
        Err(unimplemented("Disk.SetDiskState"))
    }
    pub fn disk_online(&self, _disk: u32) -> Result<bool> {
        Err(unimplemented("Disk.GetDiskState"))
    }
    pub fn partition_disk(&self, _disk: u32) -> Result<()> {
        Err(unimplemented("Disk.PartitionDisk"))
    }
    pub fn rescan(&self) -> Result<()> {
        Err(unimplemented("Disk.Rescan"))
    }
    pub fn list_volumes_on_disk(&self, _disk: u32, _partition: u32) -> Result<Vec<String>> {
        Err(unimplemented("Volume.ListVolumesOnDisk"))
    }
    pub fn disk_number_of_volume(&self, _volume_id: &str) -> Result<u32> {
        Err(unimplemented("Volume.GetDiskNumberFromVolumeID"))
    }
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
