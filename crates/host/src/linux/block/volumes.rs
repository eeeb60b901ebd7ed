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
//! A mount's device is its mountinfo `major:minor`, or, where that is an anonymous device
//! (major 0, as btrfs shows), the device node named as its source — for btrfs (and fuseblk)
//! only, a source below `/dev` without `..`, not on a FUSE mount, its final link not followed.
//!
//! **Two probes.** What a partition holds is decided in one place, `Block::probe_device`: our
//! own probe (`formats/probe.rs`) first, libblkid (`blkid.rs`) only when ours finds nothing; the
//! volume is blank only when both find nothing. Ours is the one whose answer is used: it names
//! what it finds (the type MountVolume mounts and ResizeVolume grows, and the same parsers give
//! the filesystem's size and NTFS's dirty flag), and it is Rust over bytes we read, tested and
//! fuzzed on every OS, answering the same whatever util-linux the host has. But it knows the
//! common signatures only, and mke2fs `-F` and mkntfs check nothing themselves: a signature it
//! does not know would be formatted over. libblkid knows every signature util-linux does, so it
//! has the last word on "blank": when it finds anything, the answer is
//! `probe::OTHER_SIGNATURE` (logged with what libblkid saw), which makes IsVolumeFormatted true
//! and FormatVolume refuse, and which nothing mounts or grows. A libblkid failure is an error,
//! never "blank". Other places point here rather than repeat this.
//!
//! The partition device: every call that touches it opens `/dev/<name>` and checks the node's
//! device number against sysfs (a static or copied `/dev` can hold stale nodes of other
//! partitions), then works through that descriptor; tools (mkfs, resize2fs, e2fsck,
//! ntfsresize, ntfsfix, ntfs-3g) get it as `/proc/self/fd/N`. The kernel's mount gets the
//! node's path (mountinfo shows it), and the new mount's device is checked before it is
//! attached.

use super::disklock::{HeldVolume, Lock};
use super::tools::{self, Grow};
use super::{disk_number, Block, Volume};
use crate::data_volume::DiskNumber;
use crate::error::DOES_NOT_EXIST;
use crate::formats::mountinfo::{self, Mount};
use crate::formats::probe;
use crate::types::{FsType, VolumeStats};
use crate::{Error, Result, VolumeHost};
use rustix::fs::{AtFlags, Mode, OFlags, StatxAttributes, StatxFlags};
use rustix::io::Errno;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Upstream's tolerance: a requested size within this of the partition's is no change.
const RESIZE_TOLERANCE: u64 = 100 << 20;
/// Mounts walked up from a path by GetClosestVolumeIDFromTargetPath (upstream: 256 parents).
const MAX_MOUNT_DEPTH: usize = 256;
/// A filesystem less than this smaller than its partition fills it: growing tools leave a
/// remainder (ext4 drops a last block group too small for its metadata, xfs a last allocation
/// group under 64 blocks, NTFS its backup boot sector).
const FILLED_SLACK: u64 = 16 << 20;
/// How long a missing partition node is waited for: where udev runs, it re-reads a partition
/// table after the disk was written, and the partitions' nodes disappear for a moment.
pub(crate) const NODE_WAIT: Duration = Duration::from_secs(5);
/// `CAP_SYS_RESOURCE`: what ext4's online resize checks.
const CAP_SYS_RESOURCE: u32 = 24;

/// A block device number: (major, minor).
type DevNum = (u32, u32);

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
        self.format(&self.hold_volume(volume_id, Lock::Exclusive)?)
    }
    fn resize_volume(&self, volume_id: &str, size_bytes: u64) -> Result<()> {
        self.resize(&self.hold_volume_by(volume_id, Lock::Exclusive, DiskNumber::DataVolume)?, size_bytes)
    }
    fn volume_stats(&self, volume_id: &str) -> Result<VolumeStats> {
        self.stats(&self.volume(volume_id)?)
    }
    fn flush_volume(&self, volume_id: &str) -> Result<()> {
        self.flush(&self.hold_volume(volume_id, Lock::Shared)?)
    }
    // Every NotFound here carries DOES_NOT_EXIST: the words AWS EBS's driver matches to decide
    // that a staging folder is not mounted yet.
    fn volume_at_path(&self, target_path: &str) -> Result<String> {
        let (dir, canonical) = match self.fs.contained_dir(target_path) {
            Err(Error::NotFound(msg)) => {
                return Err(Error::not_found(format!("{target_path} is not a mounted folder {DOES_NOT_EXIST}: {msg}")))
            }
            other => other?,
        };
        let mounts = read_mounts()?;
        let Some(m) = mount_rooted_at(&dir, &canonical, &mounts)? else {
            return Err(Error::not_found(format!(
                "{target_path} is not a mounted folder: the volume mounted at {canonical} cannot be read \
                 {DOES_NOT_EXIST} (nothing is mounted there)"
            )));
        };
        match self.mount_device(m, &mounts).map(|d| self.volume_of_device(d)).transpose()?.flatten() {
            Some(v) => Ok(v.id),
            None => Err(Error::not_found(format!(
                "{target_path} is not a mounted folder of a volume: the volume {DOES_NOT_EXIST}, {} is mounted there",
                describe_mount(m)
            ))),
        }
    }
    fn closest_volume_to_path(&self, target_path: &str) -> Result<String> {
        let (dir, canonical) = match self.fs.contained_dir(target_path) {
            // A file: the volume holding its directory.
            Err(Error::FailedPrecondition(msg)) => {
                let parent = Path::new(target_path).parent().and_then(Path::to_str).filter(|p| !p.is_empty());
                match parent.map(|p| self.fs.contained_dir(p)) {
                    Some(Ok(found)) => found,
                    _ => return Err(Error::FailedPrecondition(msg)),
                }
            }
            Err(Error::NotFound(msg)) => {
                return Err(Error::not_found(format!(
                    "cannot find the volume of {target_path} {DOES_NOT_EXIST}: {msg}"
                )))
            }
            other => other?,
        };
        let mounts = read_mounts()?;
        let mut at = mount_holding(&dir, &canonical, &mounts)?;
        for _ in 0..MAX_MOUNT_DEPTH {
            let Some(m) = at else { break };
            if let Some(v) = self.mount_device(m, &mounts).map(|d| self.volume_of_device(d)).transpose()?.flatten() {
                return Ok(v.id);
            }
            if m.parent == m.id {
                break;
            }
            at = mountinfo::by_id(&mounts, m.parent);
        }
        Err(Error::not_found(format!(
            "no volume holds {target_path}: neither the filesystem it is on nor any it lies below is on a volume"
        )))
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

    fn disk_number_of_volume(&self, volume_id: &str) -> Result<u32> {
        Ok(self.volume(volume_id)?.disk)
    }
}

impl Block {
    /// What the volume's partition device holds: our probe's blkid-style type name,
    /// `probe::OTHER_SIGNATURE` when only libblkid recognises it, `None` when both find nothing
    /// (see *Two probes* in the module documentation).
    pub fn filesystem_on(&self, v: &Volume) -> Result<Option<&'static str>> {
        self.probe_device(v, &self.open_device(v)?)
    }

    /// [`Self::filesystem_on`] through a checked device: its start and end are read past stale
    /// cache (what the page cache holds of them is dropped, so that a write through the whole
    /// disk, a different cache, can't hide behind stale pages; dirty pages are kept).
    fn probe_device(&self, v: &Volume, device: &Device) -> Result<Option<&'static str>> {
        let f = &device.file;
        let size = rustix::fs::seek(f, rustix::fs::SeekFrom::End(0))
            .map_err(|e| Error::io(format!("reading {}", label(v)), e.into()))?;
        let tail = probe::tail_start(size);
        for (start, len) in [(0, probe::PROBE_LEN as u64), (tail, size - tail)] {
            let _ = rustix::fs::fadvise(f, start, std::num::NonZeroU64::new(len), rustix::fs::Advice::DontNeed);
        }
        if let Some(kind) =
            probe::probe(&mut &device.file).map_err(|e| Error::io(format!("reading {}", label(v)), e))?
        {
            return Ok(Some(kind));
        }
        // Blank to us: libblkid has the last word (*Two probes*, module documentation).
        match super::blkid::signature(device.file.as_fd()) {
            Ok(None) => Ok(None),
            Ok(Some(found)) => {
                tracing::info!(volume = %v.id, device = %v.node.display(), found, "libblkid finds a signature our probe does not know");
                Ok(Some(probe::OTHER_SIGNATURE))
            }
            Err(e) => Err(Error::internal(format!("probing {}: {e}", label(v)))),
        }
    }

    /// The first [`probe::PROBE_LEN`] bytes of the checked device (fewer if it is smaller).
    fn read_head(&self, v: &Volume, device: &Device) -> Result<Vec<u8>> {
        let _ = rustix::fs::fadvise(
            &device.file,
            0,
            std::num::NonZeroU64::new(probe::PROBE_LEN as u64),
            rustix::fs::Advice::DontNeed,
        );
        probe::read_at(&mut &device.file, 0, probe::PROBE_LEN)
            .map_err(|e| Error::io(format!("reading {}", label(v)), e))
    }

    /// The volume's partition device `/dev/<name>`, opened and checked to be the block device
    /// the kernel has for the partition (sysfs `dev`): a static or copied `/dev` can hold stale
    /// nodes whose numbers now belong to another partition. Everything done to the device goes
    /// through this descriptor (tools get it as `/proc/self/fd/N`). Where udev runs, a node is
    /// briefly missing or stale after the kernel re-read a partition table: both are waited for
    /// up to [`NODE_WAIT`].
    fn open_device(&self, v: &Volume) -> Result<Device> {
        require_device(v)?;
        let deadline = Instant::now() + NODE_WAIT;
        loop {
            let want = self.devnum_of(v)?;
            let file = match std::fs::File::open(&v.node) {
                Ok(f) => f,
                // ENOENT: udev has not made the node yet. ENXIO or ENODEV: the node is there but
                // the kernel has no device behind its numbers, as while a table re-read removes
                // and re-adds the disk's partitions. Both pass once udev and the kernel agree.
                Err(e) if node_not_ready(&e) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                Err(e) if node_not_ready(&e) && e.kind() != std::io::ErrorKind::NotFound => {
                    let want = self.devnum_of(v)?;
                    return Err(Error::precondition(format!(
                        "refusing to use {}: the device node {} names no device the kernel has ({e}), but the \
                         kernel's partition {} is block device {}:{} (a stale or copied /dev?)",
                        label(v),
                        v.node.display(),
                        v.name,
                        want.0,
                        want.1
                    )));
                }
                Err(e) => return Err(Error::io(format!("opening {}", label(v)), e)),
            };
            let st = rustix::fs::fstat(&file).map_err(|e| Error::io(format!("checking {}", label(v)), e.into()))?;
            let block = rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::BlockDevice;
            let got = (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
            if block && got == want {
                return Ok(Device { file, num: want });
            }
            if Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            let what = if block { format!("block device {}:{}", got.0, got.1) } else { "not a block device".into() };
            return Err(Error::precondition(format!(
                "refusing to use {}: the device node {} is {what}, but the kernel's partition {} is block \
                 device {}:{} (a stale or copied /dev?)",
                label(v),
                v.node.display(),
                v.name,
                want.0,
                want.1
            )));
        }
    }

    /// IsVolumeFormatted on a resolved volume.
    pub(crate) fn is_formatted(&self, v: &HeldVolume) -> Result<bool> {
        // The volumes asked about are mostly formatted, and a filesystem's signature sits at its
        // start (the deepest, btrfs's, at 64 KiB): look there first, and read the whole probe
        // range (start and end of the device) only when the start shows nothing.
        const QUICK: usize = 68 * 1024;
        let device = self.open_device(v)?;
        let _ =
            rustix::fs::fadvise(&device.file, 0, std::num::NonZeroU64::new(QUICK as u64), rustix::fs::Advice::DontNeed);
        let head =
            probe::read_at(&mut &device.file, 0, QUICK).map_err(|e| Error::io(format!("reading {}", label(v)), e))?;
        if probe::identify(&head).is_some() {
            return Ok(true);
        }
        Ok(self.probe_device(v, &device)?.is_some())
    }

    /// FormatVolume on a resolved volume.
    pub(crate) fn format(&self, v: &HeldVolume) -> Result<()> {
        let device = self.open_device(v)?;
        if let Some(kind) = self.probe_device(v, &device)? {
            return Err(Error::precondition(format!(
                "{} already holds {}; FormatVolume never formats over existing data \
                 (wipe the volume first if that is what you mean)",
                label(v),
                probe::describe(kind)
            )));
        }
        // Nothing may hold the device open exclusively (a mount we can't recognise or can't
        // see, a RAID or device-mapper user); mkfs would fail less clearly, or not at all.
        check_unused(v, &device, "refusing to format it")?;
        let dev_arg = fd_path(v, &device)?;
        let argv = tools::mkfs_argv(self.fs_type, &dev_arg.path());
        tracing::info!(volume = %v.id, node = %v.node.display(), argv = %tools::show(&argv), "formatting");
        tools::run_with(&argv, &[&dev_arg]).map_err(|e| about(v, e))?;
        drop(dev_arg);
        let made = self.probe_device(v, &device)?;
        let expected = match self.fs_type {
            FsType::Ext4 => "ext4",
            other => other.name(),
        };
        if made != Some(expected) {
            return Err(Error::internal(format!(
                "{} succeeded but {} now holds {}",
                tools::show(&argv),
                label(v),
                made.map_or("no filesystem".into(), probe::describe)
            )));
        }
        Ok(())
    }

    /// MountVolume on a resolved volume.
    pub(crate) fn mount(&self, v: &HeldVolume, target_path: &str) -> Result<()> {
        let (dir, canonical) = self.fs.contained_dir(target_path)?;
        self.refuse_root(v, target_path, &canonical)?;
        let device = self.open_device(v)?;
        let dev = device.num;
        let mounts = read_mounts()?;
        if let Some(m) = mount_rooted_at(&dir, &canonical, &mounts)? {
            if self.mount_device(m, &mounts) == Some(dev) {
                return Ok(());
            }
            return Err(Error::precondition(format!(
                "cannot mount {} at {target_path}: {} is already mounted there",
                label(v),
                describe_mount(m)
            )));
        }
        if let Some(m) = mounts.iter().find(|m| self.mount_device(m, &mounts) == Some(dev)) {
            return Err(Error::precondition(format!(
                "cannot mount {} at {target_path}: it is already mounted at {}; unmount it there first",
                label(v),
                m.mount_point.display()
            )));
        }
        if !is_empty_dir(&dir).map_err(|e| io_err(target_path, "listing", e))? {
            return Err(Error::precondition(format!(
                "cannot mount {} at {target_path}: the directory is not empty",
                label(v)
            )));
        }
        let kind = self.probe_device(v, &device)?.ok_or_else(|| {
            Error::precondition(format!("cannot mount {}: it holds no filesystem; format it first", label(v)))
        })?;
        let fstype = mount_type(kind).ok_or_else(|| {
            Error::precondition(format!(
                "cannot mount {}: it holds {}, which MountVolume does not mount",
                label(v),
                probe::describe(kind)
            ))
        })?;
        tracing::info!(volume = %v.id, target = %canonical, fstype, "mounting");
        // The kernel is given the node's path (what mountinfo shows as the source; a
        // `/proc/self/fd/N` there would mislead every reader of it), checked above and held open
        // meanwhile; the new mount's device is checked again before it is attached. btrfs shows
        // an anonymous device there, so its mount is not checked again.
        let mounted = match fstype {
            "ntfs" => match kernel_mount("ntfs3", &v.node, &dir, Some(dev)) {
                Err(MountError::Os(Errno::NODEV, _)) => return self.ntfs3g_mount(v, &device, &dir, target_path),
                other => other,
            },
            "btrfs" => kernel_mount("btrfs", &v.node, &dir, None),
            t => kernel_mount(t, &v.node, &dir, Some(dev)),
        };
        drop(device);
        mounted.map_err(|e| match e {
            MountError::Os(errno, detail) => {
                let msg =
                    format!("mounting {} ({kind}) at {target_path}: {}{detail}", label(v), std::io::Error::from(errno));
                match errno {
                    Errno::BUSY | Errno::ROFS | Errno::ACCESS | Errno::INVAL | Errno::NODEV => Error::precondition(msg),
                    Errno::PERM => Error::denied(msg),
                    _ => Error::internal(msg),
                }
            }
            MountError::Device(got) => Error::precondition(format!(
                "mounting {} at {target_path}: the kernel mounted a filesystem of device {}:{} from {}, not the \
                 volume's {}:{}; nothing was mounted",
                label(v),
                got.0,
                got.1,
                v.node.display(),
                dev.0,
                dev.1
            )),
        })
    }

    /// MountVolume never mounts over a containment root itself (everything below it would be
    /// hidden). The filesystem group does not expose its roots, so a root is told by its
    /// parent: a contained directory whose parent is outside every root is a root. (A root
    /// nested inside another root is not told apart this way.)
    fn refuse_root(&self, v: &Volume, target_path: &str, canonical: &str) -> Result<()> {
        let is_root = match Path::new(canonical).parent().and_then(Path::to_str) {
            None => true,
            Some(parent) => match self.fs.contained_dir(parent) {
                Ok(_) => false,
                Err(Error::PermissionDenied(_)) => true,
                Err(e) => return Err(e),
            },
        };
        if is_root {
            return Err(Error::denied(format!(
                "refusing to mount {} at {target_path}: {canonical} is one of the working directories itself; \
                 mount it in a directory below",
                label(v)
            )));
        }
        Ok(())
    }

    /// UnmountVolume on a resolved volume.
    pub(crate) fn unmount(&self, v: &HeldVolume, target_path: &str) -> Result<()> {
        let dev = self.devnum_of(v)?;
        let (dir, canonical) = match self.fs.contained_dir(target_path) {
            // No directory: nothing can be mounted there.
            Err(Error::NotFound(_)) => return Ok(()),
            other => other?,
        };
        let mounts = read_mounts()?;
        let Some(m) = mount_rooted_at(&dir, &canonical, &mounts)? else { return Ok(()) };
        if self.mount_device(m, &mounts) != Some(dev) {
            return Err(Error::precondition(format!(
                "{target_path} has {} mounted, not {}; left alone",
                describe_mount(m),
                label(v)
            )));
        }
        let readable = reopen(&dir).map_err(|e| io_err(target_path, "opening", e))?;
        rustix::fs::syncfs(&readable).map_err(|e| io_err(target_path, "flushing", e))?;
        drop(readable);
        // umount(2) takes a path, and a descriptor of the mount itself would keep it busy. So
        // name it as <its parent's descriptor>/<name>: the parent reached from the mount itself
        // ("..", which leaves a mount root upwards), the name checked to be this very mount.
        let name = Path::new(&canonical)
            .file_name()
            .ok_or_else(|| Error::precondition(format!("{target_path}: cannot unmount /")))?
            .to_owned();
        let parent = rustix::fs::openat(&dir, "..", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| io_err(target_path, "opening the parent of", e))?;
        drop(dir);
        if let Some(id) = mount_id(parent.as_fd(), &name).map_err(|e| io_err(target_path, "checking", e))? {
            if id != m.id {
                return Err(Error::precondition(format!("{target_path} changed while it was being unmounted")));
            }
        }
        let path = PathBuf::from(format!("/proc/self/fd/{}", parent.as_raw_fd())).join(&name);
        tracing::info!(volume = %v.id, target = %canonical, "unmounting");
        crate::linux::unmount_waiting(&path).map_err(|e| match e {
            Errno::BUSY => Error::precondition(format!(
                "cannot unmount {} from {target_path}: it is busy (files open in it, or mounts below it)",
                label(v)
            )),
            e => io_err(target_path, "unmounting", e),
        })
    }

    /// GetVolumeStats on a resolved volume.
    pub fn stats(&self, v: &Volume) -> Result<VolumeStats> {
        let dev = self.devnum_of(v)?;
        let mounts = read_mounts()?;
        let Some((_, fd)) = self.open_mount_of(dev, &mounts) else {
            return Err(Error::precondition(format!(
                "{} is not mounted; its size and use are known only while it is mounted",
                label(v)
            )));
        };
        let s = rustix::fs::fstatvfs(&fd).map_err(|e| Error::io(format!("statvfs of {}", label(v)), e.into()))?;
        let total = s.f_blocks.saturating_mul(s.f_frsize);
        let used = s.f_blocks.saturating_sub(s.f_bfree).saturating_mul(s.f_frsize);
        Ok(VolumeStats { total_bytes: total, used_bytes: used })
    }

    /// WriteVolumeCache on a resolved volume.
    pub(crate) fn flush(&self, v: &HeldVolume) -> Result<()> {
        let dev = self.devnum_of(v)?;
        let mounts = read_mounts()?;
        if let Some((m, fd)) = self.open_mount_of(dev, &mounts) {
            let readable =
                reopen(&fd).map_err(|e| Error::io(format!("opening {}", m.mount_point.display()), e.into()))?;
            return rustix::fs::syncfs(&readable).map_err(|e| Error::io(format!("flushing {}", label(v)), e.into()));
        }
        let device = self.open_device(v)?;
        device.file.sync_all().map_err(|e| Error::io(format!("flushing {}", label(v)), e))
    }

    /// ResizeVolume on a resolved volume.
    pub(crate) fn resize(&self, v: &HeldVolume, size_bytes: u64) -> Result<()> {
        let grow_to = match size_bytes {
            0 => Some(0),
            s if s > v.size.saturating_add(RESIZE_TOLERANCE) => Some(s),
            s if s.saturating_add(RESIZE_TOLERANCE) < v.size => {
                return Err(Error::precondition(format!(
                    "cannot resize {} to {s} bytes: it is {} bytes and shrinking is not supported",
                    label(v),
                    v.size
                )))
            }
            _ => None,
        };
        let device = self.open_device(v)?;
        let kind = self.probe_device(v, &device)?;
        let mounts = read_mounts()?;
        // The mount, and an `O_PATH` descriptor of it whose mount ID was checked: what
        // xfs_growfs and btrfs are given.
        let mounted = self.open_mount_of(device.num, &mounts);
        let mount_point = mounted.as_ref().map(|(m, _)| m.mount_point.clone());
        let plan = kind.map(|k| grow_plan(v, k, mounted.is_some()));
        // A growth asked for explicitly is refused before the partition changes when the
        // filesystem could not follow it in its present state.
        if let (Some(1..), Some(plan)) = (grow_to, &plan) {
            let refusal = match (plan, &mount_point) {
                (Err(e), _) => Some(e.to_string()),
                (Ok(Grow::Ext), Some(mp)) if !has_capability(CAP_SYS_RESOURCE) => {
                    Some(ext_online_refused(v, mp).to_string())
                }
                (Ok(g), None) => match offline_ready(v, &device, *g) {
                    Ok(()) => None,
                    Err(Error::FailedPrecondition(why)) => Some(why),
                    Err(e) => return Err(e),
                },
                _ => None,
            };
            if let Some(why) = refusal {
                return Err(Error::precondition(format!("{why}; nothing was changed")));
            }
        }
        let before = v.size;
        let (v, device) = match grow_to {
            Some(s) => {
                tracing::info!(volume = %v.id, size = s, "growing the partition");
                let v = self.grow_held(v, s)?;
                // Checked again: the kernel's partition may have been replaced.
                let device = self.open_device(&v)?;
                (v, device)
            }
            None => (v.volume.clone(), device),
        };
        let (Some(kind), Some(plan)) = (kind, plan) else { return Ok(()) };
        // A filesystem that already fills its partition has nothing to grow, whatever its state.
        let fs_size = probe::fs_size(kind, &self.read_head(&v, &device)?);
        if fs_size.is_some_and(|f| f.saturating_add(FILLED_SLACK) >= v.size) {
            return Ok(());
        }
        let plan = plan.map_err(|e| {
            Error::precondition(format!(
                "{e}, then call ResizeVolume again (the partition {} {} bytes)",
                if v.size == before { "is" } else { "has been grown to" },
                v.size
            ))
        })?;
        let dev_arg = fd_path(&v, &device)?;
        match (plan, &mounted) {
            (Grow::Ext, Some((m, _))) => {
                tracing::info!(volume = %v.id, mount_point = %m.mount_point.display(), "growing the filesystem online");
                grow_ext(&v, &dev_arg, Some(&m.mount_point))
            }
            (Grow::Ext, None) => {
                offline_ready(&v, &device, plan)?;
                tracing::info!(volume = %v.id, node = %v.node.display(), "growing the filesystem offline");
                grow_ext(&v, &dev_arg, None)
            }
            (Grow::Ntfs, _) => {
                // ntfsresize leaves the volume marked dirty (a chkdsk request for Windows), which
                // the kernel's ntfs3 refuses to mount; ntfsfix -d clears it. offline_ready made
                // sure the volume was clean before, so nothing is hidden by that.
                offline_ready(&v, &device, plan)?;
                tracing::info!(volume = %v.id, node = %v.node.display(), "growing the filesystem offline");
                tools::run_with(&plan.argv(&dev_arg.path()), &[&dev_arg]).map_err(|e| about(&v, e))?;
                tools::run_with(&tools::ntfsfix_argv(&dev_arg.path()), &[&dev_arg]).map_err(|e| about(&v, e))?;
                Ok(())
            }
            (g, Some((m, fd))) => {
                let mp_arg = tools::FdPath::new(fd.as_fd())
                    .map_err(|e| Error::io(format!("duplicating a descriptor of {}", m.mount_point.display()), e))?;
                tracing::info!(volume = %v.id, mount_point = %m.mount_point.display(), "growing the filesystem online");
                tools::run_with(&g.argv(&mp_arg.path()), &[&mp_arg]).map(drop).map_err(|e| about(&v, e))
            }
            (g, None) => Err(Error::internal(format!("{g:?} growth of {} planned while unmounted", label(&v)))),
        }
    }

    /// (major, minor) of the volume's partition device, from sysfs.
    fn devnum_of(&self, v: &Volume) -> Result<DevNum> {
        require_device(v)?;
        let path = self.sysfs.join("class/block").join(&v.name).join("dev");
        let text = std::fs::read_to_string(&path).map_err(|e| {
            Error::precondition(format!("{}: the kernel has no partition device {} ({e})", label(v), v.name))
        })?;
        parse_devnum(text.trim())
            .ok_or_else(|| Error::internal(format!("{}: unexpected contents {text:?}", path.display())))
    }

    /// The block device a mount is on, if it is on one.
    fn mount_device(&self, m: &Mount, mounts: &[Mount]) -> Option<DevNum> {
        if m.major != 0 {
            return Some((m.major, m.minor));
        }
        // An anonymous device: btrfs (or fuseblk, should it show one) names its device node as
        // the source. Any other source is whatever its filesystem chose to show, never looked up.
        if !matches!(m.fstype.as_str(), "btrfs" | "fuseblk") {
            return None;
        }
        let source = mountinfo::device_source(&m.source, &self.dev)?;
        // Not through a FUSE filesystem, whose daemon could keep a lookup waiting for ever.
        if mountinfo::holding(mounts, source).is_some_and(mountinfo::is_fuse) {
            return None;
        }
        let st = rustix::fs::statat(rustix::fs::CWD, source, AtFlags::SYMLINK_NOFOLLOW | AtFlags::NO_AUTOMOUNT).ok()?;
        (rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::BlockDevice)
            .then(|| (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev)))
    }

    /// A mount of `dev` that can be reached through its mount point, and a descriptor of it;
    /// the most recent first.
    fn open_mount_of<'m>(&self, dev: DevNum, mounts: &'m [Mount]) -> Option<(&'m Mount, OwnedFd)> {
        mounts.iter().rev().filter(|m| self.mount_device(m, mounts) == Some(dev)).find_map(|m| {
            let fd = rustix::fs::open(
                &m.mount_point,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .ok()?;
            // The path may now lead elsewhere (mounted over): only the mount itself will do.
            match mount_id(fd.as_fd(), "") {
                Ok(Some(id)) if id != m.id => None,
                Ok(_) => Some((m, fd)),
                Err(_) => None,
            }
        })
    }

    /// The volume whose partition device is `dev`, if it is one: sysfs tells the partition and
    /// its disk, the disk's table tells the volume.
    fn volume_of_device(&self, (major, minor): DevNum) -> Result<Option<Volume>> {
        let Ok(link) = std::fs::read_link(self.sysfs.join(format!("dev/block/{major}:{minor}"))) else {
            return Ok(None);
        };
        let (Some(part), Some(disk)) = (link.file_name(), link.parent().and_then(Path::file_name)) else {
            return Ok(None);
        };
        let class = self.sysfs.join("class/block");
        if !class.join(part).join("partition").exists() {
            return Ok(None);
        }
        let Some((dmaj, dmin)) =
            std::fs::read_to_string(class.join(disk).join("dev")).ok().and_then(|t| parse_devnum(t.trim()))
        else {
            return Ok(None);
        };
        let disk = match self.disk(disk_number(dmaj, dmin)) {
            Ok(d) => d,
            Err(Error::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(self.volumes_of(&disk)?.into_iter().find(|v| v.name.as_str() == part))
    }

    /// Mounts NTFS with ntfs-3g (FUSE) onto the directory descriptor; the child gets it and
    /// the checked device as `/proc/self/fd/N`. (ntfs-3g shows the device under the name the
    /// descriptor was opened by, so mountinfo names the node.)
    fn ntfs3g_mount(&self, v: &Volume, device: &Device, dir: &OwnedFd, target_path: &str) -> Result<()> {
        let dev_arg = fd_path(v, device)?;
        let dir_arg =
            tools::FdPath::new(dir.as_fd()).map_err(|e| Error::io(format!("duplicating {target_path}"), e))?;
        let argv = tools::ntfs3g_argv(&dev_arg.path(), &dir_arg.path());
        let out = tools::output_with(&argv, &[&dev_arg, &dir_arg])?;
        if !out.status.success() {
            return Err(Error::internal(format!("{}: {}", label(v), tools::failure(&argv, &out))));
        }
        Ok(())
    }
}

/// The volume's partition device, opened and checked by [`Block::open_device`].
struct Device {
    file: std::fs::File,
    /// Its device number, as sysfs and the node agree.
    num: DevNum,
}

/// The checked device as a tool argument.
fn fd_path(v: &Volume, device: &Device) -> Result<tools::FdPath> {
    tools::FdPath::new(device.file.as_fd())
        .map_err(|e| Error::io(format!("duplicating a descriptor of {}", label(v)), e))
}

/// FailedPrecondition when something holds the device exclusively: a mount (in this mount
/// namespace or any other — mountinfo shows only ours), a RAID or device-mapper user. Opens
/// the checked device again, exclusively, and lets go at once.
fn check_unused(v: &Volume, device: &Device, refusing: &str) -> Result<()> {
    let again = format!("/proc/self/fd/{}", device.file.as_raw_fd());
    // A FUSE filesystem (ntfs-3g) lets go of its device a moment after its unmount returns:
    // busy is the answer only if it lasts.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut opened = rustix::fs::open(again.as_str(), OFlags::RDONLY | OFlags::EXCL | OFlags::CLOEXEC, Mode::empty());
    while matches!(opened, Err(Errno::BUSY)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        opened = rustix::fs::open(again.as_str(), OFlags::RDONLY | OFlags::EXCL | OFlags::CLOEXEC, Mode::empty());
    }
    match opened {
        Ok(fd) => {
            drop(fd);
            Ok(())
        }
        Err(Errno::BUSY) => Err(Error::precondition(format!(
            "{} is in use elsewhere (mounted, possibly in another mount namespace, or held by another device); \
             {refusing}",
            label(v)
        ))),
        Err(e) => Err(Error::io(format!("opening {} exclusively", label(v)), e.into())),
    }
}

/// What growing an unmounted filesystem with a tool that writes the device needs: nothing else
/// using the device ([`check_unused`]: the filesystem may be mounted in another mount
/// namespace), and, for NTFS, a clean volume — ntfsresize would resize a dirty one and the
/// ntfsfix after it would hide that it was dirty.
fn offline_ready(v: &Volume, device: &Device, plan: Grow) -> Result<()> {
    check_unused(v, device, "refusing to grow its filesystem offline")?;
    if plan != Grow::Ntfs {
        return Ok(());
    }
    let dirty = probe::ntfs_dirty(&mut &device.file).map_err(|e| Error::io(format!("reading {}", label(v)), e))?;
    match dirty {
        Some(false) => Ok(()),
        Some(true) => Err(Error::precondition(format!(
            "cannot grow the NTFS filesystem on {}: it is marked dirty (not cleanly unmounted, or a consistency \
             check is pending); have it checked first (chkdsk /f on Windows, or ntfsfix), then call ResizeVolume \
             again",
            label(v)
        ))),
        None => Err(Error::precondition(format!(
            "cannot grow the NTFS filesystem on {}: its $Volume record can't be read to tell whether it is clean",
            label(v)
        ))),
    }
}

/// A tool's error about `v`, naming the volume (tools name the device as `/proc/self/fd/N`).
fn about(v: &Volume, e: Error) -> Error {
    match e {
        Error::Internal(msg) => Error::Internal(format!("{}: {msg}", label(v))),
        Error::FailedPrecondition(msg) => Error::FailedPrecondition(format!("{}: {msg}", label(v))),
        other => other,
    }
}

/// How to grow the filesystem `kind` on `v` in its present state, or why it can't be.
fn grow_plan(v: &Volume, kind: &str, mounted: bool) -> Result<Grow> {
    let needs = |state: &str| {
        Error::precondition(format!(
            "cannot grow the {kind} filesystem on {}: it can be grown only while {state}",
            label(v)
        ))
    };
    match (kind, mounted) {
        ("ext2" | "ext3" | "ext4", _) => Ok(Grow::Ext),
        ("xfs", true) => Ok(Grow::Xfs),
        ("btrfs", true) => Ok(Grow::Btrfs),
        ("xfs" | "btrfs", false) => Err(needs("mounted; mount it")),
        ("ntfs", false) => Ok(Grow::Ntfs),
        ("ntfs", true) => Err(needs("unmounted; unmount it")),
        (other, _) => Err(Error::precondition(format!(
            "cannot resize {}: it holds {}, which ResizeVolume does not grow",
            label(v),
            probe::describe(other)
        ))),
    }
}

/// resize2fs on the checked device, with the e2fsck it may ask for first when unmounted; the
/// missing capability for an online resize is a FailedPrecondition.
fn grow_ext(v: &Volume, dev: &tools::FdPath, mounted: Option<&Path>) -> Result<()> {
    let argv = Grow::Ext.argv(&dev.path());
    for attempt in 0..2 {
        let out = tools::output_with(&argv, &[dev])?;
        if out.status.success() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
        if let (Some(mp), true) = (mounted, text.contains("Permission denied to resize filesystem")) {
            return Err(ext_online_refused(v, mp));
        }
        if attempt == 0 && mounted.is_none() && text.contains("Please run 'e2fsck -f") {
            let fsck = tools::e2fsck_argv(&dev.path());
            let out = tools::output_with(&fsck, &[dev])?;
            // 0: clean, 1: errors corrected; anything else needs a human.
            if !matches!(out.status.code(), Some(0 | 1)) {
                return Err(Error::precondition(format!("{}: {}", label(v), tools::failure(&fsck, &out))));
            }
            continue;
        }
        return Err(Error::internal(format!("{}: {}", label(v), tools::failure(&argv, &out))));
    }
    unreachable!("the loop returns on its second attempt")
}

fn ext_online_refused(v: &Volume, mount_point: &Path) -> Error {
    Error::precondition(format!(
        "cannot grow the ext4 filesystem on {} while it is mounted at {}: online resize needs \
         CAP_SYS_RESOURCE, which this daemon lacks; unmount the volume and call ResizeVolume again \
         (offline growth works), or give the daemon that capability",
        label(v),
        mount_point.display()
    ))
}

/// Whether this process has `cap` in its effective set (`/proc/self/status`, `CapEff`).
fn has_capability(cap: u32) -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return true };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_none_or(|mask| mask & (1 << cap) != 0)
}

/// The kernel filesystem type that mounts what the probe found; `ntfs` means ntfs3 or ntfs-3g.
fn mount_type(kind: &str) -> Option<&'static str> {
    Some(match kind {
        // The ext4 driver serves ext2 and ext3 too.
        "ext2" | "ext3" | "ext4" => "ext4",
        "xfs" => "xfs",
        "btrfs" => "btrfs",
        "ntfs" => "ntfs",
        "vfat" => "vfat",
        "exfat" => "exfat",
        "f2fs" => "f2fs",
        _ => return None,
    })
}

/// Why [`kernel_mount`] failed.
enum MountError {
    /// The errno, and what the filesystem said about it.
    Os(Errno, String),
    /// The filesystem mounted is on this device, not the one expected (nothing was attached).
    Device(DevNum),
}

/// Mounts `source` (a device node) with the kernel driver `fstype` on the directory descriptor
/// `dir`: `fsopen`, `fsconfig`, `fsmount`, `move_mount` — nothing is resolved by path but the
/// source. With `expect`, the new mount's device must be that one before it is attached.
/// Kernels before 5.2 get mount(2) on `/proc/self/fd/N` (and no such check).
fn kernel_mount(fstype: &str, source: &Path, dir: &OwnedFd, expect: Option<DevNum>) -> Result<(), MountError> {
    use rustix::mount::*;
    let fs = match fsopen(fstype, FsOpenFlags::FSOPEN_CLOEXEC) {
        Ok(fs) => fs,
        Err(Errno::NOSYS) => {
            let target = format!("/proc/self/fd/{}", dir.as_raw_fd());
            return mount(source, target.as_str(), fstype, MountFlags::empty(), None)
                .map_err(|e| MountError::Os(e, String::new()));
        }
        Err(e) => return Err(MountError::Os(e, String::new())),
    };
    let said = |e: Errno| MountError::Os(e, fs_messages(&fs));
    fsconfig_set_string(&fs, "source", source).map_err(said)?;
    fsconfig_create(&fs).map_err(said)?;
    let mnt = fsmount(&fs, FsMountFlags::FSMOUNT_CLOEXEC, MountAttrFlags::empty()).map_err(said)?;
    if let Some(want) = expect {
        let st = rustix::fs::fstat(&mnt).map_err(|e| MountError::Os(e, String::new()))?;
        let got = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
        if got != want {
            // Closing the descriptor of a mount never attached unmounts it.
            return Err(MountError::Device(got));
        }
    }
    move_mount(&mnt, "", dir, "", MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH)
        .map_err(|e| MountError::Os(e, String::new()))
}

/// The messages a filesystem context holds (why a mount failed), as " (a; b)".
fn fs_messages(fs: &OwnedFd) -> String {
    let mut said = Vec::new();
    let mut buf = [0u8; 512];
    while let Ok(n) = rustix::io::read(fs, &mut buf) {
        if n == 0 || said.len() >= 8 {
            break;
        }
        // "e ext4: message", "w ...", "i ..."
        let text = String::from_utf8_lossy(&buf[..n]);
        said.push(text.get(2..).unwrap_or(&text).trim().to_string());
    }
    if said.is_empty() {
        String::new()
    } else {
        format!(" ({})", said.join("; "))
    }
}

/// The mount whose root is the directory `dir` (canonically `canonical`), if it is one.
fn mount_rooted_at<'m>(dir: &OwnedFd, canonical: &str, mounts: &'m [Mount]) -> Result<Option<&'m Mount>> {
    let stx = statx_mount(dir.as_fd(), "").map_err(|e| io_err(canonical, "checking", e))?;
    match stx {
        Some((id, Some(root))) => Ok(if root { mountinfo::by_id(mounts, id) } else { None }),
        // Kernels before 5.8: by path, the last mount there being the visible one.
        _ => Ok(mountinfo::visible_at(mounts, Path::new(canonical))),
    }
}

/// The mount that holds the directory `dir`.
fn mount_holding<'m>(dir: &OwnedFd, canonical: &str, mounts: &'m [Mount]) -> Result<Option<&'m Mount>> {
    match mount_id(dir.as_fd(), "").map_err(|e| io_err(canonical, "checking", e))? {
        Some(id) => Ok(mountinfo::by_id(mounts, id)),
        None => Ok(mountinfo::holding(mounts, Path::new(canonical))),
    }
}

/// The mount ID of `name` in `dir` (`""`: `dir` itself), where the kernel reports it.
fn mount_id(dir: BorrowedFd<'_>, name: impl AsRef<Path>) -> rustix::io::Result<Option<u64>> {
    Ok(statx_mount(dir, name)?.map(|(id, _)| id))
}

/// Mount ID and whether it is a mount root (where the kernel reports each), not following a
/// final link.
fn statx_mount(dir: BorrowedFd<'_>, name: impl AsRef<Path>) -> rustix::io::Result<Option<(u64, Option<bool>)>> {
    let name = name.as_ref();
    let flags = if name.as_os_str().is_empty() { AtFlags::EMPTY_PATH } else { AtFlags::SYMLINK_NOFOLLOW }
        | AtFlags::NO_AUTOMOUNT;
    let stx = rustix::fs::statx(dir, name, flags, StatxFlags::MNT_ID | StatxFlags::BASIC_STATS)?;
    if !StatxFlags::from_bits_retain(stx.stx_mask).contains(StatxFlags::MNT_ID) {
        return Ok(None);
    }
    let root = stx
        .stx_attributes_mask
        .contains(StatxAttributes::MOUNT_ROOT)
        .then(|| stx.stx_attributes.contains(StatxAttributes::MOUNT_ROOT));
    Ok(Some((stx.stx_mnt_id, root)))
}

/// A readable descriptor of the directory behind an `O_PATH` one (syncfs and listing need one).
fn reopen(dir: &OwnedFd) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(dir, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
}

fn is_empty_dir(dir: &OwnedFd) -> rustix::io::Result<bool> {
    for entry in rustix::fs::Dir::new(reopen(dir)?)? {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            return Ok(false);
        }
    }
    Ok(true)
}

fn read_mounts() -> Result<Vec<Mount>> {
    mountinfo::read().map_err(|e| Error::internal(format!("reading /proc/self/mountinfo: {e}")))
}

fn parse_devnum(text: &str) -> Option<DevNum> {
    let (a, b) = text.split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// A volume the kernel has no partition device for (its table changed behind the kernel's
/// back) can't be worked on until a Rescan tells the kernel.
fn require_device(v: &Volume) -> Result<()> {
    if v.name.is_empty() {
        return Err(Error::precondition(format!(
            "volume {} has no partition device: the kernel does not know partition {} of disk {}; call Rescan",
            v.id, v.index, v.disk
        )));
    }
    Ok(())
}

/// An error opening a device node that waiting can cure: no node yet (ENOENT), or a node whose
/// numbers name no device at the moment (ENXIO, ENODEV).
fn node_not_ready(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound
        || matches!(e.raw_os_error(), Some(code) if code == rustix::io::Errno::NXIO.raw_os_error()
            || code == rustix::io::Errno::NODEV.raw_os_error())
}

/// How messages name a volume: its ID and its device.
fn label(v: &Volume) -> String {
    format!("volume {} ({})", v.id, v.node.display())
}

fn describe_mount(m: &Mount) -> String {
    format!("{} ({}, mount ID {})", m.source.display(), m.fstype, m.id)
}

fn io_err(path: &str, doing: &str, e: Errno) -> Error {
    Error::io(format!("{doing} {path}"), std::io::Error::from(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vol() -> Volume {
        Volume {
            id: r"\\?\Volume{0b0c2f6e-8a3b-4b43-9c1a-2f4f0e6c1d2a}\".into(),
            disk: 7 << 20,
            index: 1,
            name: "loop0p1".into(),
            node: "/dev/loop0p1".into(),
            start: 1 << 20,
            size: 511 << 20,
            type_guid: crate::formats::gpt::Guid([0; 16]),
        }
    }

    #[test]
    fn grow_plans_follow_what_each_filesystem_allows() {
        let v = vol();
        assert_eq!(grow_plan(&v, "ext4", false).unwrap(), Grow::Ext);
        assert_eq!(grow_plan(&v, "ext3", true).unwrap(), Grow::Ext);
        assert_eq!(grow_plan(&v, "xfs", true).unwrap(), Grow::Xfs);
        assert_eq!(grow_plan(&v, "btrfs", true).unwrap(), Grow::Btrfs);
        assert_eq!(grow_plan(&v, "ntfs", false).unwrap(), Grow::Ntfs);
        for (kind, mounted) in [("xfs", false), ("btrfs", false), ("ntfs", true), ("vfat", false), ("swap", false)] {
            let e = grow_plan(&v, kind, mounted).unwrap_err();
            assert!(matches!(e, Error::FailedPrecondition(_)), "{kind}: {e:?}");
            assert!(e.to_string().contains(&v.id), "{e}");
        }
    }

    #[test]
    fn anonymous_devices_only_for_btrfs_and_fuseblk_sources_in_dev() {
        let b = Block::new(crate::paths::Roots::default(), FsType::Ext4);
        let text = b"\
1 1 0:1 / / rw - ext4 /dev/root rw
2 1 0:30 / /dev rw - devtmpfs udev rw
3 1 0:41 / /b rw - btrfs /dev/null rw
4 1 0:42 / /t rw - tmpfs /dev/null rw
5 1 0:43 / /o rw - btrfs /dev/../dev/null rw
6 1 0:44 / /f rw - fuse.sshfs /dev/null rw
7 1 259:3 / /x rw - xfs /dev/whatever rw
8 2 0:50 / /dev/fz rw - fuse.hang hang rw
9 1 0:45 / /z rw - btrfs /dev/fz/sda1 rw
";
        let mounts = mountinfo::parse(text).unwrap();
        let dev = |i: usize| b.mount_device(&mounts[i], &mounts);
        // /dev/null is a character device, so even btrfs gets none; what matters is that
        // nothing else is looked up at all.
        assert_eq!(dev(2), None);
        assert_eq!(dev(6), Some((259, 3)), "a real device number is taken as it is");
        for i in [0, 1, 3, 4, 5, 7, 8] {
            assert_eq!(dev(i), None, "{:?}", mounts[i]);
        }
        let loop_node = std::fs::read_dir("/dev").unwrap().filter_map(|e| e.ok()).map(|e| e.path()).find(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.strip_prefix("loop").is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
        });
        if let Some(node) = loop_node {
            let st = rustix::fs::stat(&node).unwrap();
            let line = format!("3 1 0:41 / /b rw - btrfs {} rw\n", node.display());
            let m = mountinfo::parse(line.as_bytes()).unwrap();
            assert_eq!(b.mount_device(&m[0], &m), Some((rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev))));
        }
    }

    #[test]
    fn mount_types() {
        assert_eq!(mount_type("ext2"), Some("ext4"));
        assert_eq!(mount_type("ntfs"), Some("ntfs"));
        assert_eq!(mount_type("swap"), None);
        assert_eq!(mount_type("gpt"), None);
    }

    #[test]
    fn capabilities_are_read() {
        // No kernel defines capability 63.
        assert!(!has_capability(63));
        assert_eq!(parse_devnum("259:3"), Some((259, 3)));
        assert_eq!(parse_devnum("259"), None);
    }
}
