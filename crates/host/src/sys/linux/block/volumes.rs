//! Filesystems on volumes: probing, mkfs, mount/unmount, stats, resize and target-path lookup.
//!
//! Each RPC resolves its volume ID with [`Block::volume`] and hands the [`Volume`] to the method
//! that does the work (`mount`, `unmount`, `is_formatted`, `format`, `resize`, `stats`, `flush`).
//! Semantics (documented in the README), where they differ from upstream's Windows behaviour
//! (UPSTREAM.md §3.2, §3.7):
//!
//! - **IsVolumeFormatted**: our own superblock probe of the partition device (`probe.rs`).
//!   Any signature it knows counts, not only filesystems: swap, LUKS, LVM, RAID members and
//!   nested partition tables are "formatted" too, so that nothing is ever formatted over them.
//! - **FormatVolume**: mkfs of `-linux-fs-type` with an argv vector. A volume that holds any
//!   signature is never formatted: FailedPrecondition naming the volume and what is on it
//!   (upstream formats with Force and loses the data).
//! - **MountVolume**: mount(2) of the partition at the target directory, which obeys the
//!   filesystem group's containment ([`super::super::fs::Filesystem::contained_dir`]); the mount
//!   is attached to the directory descriptor that was checked (`fsmount` + `move_mount`), never
//!   to a re-resolved path. The filesystem type comes from the probe; NTFS through the kernel's
//!   `ntfs3` where the kernel has it, else `ntfs-3g` (FUSE). Already mounted there: success.
//!   The volume mounted elsewhere, or the target holding another mount, or a non-empty target
//!   (as upstream, which mounts only on an empty directory): FailedPrecondition naming it.
//! - **UnmountVolume**: syncfs, then umount. Nothing mounted at the target (or no target):
//!   success — upstream errors, we are idempotent. Another filesystem mounted there:
//!   FailedPrecondition, left alone (upstream does not check what it unmounts).
//! - **GetVolumeStats**: statvfs of the mounted filesystem: total = blocks × fragment size,
//!   used = (blocks − free) × fragment size. Not mounted: FailedPrecondition naming the volume
//!   (upstream answers for unmounted volumes too).
//! - **ResizeVolume(size)**: grows the partition, then the filesystem in it — ext2/3/4 with
//!   `resize2fs` (mounted or not; online needs CAP_SYS_RESOURCE), xfs with `xfs_growfs` and btrfs
//!   with `btrfs filesystem resize max` (both only mounted), NTFS with `ntfsresize` then
//!   `ntfsfix -d` (only unmounted; ntfsresize leaves the volume marked dirty, which the kernel's
//!   ntfs3 refuses to mount). How the request combines with upstream's 100 MiB rule, against the partition's
//!   current size P:
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
//!   device is one of our volumes; otherwise NotFound ("not a mounted folder", as upstream).
//! - **GetClosestVolumeIDFromTargetPath**: the mount holding the target, then the mounts it is
//!   mounted below (at most 256), until one is a volume.
//! - **WriteVolumeCache**: syncfs of the mounted filesystem; when unmounted, fsync of the
//!   partition device (which flushes the device's write cache).
//!
//! A mount's device is its mountinfo `major:minor`, or, where that is an anonymous device
//! (major 0, as btrfs shows), the device node named as its source.

use super::mountinfo::{self, Mount};
use super::probe;
use super::tools::{self, Grow};
use super::{disk_number, Block, Volume};
use crate::types::{FsType, VolumeStats};
use crate::{Error, Result};
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
/// How long UnmountVolume retries a busy mount: a child process another thread is starting
/// holds copies of our descriptors until it execs, which makes a mount busy for a moment.
const UNMOUNT_BUSY_WAIT: Duration = Duration::from_millis(500);
/// How long a missing partition node is waited for: where udev runs, it re-reads a partition
/// table after the disk was written, and the partitions' nodes disappear for a moment.
const NODE_WAIT: Duration = Duration::from_secs(5);
/// `CAP_SYS_RESOURCE`: what ext4's online resize checks.
const CAP_SYS_RESOURCE: u32 = 24;

/// A block device number: (major, minor).
type DevNum = (u32, u32);

impl Block {
    pub fn mount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
        self.mount(&self.volume(volume_id)?, target_path)
    }
    pub fn unmount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
        self.unmount(&self.volume(volume_id)?, target_path)
    }
    pub fn is_volume_formatted(&self, volume_id: &str) -> Result<bool> {
        self.is_formatted(&self.volume(volume_id)?)
    }
    pub fn format_volume(&self, volume_id: &str) -> Result<()> {
        self.format(&self.volume(volume_id)?)
    }
    pub fn resize_volume(&self, volume_id: &str, size_bytes: u64) -> Result<()> {
        self.resize(&self.volume(volume_id)?, size_bytes)
    }
    pub fn volume_stats(&self, volume_id: &str) -> Result<VolumeStats> {
        self.stats(&self.volume(volume_id)?)
    }
    pub fn flush_volume(&self, volume_id: &str) -> Result<()> {
        self.flush(&self.volume(volume_id)?)
    }

    pub fn volume_at_path(&self, target_path: &str) -> Result<String> {
        let (dir, canonical) = self.fs.contained_dir(target_path)?;
        let mounts = read_mounts()?;
        let Some(m) = mount_rooted_at(&dir, &canonical, &mounts)? else {
            return Err(Error::not_found(format!(
                "{target_path} is not a mounted folder: no volume is mounted at {canonical}"
            )));
        };
        match self.mount_device(m).map(|d| self.volume_of_device(d)).transpose()?.flatten() {
            Some(v) => Ok(v.id),
            None => Err(Error::not_found(format!(
                "{target_path} is not a mounted folder of a volume: {} is mounted there",
                describe_mount(m)
            ))),
        }
    }

    pub fn closest_volume_to_path(&self, target_path: &str) -> Result<String> {
        let (dir, canonical) = match self.fs.contained_dir(target_path) {
            // A file: the volume holding its directory.
            Err(Error::FailedPrecondition(msg)) => {
                let parent = Path::new(target_path).parent().and_then(Path::to_str).filter(|p| !p.is_empty());
                match parent.map(|p| self.fs.contained_dir(p)) {
                    Some(Ok(found)) => found,
                    _ => return Err(Error::FailedPrecondition(msg)),
                }
            }
            other => other?,
        };
        let mounts = read_mounts()?;
        let mut at = mount_holding(&dir, &canonical, &mounts)?;
        for _ in 0..MAX_MOUNT_DEPTH {
            let Some(m) = at else { break };
            if let Some(v) = self.mount_device(m).map(|d| self.volume_of_device(d)).transpose()?.flatten() {
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

    /// What our superblock probe finds on the volume's partition device: a blkid-style type
    /// name, or `None` when it is blank as far as we can tell.
    pub fn filesystem_on(&self, v: &Volume) -> Result<Option<&'static str>> {
        probe::probe(&mut &self.open_for_probe(v)?).map_err(|e| Error::io(format!("reading {}", label(v)), e))
    }

    /// The first [`probe::PROBE_LEN`] bytes of the volume's partition device (fewer if it is
    /// smaller).
    fn read_head(&self, v: &Volume) -> Result<Vec<u8>> {
        let mut head = Vec::with_capacity(probe::PROBE_LEN);
        std::io::Read::read_to_end(
            &mut std::io::Read::take(self.open_for_probe(v)?, probe::PROBE_LEN as u64),
            &mut head,
        )
        .map_err(|e| Error::io(format!("reading {}", label(v)), e))?;
        Ok(head)
    }

    /// The volume's partition device opened for reading its start past stale cache: what the
    /// page cache holds of the start is dropped, so that a write through the whole disk (a
    /// different cache) can't hide behind stale pages. Dirty pages are kept.
    fn open_for_probe(&self, v: &Volume) -> Result<std::fs::File> {
        require_device(v)?;
        let deadline = Instant::now() + NODE_WAIT;
        let f = loop {
            match std::fs::File::open(&v.node) {
                Ok(f) => break f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => return Err(Error::io(format!("opening {}", label(v)), e)),
            }
        };
        let _ = rustix::fs::fadvise(
            &f,
            0,
            std::num::NonZeroU64::new(probe::PROBE_LEN as u64),
            rustix::fs::Advice::DontNeed,
        );
        Ok(f)
    }

    /// IsVolumeFormatted on a resolved volume.
    pub fn is_formatted(&self, v: &Volume) -> Result<bool> {
        Ok(self.filesystem_on(v)?.is_some())
    }

    /// FormatVolume on a resolved volume.
    pub fn format(&self, v: &Volume) -> Result<()> {
        if let Some(kind) = self.filesystem_on(v)? {
            return Err(Error::precondition(format!(
                "{} already holds {}; FormatVolume never formats over existing data \
                 (wipe the volume first if that is what you mean)",
                label(v),
                probe::describe(kind)
            )));
        }
        // Nothing may hold the device open exclusively (a mount we can't recognise, a RAID or
        // device-mapper user); mkfs would fail less clearly.
        match rustix::fs::open(&v.node, OFlags::RDONLY | OFlags::EXCL | OFlags::CLOEXEC, Mode::empty()) {
            Ok(fd) => drop(fd),
            Err(Errno::BUSY) => {
                return Err(Error::precondition(format!("{} is in use (mounted or held by another device)", label(v))))
            }
            Err(e) => return Err(Error::io(format!("opening {}", label(v)), e.into())),
        }
        let argv = tools::mkfs_argv(self.fs_type, &v.node);
        tracing::info!(volume = %v.id, argv = %tools::show(&argv), "formatting");
        tools::run(&argv)?;
        let made = self.filesystem_on(v)?;
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
    pub fn mount(&self, v: &Volume, target_path: &str) -> Result<()> {
        let (dir, canonical) = self.fs.contained_dir(target_path)?;
        let dev = self.devnum_of(v)?;
        let mounts = read_mounts()?;
        if let Some(m) = mount_rooted_at(&dir, &canonical, &mounts)? {
            if self.mount_device(m) == Some(dev) {
                return Ok(());
            }
            return Err(Error::precondition(format!(
                "cannot mount {} at {target_path}: {} is already mounted there",
                label(v),
                describe_mount(m)
            )));
        }
        if let Some(m) = mounts.iter().find(|m| self.mount_device(m) == Some(dev)) {
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
        let kind = self.filesystem_on(v)?.ok_or_else(|| {
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
        let mounted = match fstype {
            "ntfs" => match kernel_mount("ntfs3", &v.node, &dir) {
                Err((Errno::NODEV, _)) => return self.ntfs3g_mount(v, &dir, target_path),
                other => other,
            },
            t => kernel_mount(t, &v.node, &dir),
        };
        mounted.map_err(|(errno, detail)| {
            let msg =
                format!("mounting {} ({kind}) at {target_path}: {}{detail}", label(v), std::io::Error::from(errno));
            match errno {
                Errno::BUSY | Errno::ROFS | Errno::ACCESS | Errno::INVAL | Errno::NODEV => Error::precondition(msg),
                Errno::PERM => Error::denied(msg),
                _ => Error::internal(msg),
            }
        })
    }

    /// UnmountVolume on a resolved volume.
    pub fn unmount(&self, v: &Volume, target_path: &str) -> Result<()> {
        let dev = self.devnum_of(v)?;
        let (dir, canonical) = match self.fs.contained_dir(target_path) {
            // No directory: nothing can be mounted there.
            Err(Error::NotFound(_)) => return Ok(()),
            other => other?,
        };
        let mounts = read_mounts()?;
        let Some(m) = mount_rooted_at(&dir, &canonical, &mounts)? else { return Ok(()) };
        if self.mount_device(m) != Some(dev) {
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
        let deadline = Instant::now() + UNMOUNT_BUSY_WAIT;
        loop {
            match rustix::mount::unmount(&path, rustix::mount::UnmountFlags::NOFOLLOW) {
                Ok(()) => return Ok(()),
                // Unmounted by someone else meanwhile.
                Err(Errno::INVAL) => return Ok(()),
                Err(Errno::BUSY) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                Err(Errno::BUSY) => {
                    return Err(Error::precondition(format!(
                        "cannot unmount {} from {target_path}: it is busy (files open in it, or mounts below it)",
                        label(v)
                    )))
                }
                Err(e) => return Err(io_err(target_path, "unmounting", e)),
            }
        }
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
    pub fn flush(&self, v: &Volume) -> Result<()> {
        let dev = self.devnum_of(v)?;
        let mounts = read_mounts()?;
        if let Some((m, fd)) = self.open_mount_of(dev, &mounts) {
            let readable =
                reopen(&fd).map_err(|e| Error::io(format!("opening {}", m.mount_point.display()), e.into()))?;
            return rustix::fs::syncfs(&readable).map_err(|e| Error::io(format!("flushing {}", label(v)), e.into()));
        }
        let f = std::fs::File::open(&v.node).map_err(|e| Error::io(format!("opening {}", label(v)), e))?;
        f.sync_all().map_err(|e| Error::io(format!("flushing {}", label(v)), e))
    }

    /// ResizeVolume on a resolved volume.
    pub fn resize(&self, v: &Volume, size_bytes: u64) -> Result<()> {
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
        let kind = self.filesystem_on(v)?;
        let dev = self.devnum_of(v)?;
        let mounts = read_mounts()?;
        let mounted = self.open_mount_of(dev, &mounts).map(|(m, _)| m.mount_point.clone());
        let plan = kind.map(|k| grow_plan(v, k, mounted.as_deref()));
        // A growth asked for explicitly is refused before the partition changes when the
        // filesystem could not follow it in its present state.
        if let (Some(1..), Some(plan)) = (grow_to, &plan) {
            match (plan, &mounted) {
                (Err(e), _) => return Err(Error::precondition(format!("{e}; nothing was changed"))),
                (Ok(Grow::Ext { .. }), Some(mp)) if !has_capability(CAP_SYS_RESOURCE) => {
                    return Err(Error::precondition(format!("{}; nothing was changed", ext_online_refused(v, mp))))
                }
                _ => {}
            }
        }
        let before = v.size;
        let v = match grow_to {
            Some(s) => {
                tracing::info!(volume = %v.id, size = s, "growing the partition");
                self.grow_partition(v, s)?
            }
            None => v.clone(),
        };
        let (Some(kind), Some(plan)) = (kind, plan) else { return Ok(()) };
        // A filesystem that already fills its partition has nothing to grow, whatever its state.
        let fs_size = probe::fs_size(kind, &self.read_head(&v)?);
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
        tracing::info!(volume = %v.id, argv = %tools::show(&plan.argv()), "growing the filesystem");
        match plan {
            Grow::Ext { ref dev } => grow_ext(&v, dev, mounted.as_deref()),
            Grow::Ntfs { ref dev } => {
                tools::run(&plan.argv())?;
                tools::run(&tools::ntfsfix_argv(dev)).map(drop)
            }
            other => tools::run(&other.argv()).map(drop),
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
    fn mount_device(&self, m: &Mount) -> Option<DevNum> {
        if m.major != 0 {
            return Some((m.major, m.minor));
        }
        // An anonymous device (btrfs): the device node named as the source.
        if !m.source.starts_with(&self.dev) {
            return None;
        }
        let st = rustix::fs::stat(&m.source).ok()?;
        (rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::BlockDevice)
            .then(|| (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev)))
    }

    /// A mount of `dev` that can be reached through its mount point, and a descriptor of it;
    /// the most recent first.
    fn open_mount_of<'m>(&self, dev: DevNum, mounts: &'m [Mount]) -> Option<(&'m Mount, OwnedFd)> {
        mounts.iter().rev().filter(|m| self.mount_device(m) == Some(dev)).find_map(|m| {
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

    /// Mounts NTFS with ntfs-3g (FUSE) onto the directory descriptor, which the child gets as
    /// `/proc/self/fd/N`.
    fn ntfs3g_mount(&self, v: &Volume, dir: &OwnedFd, target_path: &str) -> Result<()> {
        // Above 2, so that setting up the child's stdio can't replace it.
        let fd = rustix::io::fcntl_dupfd_cloexec(dir, 3).map_err(|e| io_err(target_path, "duplicating", e))?;
        let raw = fd.as_raw_fd();
        let argv = tools::ntfs3g_argv(&v.node, Path::new(&format!("/proc/self/fd/{raw}")));
        let mut cmd = tools::command(&argv)?;
        // SAFETY: between fork and exec only fcntl runs, which is async-signal-safe and
        // allocates nothing; `raw` is open in the child (fork copies descriptors, and only exec
        // closes close-on-exec ones), and clearing the flag there affects only the child.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                rustix::io::fcntl_setfd(BorrowedFd::borrow_raw(raw), rustix::io::FdFlags::empty())
                    .map_err(std::io::Error::from)
            });
        }
        let out = tools::output(&argv, cmd)?;
        drop(fd);
        if !out.status.success() {
            return Err(Error::internal(tools::failure(&argv, &out)));
        }
        Ok(())
    }
}

/// How to grow the filesystem `kind` on `v` in its present state, or why it can't be.
fn grow_plan(v: &Volume, kind: &str, mounted: Option<&Path>) -> Result<Grow> {
    let needs = |state: &str| {
        Error::precondition(format!(
            "cannot grow the {kind} filesystem on {}: it can be grown only while {state}",
            label(v)
        ))
    };
    match (kind, mounted) {
        ("ext2" | "ext3" | "ext4", _) => Ok(Grow::Ext { dev: v.node.clone() }),
        ("xfs", Some(mp)) => Ok(Grow::Xfs { mount_point: mp.to_path_buf() }),
        ("btrfs", Some(mp)) => Ok(Grow::Btrfs { mount_point: mp.to_path_buf() }),
        ("xfs" | "btrfs", None) => Err(needs("mounted; mount it")),
        ("ntfs", None) => Ok(Grow::Ntfs { dev: v.node.clone() }),
        ("ntfs", Some(_)) => Err(needs("unmounted; unmount it")),
        (other, _) => Err(Error::precondition(format!(
            "cannot resize {}: it holds {}, which ResizeVolume does not grow",
            label(v),
            probe::describe(other)
        ))),
    }
}

/// resize2fs, with the e2fsck it may ask for first when unmounted; the missing capability for
/// an online resize is a FailedPrecondition.
fn grow_ext(v: &Volume, dev: &Path, mounted: Option<&Path>) -> Result<()> {
    let argv = Grow::Ext { dev: dev.to_path_buf() }.argv();
    for attempt in 0..2 {
        let out = tools::output(&argv, tools::command(&argv)?)?;
        if out.status.success() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
        if let (Some(mp), true) = (mounted, text.contains("Permission denied to resize filesystem")) {
            return Err(ext_online_refused(v, mp));
        }
        if attempt == 0 && mounted.is_none() && text.contains("Please run 'e2fsck -f") {
            let fsck = tools::e2fsck_argv(dev);
            let out = tools::output(&fsck, tools::command(&fsck)?)?;
            // 0: clean, 1: errors corrected; anything else needs a human.
            if !matches!(out.status.code(), Some(0 | 1)) {
                return Err(Error::precondition(tools::failure(&fsck, &out)));
            }
            continue;
        }
        return Err(Error::internal(tools::failure(&argv, &out)));
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

/// Mounts `source` (a device node) with the kernel driver `fstype` on the directory descriptor
/// `dir`: `fsopen`, `fsconfig`, `fsmount`, `move_mount` — nothing is resolved by path but the
/// source. Kernels before 5.2 get mount(2) on `/proc/self/fd/N`. On failure: the errno and what
/// the filesystem said about it.
fn kernel_mount(fstype: &str, source: &Path, dir: &OwnedFd) -> std::result::Result<(), (Errno, String)> {
    use rustix::mount::*;
    let fs = match fsopen(fstype, FsOpenFlags::FSOPEN_CLOEXEC) {
        Ok(fs) => fs,
        Err(Errno::NOSYS) => {
            let target = format!("/proc/self/fd/{}", dir.as_raw_fd());
            return mount(source, target.as_str(), fstype, MountFlags::empty(), None).map_err(|e| (e, String::new()));
        }
        Err(e) => return Err((e, String::new())),
    };
    let said = |e: Errno| (e, fs_messages(&fs));
    fsconfig_set_string(&fs, "source", source).map_err(said)?;
    fsconfig_create(&fs).map_err(said)?;
    let mnt = fsmount(&fs, FsMountFlags::FSMOUNT_CLOEXEC, MountAttrFlags::empty()).map_err(said)?;
    move_mount(&mnt, "", dir, "", MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH)
        .map_err(|e| (e, String::new()))
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
        }
    }

    #[test]
    fn grow_plans_follow_what_each_filesystem_allows() {
        let v = vol();
        let mp = Path::new("/k/m");
        assert_eq!(grow_plan(&v, "ext4", None).unwrap(), Grow::Ext { dev: v.node.clone() });
        assert_eq!(grow_plan(&v, "ext3", Some(mp)).unwrap(), Grow::Ext { dev: v.node.clone() });
        assert_eq!(grow_plan(&v, "xfs", Some(mp)).unwrap(), Grow::Xfs { mount_point: mp.into() });
        assert_eq!(grow_plan(&v, "btrfs", Some(mp)).unwrap(), Grow::Btrfs { mount_point: mp.into() });
        assert_eq!(grow_plan(&v, "ntfs", None).unwrap(), Grow::Ntfs { dev: v.node.clone() });
        for (kind, at) in [("xfs", None), ("btrfs", None), ("ntfs", Some(mp)), ("vfat", None), ("swap", None)] {
            let e = grow_plan(&v, kind, at).unwrap_err();
            assert!(matches!(e, Error::FailedPrecondition(_)), "{kind}: {e:?}");
            assert!(e.to_string().contains(&v.id), "{e}");
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
