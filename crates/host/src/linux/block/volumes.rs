//! Filesystems on volumes: probing, mkfs, mount/unmount, stats, resize and target-path lookup.
//!
//! Each RPC resolves its volume ID with [`Block::volume`] and hands the [`Volume`] to the method
//! that does the work (`mount`, `unmount`, `is_formatted`, `format`, `resize`, `stats`, `flush`).
//! Semantics (documented in the README), where they differ from upstream's Windows behaviour
//! (docs/upstream.md#volume, #idempotency):
//!
//! - **IsVolumeFormatted**: our own superblock probe of the partition device (`probe.rs`), at
//!   its start and its end, then libblkid when ours finds nothing (see *Two probes* below). Any
//!   signature counts, not only filesystems: swap, LUKS, LVM, md and firmware RAID members, ZFS
//!   pool members, bcache and nested partition tables (a backup GPT header too) are
//!   "formatted", so that nothing is ever formatted over them.
//! - **FormatVolume**: mkfs of `-linux-fs-type` with an argv vector. A volume that holds any
//!   signature is never formatted: FailedPrecondition naming the volume and what is on it
//!   (upstream formats with Force and loses the data).
//! - **MountVolume**: mount(2) of the partition at the target directory, which obeys the
//!   filesystem group's containment ([`super::super::fs::Filesystem::contained_dir`]) and is not
//!   a root itself (PermissionDenied); the mount is attached to the directory descriptor that
//!   was checked (`fsmount` + `move_mount`), never to a re-resolved path, once its device was
//!   checked to be the volume's. The filesystem type comes from the probe; NTFS through the
//!   kernel's `ntfs3` where the kernel has it, else `ntfs-3g` (FUSE). Already mounted there:
//!   success.
//!   The volume mounted elsewhere, or the target holding another mount, or a non-empty target
//!   (as upstream, which mounts only on an empty directory): FailedPrecondition naming it.
//! - **UnmountVolume**: syncfs, then umount. Nothing mounted at the target (or no target):
//!   success — upstream errors, we are idempotent. Another filesystem mounted there:
//!   FailedPrecondition, left alone (upstream does not check what it unmounts).
//! - **GetVolumeStats**: statvfs of the mounted filesystem: total = blocks × fragment size,
//!   used = (blocks − free) × fragment size. Not mounted: FailedPrecondition naming the volume
//!   (upstream answers for unmounted volumes too).
//! - **ResizeVolume(size)**: the volume ID may also be a disk number, meaning that disk's data
//!   volume (`crate::data_volume`: the largest GPT partition of the Linux filesystem or basic
//!   data type), as on Windows. Grows the partition, then the filesystem in it — ext2/3/4 with
//!   `resize2fs` (mounted or not; online needs CAP_SYS_RESOURCE), xfs with `xfs_growfs` and btrfs
//!   with `btrfs filesystem resize max` (both only mounted, given the checked mount as
//!   `/proc/self/fd/N`), NTFS with `ntfsresize` then `ntfsfix -d` (only unmounted; ntfsresize
//!   leaves the volume marked dirty, which the kernel's ntfs3 refuses to mount). An NTFS volume
//!   dirty before is refused (FailedPrecondition), not resized and cleaned. Offline growth
//!   (ext unmounted, NTFS) first opens the partition exclusively: a filesystem mounted in
//!   another mount namespace, invisible in our mountinfo, makes it FailedPrecondition ("in use
//!   elsewhere"). How the request combines with upstream's 100 MiB rule, against the
//!   partition's current size P:
//!   - `0`: the partition grows over all the free space after it;
//!   - more than P + 100 MiB: the partition grows to `size`;
//!   - within 100 MiB of P either way: the partition is left as it is (upstream's no-op rule;
//!     also what makes a repeated call idempotent);
//!   - less than P − 100 MiB: a shrink, refused with FailedPrecondition (upstream answers
//!     success and does nothing).
//!
//!   In every accepted case the filesystem is then grown to fill its partition (a no-op when it
//!   already does), so a call that grew the partition but not the filesystem is completed by the
//!   next one. A filesystem that can't be grown in its present state (xfs unmounted, NTFS
//!   mounted, a type we can't grow) is refused before the partition is touched.
//! - **GetVolumeIDFromTargetPath**: the target (contained) must be the root of a mount
//!   (`statx` mount ID and `STATX_ATTR_MOUNT_ROOT`, matched against `/proc/self/mountinfo`) whose
//!   device is one of our volumes; otherwise NotFound ("not a mounted folder", as upstream),
//!   and its text says `because it does not exist`, as on Windows (AWS EBS matches those words).
//! - **GetClosestVolumeIDFromTargetPath**: the mount holding the target, then the mounts it is
//!   mounted below (at most 256), until one is a volume.
//! - **WriteVolumeCache**: syncfs of the mounted filesystem; when unmounted, fsync of the
//!   partition device (which flushes the device's write cache).
//!
//! The work is in `format` (probe, mkfs), `mount` (the mount table), `resize`, over `device`
//! (the checked partition device).

use super::disklock::Lock;
use super::Block;
use crate::data_volume::DiskNumber;
use crate::interlock::Action;
use crate::types::VolumeStats;
use crate::{Error, Result, VolumeHost};

impl VolumeHost for Block {
    // Each call resolves its volume with its disk locked (see `disklock`): exclusively for what
    // writes, shared for what reads the partition device. GetVolumeStats reads a mounted
    // filesystem only, which no table re-read can take away (the kernel refuses while a
    // partition is in use), so it does not wait behind a long format of another volume.
    fn mount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
        self.mount(&self.hold_volume(volume_id, Lock::Exclusive)?, target_path)
    }
    fn unmount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
        self.unmount(&self.hold_volume(volume_id, Lock::Exclusive)?, target_path)
    }
    fn is_volume_formatted(&self, volume_id: &str) -> Result<bool> {
        self.is_formatted(&self.hold_volume(volume_id, Lock::Shared)?)
    }
    fn format_volume(&self, volume_id: &str) -> Result<()> {
        let held = self.hold_volume(volume_id, Lock::Exclusive)?;
        self.interlock(&held.lock.disk, Some(&held), Action::FormatVolume)?;
        self.format(&held)
    }
    fn resize_volume(&self, volume_id: &str, size_bytes: u64) -> Result<()> {
        let held = self.hold_volume_by(volume_id, Lock::Exclusive, DiskNumber::DataVolume)?;
        self.interlock(&held.lock.disk, Some(&held), Action::ResizeVolume)?;
        self.resize(&held, size_bytes)
    }
    fn plan_mount_volume(&self, volume_id: &str, target_path: &str) -> Result<String> {
        self.plan_mount(&self.hold_volume(volume_id, Lock::Shared)?, target_path)
    }
    fn plan_format_volume(&self, volume_id: &str) -> Result<String> {
        let held = self.hold_volume(volume_id, Lock::Shared)?;
        self.interlock(&held.lock.disk, Some(&held), Action::FormatVolume)?;
        self.plan_format(&held)
    }
    fn plan_resize_volume(&self, volume_id: &str, size_bytes: u64) -> Result<String> {
        let held = self.hold_volume_by(volume_id, Lock::Shared, DiskNumber::DataVolume)?;
        self.interlock(&held.lock.disk, Some(&held), Action::ResizeVolume)?;
        self.plan_resize(&held, size_bytes)
    }
    fn get_volume_stats(&self, volume_id: &str) -> Result<VolumeStats> {
        self.stats(&self.volume(volume_id)?)
    }
    fn write_volume_cache(&self, volume_id: &str) -> Result<()> {
        self.flush(&self.hold_volume(volume_id, Lock::Shared)?)
    }
    // Every NotFound here carries DOES_NOT_EXIST: the words AWS EBS's driver matches to decide
    // that a staging folder is not mounted yet.
    fn get_volume_id_from_target_path(&self, target_path: &str) -> Result<String> {
        self.volume_mounted_at(target_path)
    }
    fn get_closest_volume_id_from_target_path(&self, target_path: &str) -> Result<String> {
        self.volume_holding(target_path)
    }

    /// `partition == 0`: every volume of the disk; otherwise the one of GPT partition `partition`.
    fn list_volumes_on_disk(&self, disk: u32, partition: u32) -> Result<Vec<String>> {
        let d = self.disk(disk)?;
        let volumes = self.volumes_of(&d)?;
        if partition == 0 {
            return Ok(volumes.into_iter().map(|v| v.id).collect());
        }
        match volumes.into_iter().find(|v| v.index == partition) {
            Some(v) => Ok(vec![v.id]),
            None => Err(Error::not_found(format!(
                "{} has no partition {partition} (partitions are the entries of a GPT; MBR partitions are not volumes)",
                Self::disk_label(&d)
            ))),
        }
    }

    fn get_disk_number_from_volume_id(&self, volume_id: &str) -> Result<u32> {
        Ok(self.volume(volume_id)?.disk)
    }
    // `hold_volume` locks the disk the lookup above found first and reads the volume there.
    fn finds_volumes_under_own_lock(&self) -> bool {
        true
    }
}
