//! A whole disk opened for partition-table work: its node opened and checked to be that disk,
//! its logical block size and size, reads and writes at offsets, and the GPT as the kernel would
//! trust it.
//!
//! - **Which GPT is trusted**: the kernel's rule (see `Table::read`): only behind a protective MBR
//!   in LBA 0, or a blank LBA 0 before a valid primary copy (our own interrupted write). A disk
//!   whose LBA 0 is a real MBR or another boot sector has no GPT here, however valid a stale one
//!   behind it: its partitions are the kernel's MBR partitions and are never touched. A GPT whose
//!   primary copy is invalid is not trusted either when the head of the disk holds a filesystem
//!   or another signature (a whole-disk filesystem over an old GPT keeps the backup copy at the
//!   end): PartitionDisk refuses, naming what is there, instead of rewriting LBA 1–33 over it.

use super::disklock::{DiskLock, Lock};
use super::sys::{DiskFd, Open};
use super::{Block, Disk};
use crate::formats::gpt::{Guid, Table};
use crate::formats::probe;
use crate::{Error, Result};
use rustix::io::Errno;
use std::path::PathBuf;

/// Partitions start and end on 1 MiB boundaries.
pub(super) const ALIGNMENT: u64 = 1 << 20;

/// Linux filesystem data.
pub(super) const LINUX_FS: Guid = match Guid::parse("0fc63daf-8483-4772-8e79-3d69d8477de4") {
    Some(g) => g,
    None => panic!(),
};

/// Basic data: what Windows formats, and what a disk partitioned there holds.
pub(super) const BASIC_DATA: Guid = match Guid::parse("ebd0a0a2-b9e5-4433-87c0-68b6b72699c7") {
    Some(g) => g,
    None => panic!(),
};

/// An OS error from `what`, by kind; EBUSY is a state of the host, not a fault.
pub(super) fn os_err(what: impl std::fmt::Display, e: Errno) -> Error {
    match e {
        Errno::BUSY => Error::precondition(format!("{what}: device or resource busy")),
        Errno::ROFS => Error::precondition(format!("{what}: the device is read-only")),
        _ => Error::io(what, e.into()),
    }
}

/// A whole disk opened for table work.
pub(super) struct OpenDisk {
    pub(super) file: Box<dyn DiskFd>,
    /// Logical block size in bytes.
    pub(super) lbs: u64,
    /// Size in bytes.
    pub(super) size: u64,
    /// `/dev/<name>`, for messages.
    pub(super) path: PathBuf,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    Read,
    Write,
    /// Write, and fail with EBUSY when anyone holds the disk or one of its partitions (mounted,
    /// or a device-mapper/md member).
    Exclusive,
}

impl OpenDisk {
    /// The GPT as the kernel would read it (see `Table::read`).
    pub(super) fn raw_table(&self) -> Result<Option<Table>> {
        Table::read(&self.file, self.lbs, self.size / self.lbs)
            .map_err(|e| Error::io(format!("reading the partition table of {}", self.path.display()), e))
    }

    /// What the head of the disk holds besides a partition table: a filesystem, swap, LUKS, …
    pub(super) fn head_signature(&self) -> Result<Option<&'static str>> {
        let head = self.read(0, probe::PROBE_LEN)?;
        Ok(probe::identify(&head).filter(|kind| *kind != "gpt" && *kind != "dos"))
    }

    /// The GPT to work with: [`Self::raw_table`], except a table read from its backup copy alone
    /// while the head of the disk holds a signature: a leftover of what the disk held before
    /// that signature was made on the whole disk, not a table of it.
    pub(super) fn table(&self) -> Result<Option<Table>> {
        let table = self.raw_table()?;
        if table.as_ref().is_some_and(|t| !t.primary_ok) {
            if let Some(kind) = self.head_signature()? {
                tracing::debug!(
                    "{}: ignoring the backup GPT at its end: the primary is invalid and the disk starts with {}",
                    self.path.display(),
                    probe::describe(kind)
                );
                return Ok(None);
            }
        }
        Ok(table)
    }

    pub(super) fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let len = len.min(self.size.saturating_sub(offset) as usize);
        let mut buf = vec![0u8; len];
        self.file.read_at(offset, &mut buf).map_err(|e| Error::io(format!("reading {}", self.path.display()), e))?;
        Ok(buf)
    }

    pub(super) fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.file.write_at(offset, data).map_err(|e| Error::io(format!("writing {}", self.path.display()), e))
    }

    pub(super) fn sync(&self) -> Result<()> {
        self.file.sync().map_err(|e| Error::io(format!("flushing {}", self.path.display()), e))
    }

    /// Alignment in logical blocks.
    pub(super) fn align(&self) -> u64 {
        align_blocks(self.lbs)
    }
}

/// [`ALIGNMENT`] in blocks of `lbs` bytes.
pub(super) fn align_blocks(lbs: u64) -> u64 {
    (ALIGNMENT / lbs).max(1)
}

impl Block {
    pub(super) fn disk_label(disk: &Disk) -> String {
        format!("disk {} ({})", disk.number, disk.name)
    }

    /// Opens `/dev/<name>` of a disk for reading and checks that it is that disk.
    pub(super) fn open_disk(&self, disk: &Disk) -> Result<OpenDisk> {
        self.open_disk_as(disk, Access::Read)
    }

    /// Opens the disk whose exclusive lock is held for writing (`exclusive`: and fails with
    /// FailedPrecondition when anyone holds the disk or a partition of it). Writing is only
    /// possible this way: a close after writing makes udev re-read the table, which it must not
    /// do while we work (see `disklock`).
    pub(super) fn open_disk_for_write(&self, lock: &DiskLock, exclusive: bool) -> Result<OpenDisk> {
        if lock.mode != Lock::Exclusive {
            return Err(Error::internal(format!(
                "{}: opened for writing under a shared lock",
                Self::disk_label(&lock.disk)
            )));
        }
        self.open_disk_as(&lock.disk, if exclusive { Access::Exclusive } else { Access::Write })
    }

    pub(super) fn open_disk_as(&self, disk: &Disk, access: Access) -> Result<OpenDisk> {
        let path = self.dev.join(&disk.name);
        let how = match access {
            Access::Read => Open::Read,
            Access::Write => Open::Write,
            Access::Exclusive => Open::Exclusive,
        };
        let what = || format!("opening {} for {}", path.display(), Self::disk_label(disk));
        let file = self.sys.open(&path, how).map_err(|e| os_err(what(), e))?;
        let (is_block, (major, minor)) = file.device().map_err(|e| os_err(what(), e))?;
        if !is_block || (major, minor) != (disk.major, disk.minor) {
            return Err(Error::internal(format!(
                "{} is not {}: it is device {major}:{minor}, expected {}:{}",
                path.display(),
                Self::disk_label(disk),
                disk.major,
                disk.minor
            )));
        }
        let lbs = file.logical_block_size().map_err(|e| os_err(format!("BLKSSZGET on {}", path.display()), e))?;
        let size = file.size_bytes().map_err(|e| os_err(format!("BLKGETSIZE64 on {}", path.display()), e))?;
        if !(512..=65536).contains(&lbs) || !lbs.is_power_of_two() {
            return Err(Error::internal(format!("{} reports a logical block size of {lbs}", path.display())));
        }
        Ok(OpenDisk { file, lbs: u64::from(lbs), size, path })
    }

    /// FailedPrecondition when sysfs says the disk is read-only.
    pub(super) fn check_writable(&self, disk: &Disk) -> Result<()> {
        let ro =
            std::fs::read_to_string(self.sysfs.join("class/block").join(&disk.name).join("ro")).unwrap_or_default();
        if ro.trim() == "1" {
            return Err(Error::precondition(format!("{} is read-only", Self::disk_label(disk))));
        }
        Ok(())
    }
}
