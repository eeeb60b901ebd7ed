//! Whole disks from sysfs: enumeration, locations, IDs, size and SCSI state.

use super::Block;
use crate::sys::unimplemented;
use crate::types::{DiskIds, DiskLocation};
use crate::Result;
use std::collections::BTreeMap;

impl Block {
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
