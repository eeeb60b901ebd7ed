//! The GPT on-disk format: read, edited in place, and created.
//!
//! A table on a disk is input we do not control and may belong to a mounted filesystem: the
//! reader bounds every size it is handed, and the editor keeps every entry in its slot (the
//! kernel numbers partitions by slot) and every byte it does not mean to change. A new table is
//! the same writer given an empty table ([`Table::new`]) and a [`protective_mbr`]. The `gpt`
//! crate is in the tests only: an independent implementation that reads back what we write, and
//! whose tables (PartitionDisk used it before) ours match byte for byte given the same GUIDs.
//!
//! Layout (UEFI 2.10 §5.3): LBA 0 protective MBR; LBA 1 primary header; the primary entry array
//! (usually from LBA 2); the usable area; the backup entry array; the backup header in the last LBA.

use std::io;

/// "EFI PART"
const SIGNATURE: &[u8; 8] = b"EFI PART";
/// Bytes of the header that the CRC covers in revision 1.0.
const HEADER_SIZE: usize = 92;
/// Revision 1.0, the only one there is.
const REVISION_1_0: u32 = 0x0001_0000;
/// Entries in a new table's array, and their size: 16 KiB, the least the spec allows, and what
/// partitioning tools write (32 blocks of 512 bytes, 4 of 4096).
const NEW_ENTRIES: u32 = 128;
const NEW_ENTRY_SIZE: u32 = 128;
/// The largest entry array we accept: 8192 entries of 128 bytes (the spec's minimum is 16 KiB).
const MAX_ARRAY_BYTES: u64 = 1 << 20;
/// Microsoft reserved partition: not a volume for PartitionDisk's "already partitioned" rule.
pub(crate) const MICROSOFT_RESERVED: Guid = Guid::from_text_const("e3c9e316-0b5c-4db8-817d-f92df00215ae");

/// Positioned reads and writes on a disk (a block device, or memory in tests).
pub(crate) trait BlockIo {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()>;
}

/// A GUID as GPT stores it: the first three fields little-endian, the rest as bytes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub(crate) struct Guid(pub [u8; 16]);

impl Guid {
    pub fn is_nil(&self) -> bool {
        self.0 == [0; 16]
    }

    /// Parses the 36-character text form (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, either case).
    pub const fn parse(text: &str) -> Option<Guid> {
        // Text order of the 16 bytes: the first three groups are stored byte-reversed.
        const ORDER: [usize; 16] = [3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15];
        let b = text.as_bytes();
        if b.len() != 36 {
            return None;
        }
        let mut out = [0u8; 16];
        let (mut n, mut i) = (0, 0);
        while i < 36 {
            if i == 8 || i == 13 || i == 18 || i == 23 {
                if b[i] != b'-' {
                    return None;
                }
                i += 1;
                continue;
            }
            let (Some(h), Some(l)) = (hex(b[i]), hex(b[i + 1])) else { return None };
            out[ORDER[n]] = (h << 4) | l;
            n += 1;
            i += 2;
        }
        Some(Guid(out))
    }

    /// For constants: a bad literal fails the build.
    const fn from_text_const(text: &str) -> Guid {
        match Guid::parse(text) {
            Some(g) => g,
            None => panic!("bad GUID literal"),
        }
    }
}

const fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Lower case, hyphenated: what `blkid` prints as PART_ENTRY_UUID.
impl std::fmt::Display for Guid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
            b[3], b[2], b[1], b[0], b[5], b[4], b[7], b[6], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]
        )
    }
}

impl std::fmt::Debug for Guid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")
    }
}

/// CRC-32 (IEEE 802.3, reflected, as GPT uses it), eight bytes at a time: volume lookups check
/// a 16 KiB entry array per disk, which a byte-wise table makes the largest cost of a lookup.
pub(crate) fn crc32(data: &[u8]) -> u32 {
    const T: [[u32; 256]; 8] = {
        let mut t = [[0u32; 256]; 8];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
                k += 1;
            }
            t[0][i] = c;
            i += 1;
        }
        let mut k = 1;
        while k < 8 {
            let mut i = 0;
            while i < 256 {
                t[k][i] = (t[k - 1][i] >> 8) ^ t[0][(t[k - 1][i] & 0xff) as usize];
                i += 1;
            }
            k += 1;
        }
        t
    };
    let mut c = !0u32;
    let mut chunks = data.chunks_exact(8);
    for ch in &mut chunks {
        let lo = u32::from_le_bytes([ch[0], ch[1], ch[2], ch[3]]) ^ c;
        let hi = u32::from_le_bytes([ch[4], ch[5], ch[6], ch[7]]);
        c = T[7][(lo & 0xff) as usize]
            ^ T[6][((lo >> 8) & 0xff) as usize]
            ^ T[5][((lo >> 16) & 0xff) as usize]
            ^ T[4][(lo >> 24) as usize]
            ^ T[3][(hi & 0xff) as usize]
            ^ T[2][((hi >> 8) & 0xff) as usize]
            ^ T[1][((hi >> 16) & 0xff) as usize]
            ^ T[0][(hi >> 24) as usize];
    }
    for &b in chunks.remainder() {
        c = T[0][((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}
fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// The fields of a GPT header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub revision: u32,
    pub current_lba: u64,
    pub backup_lba: u64,
    pub first_usable: u64,
    pub last_usable: u64,
    pub disk_guid: Guid,
    pub entries_lba: u64,
    pub num_entries: u32,
    pub entry_size: u32,
    pub entries_crc: u32,
}

impl Header {
    fn array_bytes(&self) -> u64 {
        u64::from(self.num_entries) * u64::from(self.entry_size)
    }

    fn array_lbas(&self, lbs: u64) -> u64 {
        self.array_bytes().div_ceil(lbs)
    }

    /// Parses and checks the header in `sector` (read from `lba` of a disk of `total_lbas`).
    fn parse(sector: &[u8], lba: u64, lbs: u64, total_lbas: u64) -> Option<Header> {
        if sector.len() < HEADER_SIZE || &sector[..8] != SIGNATURE {
            return None;
        }
        let size = le32(sector, 12) as usize;
        if size < HEADER_SIZE || size > sector.len() {
            return None;
        }
        let mut copy = sector[..size].to_vec();
        copy[16..20].fill(0);
        if crc32(&copy) != le32(sector, 16) {
            return None;
        }
        let mut disk_guid = [0u8; 16];
        disk_guid.copy_from_slice(&sector[56..72]);
        let h = Header {
            revision: le32(sector, 8),
            current_lba: le64(sector, 24),
            backup_lba: le64(sector, 32),
            first_usable: le64(sector, 40),
            last_usable: le64(sector, 48),
            disk_guid: Guid(disk_guid),
            entries_lba: le64(sector, 72),
            num_entries: le32(sector, 80),
            entry_size: le32(sector, 84),
            entries_crc: le32(sector, 88),
        };
        let entry_ok = h.entry_size >= 128 && h.entry_size.is_multiple_of(8) && h.entry_size as u64 <= lbs;
        let array_ok = h.num_entries > 0 && h.array_bytes() <= MAX_ARRAY_BYTES;
        if h.current_lba != lba || !entry_ok || !array_ok {
            return None;
        }
        let array_end = h.entries_lba.checked_add(h.array_lbas(lbs))?; // exclusive
        let usable_ok = 1 < h.first_usable && h.first_usable <= h.last_usable && h.last_usable < total_lbas;
        let array_outside_usable = array_end <= h.first_usable || h.entries_lba > h.last_usable;
        let array_on_disk = h.entries_lba >= 2 && array_end <= total_lbas;
        (usable_ok && array_outside_usable && array_on_disk && h.backup_lba != lba).then_some(h)
    }

    /// The sector holding this header, `lbs` bytes, CRC filled in.
    fn to_sector(&self, lbs: u64) -> Vec<u8> {
        let mut s = vec![0u8; lbs as usize];
        s[..8].copy_from_slice(SIGNATURE);
        s[8..12].copy_from_slice(&self.revision.to_le_bytes());
        s[12..16].copy_from_slice(&(HEADER_SIZE as u32).to_le_bytes());
        s[24..32].copy_from_slice(&self.current_lba.to_le_bytes());
        s[32..40].copy_from_slice(&self.backup_lba.to_le_bytes());
        s[40..48].copy_from_slice(&self.first_usable.to_le_bytes());
        s[48..56].copy_from_slice(&self.last_usable.to_le_bytes());
        s[56..72].copy_from_slice(&self.disk_guid.0);
        s[72..80].copy_from_slice(&self.entries_lba.to_le_bytes());
        s[80..84].copy_from_slice(&self.num_entries.to_le_bytes());
        s[84..88].copy_from_slice(&self.entry_size.to_le_bytes());
        s[88..92].copy_from_slice(&self.entries_crc.to_le_bytes());
        let crc = crc32(&s[..HEADER_SIZE]);
        s[16..20].copy_from_slice(&crc.to_le_bytes());
        s
    }
}

/// One used entry of the array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// 1-based slot in the array: the kernel's partition number.
    pub number: u32,
    pub type_guid: Guid,
    pub guid: Guid,
    pub first_lba: u64,
    /// Inclusive.
    pub last_lba: u64,
}

impl Entry {
    pub fn lbas(&self) -> u64 {
        self.last_lba - self.first_lba + 1
    }
}

/// A GPT as read from a disk (or made by [`Table::new`]).
#[derive(Clone, Debug)]
pub(crate) struct Table {
    /// Logical block size in bytes.
    pub lbs: u64,
    /// Size of the disk in logical blocks.
    pub total_lbas: u64,
    /// The header in use: the primary when it is valid, else the backup.
    pub header: Header,
    /// A valid primary copy on the disk.
    pub primary_ok: bool,
    /// A valid backup header where the primary says, agreeing with it.
    pub backup_ok: bool,
    /// The raw entry array (`num_entries * entry_size` bytes).
    array: Vec<u8>,
}

impl Table {
    /// A new GPT without partitions for a disk of `total_lbas` blocks of `lbs` bytes, laid out as
    /// partitioning tools lay one out: 128 entries of 128 bytes from LBA 2, the usable area from
    /// the block after them to the block before the backup array, which ends just before the
    /// backup header in the disk's last block. In memory until [`Table::write`] (given no
    /// previous partitions); LBA 0 then takes a [`protective_mbr`]. `None` when `lbs` is below
    /// 512 or the disk cannot hold both copies and one usable block.
    pub fn new(lbs: u64, total_lbas: u64, disk_guid: Guid) -> Option<Table> {
        let array = vec![0u8; NEW_ENTRIES as usize * NEW_ENTRY_SIZE as usize];
        let array_lbas = (array.len() as u64).div_ceil(lbs);
        let first_usable = 2 + array_lbas;
        let backup_lba = total_lbas.checked_sub(1)?;
        let last_usable = backup_lba.checked_sub(array_lbas + 1)?;
        if lbs < 512 || first_usable > last_usable {
            return None;
        }
        let header = Header {
            revision: REVISION_1_0,
            current_lba: 1,
            backup_lba,
            first_usable,
            last_usable,
            disk_guid,
            entries_lba: 2,
            num_entries: NEW_ENTRIES,
            entry_size: NEW_ENTRY_SIZE,
            entries_crc: crc32(&array),
        };
        // Neither copy is on the disk yet.
        Some(Table { lbs, total_lbas, header, primary_ok: false, backup_ok: false, array })
    }

    /// Reads the GPT of a disk of `total_lbas` blocks of `lbs` bytes, trusting what the kernel's
    /// GPT parser trusts: a GPT is only read behind a protective MBR in LBA 0 (then the primary
    /// copy, or the backup when the primary is invalid). The one exception is a blank LBA 0 in
    /// front of a valid primary copy: a table whose protective MBR was not written yet (the new
    /// table is written before LBA 0), which PartitionDisk completes. `None` otherwise: no GPT,
    /// neither copy valid, or LBA 0 holding anything else (a real MBR, a boot sector, a
    /// filesystem) — a stale GPT there must neither be shown, nor told to the kernel over the
    /// partitions its MBR parser found, nor "repaired" over what now uses the disk. Only the
    /// primary copy is read when it is valid (plus the backup header's sector).
    pub fn read(dev: &impl BlockIo, lbs: u64, total_lbas: u64) -> io::Result<Option<Table>> {
        if total_lbas < 3 {
            return Ok(None);
        }
        let mut lba0 = [0u8; 512];
        dev.read_at(0, &mut lba0)?;
        let protective = classify_mbr(&lba0) == Mbr::Protective;
        if !protective && lba0.iter().any(|&b| b != 0) {
            return Ok(None);
        }
        let read_header = |lba: u64| -> io::Result<Option<(Header, Vec<u8>)>> {
            let mut sector = vec![0u8; lbs as usize];
            dev.read_at(lba * lbs, &mut sector)?;
            let Some(h) = Header::parse(&sector, lba, lbs, total_lbas) else { return Ok(None) };
            let mut array = vec![0u8; h.array_bytes() as usize];
            dev.read_at(h.entries_lba * lbs, &mut array)?;
            Ok((crc32(&array) == h.entries_crc).then_some((h, array)))
        };
        if let Some((header, array)) = read_header(1)? {
            let backup_ok = if header.backup_lba < total_lbas {
                let mut sector = vec![0u8; lbs as usize];
                dev.read_at(header.backup_lba * lbs, &mut sector)?;
                Header::parse(&sector, header.backup_lba, lbs, total_lbas).is_some_and(|b| {
                    b.backup_lba == 1
                        && b.disk_guid == header.disk_guid
                        && (b.first_usable, b.last_usable) == (header.first_usable, header.last_usable)
                        && (b.num_entries, b.entry_size, b.entries_crc)
                            == (header.num_entries, header.entry_size, header.entries_crc)
                })
            } else {
                false
            };
            return Ok(Some(Table { lbs, total_lbas, header, primary_ok: true, backup_ok, array }));
        }
        if !protective {
            return Ok(None); // a blank LBA 0 vouches for a valid primary copy only
        }
        Ok(read_header(total_lbas - 1)?.map(|(header, array)| Table {
            lbs,
            total_lbas,
            header,
            primary_ok: false,
            backup_ok: true,
            array,
        }))
    }

    /// Used entries in slot order, leaving out any that do not lie on the disk (as the kernel's
    /// own GPT parser does).
    pub fn entries(&self) -> Vec<Entry> {
        let size = self.header.entry_size as usize;
        self.array
            .chunks_exact(size)
            .enumerate()
            .filter_map(|(i, e)| {
                let mut t = [0u8; 16];
                t.copy_from_slice(&e[0..16]);
                let mut g = [0u8; 16];
                g.copy_from_slice(&e[16..32]);
                let entry = Entry {
                    number: i as u32 + 1,
                    type_guid: Guid(t),
                    guid: Guid(g),
                    first_lba: le64(e, 32),
                    last_lba: le64(e, 40),
                };
                let on_disk =
                    0 < entry.first_lba && entry.first_lba <= entry.last_lba && entry.last_lba < self.total_lbas;
                (!entry.type_guid.is_nil() && on_disk).then_some(entry)
            })
            .collect()
    }

    /// Whether both copies are valid and the backup is in the disk's last block.
    pub fn healthy(&self) -> bool {
        self.primary_ok && self.backup_ok && self.header.backup_lba == self.total_lbas - 1
    }

    /// The last usable LBA once the backup copy sits at the end of the disk.
    pub fn last_usable_at_end(&self) -> u64 {
        (self.total_lbas - 1).saturating_sub(self.header.array_lbas(self.lbs) + 1)
    }

    /// The end (inclusive) an entry may grow to: the block before the next entry, or the last
    /// usable block once the backup copy sits at the end of the disk.
    pub fn room_after(&self, number: u32) -> Option<u64> {
        let entries = self.entries();
        let me = entries.iter().find(|e| e.number == number)?;
        let next = entries.iter().filter(|e| e.first_lba > me.first_lba).map(|e| e.first_lba - 1).min();
        Some(next.unwrap_or(u64::MAX).min(self.last_usable_at_end()))
    }

    /// Free extents (first, last inclusive) of the usable area as it will be with the backup
    /// copy at the end of the disk, largest first.
    pub fn free_extents(&self) -> Vec<(u64, u64)> {
        let mut used: Vec<(u64, u64)> = self.entries().iter().map(|e| (e.first_lba, e.last_lba)).collect();
        used.sort_unstable();
        let (first, last) = (self.header.first_usable, self.last_usable_at_end());
        let mut free = Vec::new();
        let mut at = first;
        for (a, b) in used {
            // Clipped at `last`: a partition starting beyond it (in the backup copy's blocks)
            // must not drop the free space before it.
            if a > at && at <= last {
                free.push((at, (a - 1).min(last)));
            }
            at = at.max(b.saturating_add(1));
        }
        if at <= last {
            free.push((at, last));
        }
        free.retain(|&(a, b)| a <= b && b <= last);
        free.sort_by_key(|&(a, b)| std::cmp::Reverse(b - a));
        free
    }

    /// Moves the end of entry `number` to `last_lba`.
    pub fn set_last_lba(&mut self, number: u32, last_lba: u64) {
        let at = (number as usize - 1) * self.header.entry_size as usize;
        self.array[at + 40..at + 48].copy_from_slice(&last_lba.to_le_bytes());
    }

    /// The first unused slot's number.
    pub fn free_slot(&self) -> Option<u32> {
        let size = self.header.entry_size as usize;
        self.array.chunks_exact(size).position(|e| e[..16] == [0; 16]).map(|i| i as u32 + 1)
    }

    /// Fills slot `number` (which must be unused) with a new entry.
    pub fn set_entry(&mut self, number: u32, type_guid: Guid, guid: Guid, first_lba: u64, last_lba: u64, name: &str) {
        let size = self.header.entry_size as usize;
        let e = &mut self.array[(number as usize - 1) * size..][..size];
        e.fill(0);
        e[0..16].copy_from_slice(&type_guid.0);
        e[16..32].copy_from_slice(&guid.0);
        e[32..40].copy_from_slice(&first_lba.to_le_bytes());
        e[40..48].copy_from_slice(&last_lba.to_le_bytes());
        for (i, unit) in name.encode_utf16().take(36).enumerate() {
            e[56 + 2 * i..58 + 2 * i].copy_from_slice(&unit.to_le_bytes());
        }
    }

    /// Writes both copies, the backup at the end of the disk, and makes this table the one read:
    /// backup array and header first, then the primary (a crash in between leaves a valid copy
    /// that the next write repairs from), then the old backup header is cleared when it moved
    /// and lay outside every partition before this write (`partitions_before`: the extents of the
    /// table as read). Flushing to stable storage is the caller's (`sync_all` on the device).
    pub fn write(&mut self, dev: &impl BlockIo, partitions_before: &[(u64, u64)]) -> io::Result<()> {
        let lbs = self.lbs;
        let array_lbas = self.header.array_lbas(lbs);
        let backup_lba = self.total_lbas - 1;
        let backup_entries = backup_lba - array_lbas;
        let last_usable = backup_entries - 1;
        let old_backup = self.primary_ok.then_some(self.header.backup_lba).filter(|&b| b != backup_lba);
        let primary_entries = if self.header.current_lba == 1 { self.header.entries_lba } else { 2 };
        let used_end = self.entries().iter().map(|e| e.last_lba).max().unwrap_or(0);
        // A partition over the table's own blocks (the kernel takes one starting at LBA 1) would
        // have its first blocks overwritten by the primary header and array.
        let used_start = self.entries().iter().map(|e| e.first_lba).min();
        if let Some(start) = used_start.filter(|&start| start < self.header.first_usable) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a partition starts at block {start}, inside the partition table's own blocks (the first usable \
                     block is {}); rewriting the table would overwrite it",
                    self.header.first_usable
                ),
            ));
        }
        if used_end > last_usable || primary_entries + array_lbas > self.header.first_usable {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the partition table does not fit: partitions end at block {used_end}, \
                     the last usable block would be {last_usable}"
                ),
            ));
        }
        let mut array = self.array.clone();
        array.resize((array_lbas * lbs) as usize, 0);
        let crc = crc32(&self.array);
        let primary = Header {
            revision: REVISION_1_0,
            current_lba: 1,
            backup_lba,
            first_usable: self.header.first_usable,
            last_usable,
            disk_guid: self.header.disk_guid,
            entries_lba: primary_entries,
            num_entries: self.header.num_entries,
            entry_size: self.header.entry_size,
            entries_crc: crc,
        };
        let backup = Header { current_lba: backup_lba, backup_lba: 1, entries_lba: backup_entries, ..primary.clone() };
        dev.write_at(backup_entries * lbs, &array)?;
        dev.write_at(backup_lba * lbs, &backup.to_sector(lbs))?;
        dev.write_at(primary_entries * lbs, &array)?;
        dev.write_at(lbs, &primary.to_sector(lbs))?;
        if let Some(old) = old_backup {
            let inside = partitions_before.iter().any(|&(a, b)| a <= old && old <= b);
            if old < backup_entries && old > primary_entries + array_lbas && !inside {
                dev.write_at(old * lbs, &vec![0u8; lbs as usize])?;
            }
        }
        self.header = primary;
        self.primary_ok = true;
        self.backup_ok = true;
        Ok(())
    }
}

/// What LBA 0 holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mbr {
    /// No boot signature.
    None,
    /// A boot signature and four empty records: an initialised MBR with no partitions.
    Empty,
    /// A protective (or hybrid) MBR: a record of type 0xEE starting at LBA 1 (the kernel's test).
    Protective,
    /// A real MBR partition table.
    Partitioned,
    /// A boot signature over records that are no partition table (boot flags other than 0 and
    /// 0x80): a boot sector of something we do not know.
    Unknown,
}

/// Classifies the first 512 bytes of a disk.
pub(crate) fn classify_mbr(sector: &[u8]) -> Mbr {
    if sector.len() < 512 || sector[510..512] != [0x55, 0xAA] {
        return Mbr::None;
    }
    let records: Vec<&[u8]> = (0..4).map(|i| &sector[446 + 16 * i..462 + 16 * i]).collect();
    if records.iter().any(|r| r[0] != 0 && r[0] != 0x80) {
        return Mbr::Unknown;
    }
    if records.iter().any(|r| r[4] == 0xEE && le32(r, 8) == 1) {
        Mbr::Protective
    } else if records.iter().any(|r| r[4] != 0 && le32(r, 12) != 0) {
        Mbr::Partitioned
    } else if records.iter().all(|r| r.iter().all(|&b| b == 0)) {
        Mbr::Empty
    } else {
        Mbr::Unknown
    }
}

/// LBA 0 of a new table: a protective MBR, one record of type 0xEE from LBA 1 over the rest of a
/// disk of `total_lbas` blocks (at most 2^32 - 1 blocks, the spec's value for larger disks), its
/// CHS start 0/0/2 and end 0xFFFFFF, no boot code, no disk signature. 512 bytes whatever the
/// block size.
pub(crate) fn protective_mbr(total_lbas: u64) -> [u8; 512] {
    let mut s = [0u8; 512];
    let r = &mut s[446..462];
    r[1..4].copy_from_slice(&[0x00, 0x02, 0x00]);
    r[4] = 0xEE;
    r[5..8].copy_from_slice(&[0xFF, 0xFF, 0xFF]);
    r[8..12].copy_from_slice(&1u32.to_le_bytes());
    let size = u32::try_from(total_lbas.saturating_sub(1)).unwrap_or(u32::MAX);
    r[12..16].copy_from_slice(&size.to_le_bytes());
    s[510..].copy_from_slice(&[0x55, 0xAA]);
    s
}

/// The partition extent (first, last inclusive) that fills the free extent `[first, last]` with
/// both ends on `align`-block boundaries: the start rounded up, the end rounded down to the block
/// before a boundary. `None` when nothing aligned fits.
pub(crate) fn aligned_extent(first: u64, last: u64, align: u64) -> Option<(u64, u64)> {
    let start = first.div_ceil(align).checked_mul(align)?;
    let end = ((last.checked_add(1)?) / align * align).checked_sub(1)?;
    (start <= end && end <= last).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    struct Mem(RefCell<Vec<u8>>);
    impl BlockIo for Mem {
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
            let d = self.0.borrow();
            let s = d.get(offset as usize..offset as usize + buf.len()).ok_or(io::ErrorKind::UnexpectedEof)?;
            buf.copy_from_slice(s);
            Ok(())
        }
        fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
            let mut d = self.0.borrow_mut();
            d.get_mut(offset as usize..offset as usize + buf.len())
                .ok_or(io::ErrorKind::UnexpectedEof)?
                .copy_from_slice(buf);
            Ok(())
        }
    }

    /// A disk image with a table written by the `gpt` crate: one partition per (first, last).
    fn crate_image(bytes: usize, lbs: gpt::disk::LogicalBlockSize, parts: &[(u32, u64, u64)]) -> Vec<u8> {
        let mut dev = std::io::Cursor::new(vec![0u8; bytes]);
        let mut d =
            gpt::GptConfig::new().writable(true).logical_block_size(lbs).create_from_device(&mut dev, None).unwrap();
        for &(id, first, last) in parts {
            d.add_partition_at("p", id, first, last - first + 1, gpt::partition_types::LINUX_FS, 0).unwrap();
        }
        d.write().unwrap();
        dev.into_inner()
    }

    #[test]
    fn crc32_matches_the_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
        // Every length around the 8-byte stride agrees with the bit-by-bit definition.
        fn slow(data: &[u8]) -> u32 {
            let mut c = !0u32;
            for &b in data {
                c ^= b as u32;
                for _ in 0..8 {
                    c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
                }
            }
            !c
        }
        let data: Vec<u8> = (0..100u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for n in 0..data.len() {
            assert_eq!(crc32(&data[..n]), slow(&data[..n]), "{n} bytes");
        }
    }

    #[test]
    fn guids_round_trip_in_gpt_byte_order() {
        let text = "0fc63daf-8483-4772-8e79-3d69d8477de4";
        let g = Guid::parse(text).unwrap();
        // LINUX_FS as stored on disk (mixed endian).
        assert_eq!(g.0[..4], [0xaf, 0x3d, 0xc6, 0x0f]);
        assert_eq!(g.to_string(), text);
        assert_eq!(Guid::parse(&text.to_uppercase()), Some(g));
        for bad in [
            "",
            "0fc63daf-8483-4772-8e79-3d69d8477de",
            "0fc63daf_8483-4772-8e79-3d69d8477de4",
            "gfc63daf-8483-4772-8e79-3d69d8477de4",
            "0fc63daf-8483-4772-8e79-3d69d8477de4a",
        ] {
            assert_eq!(Guid::parse(bad), None, "{bad}");
        }
        assert_eq!(MICROSOFT_RESERVED.to_string(), "e3c9e316-0b5c-4db8-817d-f92df00215ae");
    }

    #[test]
    fn alignment_rounds_start_up_and_end_down() {
        // 512-byte blocks, 1 MiB = 2048 blocks: a 512 MiB disk's usable area 34..=1048542.
        assert_eq!(aligned_extent(34, 1_048_542, 2048), Some((2048, 1_046_527)));
        // Already aligned.
        assert_eq!(aligned_extent(2048, 4095, 2048), Some((2048, 4095)));
        // Nothing aligned fits.
        assert_eq!(aligned_extent(34, 2047, 2048), None);
        assert_eq!(aligned_extent(2049, 4095, 2048), None);
        // 4096-byte blocks: 1 MiB = 256 blocks.
        assert_eq!(aligned_extent(6, 131_066, 256), Some((256, 130_815)));
    }

    #[test]
    fn reads_what_the_gpt_crate_writes() {
        for (lbs, n) in [(gpt::disk::LogicalBlockSize::Lb512, 512u64), (gpt::disk::LogicalBlockSize::Lb4096, 4096)] {
            let bytes = 8 << 20;
            let img = crate_image(bytes, lbs, &[(1, (1 << 20) / n, (3 << 20) / n - 1)]);
            let dev = Mem(RefCell::new(img));
            let t = Table::read(&dev, n, bytes as u64 / n).unwrap().unwrap();
            assert!(t.healthy());
            let e = t.entries();
            assert_eq!(e.len(), 1);
            assert_eq!((e[0].number, e[0].first_lba * n, (e[0].last_lba + 1) * n), (1, 1 << 20, 3 << 20));
            assert_eq!(e[0].type_guid.to_string(), "0fc63daf-8483-4772-8e79-3d69d8477de4");
        }
    }

    const LINUX: Guid = Guid::from_text_const("0fc63daf-8483-4772-8e79-3d69d8477de4");

    /// A new table with one partition over `first..=last`, written to a blank image of `total`
    /// blocks of `lbs` bytes behind its protective MBR: the image and the table as written.
    fn new_image(lbs: u64, total: u64, first: u64, last: u64) -> (Mem, Table) {
        let dev = Mem(RefCell::new(vec![0u8; (total * lbs) as usize]));
        let mut t = Table::new(lbs, total, Guid::parse("4e2e8f6a-3c1d-4b7e-9a0f-1d2c3b4a5968").unwrap()).unwrap();
        t.set_entry(1, LINUX, Guid::parse("a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d").unwrap(), first, last, "csi-proxy");
        t.write(&dev, &[]).unwrap();
        dev.write_at(0, &protective_mbr(total)).unwrap();
        (dev, t)
    }

    #[test]
    fn a_new_table_reads_back_with_the_gpt_crate_and_with_ours() {
        for (lb, lbs) in [(gpt::disk::LogicalBlockSize::Lb512, 512u64), (gpt::disk::LogicalBlockSize::Lb4096, 4096)] {
            let total = (8 << 20) / lbs;
            let array_lbas = (128 * 128) / lbs;
            let (first_usable, last_usable) = (2 + array_lbas, total - 2 - array_lbas);
            let align = (1 << 20) / lbs;
            let (first, last) = aligned_extent(first_usable, last_usable, align).unwrap();
            let (dev, written) = new_image(lbs, total, first, last);
            let h = &written.header;
            assert_eq!((h.first_usable, h.last_usable, h.entries_lba), (first_usable, last_usable, 2), "{lbs}");
            assert_eq!((first * lbs, (last + 1) * lbs), (1 << 20, 7 << 20), "{lbs}: 1 MiB aligned at both ends");

            // Ours: both copies valid, the backup in the last block, the one entry.
            let t = Table::read(&dev, lbs, total).unwrap().unwrap();
            assert!(t.healthy(), "{lbs}");
            assert_eq!(t.header, written.header);
            assert_eq!((t.header.num_entries, t.header.entry_size), (128, 128));
            let e = t.entries();
            assert_eq!(e.len(), 1);
            assert_eq!((e[0].number, e[0].type_guid, e[0].first_lba, e[0].last_lba), (1, LINUX, first, last));
            assert_eq!(e[0].guid.to_string(), "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d");

            // The gpt crate: both headers valid and where they belong, the same entry.
            let mut cur = std::io::Cursor::new(dev.0.borrow().clone());
            let d = gpt::GptConfig::new()
                .only_valid_headers(true)
                .logical_block_size(lb)
                .open_from_device(&mut cur)
                .unwrap();
            let (p, b) = (d.primary_header().unwrap(), d.backup_header().unwrap());
            assert_eq!(
                (p.current_lba, p.backup_lba, p.first_usable, p.last_usable, p.part_start, p.num_parts, p.part_size),
                (1, total - 1, first_usable, last_usable, 2, 128, 128),
                "{lbs}"
            );
            assert_eq!((b.current_lba, b.backup_lba, b.part_start), (total - 1, 1, last_usable + 1), "{lbs}");
            assert_eq!((b.first_usable, b.last_usable, b.crc32_parts), (p.first_usable, p.last_usable, p.crc32_parts));
            assert_eq!(d.guid().to_string(), "4e2e8f6a-3c1d-4b7e-9a0f-1d2c3b4a5968");
            let used: Vec<_> = d.partitions().iter().filter(|(_, p)| p.is_used()).collect();
            assert_eq!(used.len(), 1, "{lbs}");
            let (&id, part) = used[0];
            assert_eq!((id, part.first_lba, part.last_lba, part.flags), (1, first, last, 0));
            assert_eq!(part.name, "csi-proxy");
            assert_eq!(part.part_type_guid, gpt::partition_types::LINUX_FS);
            assert_eq!(part.part_guid.to_string(), "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d");
            // And its protective MBR.
            let (got, want) = (
                gpt::mbr::ProtectiveMBR::from_disk(&mut cur, lb).unwrap().to_bytes(),
                gpt::mbr::ProtectiveMBR::with_lb_size(total as u32 - 1).to_bytes(),
            );
            assert_eq!(got[446..462], want[446..462], "{lbs}: the 0xEE record");
            assert!(got == want, "{lbs}");
        }
    }

    #[test]
    fn a_new_table_needs_room_for_both_copies_and_a_block() {
        let g = Guid([7; 16]);
        // 512-byte blocks: MBR, header, 32 array blocks, one usable, 32 array blocks, header.
        assert!(Table::new(512, 67, g).is_none());
        let t = Table::new(512, 68, g).unwrap();
        assert_eq!((t.header.first_usable, t.header.last_usable), (34, 34));
        // 4096-byte blocks: 4 array blocks a copy.
        assert!(Table::new(4096, 11, g).is_none());
        assert_eq!(Table::new(4096, 12, g).unwrap().header.last_usable, 6);
        assert!(Table::new(512, 0, g).is_none() && Table::new(512, 2, g).is_none());
        assert!(Table::new(256, 1 << 20, g).is_none(), "no protective MBR fits a 256-byte block");
        // Nothing is on the disk yet.
        assert!(!t.primary_ok && !t.backup_ok && t.entries().is_empty() && t.free_slot() == Some(1));
    }

    #[test]
    fn protective_mbrs_are_the_gpt_crates() {
        for total in [3u64, 8192, 1 << 32, (1 << 32) + 1, 1 << 40] {
            let crate_mbr = gpt::mbr::ProtectiveMBR::with_lb_size(u32::try_from(total - 1).unwrap_or(u32::MAX));
            let (ours, theirs) = (protective_mbr(total), crate_mbr.to_bytes());
            assert_eq!(ours[446..462], theirs[446..462], "{total} blocks: the 0xEE record");
            assert!(ours == theirs, "{total} blocks");
            assert_eq!(classify_mbr(&protective_mbr(total)), Mbr::Protective);
        }
    }

    #[test]
    fn grows_in_place_and_moves_the_backup_to_the_new_end() {
        let lbs = gpt::disk::LogicalBlockSize::Lb512;
        // Partition 2 only (slot 1 empty): the slot must survive the edit. (The crate's own
        // writer would pack it into slot 1, so place it with ours.)
        let mut img = crate_image(4 << 20, lbs, &[]);
        let dev = Mem(RefCell::new(img.clone()));
        let mut t = Table::read(&dev, 512, 8192).unwrap().unwrap();
        t.set_entry(2, Guid::parse("0fc63daf-8483-4772-8e79-3d69d8477de4").unwrap(), Guid([9; 16]), 2048, 4095, "p");
        t.write(&dev, &[]).unwrap();
        img.copy_from_slice(&dev.0.borrow());
        img.resize(8 << 20, 0);
        let dev = Mem(RefCell::new(img));
        let mut t = Table::read(&dev, 512, 16384).unwrap().unwrap();
        assert!(t.primary_ok && t.backup_ok && !t.healthy(), "backup still at the old end");
        assert_eq!(t.room_after(2), Some(16384 - 34));
        let before: Vec<_> = t.entries().iter().map(|e| (e.first_lba, e.last_lba)).collect();
        t.set_last_lba(2, 16383 - 33);
        t.write(&dev, &before).unwrap();
        // The old backup header is gone, the new table reads back healthy, the slot kept.
        let old = 8191 * 512;
        assert!(dev.0.borrow()[old..old + 512].iter().all(|&b| b == 0));
        let t = Table::read(&dev, 512, 16384).unwrap().unwrap();
        assert!(t.healthy());
        assert_eq!(t.header.last_usable, 16384 - 34);
        assert_eq!(t.entries().iter().map(|e| (e.number, e.last_lba)).collect::<Vec<_>>(), [(2, 16350)]);
        // And the gpt crate agrees, both headers valid.
        let mut cur = std::io::Cursor::new(dev.0.borrow().clone());
        let d =
            gpt::GptConfig::new().only_valid_headers(true).logical_block_size(lbs).open_from_device(&mut cur).unwrap();
        assert_eq!(d.partitions()[&2].last_lba, 16350);
        assert_eq!(d.backup_header().unwrap().current_lba, 16383);
    }

    /// Writes a protective MBR (the `gpt` crate's) into LBA 0 of an image of `lbas` blocks.
    fn protect(img: &mut [u8], lbas: u32) {
        gpt::mbr::ProtectiveMBR::with_lb_size(lbas - 1)
            .overwrite_lba0(&mut std::io::Cursor::new(&mut img[..512]))
            .unwrap();
    }

    #[test]
    fn a_bad_primary_falls_back_to_the_backup_and_a_write_repairs_it() {
        let mut img = crate_image(4 << 20, gpt::disk::LogicalBlockSize::Lb512, &[(1, 2048, 4095)]);
        protect(&mut img, 8192);
        let dev = Mem(RefCell::new(img));
        dev.0.borrow_mut()[512 + 100] ^= 0xff; // outside the CRC'd 92 bytes: still valid
        assert!(Table::read(&dev, 512, 8192).unwrap().unwrap().primary_ok);
        dev.0.borrow_mut()[512 + 40] ^= 0xff; // first_usable: CRC mismatch
        let mut t = Table::read(&dev, 512, 8192).unwrap().unwrap();
        assert!(!t.primary_ok && t.backup_ok);
        assert_eq!(t.entries().len(), 1);
        t.write(&dev, &[]).unwrap();
        assert!(Table::read(&dev, 512, 8192).unwrap().unwrap().healthy());
    }

    #[test]
    fn lba0_decides_whether_a_gpt_is_read_at_all() {
        let good = crate_image(4 << 20, gpt::disk::LogicalBlockSize::Lb512, &[(1, 2048, 4095)]);
        let read = |img: &[u8]| Table::read(&Mem(RefCell::new(img.to_vec())), 512, 8192).unwrap();
        let mut bad_primary = good.clone();
        bad_primary[512 + 40] ^= 0xff;
        // Blank LBA 0: the primary copy is read; a backup copy alone is not (the kernel reads
        // neither; a blank LBA 0 before a valid primary is our own interrupted write).
        assert!(read(&good).unwrap().healthy());
        assert!(read(&bad_primary).is_none(), "a backup copy without a protective MBR");
        // A protective MBR: either copy.
        let (mut good_p, mut bad_p) = (good.clone(), bad_primary.clone());
        protect(&mut good_p, 8192);
        protect(&mut bad_p, 8192);
        assert!(read(&good_p).unwrap().healthy());
        let t = read(&bad_p).unwrap();
        assert!(!t.primary_ok && t.backup_ok && t.entries().len() == 1);
        // Anything else in LBA 0 hides even a valid GPT: a real MBR, an MBR without partitions,
        // a boot sector, a filesystem's first bytes, a 0xEE record not starting at LBA 1.
        let mut mbr = [0u8; 512];
        mbr[446 + 4] = 0x83;
        mbr[446 + 8..446 + 12].copy_from_slice(&2048u32.to_le_bytes());
        mbr[446 + 12..446 + 16].copy_from_slice(&16384u32.to_le_bytes());
        mbr[510..].copy_from_slice(&[0x55, 0xAA]);
        let mut empty = [0u8; 512];
        empty[510..].copy_from_slice(&[0x55, 0xAA]);
        let mut boot = mbr;
        boot[446] = 0x12;
        let mut xfs = [0u8; 512];
        xfs[..4].copy_from_slice(b"XFSB");
        let mut ee_elsewhere = [0u8; 512];
        ee_elsewhere[446 + 4] = 0xEE;
        ee_elsewhere[446 + 8..446 + 12].copy_from_slice(&2u32.to_le_bytes());
        ee_elsewhere[446 + 12..446 + 16].copy_from_slice(&8191u32.to_le_bytes());
        ee_elsewhere[510..].copy_from_slice(&[0x55, 0xAA]);
        for (what, lba0) in [("mbr", mbr), ("empty", empty), ("boot", boot), ("xfs", xfs), ("ee", ee_elsewhere)] {
            for img in [&good, &bad_primary] {
                let mut img = img.clone();
                img[..512].copy_from_slice(&lba0);
                assert!(read(&img).is_none(), "{what}");
            }
        }
    }

    #[test]
    fn hostile_headers_are_refused_not_trusted() {
        let img = crate_image(4 << 20, gpt::disk::LogicalBlockSize::Lb512, &[]);
        let patch = |at: usize, v: &[u8]| {
            let dev = Mem(RefCell::new(img.clone()));
            {
                let mut d = dev.0.borrow_mut();
                for lba in [1usize, 8191] {
                    let s = &mut d[lba * 512..lba * 512 + 512];
                    s[at..at + v.len()].copy_from_slice(v);
                    s[16..20].fill(0);
                    let crc = crc32(&s[..92]);
                    s[16..20].copy_from_slice(&crc.to_le_bytes());
                }
            }
            Table::read(&dev, 512, 8192).unwrap()
        };
        assert!(patch(80, &u32::MAX.to_le_bytes()).is_none(), "huge entry count");
        assert!(patch(84, &64u32.to_le_bytes()).is_none(), "entry size below 128");
        assert!(patch(48, &9000u64.to_le_bytes()).is_none(), "last usable beyond the disk");
        assert!(patch(72, &100u64.to_le_bytes()).is_none(), "array inside the usable area");
        assert!(patch(12, &4096u32.to_le_bytes()).is_none(), "header size beyond the sector");
        assert!(patch(0, b"EFI PARX").is_none());
    }

    #[test]
    fn free_extents_and_slots() {
        let linux = Guid::parse("0fc63daf-8483-4772-8e79-3d69d8477de4").unwrap();
        let dev = Mem(RefCell::new(crate_image(4 << 20, gpt::disk::LogicalBlockSize::Lb512, &[])));
        let mut t = Table::read(&dev, 512, 8192).unwrap().unwrap();
        assert_eq!(t.free_extents(), vec![(34, 8158)]);
        t.set_entry(1, linux, Guid([1; 16]), 2048, 4095, "a");
        t.set_entry(3, linux, Guid([3; 16]), 6144, 7000, "c");
        assert_eq!(t.free_extents(), vec![(4096, 6143), (34, 2047), (7001, 8158)]);
        assert_eq!(t.free_slot(), Some(2));
        assert_eq!(t.room_after(1), Some(6143));
        assert_eq!(t.room_after(3), Some(8158));
        t.set_entry(2, MICROSOFT_RESERVED, Guid([2; 16]), 4096, 6143, "b");
        t.write(&dev, &[]).unwrap();
        let t = Table::read(&dev, 512, 8192).unwrap().unwrap();
        assert_eq!(t.entries().iter().map(|e| e.number).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(t.entries()[1].type_guid, MICROSOFT_RESERVED);
        assert_eq!(t.entries()[2].guid, Guid([3; 16]));
    }

    /// Found by the `gpt` fuzz target: a partition starting before FirstUsableLBA (at LBA 1)
    /// had its first blocks overwritten when the table was rewritten (a primary repaired from
    /// the backup); and free space before a partition that starts in the backup copy's blocks
    /// was dropped instead of clipped.
    #[test]
    fn partitions_over_the_table_are_never_written_and_free_space_is_clipped() {
        let linux = Guid::parse("0fc63daf-8483-4772-8e79-3d69d8477de4").unwrap();
        let dev = Mem(RefCell::new(crate_image(4 << 20, gpt::disk::LogicalBlockSize::Lb512, &[])));
        let mut t = Table::read(&dev, 512, 8192).unwrap().unwrap();
        t.set_entry(1, linux, Guid([1; 16]), 1, 4095, "over the table");
        let data = vec![0xa5u8; 512];
        for lba in 1..40 {
            dev.write_at(lba * 512, &data).unwrap();
        }
        let before = dev.0.borrow().clone();
        let e = t.write(&dev, &[(1, 4095)]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("starts at block 1"), "{e}");
        assert!(*dev.0.borrow() == before, "nothing was written");

        let dev = Mem(RefCell::new(crate_image(4 << 20, gpt::disk::LogicalBlockSize::Lb512, &[])));
        let mut t = Table::read(&dev, 512, 8192).unwrap().unwrap();
        t.set_entry(1, MICROSOFT_RESERVED, Guid([2; 16]), 8191, 8191, "in the backup blocks");
        assert_eq!(t.free_extents(), vec![(34, 8158)]);
    }

    #[test]
    fn mbr_classification() {
        let mut s = vec![0u8; 512];
        assert_eq!(classify_mbr(&s), Mbr::None);
        s[510] = 0x55;
        s[511] = 0xAA;
        assert_eq!(classify_mbr(&s), Mbr::Empty);
        s[446 + 4] = 0x83;
        s[446 + 12] = 1;
        assert_eq!(classify_mbr(&s), Mbr::Partitioned);
        s[446 + 16 + 4] = 0xEE;
        assert_eq!(classify_mbr(&s), Mbr::Partitioned, "0xEE not starting at LBA 1: not protective");
        s[446 + 16 + 8] = 1;
        assert_eq!(classify_mbr(&s), Mbr::Protective);
        s[446] = 0x12;
        assert_eq!(classify_mbr(&s), Mbr::Unknown);
        let mut p = vec![0u8; 512];
        gpt::mbr::ProtectiveMBR::with_lb_size(1000).overwrite_lba0(&mut std::io::Cursor::new(&mut p[..])).unwrap();
        assert_eq!(classify_mbr(&p), Mbr::Protective);
    }
}
