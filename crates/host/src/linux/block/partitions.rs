//! GPT work: PartitionDisk and growing a partition.
//!
//! - **PartitionDisk**: a disk without a partition table gets a protective MBR and a GPT with one
//!   partition over all its space, start and end on 1 MiB boundaries, type Linux filesystem
//!   (`0fc63daf-8483-4772-8e79-3d69d8477de4`; upstream uses Windows' basic data type, which says
//!   nothing to Linux tools), name `csi-proxy`. A disk that already has a table (a GPT, or an MBR
//!   with partitions) is left as it is (upstream's rule); a GPT with no partition but Microsoft
//!   reserved ones gets one in its largest free space (upstream creates one there too). A disk
//!   with no table but a filesystem or other signature on the whole device is refused with
//!   FailedPrecondition: upstream would initialise it and lose the data. A disk in use (the
//!   exclusive open fails) is never given a new table, nor a primary GPT rewritten.
//! - **Growing**: the backup table moves to the new end of the disk, the partition grows in
//!   place (its slot, GUID, name and attributes kept), the kernel resizes it (BLKPG works while
//!   it is mounted). Never shrinks.
//!
//! Failures leave a disk as it was or in a state the next call repairs: tables are written
//! backup first, a GPT with one bad copy is rewritten from the good one, a missing protective
//! MBR is added, and the kernel sync runs on every call.

use super::disklock::Lock;
use super::lookup::{parse_volume_id, HeldVolume};
use super::table::{align_blocks, OpenDisk, LINUX_FS};
use super::{Block, Disk, Volume};
use crate::formats::gpt::{aligned_extent, classify_mbr, protective_mbr, Entry, Guid, Mbr, Table, MICROSOFT_RESERVED};
use crate::formats::probe;
use crate::{Error, Result};
use std::fs::File;

/// GPT partition name of the partition PartitionDisk creates.
const PARTITION_NAME: &str = "csi-proxy";

/// A random (version 4) GUID, in GPT byte order.
fn random_guid() -> Result<Guid> {
    let mut b = [0u8; 16];
    std::io::Read::read_exact(
        &mut File::open("/dev/urandom").map_err(|e| Error::io("opening /dev/urandom", e))?,
        &mut b,
    )
    .map_err(|e| Error::io("reading /dev/urandom", e))?;
    b[7] = (b[7] & 0x0f) | 0x40; // version 4: high nibble of the third field (stored little-endian)
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
    Ok(Guid(b))
}

/// The table PartitionDisk gives a disk without one, `total_lbas` blocks of `lbs` bytes: one
/// partition over all the usable space, start and end on [`ALIGNMENT`] boundaries, type Linux
/// filesystem, named [`PARTITION_NAME`]. Not written yet; `None` when no such partition fits.
fn fresh_table(lbs: u64, total_lbas: u64, disk_guid: Guid, partition_guid: Guid) -> Option<Table> {
    let mut table = Table::new(lbs, total_lbas, disk_guid)?;
    let h = &table.header;
    let (first, last) = aligned_extent(h.first_usable, h.last_usable, align_blocks(lbs))?;
    table.set_entry(1, LINUX_FS, partition_guid, first, last, PARTITION_NAME);
    Some(table)
}

/// Where the used entries of a table lie (first, last).
fn extents(table: &Table) -> Vec<(u64, u64)> {
    table.entries().iter().map(|e| (e.first_lba, e.last_lba)).collect()
}

/// The last block of `entry` grown to `size_bytes` (0: all the room after it, the end rounded
/// down to `align` blocks but never below where it is). Err: why not, naming the sizes.
fn growth_target(table: &Table, entry: &Entry, align: u64, size_bytes: u64) -> std::result::Result<u64, String> {
    let lbs = table.lbs;
    let room = table.room_after(entry.number).unwrap_or(entry.last_lba).max(entry.last_lba);
    if size_bytes == 0 {
        let aligned = ((room + 1) / align * align).saturating_sub(1);
        return Ok(aligned.max(entry.last_lba));
    }
    let current = entry.lbas() * lbs;
    let last = entry.first_lba + size_bytes.div_ceil(lbs) - 1;
    if last < entry.last_lba {
        return Err(format!("it is {current} bytes; {size_bytes} bytes would shrink it, which is not supported"));
    }
    if last > room {
        let most = (room - entry.first_lba + 1) * lbs;
        return Err(format!(
            "it cannot grow to {size_bytes} bytes: at most {most} bytes are available (now {current})"
        ));
    }
    Ok(last)
}

impl Block {
    /// Writes a protective MBR over LBA 0 when its first 512 bytes are all zero (a table whose
    /// MBR write did not happen); anything else there is left alone.
    pub(super) fn repair_protective_mbr(&self, od: &OpenDisk) -> Result<()> {
        if od.read(0, 512)?.iter().any(|&b| b != 0) {
            return Ok(());
        }
        self.write_protective_mbr(od)
    }

    pub(super) fn write_protective_mbr(&self, od: &OpenDisk) -> Result<()> {
        od.write(0, &protective_mbr(od.size / od.lbs))
    }

    /// Sets the size of a pure protective MBR's 0xEE record to the disk's (after it grew).
    pub(super) fn update_protective_mbr(&self, od: &OpenDisk) -> Result<()> {
        let mut sector = od.read(0, 512)?;
        if classify_mbr(&sector) != Mbr::Protective {
            return Ok(());
        }
        let records: Vec<usize> = (0..4).map(|i| 446 + 16 * i).collect();
        let nonzero: Vec<usize> =
            records.iter().copied().filter(|&r| sector[r..r + 16].iter().any(|&b| b != 0)).collect();
        let [r] = nonzero[..] else { return Ok(()) }; // hybrid: not ours to edit
        let want = u32::try_from(od.size / od.lbs - 1).unwrap_or(u32::MAX).to_le_bytes();
        if sector[r + 4] != 0xEE || sector[r + 12..r + 16] == want {
            return Ok(());
        }
        sector[r + 12..r + 16].copy_from_slice(&want);
        od.write(0, &sector)
    }

    /// A new protective MBR and GPT with one partition over the whole disk.
    pub(super) fn create_table(&self, disk: &Disk, od: &OpenDisk) -> Result<Table> {
        let label = Self::disk_label(disk);
        let mut table = fresh_table(od.lbs, od.size / od.lbs, random_guid()?, random_guid()?).ok_or_else(|| {
            Error::precondition(format!("{label} is too small for a 1 MiB aligned partition ({} bytes)", od.size))
        })?;
        // LBA 0 blank first (what is there is replaced by the protective MBR anyway): a GPT is
        // trusted behind a blank LBA 0, not behind another MBR, so a crash after the GPT write
        // leaves a table the next PartitionDisk completes.
        if od.read(0, 512)?.iter().any(|&b| b != 0) {
            od.write(0, &[0u8; 512])?;
            od.sync()?;
        }
        // The GPT first, then LBA 0: a crash in between leaves a valid GPT whose MBR the next
        // PartitionDisk adds.
        table
            .write(&od.file, &[])
            .map_err(|e| Error::internal(format!("writing a GPT to {}: {e}", od.path.display())))?;
        od.sync()?;
        self.write_protective_mbr(od)?;
        od.sync()?;
        od.table()?.ok_or_else(|| Error::internal(format!("{label}: the GPT just written does not read back")))
    }

    /// Whether an existing GPT needs PartitionDisk to write: no partition but Microsoft reserved
    /// ones, a bad copy, or a blank LBA 0.
    pub(super) fn incomplete(&self, od: &OpenDisk, table: &Table) -> Result<bool> {
        Ok(table.entries().iter().all(|e| e.type_guid == MICROSOFT_RESERVED)
            || !table.primary_ok
            || !table.backup_ok
            || od.read(0, 512)?.iter().all(|&b| b == 0))
    }

    /// Completes an existing GPT: one partition when it has none but Microsoft reserved ones
    /// (`exclusive`: nobody holds the disk), both copies valid, a protective MBR when LBA 0 is
    /// blank.
    pub(super) fn complete_table(&self, disk: &Disk, od: &OpenDisk, table: &mut Table, exclusive: bool) -> Result<()> {
        let label = Self::disk_label(disk);
        if !exclusive && !table.primary_ok {
            return Err(Self::busy_primary(&label));
        }
        let before = extents(table);
        let mut changed = false;
        if table.entries().iter().all(|e| e.type_guid == MICROSOFT_RESERVED) {
            if !exclusive {
                return Err(Error::precondition(format!(
                    "{label} has a GPT without partitions but is in use (mounted or held by another device)"
                )));
            }
            let extent = table.free_extents().into_iter().find_map(|(a, b)| aligned_extent(a, b, od.align()));
            let (first, last) = extent
                .ok_or_else(|| Error::precondition(format!("{label}: its GPT has no 1 MiB of free space left")))?;
            let slot =
                table.free_slot().ok_or_else(|| Error::precondition(format!("{label}: its GPT has no free entry")))?;
            table.set_entry(slot, LINUX_FS, random_guid()?, first, last, PARTITION_NAME);
            changed = true;
        }
        if changed || !table.primary_ok || !table.backup_ok {
            table.write(&od.file, &before).map_err(|e| {
                Error::precondition(format!("{label}: rewriting its GPT on {}: {e}", od.path.display()))
            })?;
        }
        self.repair_protective_mbr(od)?;
        od.sync()
    }

    /// What PartitionDisk has to do with a disk, read without writing: `Some(table)` for a GPT,
    /// `None` for a blank disk; Ok(Err(())) for an MBR table (nothing to do); refusals as errors.
    pub(super) fn inspect(&self, disk: &Disk, od: &OpenDisk) -> Result<std::result::Result<Option<Table>, ()>> {
        let label = Self::disk_label(disk);
        if let Some(table) = od.raw_table()? {
            // Only the backup copy is valid: completing the table would write LBA 1–33. Not
            // over a filesystem (or anything else) made on the whole disk since that table.
            if !table.primary_ok {
                if let Some(kind) = od.head_signature()? {
                    return Err(Error::precondition(format!(
                        "{label} ({}) holds {} at its start and a GPT only in its backup copy at its end (the \
                         primary copy is invalid); refusing to rewrite the table over it (that would destroy it)",
                        od.path.display(),
                        probe::describe(kind)
                    )));
                }
            }
            return Ok(Ok(Some(table)));
        }
        let head = od.read(0, probe::PROBE_LEN)?;
        let refuse = |what: String| {
            Err(Error::precondition(format!(
                "{label} has no partition table but {what}; refusing to partition it (that would destroy it)"
            )))
        };
        // Signatures first: a filesystem's boot sector can look like an MBR.
        match (probe::identify(&head), classify_mbr(&head)) {
            (Some(kind), _) if kind != "dos" && kind != "gpt" => {
                refuse(format!("holds {} on the whole disk", probe::describe(kind)))
            }
            (_, Mbr::Partitioned) => Ok(Err(())),
            (_, Mbr::Protective) => refuse("a protective MBR whose GPT is unreadable (both headers bad)".into()),
            (_, Mbr::Unknown) => refuse("a boot sector that is not a partition table".into()),
            (Some("gpt"), _) => refuse(
                "a GPT signature that is no table the kernel reads (no protective MBR in LBA 0, or no valid \
                 primary header behind a blank one)"
                    .into(),
            ),
            _ => Ok(Ok(None)),
        }
    }

    /// The refusal to rewrite a primary GPT of a disk in use.
    pub(super) fn busy_primary(label: &str) -> Error {
        Error::precondition(format!(
            "{label} is in use (mounted, or held by another device) and its primary GPT is invalid; refusing to \
             rewrite it from the backup copy while the disk is in use"
        ))
    }

    /// Dry-run of PartitionDisk: [`Self::partition`]'s reading half, told. It does not test
    /// whether the disk is in use (that takes an exclusive open, a change a dry run must not
    /// make): the plan then says what would be written if it is not.
    pub fn plan_partition(&self, disk: &Disk) -> Result<String> {
        let _lock = self.lock_disk(disk, Lock::Shared)?;
        let label = Self::disk_label(disk);
        let od = self.open_disk(disk)?;
        Ok(match self.inspect(disk, &od)? {
            Err(()) => format!("{label} already has an MBR partition table: nothing would change"),
            Ok(Some(table)) if !self.incomplete(&od, &table)? => {
                format!("{label} already has a complete GPT: nothing would be written (the kernel re-reads it)")
            }
            Ok(Some(_)) => {
                self.check_writable(disk)?;
                format!("would complete the GPT of {label} (its backup copy, protective MBR or data partition)")
            }
            Ok(None) => {
                self.check_writable(disk)?;
                format!("would write a GPT to {label} with one Linux data partition over the whole disk (if nothing holds it open then)")
            }
        })
    }

    /// PartitionDisk on one disk; see the module documentation. The disk is opened for writing
    /// only when something is to be written (a close after writing makes udev, where it runs,
    /// re-read the partitions), and exclusively when a table or partition is to be created.
    pub fn partition(&self, disk: &Disk) -> Result<()> {
        let lock = self.lock_disk(disk, Lock::Exclusive)?;
        let label = Self::disk_label(disk);
        let od = self.open_disk(disk)?;
        let table = match self.inspect(disk, &od)? {
            Err(()) => return Ok(()), // an MBR table: already partitioned
            Ok(Some(table)) if !self.incomplete(&od, &table)? => return self.sync_kernel(disk, &od, &table),
            Ok(table) => table,
        };
        self.check_writable(disk)?;
        let in_use = |e: String| {
            Error::precondition(format!(
                "{label} is in use (mounted, or held by another device); refusing to write a partition table: {e}"
            ))
        };
        let (od, exclusive) = match self.open_disk_for_write(&lock, true) {
            Ok(od) => (od, true),
            // In use: only a table with a valid primary copy may be completed (a backup copy
            // rewritten, a protective MBR added); nothing is created or rewritten at its start.
            Err(Error::FailedPrecondition(e)) => match &table {
                Some(t) if t.primary_ok => (self.open_disk_for_write(&lock, false)?, false),
                Some(_) => return Err(Self::busy_primary(&label)),
                None => return Err(in_use(e)),
            },
            Err(e) => return Err(e),
        };
        // Again on the descriptor that writes: the disk may have changed in between.
        let table = match self.inspect(disk, &od)? {
            Err(()) => return Ok(()),
            Ok(Some(mut table)) => {
                self.complete_table(disk, &od, &mut table, exclusive)?;
                table
            }
            Ok(None) if !exclusive => {
                return Err(in_use(format!("its partition table is gone since {} was opened", od.path.display())))
            }
            Ok(None) => self.create_table(disk, &od)?,
        };
        self.sync_kernel(disk, &od, &table)
    }

    /// Grows the partition of `volume` to `size_bytes` (0: all the space after it, the end on a
    /// 1 MiB boundary) and tells the kernel; returns the volume as it is now. A smaller size is
    /// refused (FailedPrecondition naming both sizes); the current size is a no-op. The backup
    /// table moves to the end of the disk first, so space a grown disk added is usable.
    pub fn grow_partition(&self, volume: &Volume, size_bytes: u64) -> Result<Volume> {
        self.grow_held(&self.hold_volume(&volume.id, Lock::Exclusive)?, size_bytes)
    }

    /// [`Self::grow_partition`] of a volume whose disk is locked.
    pub(crate) fn grow_held(&self, held: &HeldVolume, size_bytes: u64) -> Result<Volume> {
        let volume = &held.volume;
        let guid = parse_volume_id(&volume.id)?;
        let disk = held.lock.disk.clone();
        let label = Self::disk_label(&disk);
        // The table and the new end of the partition; decided on a read-only descriptor, then
        // again on the writing one when there is something to write.
        let plan = |od: &OpenDisk| -> Result<(Table, Entry, u64)> {
            let table = od
                .table()?
                .ok_or_else(|| Error::not_found(format!("volume {}: {label} has no GPT any more", volume.id)))?;
            let entry = table
                .entries()
                .into_iter()
                .find(|e| e.guid == guid)
                .ok_or_else(|| Error::not_found(format!("volume {} is no longer on {label}", volume.id)))?;
            let last = growth_target(&table, &entry, od.align(), size_bytes)
                .map_err(|why| Error::precondition(format!("volume {} on {label}: {why}", volume.id)))?;
            Ok((table, entry, last))
        };
        let mut od = self.open_disk(&disk)?;
        let (mut table, mut entry, mut last) = plan(&od)?;
        if last != entry.last_lba || !table.healthy() {
            self.check_writable(&disk)?;
            // A primary copy is rewritten from the backup only when nobody holds the disk.
            let exclusive = !table.primary_ok;
            od = match self.open_disk_for_write(&held.lock, exclusive) {
                Err(Error::FailedPrecondition(_)) if exclusive => return Err(Self::busy_primary(&label)),
                other => other?,
            };
            (table, entry, last) = plan(&od)?;
            if !table.primary_ok && !exclusive {
                return Err(Error::precondition(format!(
                    "{label}: its primary GPT turned invalid while volume {} was being grown; refusing to \
                     rewrite it on a disk that may be in use",
                    volume.id
                )));
            }
            let before = extents(&table);
            table.set_last_lba(entry.number, last);
            table.write(&od.file, &before).map_err(|e| {
                Error::precondition(format!("{label}: rewriting its GPT on {}: {e}", od.path.display()))
            })?;
            self.update_protective_mbr(&od)?;
            od.sync()?;
        }
        self.sync_kernel(&disk, &od, &table)?;
        let kernel = self.kernel_partitions(&disk)?;
        let entry = table.entries().into_iter().find(|e| e.guid == guid).expect("the entry just written");
        Ok(self.volume_of(&disk, &od, &entry, &kernel))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::gpt::BlockIo;

    struct Mem(std::cell::RefCell<Vec<u8>>);
    impl BlockIo for Mem {
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
            buf.copy_from_slice(&self.0.borrow()[offset as usize..offset as usize + buf.len()]);
            Ok(())
        }
        fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
            self.0.borrow_mut()[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
            Ok(())
        }
    }

    /// A table of a `blocks`-block disk (512-byte blocks) with partition 1 over `first..=last`,
    /// read back as the backend reads it.
    fn table(blocks: u64, first: u64, last: u64) -> Table {
        let dev = Mem(std::cell::RefCell::new(vec![0u8; blocks as usize * 512]));
        let mut t = Table::new(512, blocks, Guid([1; 16])).unwrap();
        t.set_entry(1, LINUX_FS, Guid([2; 16]), first, last, "p");
        t.write(&dev, &[]).unwrap();
        Table::read(&dev, 512, blocks).unwrap().unwrap()
    }

    /// The image PartitionDisk wrote when the `gpt` crate made its tables (`lbs`-byte blocks,
    /// `blocks` of them), with the disk and partition GUIDs the crate picked; `None` where it
    /// refused (no room for a table, or for a 1 MiB aligned partition).
    fn image_of_the_gpt_crate(lbs: u64, blocks: u64) -> Option<(Vec<u8>, Guid, Guid)> {
        let lb = gpt::disk::LogicalBlockSize::try_from(lbs).unwrap();
        let mut dev = std::io::Cursor::new(vec![0u8; (blocks * lbs) as usize]);
        let mut d =
            gpt::GptConfig::new().writable(true).logical_block_size(lb).create_from_device(&mut dev, None).ok()?;
        let h = d.header();
        let (first, last) = aligned_extent(h.first_usable, h.last_usable, align_blocks(lbs))?;
        d.add_partition_at(PARTITION_NAME, 1, first, last - first + 1, gpt::partition_types::LINUX_FS, 0).unwrap();
        let disk_guid = Guid::parse(&d.guid().to_string()).unwrap();
        let part_guid = Guid::parse(&d.partitions()[&1].part_guid.to_string()).unwrap();
        d.write().unwrap();
        let lbas = u32::try_from(blocks - 1).unwrap_or(u32::MAX);
        gpt::mbr::ProtectiveMBR::with_lb_size(lbas).overwrite_lba0(&mut dev).unwrap();
        Some((dev.into_inner(), disk_guid, part_guid))
    }

    /// PartitionDisk's new table is the one the `gpt` crate wrote before ours replaced it: the
    /// same usable range, entry arrays, partition extent, type and name, and, given the same
    /// GUIDs, the same bytes on the whole disk. Sizes around the smallest disk that takes a
    /// table and an aligned partition, and larger ones not a whole number of MiB.
    #[test]
    fn fresh_tables_are_what_the_gpt_crate_wrote() {
        let sizes = |lbs: u64| {
            // The first MiB (tables inside), one MiB of partition, the backup array and header.
            let smallest = 2 * align_blocks(lbs) + 16384 / lbs + 1;
            let mut s: Vec<u64> = (smallest - 3..smallest + 3).collect();
            s.extend([3, 60, (8 << 20) / lbs, (8 << 20) / lbs + 7, (64 << 20) / lbs - 1]);
            s
        };
        let (mut made, mut refused) = (0, 0);
        for lbs in [512u64, 4096] {
            for blocks in sizes(lbs) {
                let what = format!("{blocks} blocks of {lbs} bytes");
                let Some((old, disk_guid, part_guid)) = image_of_the_gpt_crate(lbs, blocks) else {
                    assert!(fresh_table(lbs, blocks, Guid([1; 16]), Guid([2; 16])).is_none(), "{what}");
                    refused += 1;
                    continue;
                };
                made += 1;
                let mut new = fresh_table(lbs, blocks, disk_guid, part_guid).unwrap_or_else(|| panic!("{what}"));
                let dev = Mem(std::cell::RefCell::new(vec![0u8; (blocks * lbs) as usize]));
                new.write(&dev, &[]).unwrap();
                dev.write_at(0, &protective_mbr(blocks)).unwrap();

                // The properties that matter, one by one (for a readable failure)...
                let o = Table::read(&Mem(old.clone().into()), lbs, blocks).unwrap().unwrap();
                let n = Table::read(&dev, lbs, blocks).unwrap().unwrap();
                assert!(o.healthy() && n.healthy(), "{what}");
                let layout = |t: &Table| {
                    let h = &t.header;
                    (h.first_usable, h.last_usable, h.entries_lba, h.backup_lba, h.num_entries, h.entry_size)
                };
                assert_eq!(layout(&n), layout(&o), "{what}: usable range, array, backup");
                assert_eq!(n.entries(), o.entries(), "{what}: the partition");
                let extent = n.entries()[0].first_lba * lbs..(n.entries()[0].last_lba + 1) * lbs;
                assert!(extent.start % (1 << 20) == 0 && extent.end % (1 << 20) == 0, "{what}: {extent:?}");
                // ...then every byte: backup array and header, name, attributes, MBR.
                let new = dev.0.into_inner();
                if let Some(at) = (0..new.len()).find(|&i| new[i] != old[i]) {
                    panic!(
                        "{what}: byte {at} (block {}) differs: {:#04x}, was {:#04x}",
                        at as u64 / lbs,
                        new[at],
                        old[at]
                    );
                }
            }
        }
        assert_eq!((made, refused), (12, 10), "both sides of the smallest disk, for both block sizes");
    }

    #[test]
    fn growth_targets() {
        // 64 MiB disk, partition 1 MiB..=2 MiB-1; last usable block 131038.
        let t = table(131072, 2048, 4095);
        let e = &t.entries()[0];
        // 0: all the room, the end rounded down to 1 MiB.
        assert_eq!(growth_target(&t, e, 2048, 0), Ok(129_023));
        // An exact size, rounded up to whole blocks.
        assert_eq!(growth_target(&t, e, 2048, 2 << 20), Ok(6143));
        assert_eq!(growth_target(&t, e, 2048, (2 << 20) + 1), Ok(6144));
        // The current size: unchanged.
        assert_eq!(growth_target(&t, e, 2048, 1 << 20), Ok(4095));
        // Smaller: refused naming both sizes; larger than the disk: refused naming the room.
        let shrink = growth_target(&t, e, 2048, 1 << 19).unwrap_err();
        assert!(shrink.contains("1048576") && shrink.contains("524288"), "{shrink}");
        let huge = growth_target(&t, e, 2048, 1 << 40).unwrap_err();
        assert!(
            huge.contains(&(1u64 << 40).to_string()) && huge.contains(&((131_038 - 2048 + 1) * 512).to_string()),
            "{huge}"
        );
        // A partition already past the last aligned boundary is not shrunk by "all the room".
        let t = table(131072, 2048, 131_038);
        assert_eq!(growth_target(&t, &t.entries()[0], 2048, 0), Ok(131_038));
    }

    #[test]
    fn random_guids_are_version_4() {
        let g = random_guid().unwrap().to_string();
        assert_eq!(&g[14..15], "4", "{g}");
        assert!(matches!(&g[19..20], "8" | "9" | "a" | "b"), "{g}");
        assert_ne!(random_guid().unwrap(), random_guid().unwrap());
    }
}
