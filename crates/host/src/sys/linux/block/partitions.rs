//! GPT partition tables, telling the kernel about partitions, volume lookup and rescans.

use super::{Block, Disk, Volume};
use crate::sys::unimplemented;
use crate::Result;

impl Block {
    /// The volume with this ID: InvalidArgument when the ID is malformed, NotFound when no disk
    /// has it.
    pub(crate) fn volume(&self, _volume_id: &str) -> Result<Volume> {
        Err(unimplemented("Volume lookup"))
    }
    /// The volumes (GPT partitions) of one disk, in table order.
    pub(crate) fn volumes_of(&self, _disk: &Disk) -> Result<Vec<Volume>> {
        Err(unimplemented("Volume listing"))
    }
    /// Grows the partition of `volume` to `size_bytes` (0: all the space after it) and tells the
    /// kernel; returns the volume as it is now. Never shrinks.
    pub(crate) fn grow_partition(&self, _volume: &Volume, _size_bytes: u64) -> Result<Volume> {
        Err(unimplemented("Partition resize"))
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
}
