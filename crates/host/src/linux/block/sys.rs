//! The system calls the whole-disk logic makes (`disklock`, `table`, `kernel`, and through them
//! `lookup` and `partitions`), behind [`Sys`] and [`DiskFd`]: open(2) of a disk's node, fstat,
//! the block ioctls (BLKSSZGET, BLKGETSIZE64, BLKPG, BLKFLSBUF, LOOP_SET_CAPACITY), flock,
//! pread/pwrite and fsync. [`RealSys`] makes them; the tests' `fake::FakeSys` keeps disks in
//! memory, makes a BLKPG change the partitions it shows in a sysfs tree of its own, and logs
//! every call that changes something, so the logic is tested without root.
//!
//! sysfs is read with `std::fs` below `Block::sysfs` (tests point it at a directory of their
//! own), and so is the existence of `/dev` nodes below `Block::dev`: both are files, which a
//! test can make without root.

use super::{blkpg, loopdev};
use rustix::fs::{FlockOperation, Mode, OFlags};
use std::fs::File;
use std::path::Path;

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

/// Opening whole-disk device nodes.
pub(crate) trait Sys: Send + Sync {
    /// open(2) of `path` as `how` says.
    fn open(&self, path: &Path, how: Open) -> rustix::io::Result<Box<dyn DiskFd>>;
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
