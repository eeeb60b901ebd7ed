//! Disk and volume groups on Windows: the logic of [`crate::win::disks`] and
//! [`crate::win::volumes`] on the real Win32 and WMI layers.

use super::platform;
use crate::paths::Roots;
use crate::types::{DiskIds, DiskLocation, FsType, VolumeStats};
use crate::win::disks::Disks;
use crate::win::volumes::Volumes;
use crate::{DiskHost, Result, VolumeHost};
use std::collections::BTreeMap;

pub struct Block {
    disks: Disks,
    volumes: Volumes,
}

impl Block {
    /// `-linux-fs-type` doesn't apply: FormatVolume makes NTFS, as upstream.
    pub fn new(roots: Roots, _fs_type: FsType) -> Self {
        let (win32, wmi) = platform();
        Block { disks: Disks::new(win32.clone(), wmi.clone()), volumes: Volumes::new(win32, wmi, roots) }
    }
    pub fn list_disk_locations(&self) -> Result<BTreeMap<u32, DiskLocation>> {
        self.disks.list_disk_locations()
    }
    pub fn list_disk_ids(&self) -> Result<BTreeMap<u32, DiskIds>> {
        self.disks.list_disk_ids()
    }
    pub fn disk_size(&self, disk: u32) -> Result<u64> {
        self.disks.disk_size(disk)
    }
    pub fn set_disk_online(&self, disk: u32, online: bool) -> Result<()> {
        self.disks.set_disk_online(disk, online)
    }
    pub fn disk_online(&self, disk: u32) -> Result<bool> {
        self.disks.disk_online(disk)
    }
    pub fn partition_disk(&self, disk: u32) -> Result<()> {
        self.disks.partition_disk(disk)
    }
    pub fn rescan(&self) -> Result<()> {
        self.disks.rescan()
    }
    pub fn list_volumes_on_disk(&self, disk: u32, partition: u32) -> Result<Vec<String>> {
        self.volumes.list_volumes_on_disk(disk, partition)
    }
    pub fn disk_number_of_volume(&self, volume_id: &str) -> Result<u32> {
        self.volumes.disk_number_of_volume(volume_id)
    }
    pub fn mount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
        self.volumes.mount_volume(volume_id, target_path)
    }
    pub fn unmount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
        self.volumes.unmount_volume(volume_id, target_path)
    }
    pub fn is_volume_formatted(&self, volume_id: &str) -> Result<bool> {
        self.volumes.is_volume_formatted(volume_id)
    }
    pub fn format_volume(&self, volume_id: &str) -> Result<()> {
        self.volumes.format_volume(volume_id)
    }
    pub fn resize_volume(&self, volume_id: &str, size_bytes: u64) -> Result<()> {
        self.volumes.resize_volume(volume_id, size_bytes)
    }
    pub fn volume_stats(&self, volume_id: &str) -> Result<VolumeStats> {
        self.volumes.volume_stats(volume_id)
    }
    pub fn volume_at_path(&self, target_path: &str) -> Result<String> {
        self.volumes.volume_at_path(target_path)
    }
    pub fn closest_volume_to_path(&self, target_path: &str) -> Result<String> {
        self.volumes.closest_volume_to_path(target_path)
    }
    pub fn flush_volume(&self, volume_id: &str) -> Result<()> {
        self.volumes.flush_volume(volume_id)
    }
}
