//! Block-device ioctls: sizes, buffer flush, and BLKPG, which adds, resizes and removes the
//! kernel's partitions one by one (what `partx` and `resizepart` use). Partitions are told to
//! the kernel this way rather than with BLKRRPART because a kernel may have no partition-table
//! parsers at all (this host's has none), because BLKRRPART drops partitions added by hand, and
//! because it fails with EBUSY while any partition is mounted, where BLKPG resizes in place.

// A platform module: ioctls on block devices.
#![allow(unsafe_code)]

use linux_raw_sys::ioctl as nr;
use rustix::io::Result;
use rustix::ioctl::{ioctl, Getter, NoArg, Opcode, Setter};
use std::os::fd::AsFd;

/// `struct blkpg_partition` (include/uapi/linux/blkpg.h): offsets and lengths in bytes.
#[repr(C)]
struct BlkpgPartition {
    start: i64,
    length: i64,
    pno: i32,
    devname: [u8; 64],
    volname: [u8; 64],
}

/// `struct blkpg_ioctl_arg`.
#[repr(C)]
struct BlkpgIoctlArg {
    op: i32,
    flags: i32,
    datalen: i32,
    data: *mut BlkpgPartition,
}

const BLKPG_ADD_PARTITION: i32 = 1;
const BLKPG_DEL_PARTITION: i32 = 2;
const BLKPG_RESIZE_PARTITION: i32 = 3;

fn blkpg(disk: impl AsFd, op: i32, pno: u32, start: u64, length: u64) -> Result<()> {
    let overflow = |_| rustix::io::Errno::OVERFLOW;
    let mut part = BlkpgPartition {
        start: i64::try_from(start).map_err(overflow)?,
        length: i64::try_from(length).map_err(overflow)?,
        pno: i32::try_from(pno).map_err(overflow)?,
        devname: [0; 64],
        volname: [0; 64],
    };
    let arg = BlkpgIoctlArg { op, flags: 0, datalen: std::mem::size_of::<BlkpgPartition>() as i32, data: &mut part };
    // SAFETY: BLKPG takes a pointer to a `blkpg_ioctl_arg` whose layout `BlkpgIoctlArg` repeats;
    // its `data` points at `part`, a live `blkpg_partition` of `datalen` bytes, for the whole call.
    unsafe { ioctl(disk, Setter::<{ nr::BLKPG as Opcode }, BlkpgIoctlArg>::new(arg)) }
}

/// Adds partition `pno` over `length` bytes from `start` (both multiples of the logical block
/// size). EBUSY when `pno` exists or the range overlaps another partition.
pub(crate) fn add_partition(disk: impl AsFd, pno: u32, start: u64, length: u64) -> Result<()> {
    blkpg(disk, BLKPG_ADD_PARTITION, pno, start, length)
}

/// Changes the length of partition `pno` (`start` must be its current start). Works while the
/// partition is mounted.
pub(crate) fn resize_partition(disk: impl AsFd, pno: u32, start: u64, length: u64) -> Result<()> {
    blkpg(disk, BLKPG_RESIZE_PARTITION, pno, start, length)
}

/// Removes partition `pno`; EBUSY while it is open exclusively (mounted).
pub(crate) fn delete_partition(disk: impl AsFd, pno: u32) -> Result<()> {
    blkpg(disk, BLKPG_DEL_PARTITION, pno, 0, 0)
}

/// Size of the device in bytes.
pub(crate) fn size_bytes(disk: impl AsFd) -> Result<u64> {
    // SAFETY: BLKGETSIZE64 writes one u64 (`_IOR(0x12, 114, size_t)`, 64 bits on every 64-bit
    // and 32-bit ABI the kernel defines it for) into the getter's buffer.
    unsafe { ioctl(disk, Getter::<{ nr::BLKGETSIZE64 as Opcode }, u64>::new()) }
}

/// Logical block size in bytes.
pub(crate) fn logical_block_size(disk: impl AsFd) -> Result<u32> {
    rustix::fs::ioctl_blksszget(disk)
}

/// Writes back dirty buffers of the whole-disk device and drops its page cache, so that the next
/// read sees what is on the medium (a table written through another path, a grown loop file).
pub(crate) fn flush_buffers(disk: impl AsFd) -> Result<()> {
    // SAFETY: BLKFLSBUF takes no argument.
    unsafe { ioctl(disk, NoArg::<{ nr::BLKFLSBUF as Opcode }>::new()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structs_match_the_kernel_abi() {
        // include/uapi/linux/blkpg.h: 2*8 + 4 + 64 + 64 = 148, padded to 152 for i64 alignment.
        assert_eq!(std::mem::size_of::<BlkpgPartition>(), 152);
        #[cfg(target_pointer_width = "64")]
        assert_eq!(std::mem::size_of::<BlkpgIoctlArg>(), 24);
        assert_eq!(nr::BLKPG, 0x1269);
        assert_eq!(nr::BLKFLSBUF, 0x1261);
    }
}
