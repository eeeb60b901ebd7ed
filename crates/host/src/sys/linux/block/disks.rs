//! Whole disks from sysfs: enumeration, locations, IDs, size and SCSI state.

use super::{Block, Disk};
use crate::sys::unimplemented;
use crate::types::{DiskIds, DiskLocation};
use crate::Result;
use std::collections::BTreeMap;

impl Block {
    /// Every whole disk, in disk-number order.
    pub(crate) fn disks(&self) -> Result<Vec<Disk>> {
        Err(unimplemented("Disk enumeration"))
    }
    /// The whole disk with this number; NotFound naming it otherwise.
    pub(crate) fn disk(&self, _number: u32) -> Result<Disk> {
        Err(unimplemented("Disk lookup"))
    }
    /// Asks every SCSI host to scan for new devices and every SCSI disk to re-read its capacity;
    /// returns when the kernel has done so.
    pub(crate) fn rescan_scsi(&self) -> Result<()> {
        Ok(())
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
}
