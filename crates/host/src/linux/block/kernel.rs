//! The kernel's view of a disk's partitions: what sysfs shows, made equal to a GPT with BLKPG,
//! and the per-disk part of a rescan.
//!
//! - **Telling the kernel**: like `partx -u`, partition by partition with BLKPG (see `blkpg`):
//!   what the GPT has and the kernel lacks is added, what changed size is resized, what the GPT
//!   no longer has is removed. Disks without a GPT are not touched (a kernel with an MBR parser
//!   keeps its own view). Calls return once `/dev/<partition>` exists (devtmpfs; no udev needed).
//! - **Rescan**: SCSI scans, LOOP_SET_CAPACITY on loop disks, then every disk's GPT re-read
//!   from the medium (after BLKFLSBUF) and the kernel told; it writes no disk. A failing step
//!   (a SCSI scan in a container with a read-only /sys, one disk) does not stop the others; the
//!   error names every failure.

use super::disklock::Lock;
use super::lookup::volume_id;
use super::table::{os_err, OpenDisk};
use super::{Block, Disk, Volume};
use crate::formats::gpt::{Entry, Table};
use crate::{Error, Result};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long to wait for devtmpfs to show a partition the kernel has added.
const NODE_WAIT: Duration = Duration::from_secs(10);

/// sysfs `start` and `size` count 512-byte units whatever the logical block size.
pub(super) const SYSFS_SECTOR: u64 = 512;

/// A partition as the kernel has it (sysfs).
#[derive(Debug, Clone)]
pub(super) struct KernelPartition {
    pub(super) number: u32,
    pub(super) name: String,
    /// Bytes.
    pub(super) start: u64,
    pub(super) size: u64,
}

impl Block {
    /// The kernel's partitions of a disk, by number.
    pub(super) fn kernel_partitions(&self, disk: &Disk) -> Result<BTreeMap<u32, KernelPartition>> {
        let dir = self.sysfs.join("class/block").join(&disk.name);
        let entries = std::fs::read_dir(&dir)
            .map_err(|e| Error::io(format!("listing the partitions in {}", dir.display()), e))?;
        let mut parts = BTreeMap::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
            // The kernel names partitions after their disk (sda1, loop0p1, nvme0n1p1): skip the
            // other attributes without opening them.
            let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
            if name.len() <= disk.name.len() || !name.starts_with(&disk.name) {
                continue;
            }
            let path = entry.path();
            let number = match std::fs::read_to_string(path.join("partition")) {
                Ok(text) => text,
                Err(_) => continue, // not a partition (queue, holders, …)
            };
            let read_num = |file: &str, text: &str| -> Result<u64> {
                text.trim().parse::<u64>().map_err(|_| {
                    Error::internal(format!("{} holds {:?}, not a number", path.join(file).display(), text))
                })
            };
            let number = u32::try_from(read_num("partition", &number)?)
                .map_err(|_| Error::internal(format!("{} is out of range", path.join("partition").display())))?;
            // Ok(None): the partition went away while it was being read (a table re-read by
            // someone who does not lock the disk): it is not there. Its directory gone, the read
            // fails with ENOENT; its attributes already being torn down, with ENODEV.
            let attr = |file: &str| -> Result<Option<u64>> {
                let text = match std::fs::read_to_string(path.join(file)) {
                    Ok(text) => text,
                    Err(e)
                        if e.kind() == std::io::ErrorKind::NotFound
                            || e.raw_os_error() == Some(rustix::io::Errno::NODEV.raw_os_error()) =>
                    {
                        return Ok(None)
                    }
                    Err(e) => return Err(Error::io(format!("reading {}", path.join(file).display()), e)),
                };
                read_num(file, &text)?
                    .checked_mul(SYSFS_SECTOR)
                    .map(Some)
                    .ok_or_else(|| Error::internal(format!("{} is out of range", path.join(file).display())))
            };
            let (Some(start), Some(size)) = (attr("start")?, attr("size")?) else { continue };
            parts.insert(number, KernelPartition { number, name, start, size });
        }
        Ok(parts)
    }

    /// Makes the kernel's partitions of `disk` those of `table` (like `partx -u`), then waits
    /// until each has its device node.
    pub(super) fn sync_kernel(&self, disk: &Disk, od: &OpenDisk, table: &Table) -> Result<()> {
        let label = Self::disk_label(disk);
        let want: BTreeMap<u32, (u64, u64)> =
            table.entries().iter().map(|e| (e.number, (e.first_lba * od.lbs, e.lbas() * od.lbs))).collect();
        let have = self.kernel_partitions(disk)?;
        // Removals first, so that additions and growth do not overlap what goes away.
        for k in have.values() {
            if want.get(&k.number).is_none_or(|&(start, _)| start != k.start) {
                od.file.delete_partition(k.number).map_err(|e| {
                    os_err(
                        format!(
                            "{label}: removing partition {} ({}), which the partition table no longer has there, \
                             from the kernel (is it mounted?)",
                            k.number, k.name
                        ),
                        e,
                    )
                })?;
            }
        }
        // Shrinks before growths, for the same reason.
        let mut resizes: Vec<_> = have
            .values()
            .filter_map(|k| want.get(&k.number).filter(|w| w.0 == k.start && w.1 != k.size).map(|w| (k, w.1)))
            .collect();
        resizes.sort_by_key(|(k, len)| *len > k.size);
        for (k, len) in resizes {
            od.file.resize_partition(k.number, k.start, len).map_err(|e| {
                os_err(
                    format!("{label}: resizing partition {} ({}) from {} to {len} bytes", k.number, k.name, k.size),
                    e,
                )
            })?;
        }
        for (&number, &(start, len)) in &want {
            if have.get(&number).is_some_and(|k| k.start == start) {
                continue;
            }
            od.file.add_partition(number, start, len).map_err(|e| {
                os_err(format!("{label}: adding partition {number} ({len} bytes at {start}) to the kernel"), e)
            })?;
        }
        // devtmpfs creates the node when the kernel registers the partition; wait for it all the
        // same (a slow uevent path, a udev that renames).
        let now = self.kernel_partitions(disk)?;
        let deadline = Instant::now() + NODE_WAIT;
        for number in want.keys() {
            let k = now.get(number).ok_or_else(|| {
                Error::internal(format!("{label}: the kernel does not show partition {number} after adding it"))
            })?;
            let node = self.dev.join(&k.name);
            while !node.exists() {
                if Instant::now() > deadline {
                    return Err(Error::Unavailable(format!(
                        "{label}: the kernel has partition {number} as {} but {} did not appear within {NODE_WAIT:?}",
                        k.name,
                        node.display()
                    )));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(())
    }

    /// Re-reads one disk's GPT from the medium and tells the kernel; nothing is written to the
    /// disk. Disks without a GPT are left alone.
    pub fn refresh(&self, disk: &Disk) -> Result<()> {
        let _lock = self.lock_disk(disk, Lock::Exclusive)?;
        let od = self.open_disk(disk)?;
        if self.sysfs.join("class/block").join(&disk.name).join("loop/backing_file").exists() {
            od.file.set_capacity().map_err(|e| os_err(format!("LOOP_SET_CAPACITY on {}", od.path.display()), e))?;
        }
        od.file.flush_buffers().map_err(|e| os_err(format!("BLKFLSBUF on {}", od.path.display()), e))?;
        // The size may have changed: open again.
        let od = self.open_disk(disk)?;
        match od.table()? {
            Some(table) => self.sync_kernel(disk, &od, &table),
            None => Ok(()),
        }
    }

    pub(super) fn volume_of(
        &self,
        disk: &Disk,
        od: &OpenDisk,
        entry: &Entry,
        kernel: &BTreeMap<u32, KernelPartition>,
    ) -> Volume {
        let start = entry.first_lba * od.lbs;
        // The kernel's partition of that number is this one only if it starts where the entry does.
        let name = kernel.get(&entry.number).filter(|k| k.start == start).map(|k| k.name.clone()).unwrap_or_default();
        Volume {
            id: volume_id(&entry.guid),
            disk: disk.number,
            index: entry.number,
            node: if name.is_empty() { PathBuf::new() } else { self.dev.join(&name) },
            name,
            start,
            size: entry.lbas() * od.lbs,
            type_guid: entry.type_guid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rescan_goes_on_after_a_failed_scsi_scan_and_names_every_failure() {
        use crate::paths::Roots;
        use crate::types::FsType;
        let root = std::env::temp_dir().join(format!("csi-proxy-rescan-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        // A SCSI host whose scan attribute cannot be written (a directory here; a read-only /sys
        // in a container).
        std::fs::create_dir_all(root.join("sys/class/scsi_host/host0/scan")).unwrap();
        // A virtio disk without its device node: its refresh fails, which shows it was tried.
        std::fs::create_dir_all(root.join("sys/class/block/vda")).unwrap();
        std::fs::write(root.join("sys/class/block/vda/dev"), "252:0\n").unwrap();
        std::fs::write(root.join("sys/class/block/vda/size"), "2048\n").unwrap();
        std::fs::create_dir_all(root.join("sys/dev/block")).unwrap();
        std::os::unix::fs::symlink("../../class/block/vda", root.join("sys/dev/block/252:0")).unwrap();
        std::fs::create_dir_all(root.join("dev")).unwrap();
        let b = Block::with_roots(&root.join("sys"), &root.join("dev"), Roots::default(), FsType::Ext4);
        let err = crate::rescan_and_refresh(&b).unwrap_err().to_string();
        let node = root.join("dev/vda").display().to_string();
        std::fs::remove_dir_all(&root).unwrap();
        assert!(err.contains("SCSI rescan failed") && err.contains("host0/scan"), "{err}");
        assert!(err.contains(&node) && err.contains("2 errors"), "{err}");
    }
}
