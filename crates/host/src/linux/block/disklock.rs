//! Keeping udev (and every other tool that follows the same rule) away from a disk while we
//! work on it.
//!
//! Where systemd-udevd runs, it watches whole disks: when a writer closes one, it re-reads the
//! partition table (BLKRRPART), and the kernel drops and re-adds every partition; their sysfs
//! entries and `/dev` nodes vanish for a moment. It probes partitions on every change event too.
//! udevd leaves alone (skips, or with newer versions postpones) a disk on which someone holds a
//! BSD `flock`, which is how partitioning tools are expected to keep it out (systemd's "Locking
//! Block Device Access" document); it takes `LOCK_EX` itself while it re-reads.
//!
//! So every disk and volume call that uses or changes a disk's partitions holds the whole-disk
//! lock from the moment it resolves the volume until it is done:
//! - [`Lock::Exclusive`] for everything that writes (PartitionDisk, FormatVolume, MountVolume,
//!   UnmountVolume, ResizeVolume, Rescan's per-disk refresh);
//! - [`Lock::Shared`] for reads that need the partition device to stay put (IsVolumeFormatted,
//!   WriteVolumeCache). GetVolumeStats takes none: it reads a mounted filesystem, whose partition
//!   no re-read can take away.
//!
//! Taking the lock waits while udevd re-reads a table (it holds `LOCK_EX` meanwhile), so the
//! partitions are back, with their nodes, once we hold it. The lock is taken on a read-only
//! descriptor of the disk: closing it is no "close after write", which is what makes udevd re-read.
//! A re-read that udevd saved up for later runs after we let go; the next call locks first and
//! waits for it. The wait is bounded ([`LOCK_WAIT`]): a tool holding the disk longer makes the
//! call fail with Aborted (retryable), naming the disk.
//!
//! Writing descriptors of a whole disk are only handed out against a held exclusive lock (see
//! `table.rs`, `Block::open_disk_for_write`), and the volume calls that act on a partition take a
//! `HeldVolume`, which only `Block::hold_volume` (`lookup.rs`) makes: work on a disk can't be
//! written without the lock.

use super::sys::{DiskFd, Open};
use super::{Block, Disk};
use crate::{Error, Result};
use rustix::io::Errno;
use std::time::{Duration, Instant};

/// How long a call waits for another holder of a disk's lock (udevd holds it for the length of
/// a table re-read or a probe; a partitioning tool for as long as it works).
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lock {
    /// Others may read (and lock shared) too; udevd and writers stay out.
    Shared,
    /// Nobody else holds the lock.
    Exclusive,
}

/// A held `flock` on a whole disk; released when dropped (its descriptor closes).
pub(crate) struct DiskLock {
    _file: Box<dyn DiskFd>,
    pub(crate) disk: Disk,
    pub(crate) mode: Lock,
}
impl Block {
    /// Locks `disk` (`/dev/<name>`, checked to be that disk), waiting at most [`LOCK_WAIT`].
    pub(crate) fn lock_disk(&self, disk: &Disk, mode: Lock) -> Result<DiskLock> {
        let path = self.dev.join(&disk.name);
        let label = format!("disk {} ({})", disk.number, disk.name);
        // Non-blocking open: a removable disk without media must not hang here.
        let fd = self
            .sys
            .open(&path, Open::Lock)
            .map_err(|e| Error::io(format!("opening {} to lock {label}", path.display()), e.into()))?;
        let (is_block, device) =
            fd.device().map_err(|e| Error::io(format!("checking {}", path.display()), e.into()))?;
        if !is_block || device != (disk.major, disk.minor) {
            return Err(Error::internal(format!(
                "{} is not {label} (device {}:{}); refusing to lock it",
                path.display(),
                disk.major,
                disk.minor
            )));
        }
        let deadline = Instant::now() + LOCK_WAIT;
        let mut pause = Duration::from_millis(2);
        loop {
            match fd.try_lock(mode == Lock::Shared) {
                Ok(()) => return Ok(DiskLock { _file: fd, disk: disk.clone(), mode }),
                Err(Errno::WOULDBLOCK) | Err(Errno::INTR) if Instant::now() < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Err(Errno::WOULDBLOCK) => {
                    return Err(Error::Aborted(format!(
                        "{label} stayed locked for more than {LOCK_WAIT:?} (a flock on {} held by another call \
                         on the same disk, by udev or by a partitioning tool); retry the call",
                        path.display()
                    )))
                }
                Err(e) => return Err(Error::io(format!("locking {} ({label})", path.display()), e.into())),
            }
        }
    }
}
