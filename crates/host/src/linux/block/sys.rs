//! The system calls the block logic makes on device nodes, behind [`Sys`] and [`DiskFd`]: open(2)
//! of a disk's or a partition's node, fstat, the block ioctls (BLKSSZGET, BLKGETSIZE64, BLKPG,
//! BLKFLSBUF, LOOP_SET_CAPACITY), flock, pread/pwrite, fsync, fadvise, an exclusive re-open,
//! libblkid's probe, and the external tools run on a device ([`Sys::run`]). [`RealSys`] makes
//! them; the tests' `fake::FakeSys` keeps disks in memory, makes a BLKPG change the partitions
//! it shows in a sysfs tree of its own, runs scripted tools, and logs every call that changes
//! something, so the logic is tested without root. The mount table's calls are here too:
//! mountinfo, statx's mount ID, fsopen/fsmount/move_mount (or mount(2)), umount, syncfs,
//! statvfs, the `O_PATH` open of a mount point and the stat of a mount's source node.
//!
//! sysfs is read with `std::fs` below `Block::sysfs` (tests point it at a directory of their
//! own), and so is the existence of `/dev` nodes below `Block::dev`: both are files, which a
//! test can make without root.

use super::tools::{self, FdPath};
use super::{blkid, blkpg, loopdev};
use crate::formats::mountinfo::{self, Mount};
use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags, StatxAttributes, StatxFlags};
use rustix::io::Errno;
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::process::Output;

#[cfg(test)]
pub(crate) mod fake;

/// How a disk's node is opened (always close-on-exec).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Open {
    /// Read-only.
    Read,
    /// Read-only and non-blocking, for a lock: a removable disk without media must not hang.
    Lock,
    /// Read and write.
    Write,
    /// Read and write, and EBUSY when anyone holds the disk or one of its partitions (mounted,
    /// or a device-mapper/md member): `O_EXCL` on a block device.
    Exclusive,
}

/// Opening device nodes, running tools on them.
pub(crate) trait Sys: Send + Sync {
    /// open(2) of `path` as `how` says.
    fn open(&self, path: &Path, how: Open) -> rustix::io::Result<Box<dyn DiskFd>>;
    /// Runs `argv` to completion with `fds` open in the child ([`tools::output_with`]).
    fn run(&self, argv: &[OsString], fds: &[&FdPath]) -> crate::Result<Output>;
    /// `/proc/self/mountinfo`.
    fn mounts(&self) -> std::io::Result<Vec<Mount>>;
    /// statx of `name` in `dir` (`""`: `dir` itself), a final link not followed: the mount ID
    /// and whether it is a mount root, where the kernel reports each.
    fn mount_at(&self, dir: BorrowedFd<'_>, name: &Path) -> rustix::io::Result<Option<(u64, Option<bool>)>>;
    /// Mounts `source` (a device node) with the kernel driver `fstype` on the directory
    /// descriptor `dir`: `fsopen`, `fsconfig`, `fsmount`, `move_mount`, nothing resolved by path
    /// but the source. With `expect`, the new mount's device must be that one before it is
    /// attached. Kernels before 5.2 get mount(2) on `/proc/self/fd/N` (and no such check).
    fn mount(&self, fstype: &str, source: &Path, dir: &OwnedFd, expect: Option<(u32, u32)>) -> Result<(), MountError>;
    /// umount of `path` ([`crate::linux::unmount_waiting`]: its final name not followed, a busy
    /// mount retried for a moment, nothing mounted there any more is success).
    fn unmount(&self, path: &Path) -> rustix::io::Result<()>;
    /// syncfs of the filesystem of the (readable) descriptor.
    fn syncfs(&self, fd: &OwnedFd) -> rustix::io::Result<()>;
    /// statvfs of the filesystem of the descriptor: blocks, free blocks, fragment size.
    fn statvfs(&self, fd: &OwnedFd) -> rustix::io::Result<(u64, u64, u64)>;
    /// An `O_PATH` descriptor of the directory at `path`, a final link not followed.
    fn open_mount_point(&self, path: &Path) -> rustix::io::Result<OwnedFd>;
    /// The device number of the block device node at `path` (a final link not followed), if it
    /// is one.
    fn block_device_at(&self, path: &Path) -> Option<(u32, u32)>;
    /// The block devices active swap is on (`/proc/swaps`; swap files are left out: their
    /// filesystem's mount says where they are).
    fn swaps(&self) -> std::io::Result<Vec<(u32, u32)>>;
}

/// An open descriptor of a whole disk; closing it (drop) releases its flock.
pub(crate) trait DiskFd: Send + Sync {
    /// fstat: whether it is a block device, and its device number (`st_rdev`).
    fn device(&self) -> rustix::io::Result<(bool, (u32, u32))>;
    /// BLKSSZGET: the logical block size in bytes.
    fn logical_block_size(&self) -> rustix::io::Result<u32>;
    /// BLKGETSIZE64: the size in bytes.
    fn size_bytes(&self) -> rustix::io::Result<u64>;
    /// pread of exactly `buf.len()` bytes.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()>;
    /// pwrite of all of `buf`.
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()>;
    /// fsync.
    fn sync(&self) -> std::io::Result<()>;
    /// flock, without waiting (`shared` or exclusive): EWOULDBLOCK while another holds it.
    fn try_lock(&self, shared: bool) -> rustix::io::Result<()>;
    /// BLKPG_ADD_PARTITION (bytes).
    fn add_partition(&self, pno: u32, start: u64, length: u64) -> rustix::io::Result<()>;
    /// BLKPG_RESIZE_PARTITION (bytes; `start` is the partition's own).
    fn resize_partition(&self, pno: u32, start: u64, length: u64) -> rustix::io::Result<()>;
    /// BLKPG_DEL_PARTITION.
    fn delete_partition(&self, pno: u32) -> rustix::io::Result<()>;
    /// BLKFLSBUF: dirty buffers written back, the page cache dropped.
    fn flush_buffers(&self) -> rustix::io::Result<()>;
    /// LOOP_SET_CAPACITY: a loop device re-reads its backing file's size.
    fn set_capacity(&self) -> rustix::io::Result<()>;
    /// fadvise DONTNEED: what the page cache holds of the range is dropped (dirty pages kept);
    /// failures are of no consequence (the next read is only slower or staler).
    fn drop_cache(&self, offset: u64, len: u64);
    /// Opens the same device again with `O_EXCL` and closes it at once: EBUSY while anyone
    /// holds it exclusively (mounted in any mount namespace, a RAID or device-mapper member).
    fn open_exclusive_again(&self) -> rustix::io::Result<()>;
    /// What libblkid finds on the device (`blkid::signature`).
    fn signature(&self) -> Result<Option<String>, String>;
    /// The descriptor as a tool argument (`/proc/self/fd/N` of a duplicate).
    fn tool_path(&self) -> std::io::Result<FdPath>;
}

/// The real system calls.
pub(crate) struct RealSys;

impl Sys for RealSys {
    fn open(&self, path: &Path, how: Open) -> rustix::io::Result<Box<dyn DiskFd>> {
        let flags = match how {
            Open::Read => OFlags::RDONLY,
            Open::Lock => OFlags::RDONLY | OFlags::NONBLOCK,
            Open::Write => OFlags::RDWR,
            Open::Exclusive => OFlags::RDWR | OFlags::EXCL,
        } | OFlags::CLOEXEC;
        let fd = rustix::fs::open(path, flags, Mode::empty())?;
        Ok(Box::new(RealFd(File::from(fd))))
    }
    fn run(&self, argv: &[OsString], fds: &[&FdPath]) -> crate::Result<Output> {
        tools::output_with(argv, fds)
    }
    fn mounts(&self) -> std::io::Result<Vec<Mount>> {
        mountinfo::read()
    }
    fn mount_at(&self, dir: BorrowedFd<'_>, name: &Path) -> rustix::io::Result<Option<(u64, Option<bool>)>> {
        statx_mount(dir, name)
    }
    fn mount(&self, fstype: &str, source: &Path, dir: &OwnedFd, expect: Option<(u32, u32)>) -> Result<(), MountError> {
        kernel_mount(fstype, source, dir, expect)
    }
    fn unmount(&self, path: &Path) -> rustix::io::Result<()> {
        crate::linux::unmount_waiting(path)
    }
    fn syncfs(&self, fd: &OwnedFd) -> rustix::io::Result<()> {
        rustix::fs::syncfs(fd)
    }
    fn statvfs(&self, fd: &OwnedFd) -> rustix::io::Result<(u64, u64, u64)> {
        let s = rustix::fs::fstatvfs(fd)?;
        Ok((s.f_blocks, s.f_bfree, s.f_frsize))
    }
    fn open_mount_point(&self, path: &Path) -> rustix::io::Result<OwnedFd> {
        rustix::fs::open(path, OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
    }
    fn block_device_at(&self, path: &Path) -> Option<(u32, u32)> {
        let st = rustix::fs::statat(rustix::fs::CWD, path, AtFlags::SYMLINK_NOFOLLOW | AtFlags::NO_AUTOMOUNT).ok()?;
        (rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::BlockDevice)
            .then(|| (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev)))
    }
    fn swaps(&self) -> std::io::Result<Vec<(u32, u32)>> {
        let text = match std::fs::read_to_string("/proc/swaps") {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()), // no swap support
            r => r?,
        };
        Ok(swap_partitions(&text).iter().filter_map(|p| self.block_device_at(p)).collect())
    }
}

/// The device paths of the `partition` lines of `/proc/swaps` (after its header), their spaces
/// and other octal escapes (`\040`) decoded.
pub(crate) fn swap_partitions(text: &str) -> Vec<std::path::PathBuf> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (name, kind) = (fields.next()?, fields.next()?);
            let name = crate::formats::mountinfo::unescape(name.as_bytes());
            (kind == "partition").then(|| std::path::PathBuf::from(std::ffi::OsString::from_vec(name)))
        })
        .collect()
}

struct RealFd(File);

impl DiskFd for RealFd {
    fn device(&self) -> rustix::io::Result<(bool, (u32, u32))> {
        let st = rustix::fs::fstat(&self.0)?;
        let is_block = rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::BlockDevice;
        Ok((is_block, (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev))))
    }
    fn logical_block_size(&self) -> rustix::io::Result<u32> {
        blkpg::logical_block_size(&self.0)
    }
    fn size_bytes(&self) -> rustix::io::Result<u64> {
        blkpg::size_bytes(&self.0)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(&self.0, buf, offset)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(&self.0, buf, offset)
    }
    fn sync(&self) -> std::io::Result<()> {
        self.0.sync_all()
    }
    fn try_lock(&self, shared: bool) -> rustix::io::Result<()> {
        let op = if shared { FlockOperation::NonBlockingLockShared } else { FlockOperation::NonBlockingLockExclusive };
        rustix::fs::flock(&self.0, op)
    }
    fn add_partition(&self, pno: u32, start: u64, length: u64) -> rustix::io::Result<()> {
        blkpg::add_partition(&self.0, pno, start, length)
    }
    fn resize_partition(&self, pno: u32, start: u64, length: u64) -> rustix::io::Result<()> {
        blkpg::resize_partition(&self.0, pno, start, length)
    }
    fn delete_partition(&self, pno: u32) -> rustix::io::Result<()> {
        blkpg::delete_partition(&self.0, pno)
    }
    fn flush_buffers(&self) -> rustix::io::Result<()> {
        blkpg::flush_buffers(&self.0)
    }
    fn set_capacity(&self) -> rustix::io::Result<()> {
        loopdev::set_capacity(&self.0)
    }
    fn drop_cache(&self, offset: u64, len: u64) {
        let _ = rustix::fs::fadvise(&self.0, offset, std::num::NonZeroU64::new(len), rustix::fs::Advice::DontNeed);
    }
    fn open_exclusive_again(&self) -> rustix::io::Result<()> {
        let again = format!("/proc/self/fd/{}", self.0.as_raw_fd());
        rustix::fs::open(again.as_str(), OFlags::RDONLY | OFlags::EXCL | OFlags::CLOEXEC, Mode::empty()).map(drop)
    }
    fn signature(&self) -> Result<Option<String>, String> {
        blkid::signature(self.0.as_fd())
    }
    fn tool_path(&self) -> std::io::Result<FdPath> {
        FdPath::new(self.0.as_fd())
    }
}

/// Why a mount ([`Sys::mount`]) failed.
pub(crate) enum MountError {
    /// The errno, and what the filesystem said about it.
    Os(Errno, String),
    /// The filesystem mounted is on this device, not the one expected (nothing was attached).
    Device((u32, u32)),
}

/// Mounts `source` (a device node) with the kernel driver `fstype` on the directory descriptor
/// `dir`: `fsopen`, `fsconfig`, `fsmount`, `move_mount` — nothing is resolved by path but the
/// source. With `expect`, the new mount's device must be that one before it is attached.
/// Kernels before 5.2 get mount(2) on `/proc/self/fd/N` (and no such check).
fn kernel_mount(fstype: &str, source: &Path, dir: &OwnedFd, expect: Option<(u32, u32)>) -> Result<(), MountError> {
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

/// Mount ID and whether it is a mount root (where the kernel reports each), not following a
/// final link.
fn statx_mount(dir: BorrowedFd<'_>, name: &Path) -> rustix::io::Result<Option<(u64, Option<bool>)>> {
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

/// A descriptor read as a stream (what the probes read), by offset.
pub(crate) struct Reader<'a> {
    fd: &'a dyn DiskFd,
    pos: u64,
    size: u64,
}

impl<'a> Reader<'a> {
    /// A reader of the whole device (its size from BLKGETSIZE64).
    pub(crate) fn new(fd: &'a dyn DiskFd) -> rustix::io::Result<Reader<'a>> {
        Ok(Reader { fd, pos: 0, size: fd.size_bytes()? })
    }

    /// The device's size in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.size
    }
}

impl std::io::Read for Reader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.size.saturating_sub(self.pos) as usize);
        self.fd.read_at(self.pos, &mut buf[..n])?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl std::io::Seek for Reader<'_> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        let pos = match to {
            std::io::SeekFrom::Start(p) => Some(p),
            std::io::SeekFrom::End(d) => self.size.checked_add_signed(d),
            std::io::SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = pos.ok_or_else(|| std::io::Error::from(Errno::INVAL))?;
        Ok(self.pos)
    }
}

/// The GPT code reads and writes a disk through its descriptor.
impl crate::formats::gpt::BlockIo for Box<dyn DiskFd> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        DiskFd::read_at(&**self, offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        DiskFd::write_at(&**self, offset, buf)
    }
}
