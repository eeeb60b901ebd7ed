//! Filesystems of volumes in the mount table: MountVolume, UnmountVolume, GetVolumeStats,
//! WriteVolumeCache, and the volume mounted at (or holding) a path.
//!
//! A mount's device is its mountinfo `major:minor`, or, where that is an anonymous device
//! (major 0, as btrfs shows), the device node named as its source — for btrfs (and fuseblk)
//! only, a source below `/dev` without `..`, not on a FUSE mount, its final link not followed.

use super::device::{fd_path, label, parse_devnum, DevNum, Device};
use super::lookup::HeldVolume;
use super::sys::{MountError, Sys};
use super::tools;
use super::{disk_number, Block, Volume};
use crate::error::DOES_NOT_EXIST;
use crate::formats::mountinfo::{self, Mount};
use crate::formats::probe;
use crate::linux::io_err;
use crate::types::VolumeStats;
use crate::{Error, Result};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Mounts walked up from a path by GetClosestVolumeIDFromTargetPath (upstream: 256 parents).
const MAX_MOUNT_DEPTH: usize = 256;

/// Where and how [`Block::mount_checks`] found a volume may be mounted: the target directory
/// (held open) and its canonical path, the device (held open), its filesystem and the type it is
/// mounted as.
struct MountAt {
    dir: OwnedFd,
    canonical: String,
    device: Device,
    kind: &'static str,
    fstype: &'static str,
}

impl Block {
    // Every NotFound here carries DOES_NOT_EXIST: the words AWS EBS's driver matches to decide
    // that a staging folder is not mounted yet.
    /// GetVolumeIDFromTargetPath.
    pub(super) fn volume_mounted_at(&self, target_path: &str) -> Result<String> {
        let (dir, canonical) = match self.fs.contained_dir(target_path) {
            Err(Error::NotFound(msg)) => {
                return Err(Error::not_found(format!("{target_path} is not a mounted folder {DOES_NOT_EXIST}: {msg}")))
            }
            other => other?,
        };
        let mounts = self.read_mounts()?;
        let Some(m) = mount_rooted_at(&*self.sys, &dir, &canonical, &mounts)? else {
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

    /// GetClosestVolumeIDFromTargetPath.
    pub(super) fn volume_holding(&self, target_path: &str) -> Result<String> {
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
        let mounts = self.read_mounts()?;
        let mut at = mount_holding(&*self.sys, &dir, &canonical, &mounts)?;
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

    /// What MountVolume checks before it mounts, by reading only: `None` when the volume is
    /// mounted there already.
    fn mount_checks(&self, v: &HeldVolume, target_path: &str) -> Result<Option<MountAt>> {
        let (dir, canonical) = self.fs.contained_dir(target_path)?;
        self.refuse_root(v, target_path, &canonical)?;
        let device = self.open_device(v)?;
        let dev = device.num;
        let mounts = self.read_mounts()?;
        if let Some(m) = mount_rooted_at(&*self.sys, &dir, &canonical, &mounts)? {
            if self.mount_device(m, &mounts) == Some(dev) {
                return Ok(None);
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
        Ok(Some(MountAt { dir, canonical, device, kind, fstype }))
    }

    /// Dry-run of MountVolume on a resolved volume: [`Self::mount_checks`], told.
    pub(crate) fn plan_mount(&self, v: &HeldVolume, target_path: &str) -> Result<String> {
        Ok(match self.mount_checks(v, target_path)? {
            None => format!("{} is already mounted at {target_path}: nothing would change", label(v)),
            Some(at) => format!("would mount {} ({}) at {} as {}", label(v), at.kind, at.canonical, at.fstype),
        })
    }

    /// MountVolume on a resolved volume.
    pub(crate) fn mount(&self, v: &HeldVolume, target_path: &str) -> Result<()> {
        let Some(MountAt { dir, canonical, device, kind, fstype }) = self.mount_checks(v, target_path)? else {
            return Ok(());
        };
        let dev = device.num;
        tracing::info!(volume = %v.id, target = %canonical, fstype, "mounting");
        // The kernel is given the node's path (what mountinfo shows as the source; a
        // `/proc/self/fd/N` there would mislead every reader of it), checked above and held open
        // meanwhile; the new mount's device is checked again before it is attached. btrfs shows
        // an anonymous device there, so its mount is not checked again.
        let mounted = match fstype {
            "ntfs" => match self.sys.mount("ntfs3", &v.node, &dir, Some(dev)) {
                Err(MountError::Os(Errno::NODEV, _)) => return self.ntfs3g_mount(v, &device, &dir, target_path),
                other => other,
            },
            "btrfs" => self.sys.mount("btrfs", &v.node, &dir, None),
            t => self.sys.mount(t, &v.node, &dir, Some(dev)),
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
    pub(super) fn refuse_root(&self, v: &Volume, target_path: &str, canonical: &str) -> Result<()> {
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
        let mounts = self.read_mounts()?;
        let Some(m) = mount_rooted_at(&*self.sys, &dir, &canonical, &mounts)? else { return Ok(()) };
        if self.mount_device(m, &mounts) != Some(dev) {
            return Err(Error::precondition(format!(
                "{target_path} has {} mounted, not {}; left alone",
                describe_mount(m),
                label(v)
            )));
        }
        let readable = reopen(&dir).map_err(|e| io_err(target_path, "opening", e))?;
        self.sys.syncfs(&readable).map_err(|e| io_err(target_path, "flushing", e))?;
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
        if let Some(id) = mount_id(&*self.sys, parent.as_fd(), &name).map_err(|e| io_err(target_path, "checking", e))? {
            if id != m.id {
                return Err(Error::precondition(format!("{target_path} changed while it was being unmounted")));
            }
        }
        let path = PathBuf::from(format!("/proc/self/fd/{}", parent.as_raw_fd())).join(&name);
        tracing::info!(volume = %v.id, target = %canonical, "unmounting");
        self.sys.unmount(&path).map_err(|e| match e {
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
        let mounts = self.read_mounts()?;
        let Some((_, fd)) = self.open_mount_of(dev, &mounts) else {
            return Err(Error::precondition(format!(
                "{} is not mounted; its size and use are known only while it is mounted",
                label(v)
            )));
        };
        let (blocks, free, frsize) =
            self.sys.statvfs(&fd).map_err(|e| Error::io(format!("statvfs of {}", label(v)), e.into()))?;
        let total = blocks.saturating_mul(frsize);
        let used = blocks.saturating_sub(free).saturating_mul(frsize);
        Ok(VolumeStats { total_bytes: total, used_bytes: used })
    }

    /// WriteVolumeCache on a resolved volume.
    pub(crate) fn flush(&self, v: &HeldVolume) -> Result<()> {
        let dev = self.devnum_of(v)?;
        let mounts = self.read_mounts()?;
        if let Some((m, fd)) = self.open_mount_of(dev, &mounts) {
            let readable =
                reopen(&fd).map_err(|e| Error::io(format!("opening {}", m.mount_point.display()), e.into()))?;
            return self.sys.syncfs(&readable).map_err(|e| Error::io(format!("flushing {}", label(v)), e.into()));
        }
        let device = self.open_device(v)?;
        device.file.sync().map_err(|e| Error::io(format!("flushing {}", label(v)), e))
    }

    /// The block device a mount is on, if it is on one.
    pub(super) fn mount_device(&self, m: &Mount, mounts: &[Mount]) -> Option<DevNum> {
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
        self.sys.block_device_at(source)
    }

    /// A mount of `dev` that can be reached through its mount point, and a descriptor of it;
    /// the most recent first.
    pub(super) fn open_mount_of<'m>(&self, dev: DevNum, mounts: &'m [Mount]) -> Option<(&'m Mount, OwnedFd)> {
        mounts.iter().rev().filter(|m| self.mount_device(m, mounts) == Some(dev)).find_map(|m| {
            let fd = self.sys.open_mount_point(&m.mount_point).ok()?;
            // The path may now lead elsewhere (mounted over): only the mount itself will do.
            match mount_id(&*self.sys, fd.as_fd(), "") {
                Ok(Some(id)) if id != m.id => None,
                Ok(_) => Some((m, fd)),
                Err(_) => None,
            }
        })
    }

    /// The volume whose partition device is `dev`, if it is one: sysfs tells the partition and
    /// its disk, the disk's table tells the volume.
    pub(super) fn volume_of_device(&self, (major, minor): DevNum) -> Result<Option<Volume>> {
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
    pub(super) fn ntfs3g_mount(&self, v: &Volume, device: &Device, dir: &OwnedFd, target_path: &str) -> Result<()> {
        let dev_arg = fd_path(v, device)?;
        let dir_arg =
            tools::FdPath::new(dir.as_fd()).map_err(|e| Error::io(format!("duplicating {target_path}"), e))?;
        let argv = tools::ntfs3g_argv(&dev_arg.path(), &dir_arg.path());
        let out = self.sys.run(&argv, &[&dev_arg, &dir_arg])?;
        if !out.status.success() {
            return Err(Error::internal(format!("{}: {}", label(v), tools::failure(&argv, &out))));
        }
        Ok(())
    }
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

/// The mount whose root is the directory `dir` (canonically `canonical`), if it is one.
fn mount_rooted_at<'m>(
    sys: &dyn Sys,
    dir: &OwnedFd,
    canonical: &str,
    mounts: &'m [Mount],
) -> Result<Option<&'m Mount>> {
    let stx = sys.mount_at(dir.as_fd(), Path::new("")).map_err(|e| io_err(canonical, "checking", e))?;
    match stx {
        Some((id, Some(root))) => Ok(if root { mountinfo::by_id(mounts, id) } else { None }),
        // Kernels before 5.8: by path, the last mount there being the visible one.
        _ => Ok(mountinfo::visible_at(mounts, Path::new(canonical))),
    }
}

/// The mount that holds the directory `dir`.
fn mount_holding<'m>(sys: &dyn Sys, dir: &OwnedFd, canonical: &str, mounts: &'m [Mount]) -> Result<Option<&'m Mount>> {
    match mount_id(sys, dir.as_fd(), "").map_err(|e| io_err(canonical, "checking", e))? {
        Some(id) => Ok(mountinfo::by_id(mounts, id)),
        None => Ok(mountinfo::holding(mounts, Path::new(canonical))),
    }
}

/// The mount ID of `name` in `dir` (`""`: `dir` itself), where the kernel reports it.
fn mount_id(sys: &dyn Sys, dir: BorrowedFd<'_>, name: impl AsRef<Path>) -> rustix::io::Result<Option<u64>> {
    Ok(sys.mount_at(dir, name.as_ref())?.map(|(id, _)| id))
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

impl Block {
    pub(super) fn read_mounts(&self) -> Result<Vec<Mount>> {
        self.sys.mounts().map_err(|e| Error::internal(format!("reading /proc/self/mountinfo: {e}")))
    }
}

fn describe_mount(m: &Mount) -> String {
    format!("{} ({}, mount ID {})", m.source.display(), m.fstype, m.id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::FsType;

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
}
