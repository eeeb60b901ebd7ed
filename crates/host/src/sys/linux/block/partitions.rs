//! GPT partition tables, telling the kernel about partitions, volume lookup and rescans.

use super::Block;
use crate::sys::unimplemented;
use crate::Result;

impl Block {
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
}
