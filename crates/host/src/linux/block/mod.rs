//! Disk and volume groups on Linux: whole-disk block devices, GPT partitions, filesystems, mounts.
//!
//! Mapping onto upstream's Windows notions (documented in the README):
//! - disk number: the kernel's device number of the whole disk, `(major << 20) | minor`
//!   ([`disk_number`]); whole disks only (sd, vd, xvd, nvme namespaces, loop devices with a
//!   backing file); partitions are volumes; device-mapper, md, ram and zram devices are left out.
//! - volume ID: `\\?\Volume{<GPT partition GUID, lower case>}\`, upstream's shape, stable across
//!   reboots and rescans and resolvable by reading partition tables (no udev needed).
//!
//! The work is split by idea, each file adding the methods of its idea to [`Block`] (this folder
//! is the type's), each importing only from the ones above it in this list:
//! - `disklock`: the whole-disk `flock` that keeps udev out while we work;
//! - `table`: a whole disk opened and checked, its GPT as the kernel trusts it;
//! - `kernel`: the kernel's partitions (sysfs), made equal to a GPT with BLKPG; a disk's refresh;
//! - `lookup`: volume IDs, which disk has a volume, the volume resolved under its disk's lock;
//! - `partitions`: PartitionDisk and growing a partition (GPT writes);
//! - `disks`: sysfs enumeration and identity (locations, IDs, size, SCSI state);
//! - `device`: a volume's partition device, opened and checked; `format`: probe and mkfs;
//!   `mount`: the mount table (mount, unmount, stats, flush, path lookups); `resize`;
//! - `interlock`: what the disk is found to hold (the running system, holders, mounts outside
//!   the working directories, `-protected-disk`), checked before a call changes it;
//! - `volumes`: the volume group's RPCs, each resolving its volume and calling the above.

mod blkid;
mod blkpg;
mod device;
mod disklock;
pub mod disks;
mod format;
mod interlock;
mod kernel;
mod lookup;
mod loopdev;
mod mount;
pub mod partitions;
mod resize;
mod sys;
mod table;
pub(crate) mod tools;
pub mod volumes;

use super::fs::Filesystem;
use crate::paths::Roots;
use crate::types::FsType;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The disk number of a whole disk: the kernel's own `MKDEV` packing. Block majors are below 512
/// and minors below 2^20, so it fits in 32 bits.
pub fn disk_number(major: u32, minor: u32) -> u32 {
    (major << 20) | (minor & 0xf_ffff)
}

/// (major, minor) of a disk number.
pub fn split_disk_number(number: u32) -> (u32, u32) {
    (number >> 20, number & 0xf_ffff)
}

/// A whole disk as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    pub number: u32,
    /// Kernel name, e.g. `sda`, `loop0`, `nvme0n1`.
    pub name: String,
    pub major: u32,
    pub minor: u32,
}

/// A partition of a whole disk, which is what the volume group calls a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    /// `\\?\Volume{guid}\`
    pub id: String,
    pub disk: u32,
    /// 1-based partition number in the table.
    pub index: u32,
    /// Kernel name of the partition device, e.g. `loop0p1`, `sda1`.
    pub name: String,
    /// `/dev/<name>`.
    pub node: PathBuf,
    /// Byte offset and length on the disk.
    pub start: u64,
    pub size: u64,
    /// The GPT partition type.
    pub(crate) type_guid: crate::formats::gpt::Guid,
}

/// The disk and volume groups of the native Linux host.
pub struct Block {
    /// `/sys` (tests point this at a fake tree).
    pub(crate) sysfs: PathBuf,
    /// `/dev`.
    pub(crate) dev: PathBuf,
    /// Containment for mount targets and target-path lookups (the filesystem group's rules).
    pub(crate) fs: Filesystem,
    /// `-linux-fs-type`: what FormatVolume creates.
    pub(crate) fs_type: FsType,
    /// The system calls on whole disks ([`sys::RealSys`]; tests: `sys::fake::FakeSys`).
    pub(crate) sys: Arc<dyn sys::Sys>,
    /// The disk each volume GUID was last seen on (see [`lookup::LastSeen`]).
    pub(crate) seen: lookup::LastSeen,
    /// `-protected-disk`: disks no call may change ([`crate::interlock`]).
    pub(crate) protected: Vec<crate::interlock::ProtectedDisk>,
}

impl Block {
    pub fn new(roots: Roots, fs_type: FsType) -> Self {
        Self::with_roots(Path::new("/sys"), Path::new("/dev"), roots, fs_type)
    }

    /// A backend reading sysfs and device nodes below other roots, for tests.
    pub fn with_roots(sysfs: &Path, dev: &Path, roots: Roots, fs_type: FsType) -> Self {
        let sys = Arc::new(sys::RealSys);
        Block {
            sysfs: sysfs.to_path_buf(),
            dev: dev.to_path_buf(),
            fs: Filesystem::new(roots),
            fs_type,
            sys,
            seen: lookup::LastSeen::new(lookup::REMEMBERED),
            protected: Vec::new(),
        }
    }

    /// This backend with `-protected-disk`'s disks.
    pub fn protecting(mut self, disks: Vec<crate::interlock::ProtectedDisk>) -> Self {
        self.protected = disks;
        self
    }
}

#[cfg(test)]
mod tests;
