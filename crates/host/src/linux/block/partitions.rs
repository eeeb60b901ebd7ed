//! GPT partition tables, telling the kernel about partitions, volume lookup and rescans.
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
//! - **Which GPT is trusted**: the kernel's rule (see `Table::read`): only behind a protective MBR
//!   in LBA 0, or a blank LBA 0 before a valid primary copy (our own interrupted write). A disk
//!   whose LBA 0 is a real MBR or another boot sector has no GPT here, however valid a stale one
//!   behind it: its partitions are the kernel's MBR partitions and are never touched. A GPT whose
//!   primary copy is invalid is not trusted either when the head of the disk holds a filesystem
//!   or another signature (a whole-disk filesystem over an old GPT keeps the backup copy at the
//!   end): PartitionDisk refuses, naming what is there, instead of rewriting LBA 1–33 over it.
//! - **Telling the kernel**: like `partx -u`, partition by partition with BLKPG (see `blkpg`):
//!   what the GPT has and the kernel lacks is added, what changed size is resized, what the GPT
//!   no longer has is removed. Disks without a GPT are not touched (a kernel with an MBR parser
//!   keeps its own view). Calls return once `/dev/<partition>` exists (devtmpfs; no udev needed).
//! - **Volume ID**: `\\?\Volume{<GPT partition GUID, lower case>}\`, upstream's shape. The GUID is
//!   in the table, so the ID survives reboots and rescans and is found by reading the tables of
//!   the disks. Partitions of MBR disks are not volumes here. An ID found on two disks (a cloned
//!   disk) is refused rather than guessed, whichever disk was listed last.
//! - **Rescan**: SCSI scans, LOOP_SET_CAPACITY on loop disks, then every disk's GPT re-read
//!   from the medium (after BLKFLSBUF) and the kernel told; it writes no disk. A failing step
//!   (a SCSI scan in a container with a read-only /sys, one disk) does not stop the others; the
//!   error names every failure.
//! - **Growing**: the backup table moves to the new end of the disk, the partition grows in
//!   place (its slot, GUID, name and attributes kept), the kernel resizes it (BLKPG works while
//!   it is mounted). Never shrinks.
//!
//! Failures leave a disk as it was or in a state the next call repairs: tables are written
//! backup first, a GPT with one bad copy is rewritten from the good one, a missing protective
//! MBR is added, and the kernel sync runs on every call.

use super::disklock::{DiskLock, HeldVolume, Lock};
use super::{blkpg, loopdev, Block, Disk, Volume};
use crate::data_volume::{self, Candidate, DiskNumber};
use crate::formats::gpt::{
    aligned_extent, classify_mbr, protective_mbr, BlockIo, Entry, Guid, Mbr, Table, MICROSOFT_RESERVED,
};
use crate::formats::probe;
use crate::{Error, Result};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Partitions start and end on 1 MiB boundaries.
const ALIGNMENT: u64 = 1 << 20;
/// GPT partition name of the partition PartitionDisk creates.
const PARTITION_NAME: &str = "csi-proxy";
/// Linux filesystem data.
const LINUX_FS: Guid = match Guid::parse("0fc63daf-8483-4772-8e79-3d69d8477de4") {
    Some(g) => g,
    None => panic!(),
};
/// Basic data: what Windows formats, and what a disk partitioned there holds.
const BASIC_DATA: Guid = match Guid::parse("ebd0a0a2-b9e5-4433-87c0-68b6b72699c7") {
    Some(g) => g,
    None => panic!(),
};
/// How long to wait for devtmpfs to show a partition the kernel has added.
const NODE_WAIT: Duration = Duration::from_secs(10);
/// sysfs `start` and `size` count 512-byte units whatever the logical block size.
const SYSFS_SECTOR: u64 = 512;

const ID_PREFIX: &str = r"\\?\Volume{";
const ID_SUFFIX: &str = r"}\";

/// A disk device is where the GPT code reads and writes.
impl BlockIo for std::fs::File {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, buf, offset)
    }
}

/// The volume ID of the GPT partition with this unique GUID.
pub(crate) fn volume_id(guid: &Guid) -> String {
    format!("{ID_PREFIX}{guid}{ID_SUFFIX}")
}

/// The GUID in a volume ID; InvalidArgument naming it and the expected form otherwise. Hex digits
/// may be of either case (Windows compares volume IDs without case).
pub(crate) fn parse_volume_id(id: &str) -> Result<Guid> {
    id.strip_prefix(ID_PREFIX).and_then(|rest| rest.strip_suffix(ID_SUFFIX)).and_then(Guid::parse).ok_or_else(|| {
        Error::invalid(format!(
            "volume ID {id:?} is malformed: expected \\\\?\\Volume{{xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx}}\\ \
             (a GPT partition GUID, as ListVolumesOnDisk returns)"
        ))
    })
}

/// An OS error from `what`, by kind; EBUSY is a state of the host, not a fault.
fn os_err(what: impl std::fmt::Display, e: Errno) -> Error {
    match e {
        Errno::BUSY => Error::precondition(format!("{what}: device or resource busy")),
        Errno::ROFS => Error::precondition(format!("{what}: the device is read-only")),
        _ => Error::io(what, e.into()),
    }
}

/// A whole disk opened for table work.
struct OpenDisk {
    file: File,
    /// Logical block size in bytes.
    lbs: u64,
    /// Size in bytes.
    size: u64,
    /// `/dev/<name>`, for messages.
    path: PathBuf,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
    /// Write, and fail with EBUSY when anyone holds the disk or one of its partitions (mounted,
    /// or a device-mapper/md member).
    Exclusive,
}

impl OpenDisk {
    /// The GPT as the kernel would read it (see `Table::read`).
    fn raw_table(&self) -> Result<Option<Table>> {
        Table::read(&self.file, self.lbs, self.size / self.lbs)
            .map_err(|e| Error::io(format!("reading the partition table of {}", self.path.display()), e))
    }

    /// What the head of the disk holds besides a partition table: a filesystem, swap, LUKS, …
    fn head_signature(&self) -> Result<Option<&'static str>> {
        let head = self.read(0, probe::PROBE_LEN)?;
        Ok(probe::identify(&head).filter(|kind| *kind != "gpt" && *kind != "dos"))
    }

    /// The GPT to work with: [`Self::raw_table`], except a table read from its backup copy alone
    /// while the head of the disk holds a signature: a leftover of what the disk held before
    /// that signature was made on the whole disk, not a table of it.
    fn table(&self) -> Result<Option<Table>> {
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

    fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let len = len.min(self.size.saturating_sub(offset) as usize);
        let mut buf = vec![0u8; len];
        std::os::unix::fs::FileExt::read_exact_at(&self.file, &mut buf, offset)
            .map_err(|e| Error::io(format!("reading {}", self.path.display()), e))?;
        Ok(buf)
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        std::os::unix::fs::FileExt::write_all_at(&self.file, data, offset)
            .map_err(|e| Error::io(format!("writing {}", self.path.display()), e))
    }

    fn sync(&self) -> Result<()> {
        self.file.sync_all().map_err(|e| Error::io(format!("flushing {}", self.path.display()), e))
    }

    /// Alignment in logical blocks.
    fn align(&self) -> u64 {
        align_blocks(self.lbs)
    }
}

/// Where a volume GUID was last seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    On(u32),
    /// On more than one disk (a cloned disk): no hint, every lookup reads every disk (and
    /// refuses while the GUID is on several), until a lookup finds it on one disk only.
    Several,
}

/// Which disk each volume GUID was last seen on. A lookup tries that disk first instead of
/// reading the table of every disk: a disk nobody holds open has its page cache dropped at its
/// last close, so each table read is I/O. Only a hint: the disk's table is read to confirm it.
static LAST_SEEN: Mutex<BTreeMap<Guid, Seen>> = Mutex::new(BTreeMap::new());

/// Notes the GUIDs of `disk`'s table. A GUID already seen on another disk loses its hint for
/// good (`Seen::Several`): the order in which disks are listed must not pick one of two clones.
fn remember(disk: u32, entries: &[Entry]) {
    let mut seen = LAST_SEEN.lock().unwrap_or_else(|e| e.into_inner());
    for e in entries {
        let hint = match seen.get(&e.guid) {
            Some(Seen::On(other)) if *other != disk => Seen::Several,
            Some(Seen::Several) => Seen::Several,
            _ => Seen::On(disk),
        };
        seen.insert(e.guid, hint);
    }
}

/// A partition as the kernel has it (sysfs).
#[derive(Debug, Clone)]
struct KernelPartition {
    number: u32,
    name: String,
    /// Bytes.
    start: u64,
    size: u64,
}

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

/// [`ALIGNMENT`] in blocks of `lbs` bytes.
fn align_blocks(lbs: u64) -> u64 {
    (ALIGNMENT / lbs).max(1)
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
    pub(super) fn disk_label(disk: &Disk) -> String {
        format!("disk {} ({})", disk.number, disk.name)
    }

    /// Opens `/dev/<name>` of a disk for reading and checks that it is that disk.
    fn open_disk(&self, disk: &Disk) -> Result<OpenDisk> {
        self.open_disk_as(disk, Access::Read)
    }

    /// Opens the disk whose exclusive lock is held for writing (`exclusive`: and fails with
    /// FailedPrecondition when anyone holds the disk or a partition of it). Writing is only
    /// possible this way: a close after writing makes udev re-read the table, which it must not
    /// do while we work (see `disklock`).
    fn open_disk_for_write(&self, lock: &DiskLock, exclusive: bool) -> Result<OpenDisk> {
        if lock.mode != Lock::Exclusive {
            return Err(Error::internal(format!(
                "{}: opened for writing under a shared lock",
                Self::disk_label(&lock.disk)
            )));
        }
        self.open_disk_as(&lock.disk, if exclusive { Access::Exclusive } else { Access::Write })
    }

    fn open_disk_as(&self, disk: &Disk, access: Access) -> Result<OpenDisk> {
        let path = self.dev.join(&disk.name);
        let flags = match access {
            Access::Read => OFlags::RDONLY,
            Access::Write => OFlags::RDWR,
            Access::Exclusive => OFlags::RDWR | OFlags::EXCL,
        } | OFlags::CLOEXEC;
        let what = || format!("opening {} for {}", path.display(), Self::disk_label(disk));
        let fd = rustix::fs::open(&path, flags, Mode::empty()).map_err(|e| os_err(what(), e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| os_err(what(), e))?;
        let is_block = rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::BlockDevice;
        let (major, minor) = (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
        if !is_block || (major, minor) != (disk.major, disk.minor) {
            return Err(Error::internal(format!(
                "{} is not {}: it is device {major}:{minor}, expected {}:{}",
                path.display(),
                Self::disk_label(disk),
                disk.major,
                disk.minor
            )));
        }
        let file = File::from(fd);
        let lbs =
            blkpg::logical_block_size(&file).map_err(|e| os_err(format!("BLKSSZGET on {}", path.display()), e))?;
        let size = blkpg::size_bytes(&file).map_err(|e| os_err(format!("BLKGETSIZE64 on {}", path.display()), e))?;
        if !(512..=65536).contains(&lbs) || !lbs.is_power_of_two() {
            return Err(Error::internal(format!("{} reports a logical block size of {lbs}", path.display())));
        }
        Ok(OpenDisk { file, lbs: u64::from(lbs), size, path })
    }

    /// FailedPrecondition when sysfs says the disk is read-only.
    fn check_writable(&self, disk: &Disk) -> Result<()> {
        let ro =
            std::fs::read_to_string(self.sysfs.join("class/block").join(&disk.name).join("ro")).unwrap_or_default();
        if ro.trim() == "1" {
            return Err(Error::precondition(format!("{} is read-only", Self::disk_label(disk))));
        }
        Ok(())
    }

    /// The kernel's partitions of a disk, by number.
    fn kernel_partitions(&self, disk: &Disk) -> Result<BTreeMap<u32, KernelPartition>> {
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
    fn sync_kernel(&self, disk: &Disk, od: &OpenDisk, table: &Table) -> Result<()> {
        let label = Self::disk_label(disk);
        let want: BTreeMap<u32, (u64, u64)> =
            table.entries().iter().map(|e| (e.number, (e.first_lba * od.lbs, e.lbas() * od.lbs))).collect();
        let have = self.kernel_partitions(disk)?;
        // Removals first, so that additions and growth do not overlap what goes away.
        for k in have.values() {
            if want.get(&k.number).is_none_or(|&(start, _)| start != k.start) {
                blkpg::delete_partition(&od.file, k.number).map_err(|e| {
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
            blkpg::resize_partition(&od.file, k.number, k.start, len).map_err(|e| {
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
            blkpg::add_partition(&od.file, number, start, len).map_err(|e| {
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

    /// Writes a protective MBR over LBA 0 when its first 512 bytes are all zero (a table whose
    /// MBR write did not happen); anything else there is left alone.
    fn repair_protective_mbr(&self, od: &OpenDisk) -> Result<()> {
        if od.read(0, 512)?.iter().any(|&b| b != 0) {
            return Ok(());
        }
        self.write_protective_mbr(od)
    }

    fn write_protective_mbr(&self, od: &OpenDisk) -> Result<()> {
        od.write(0, &protective_mbr(od.size / od.lbs))
    }

    /// Sets the size of a pure protective MBR's 0xEE record to the disk's (after it grew).
    fn update_protective_mbr(&self, od: &OpenDisk) -> Result<()> {
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
    fn create_table(&self, disk: &Disk, od: &OpenDisk) -> Result<Table> {
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
    fn incomplete(&self, od: &OpenDisk, table: &Table) -> Result<bool> {
        Ok(table.entries().iter().all(|e| e.type_guid == MICROSOFT_RESERVED)
            || !table.primary_ok
            || !table.backup_ok
            || od.read(0, 512)?.iter().all(|&b| b == 0))
    }

    /// Completes an existing GPT: one partition when it has none but Microsoft reserved ones
    /// (`exclusive`: nobody holds the disk), both copies valid, a protective MBR when LBA 0 is
    /// blank.
    fn complete_table(&self, disk: &Disk, od: &OpenDisk, table: &mut Table, exclusive: bool) -> Result<()> {
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
    fn inspect(&self, disk: &Disk, od: &OpenDisk) -> Result<std::result::Result<Option<Table>, ()>> {
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
    fn busy_primary(label: &str) -> Error {
        Error::precondition(format!(
            "{label} is in use (mounted, or held by another device) and its primary GPT is invalid; refusing to \
             rewrite it from the backup copy while the disk is in use"
        ))
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

    /// Re-reads one disk's GPT from the medium and tells the kernel; nothing is written to the
    /// disk. Disks without a GPT are left alone.
    pub fn refresh(&self, disk: &Disk) -> Result<()> {
        let _lock = self.lock_disk(disk, Lock::Exclusive)?;
        let od = self.open_disk(disk)?;
        if self.sysfs.join("class/block").join(&disk.name).join("loop/backing_file").exists() {
            loopdev::set_capacity(&od.file)
                .map_err(|e| os_err(format!("LOOP_SET_CAPACITY on {}", od.path.display()), e))?;
        }
        blkpg::flush_buffers(&od.file).map_err(|e| os_err(format!("BLKFLSBUF on {}", od.path.display()), e))?;
        // The size may have changed: open again.
        let od = self.open_disk(disk)?;
        match od.table()? {
            Some(table) => self.sync_kernel(disk, &od, &table),
            None => Ok(()),
        }
    }

    fn volume_of(&self, disk: &Disk, od: &OpenDisk, entry: &Entry, kernel: &BTreeMap<u32, KernelPartition>) -> Volume {
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

    /// The volumes (GPT partitions) of one disk, in table order. MBR disks and disks without a
    /// table have none. A volume the kernel does not have yet has an empty `name` and `node`.
    pub fn volumes_of(&self, disk: &Disk) -> Result<Vec<Volume>> {
        let od = self.open_disk(disk)?;
        let Some(table) = od.table()? else { return Ok(Vec::new()) };
        let kernel = self.kernel_partitions(disk)?;
        let entries = table.entries();
        remember(disk.number, &entries);
        Ok(entries.iter().map(|e| self.volume_of(disk, &od, e, &kernel)).collect())
    }

    /// The volume with this ID: InvalidArgument when the ID is malformed, NotFound when no disk
    /// has it, FailedPrecondition when several do (found when every disk is read: on the first
    /// lookup of an ID, or when the disk it was last seen on no longer has it).
    pub fn volume(&self, volume_id: &str) -> Result<Volume> {
        self.volume_by(volume_id, DiskNumber::Refused)
    }

    /// [`Self::volume`], where `by_disk` may let a disk number stand for that disk's data volume
    /// ([`data_volume`]): the largest partition of the Linux filesystem or basic data type.
    pub fn volume_by(&self, volume_id: &str, by_disk: DiskNumber) -> Result<Volume> {
        if let (DiskNumber::DataVolume, Some(number)) = (by_disk, data_volume::disk_number_in(volume_id)) {
            let found = self.volumes_of(&self.disk(number)?)?;
            let candidates: Vec<Candidate> = found
                .iter()
                .map(|v| {
                    let (kind, data) = match v.type_guid {
                        LINUX_FS => ("GPT Linux filesystem".to_owned(), true),
                        BASIC_DATA => ("GPT basic data".to_owned(), true),
                        other => (format!("GPT type {other}"), false),
                    };
                    Candidate { id: v.id.clone(), partition: v.index, kind, data, size: v.size }
                })
                .collect();
            let id = data_volume::data_volume(number, &candidates)?;
            return Ok(found.into_iter().find(|v| v.id == id).expect("the data volume is one of those found"));
        }
        let guid = parse_volume_id(volume_id)?;
        if let Some(v) = self.volume_where_last_seen(&guid) {
            return Ok(v);
        }
        let mut found = Vec::new();
        for disk in self.disks()? {
            let od = match self.open_disk(&disk) {
                Ok(od) => od,
                Err(e @ Error::PermissionDenied(_)) => {
                    tracing::debug!("looking for volume {volume_id}: {e}");
                    continue;
                }
                Err(e) => {
                    tracing::warn!("looking for volume {volume_id}: {e}");
                    continue;
                }
            };
            let table = match od.table() {
                Ok(Some(table)) => table,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!("looking for volume {volume_id}: {e}");
                    continue;
                }
            };
            let entries = table.entries();
            remember(disk.number, &entries);
            if let Some(entry) = entries.into_iter().find(|e| e.guid == guid) {
                let kernel = self.kernel_partitions(&disk)?;
                found.push(self.volume_of(&disk, &od, &entry, &kernel));
            }
        }
        // Every disk was read: what was found is the hint now (clearing `Several` once only one
        // disk has the GUID).
        {
            let mut seen = LAST_SEEN.lock().unwrap_or_else(|e| e.into_inner());
            match &found[..] {
                [] => seen.remove(&guid),
                [v] => seen.insert(guid, Seen::On(v.disk)),
                _ => seen.insert(guid, Seen::Several),
            };
        }
        match found.len() {
            0 => Err(Error::not_found(format!("volume {volume_id} not found: no disk has a GPT partition {guid}"))),
            1 => Ok(found.pop().unwrap()),
            _ => Err(Error::precondition(format!(
                "volume {volume_id} is on more than one disk ({}): cloned disks? refusing to guess",
                found.iter().map(|v| format!("disk {} partition {}", v.disk, v.index)).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    /// The volume with GPT partition GUID `guid` if `disk`'s table has it: the lookup on one
    /// disk (where the volume was last seen, or the disk [`Self::hold_volume`] locked).
    pub(crate) fn volume_on(&self, disk: &Disk, guid: &Guid) -> Result<Option<Volume>> {
        let od = self.open_disk(disk)?;
        let Some(table) = od.table()? else { return Ok(None) };
        let entries = table.entries();
        remember(disk.number, &entries);
        let Some(entry) = entries.iter().find(|e| e.guid == *guid) else { return Ok(None) };
        let kernel = self.kernel_partitions(disk)?;
        Ok(Some(self.volume_of(disk, &od, entry, &kernel)))
    }

    /// The volume from the table of the disk it was last seen on, if it is still there.
    fn volume_where_last_seen(&self, guid: &Guid) -> Option<Volume> {
        let Seen::On(number) = *LAST_SEEN.lock().unwrap_or_else(|e| e.into_inner()).get(guid)? else { return None };
        let found = self.disk(number).ok().and_then(|disk| self.volume_on(&disk, guid).ok().flatten());
        if found.is_none() {
            LAST_SEEN.lock().unwrap_or_else(|e| e.into_inner()).remove(guid);
        }
        found
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

    #[test]
    fn volume_ids_round_trip() {
        let g = Guid::parse("0fc63daf-8483-4772-8e79-3d69d8477de4").unwrap();
        let id = volume_id(&g);
        assert_eq!(id, r"\\?\Volume{0fc63daf-8483-4772-8e79-3d69d8477de4}\");
        assert_eq!(parse_volume_id(&id).unwrap(), g);
        assert_eq!(parse_volume_id(r"\\?\Volume{0FC63DAF-8483-4772-8E79-3D69D8477DE4}\").unwrap(), g);
    }

    #[test]
    fn malformed_volume_ids_are_invalid_arguments_naming_the_form() {
        for bad in [
            "",
            r"\\?\Volume{0fc63daf-8483-4772-8e79-3d69d8477de4}",
            r"\\.\Volume{0fc63daf-8483-4772-8e79-3d69d8477de4}\",
            r"\\?\Volume{0fc63daf-8483-4772-8e79-3d69d8477de}\",
            r"\\?\Volume{zfc63daf-8483-4772-8e79-3d69d8477de4}\",
            "/dev/loop0p1",
        ] {
            match parse_volume_id(bad) {
                Err(Error::InvalidArgument(msg)) => {
                    assert!(msg.contains(&format!("{bad:?}")), "{msg}");
                    assert!(msg.contains(r"\\?\Volume{xxxxxxxx-"), "{msg}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

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

    #[test]
    fn a_guid_seen_on_two_disks_loses_its_hint_whatever_the_order() {
        let entry =
            |g: u8| Entry { number: 1, type_guid: LINUX_FS, guid: Guid([g; 16]), first_lba: 2048, last_lba: 4095 };
        let hint = |g: u8| LAST_SEEN.lock().unwrap().get(&Guid([g; 16])).copied();
        // GUIDs of their own (the map is the process's): 0xa1.., 0xa2.., 0xa3..
        remember(1, &[entry(0xa1)]);
        remember(1, &[entry(0xa1)]);
        assert_eq!(hint(0xa1), Some(Seen::On(1)));
        for (g, order) in [(0xa2, [1, 2, 1]), (0xa3, [2, 1, 2])] {
            for disk in order {
                remember(disk, &[entry(g)]);
            }
            assert_eq!(hint(g), Some(Seen::Several), "{order:?}");
        }
    }

    #[test]
    fn random_guids_are_version_4() {
        let g = random_guid().unwrap().to_string();
        assert_eq!(&g[14..15], "4", "{g}");
        assert!(matches!(&g[19..20], "8" | "9" | "a" | "b"), "{g}");
        assert_ne!(random_guid().unwrap(), random_guid().unwrap());
    }
}
