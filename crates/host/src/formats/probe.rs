//! Superblock probing: what a block device (or an image of one) already holds, told by the
//! magic numbers at fixed offsets near its start and near its end. Our own reading of the
//! bytes — no blkid, no C.
//!
//! Offsets and magics follow util-linux's `libblkid/src/superblocks/*.c` (and the formats' own
//! definitions); the names returned are blkid's `TYPE` values (`gpt` and `dos` are its `PTTYPE`
//! values), so tests can cross-check them with `blkid -p`. Any hit means "in use": FormatVolume
//! never writes over it. The Linux backend also asks libblkid when this probe finds nothing; why,
//! and how the answers combine: *Two probes* in `linux/block/volumes.rs`.
//!
//! Read: the first [`PROBE_LEN`] bytes and the last ones from [`tail_start`] on. At the end of a
//! device lie md RAID 0.90 and 1.0 superblocks, Intel (IMSM) and DDF RAID metadata, ZFS labels
//! 2 and 3 and a GPT's backup header. RAID metadata at the end outranks what the start holds
//! (an md 1.0 member starts with the filesystem of its array, as blkid ranks them too);
//! ZFS labels and a backup GPT count only where the start holds nothing known.

use std::io::{self, Read, Seek, SeekFrom};

/// Bytes read from the start of the device: enough for every signature below (ZFS labels 0 and
/// 1 fill the first 512 KiB; btrfs and reiserfs superblocks sit at 64 KiB, jfs, UDF and ISO 9660
/// descriptors from 32 KiB).
pub(crate) const PROBE_LEN: usize = 512 * 1024;
/// The kind reported when only libblkid recognises what is on a device (see *Two probes* in
/// `linux/block/volumes.rs`).
pub(crate) const OTHER_SIGNATURE: &str = "libblkid-signature";
/// A ZFS vdev label: four per device, two at the start and two at the end (the end ones
/// aligned down to the label size), each with its uberblock ring in its second half.
const ZFS_LABEL: u64 = 256 * 1024;
/// Where the uberblock ring starts in a label, and the size of one uberblock slot (larger
/// sectors make larger slots, multiples of this).
const ZFS_UBERBLOCKS: u64 = 128 * 1024;
const ZFS_UBERBLOCK_SLOT: u64 = 1024;
const ZFS_UBERBLOCK_MAGIC: u64 = 0x00ba_b10c;
/// md RAID superblocks' magic.
const MD_MAGIC: u32 = 0xa92b_4efc;
const BCACHE_MAGIC: [u8; 16] =
    [0xc6, 0x85, 0x73, 0xf6, 0x4e, 0x1a, 0x45, 0xca, 0x82, 0x65, 0xf5, 0x7f, 0x48, 0xba, 0x6d, 0x81];
const BCACHEFS_MAGIC: [u8; 16] =
    [0xc6, 0x85, 0x73, 0xf6, 0x66, 0xce, 0x90, 0xa9, 0xd9, 0x6a, 0x60, 0xcf, 0x80, 0x3d, 0xf7, 0xef];

/// Where the bytes read from the end of a device of `size` bytes start: the last two ZFS labels
/// and everything after them (at most 768 KiB).
pub(crate) fn tail_start(size: u64) -> u64 {
    (size & !(ZFS_LABEL - 1)).saturating_sub(2 * ZFS_LABEL)
}

/// What was read of a device of `size` bytes: `head` from its start, `tail` from `tail_start`.
/// The two may overlap (small devices); bytes missing from both are not there.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample<'a> {
    pub size: u64,
    pub head: &'a [u8],
    pub tail_start: u64,
    pub tail: &'a [u8],
}

impl Sample<'_> {
    /// `len` bytes at device offset `off`, if they were read.
    fn get(&self, off: u64, len: usize) -> Option<&[u8]> {
        let end = off.checked_add(len as u64).filter(|&end| end <= self.size)?;
        if end <= self.head.len() as u64 {
            return self.head.get(off as usize..end as usize);
        }
        let rel = off.checked_sub(self.tail_start)?;
        self.tail.get(usize::try_from(rel).ok()?..usize::try_from(rel).ok()?.checked_add(len)?)
    }

    fn u32_le(&self, off: u64) -> Option<u32> {
        self.get(off, 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn u64_at(&self, off: u64, big_endian: bool) -> Option<u64> {
        let b: [u8; 8] = self.get(off, 8)?.try_into().ok()?;
        Some(if big_endian { u64::from_be_bytes(b) } else { u64::from_le_bytes(b) })
    }
}

/// What `r` holds: a filesystem, another known signature (swap, LUKS, LVM, RAID, bcache, ZFS)
/// or a nested partition table; `None` when nothing known is there. Reads the start and the
/// end (the size is where `r` seeks to at its end); a device shorter than [`PROBE_LEN`] is
/// probed on what it has.
pub(crate) fn probe(r: &mut (impl Read + Seek)) -> io::Result<Option<&'static str>> {
    let size = r.seek(SeekFrom::End(0))?;
    let head = read_at(r, 0, PROBE_LEN.min(usize::try_from(size).unwrap_or(PROBE_LEN)))?;
    // What the head already holds is not read twice.
    let tail_start = tail_start(size).max(head.len() as u64);
    let tail = read_at(r, tail_start, usize::try_from(size - tail_start).unwrap_or(0))?;
    Ok(identify_sample(&Sample { size, head: &head, tail_start, tail: &tail }))
}

/// Up to `len` bytes of `r` from `off` (fewer at its end).
pub(crate) fn read_at(r: &mut (impl Read + Seek), off: u64, len: usize) -> io::Result<Vec<u8>> {
    r.seek(SeekFrom::Start(off))?;
    let mut buf = vec![0u8; len];
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(n);
    Ok(buf)
}

/// [`probe`] on what was read of a device: RAID metadata at its end, then what its start
/// holds ([`identify`]), then ZFS labels and a backup GPT header.
pub(crate) fn identify_sample(s: &Sample<'_>) -> Option<&'static str> {
    if let Some(raid) = end_raid(s) {
        return Some(raid);
    }
    if let Some(kind) = identify(s.head) {
        return Some(kind);
    }
    let size = s.size;
    let aligned = size & !(ZFS_LABEL - 1);
    let labels = [Some(0), Some(ZFS_LABEL), aligned.checked_sub(2 * ZFS_LABEL), aligned.checked_sub(ZFS_LABEL)];
    if labels.into_iter().flatten().any(|label| zfs_label(s, label)) {
        return Some("zfs_member");
    }
    // The backup GPT header in the last LBA (512- or 4096-byte sectors).
    if [512, 4096].iter().any(|&lbs| size.checked_sub(lbs).is_some_and(|off| s.get(off, 8) == Some(b"EFI PART"))) {
        return Some("gpt");
    }
    None
}

/// RAID metadata kept at the end of a member device.
fn end_raid(s: &Sample<'_>) -> Option<&'static str> {
    let size = s.size;
    // md 0.90: 64 KiB aligned down to 64 KiB from the end, in the creating host's byte order;
    // its major version (0) follows.
    if let Some(off) = (size & !0xffff).checked_sub(0x10000).filter(|_| size >= 0x20000) {
        for be in [false, true] {
            let word = |o: u64| s.get(o, 4).map(|b| [b[0], b[1], b[2], b[3]]);
            let num = |w: [u8; 4]| if be { u32::from_be_bytes(w) } else { u32::from_le_bytes(w) };
            if word(off).map(num) == Some(MD_MAGIC) && word(off + 4).map(num) == Some(0) {
                return Some("linux_raid_member");
            }
        }
    }
    // md 1.0: 8 KiB from the end, aligned down to 4 KiB; little endian, major version 1.
    if let Some(sectors) = (size / 512).checked_sub(16) {
        let off = (sectors & !7) * 512;
        if s.u32_le(off) == Some(MD_MAGIC) && s.u32_le(off + 4) == Some(1) {
            return Some("linux_raid_member");
        }
    }
    // Intel Matrix Storage (IMSM): in the second-to-last sector.
    if size.checked_sub(1024).is_some_and(|off| s.get(off, 24) == Some(b"Intel Raid ISM Cfg Sig. ")) {
        return Some("isw_raid_member");
    }
    // SNIA DDF: the anchor header in the last sector, big endian magic.
    if size.checked_sub(512).is_some_and(|off| s.get(off, 4) == Some(&0xde11_de11u32.to_be_bytes())) {
        return Some("ddf_raid_member");
    }
    None
}

/// Whether the ZFS label at `label` holds an uberblock: the magic in either byte order at the
/// start of a slot of its ring, followed by a plausible pool version (1..=5000, 5000 meaning
/// "feature flags").
fn zfs_label(s: &Sample<'_>, label: u64) -> bool {
    let ring = label + ZFS_UBERBLOCKS;
    (0..(ZFS_LABEL - ZFS_UBERBLOCKS) / ZFS_UBERBLOCK_SLOT).any(|i| {
        let slot = ring + i * ZFS_UBERBLOCK_SLOT;
        [false, true].into_iter().any(|be| {
            s.u64_at(slot, be) == Some(ZFS_UBERBLOCK_MAGIC)
                && s.u64_at(slot + 8, be).is_some_and(|v| (1..=5000).contains(&v))
        })
    })
}

/// What bytes read from the start of a device hold (see [`probe`], which also reads its end).
pub(crate) fn identify(b: &[u8]) -> Option<&'static str> {
    let at = |off: usize, magic: &[u8]| b.get(off..off + magic.len()) == Some(magic);
    let u32_at = |off: usize| b.get(off..off + 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]));
    let u64_at = |off: usize| b.get(off..off + 8).map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")));

    if at(0, b"LUKS\xba\xbe") {
        return Some("crypto_LUKS");
    }
    if at(0, b"XFSB") {
        return Some("xfs");
    }
    // ext2/3/4: superblock at 1 KiB, s_magic 0xEF53 (little endian) at 0x38.
    if at(1024 + 0x38, &[0x53, 0xef]) {
        return Some(ext_kind(b));
    }
    if at(0x10000 + 0x40, b"_BHRfS_M") {
        return Some("btrfs");
    }
    if u32_at(1024) == Some(0xf2f5_2010) {
        return Some("f2fs");
    }
    if u32_at(1024) == Some(0xe0f5_e1e2) {
        return Some("erofs");
    }
    if at(3, b"NTFS    ") {
        return Some("ntfs");
    }
    if at(3, b"EXFAT   ") {
        return Some("exfat");
    }
    if at(510, &[0x55, 0xaa])
        && (["FAT12   ", "FAT16   ", "FAT     ", "MSDOS"].iter().any(|m| at(0x36, m.as_bytes()))
            || ["FAT32   ", "MSWIN"].iter().any(|m| at(0x52, m.as_bytes())))
    {
        return Some("vfat");
    }
    // Swap: the signature ends the first page, for every page size up to 64 KiB.
    for page in [4096, 8192, 16384, 32768, 65536] {
        let off = page - 10;
        if at(off, b"SWAPSPACE2") || at(off, b"SWAP-SPACE") || at(off, b"S1SUSPEND\0") {
            return Some("swap");
        }
    }
    // LVM2: a label in one of the first four sectors.
    if (0..4).any(|s| at(s * 512, b"LABELONE") && at(s * 512 + 0x18, b"LVM2 001")) {
        return Some("LVM2_member");
    }
    // md RAID 1.1 (at 0) and 1.2 (at 4 KiB).
    if u32_at(0) == Some(MD_MAGIC) || u32_at(4096) == Some(MD_MAGIC) {
        return Some("linux_raid_member");
    }
    // bcache and bcachefs: a superblock at 4 KiB with the magic at 24. bcachefs used bcache's
    // magic at first; its versions (from 7 on) tell it apart from bcache's (0 to 6).
    if at(4096 + 24, &BCACHEFS_MAGIC) {
        return Some("bcachefs");
    }
    if at(4096 + 24, &BCACHE_MAGIC) {
        return Some(if u64_at(4096 + 16).is_some_and(|v| v < 7) { "bcache" } else { "bcachefs" });
    }
    if [0x10000 + 52, 0x2000 + 52]
        .iter()
        .any(|&off| [&b"ReIsErFs"[..], b"ReIsEr2Fs", b"ReIsEr3Fs"].iter().any(|m| at(off, m)))
    {
        return Some("reiserfs");
    }
    if at(0, b"hsqs") {
        return Some("squashfs");
    }
    if at(32768, b"JFS1") {
        return Some("jfs");
    }
    // Volume descriptors from 32 KiB, one per 2 KiB sector (or per larger sector): ECMA-167's
    // recognition sequence (BEA01, NSR02/NSR03, TEA01) makes UDF, else CD001 makes ISO 9660.
    let descriptors = |step: usize| (0..16).map(move |i| 32768 + i * step + 1);
    let udf = [2048, 4096].into_iter().any(|step| {
        descriptors(step).any(|off| ["BEA01", "NSR02", "NSR03", "TEA01"].iter().any(|m| at(off, m.as_bytes())))
    });
    if udf {
        return Some("udf");
    }
    if descriptors(2048).any(|off| at(off, b"CD001")) {
        return Some("iso9660");
    }
    // LUKS2's secondary header, where the primary one was wiped.
    if [0x4000, 0x8000, 0x10000, 0x20000, 0x40000].iter().any(|&off| at(off, b"SKUL\xba\xbe")) {
        return Some("crypto_LUKS");
    }
    // Partition tables: a GPT header (512- or 4096-byte sectors), or an MBR with an entry.
    if at(512, b"EFI PART") || at(4096, b"EFI PART") {
        return Some("gpt");
    }
    if at(510, &[0x55, 0xaa]) && (0..4).any(|i| b.get(446 + 16 * i + 4).is_some_and(|&t| t != 0)) {
        return Some("dos");
    }
    None
}

/// ext2, ext3, ext4 or an external ext journal, by feature flags as blkid tells them apart.
fn ext_kind(b: &[u8]) -> &'static str {
    let feature =
        |off: usize| b.get(1024 + off..1024 + off + 4).map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]));
    let (compat, incompat, ro_compat) = (feature(0x5c), feature(0x60), feature(0x64));
    const HAS_JOURNAL: u32 = 0x4;
    const INCOMPAT_JOURNAL_DEV: u32 = 0x8;
    // What ext3 knows: FILETYPE | RECOVER | META_BG, and SPARSE_SUPER | LARGE_FILE | BTREE_DIR.
    const EXT3_INCOMPAT: u32 = 0x2 | 0x4 | 0x10;
    const EXT3_RO_COMPAT: u32 = 0x1 | 0x2 | 0x4;
    if incompat & INCOMPAT_JOURNAL_DEV != 0 {
        "jbd"
    } else if incompat & !EXT3_INCOMPAT != 0 || ro_compat & !EXT3_RO_COMPAT != 0 {
        "ext4"
    } else if compat & HAS_JOURNAL != 0 {
        "ext3"
    } else {
        "ext2"
    }
}

/// The size in bytes that the superblock of filesystem `kind` (as [`identify`] named it) gives
/// the filesystem, for the kinds ResizeVolume grows; `None` for others or when cut off.
pub(crate) fn fs_size(kind: &str, b: &[u8]) -> Option<u64> {
    let le =
        |off: usize, n: usize| b.get(off..off + n).map(|s| s.iter().rev().fold(0u64, |v, &x| v << 8 | u64::from(x)));
    let be = |off: usize, n: usize| b.get(off..off + n).map(|s| s.iter().fold(0u64, |v, &x| v << 8 | u64::from(x)));
    match kind {
        "ext2" | "ext3" | "ext4" => {
            let sb = 1024;
            let mut blocks = le(sb + 0x04, 4)?;
            // INCOMPAT_64BIT: the high half of the block count.
            if le(sb + 0x60, 4)? & 0x80 != 0 {
                blocks |= le(sb + 0x150, 4)? << 32;
            }
            let log = le(sb + 0x18, 4)?;
            (log <= 6).then(|| blocks.saturating_mul(1024 << log))
        }
        // sb_blocksize, sb_dblocks (big endian).
        "xfs" => Some(be(4, 4)?.saturating_mul(be(8, 8)?)),
        // total_bytes of the superblock at 64 KiB.
        "btrfs" => le(0x10000 + 0x70, 8),
        // bytes per sector, total sectors of the boot sector.
        "ntfs" => Some(le(0x0b, 2)?.saturating_mul(le(0x28, 8)?)),
        _ => None,
    }
}

/// Whether the NTFS volume on `r` is marked dirty: the `VOLUME_IS_DIRTY` flag of
/// `$VOLUME_INFORMATION` in `$Volume` (MFT record 3), which Windows' chkdsk and `ntfsfix -d`
/// clear and the kernel's ntfs3 refuses to mount. `None` when that can't be read (not NTFS, or
/// a damaged boot sector or record).
pub(crate) fn ntfs_dirty(r: &mut (impl Read + Seek)) -> io::Result<Option<bool>> {
    let boot = read_at(r, 0, 512)?;
    let Some((off, len)) = ntfs_volume_record(&boot) else { return Ok(None) };
    let mut record = read_at(r, off, len)?;
    Ok(ntfs_record_dirty(&mut record))
}

/// Where MFT record 3 (`$Volume`) is, and its size, from an NTFS boot sector.
fn ntfs_volume_record(boot: &[u8]) -> Option<(u64, usize)> {
    if boot.get(3..11) != Some(b"NTFS    ") {
        return None;
    }
    let sector = u64::from(u16::from_le_bytes(boot.get(0x0b..0x0d)?.try_into().ok()?));
    if !(256..=4096).contains(&sector) || !sector.is_power_of_two() {
        return None;
    }
    // Sectors per cluster; above 128 a negative power of two (clusters over 64 KiB).
    let cluster = match *boot.get(0x0d)? {
        0 => return None,
        n @ 1..=128 => sector * u64::from(n),
        n => sector << (256 - u32::from(n)).min(24),
    };
    let mft_lcn = u64::from_le_bytes(boot.get(0x30..0x38)?.try_into().ok()?);
    // Clusters per MFT record; negative: the record is 2^-n bytes.
    let record = match *boot.get(0x40)? as i8 {
        n @ 1.. => cluster * n as u64,
        n => 1u64 << (-(n as i32)).clamp(0, 24),
    };
    if !(512..=65536).contains(&record) {
        return None;
    }
    Some((mft_lcn.checked_mul(cluster)?.checked_add(3 * record)?, record as usize))
}

/// The dirty flag of a `$Volume` MFT record, after undoing its update sequence (the last two
/// bytes of each 512-byte stride are kept in the record's header).
fn ntfs_record_dirty(rec: &mut [u8]) -> Option<bool> {
    const VOLUME_INFORMATION: u32 = 0x70;
    const VOLUME_IS_DIRTY: u16 = 0x0001;
    let u16_at = |rec: &[u8], off: usize| rec.get(off..off + 2).map(|s| u16::from_le_bytes([s[0], s[1]]));
    let u32_at = |rec: &[u8], off: usize| rec.get(off..off + 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]));
    if rec.get(0..4) != Some(b"FILE") {
        return None;
    }
    let (usa, count) = (usize::from(u16_at(rec, 4)?), usize::from(u16_at(rec, 6)?));
    let usn = rec.get(usa..usa + 2)?.to_vec();
    for i in 1..count {
        let end = i * 512 - 2;
        if end + 2 > rec.len() {
            break;
        }
        if rec[end..end + 2] != usn[..] {
            return None; // torn write
        }
        let fix = rec.get(usa + 2 * i..usa + 2 * i + 2)?.to_vec();
        rec[end..end + 2].copy_from_slice(&fix);
    }
    let mut at = usize::from(u16_at(rec, 0x14)?);
    loop {
        let kind = u32_at(rec, at)?;
        if kind == 0xffff_ffff {
            return None;
        }
        let len = usize::try_from(u32_at(rec, at + 4)?).ok()?;
        if len < 24 || at.checked_add(len)? > rec.len() {
            return None;
        }
        if kind == VOLUME_INFORMATION {
            // Resident: value length at 16, its offset at 20; flags at 10 of the value.
            if *rec.get(at + 8)? != 0 || u32_at(rec, at + 16)? < 12 {
                return None;
            }
            let value = at + usize::from(u16_at(rec, at + 20)?);
            return Some(u16_at(rec, value + 10)? & VOLUME_IS_DIRTY != 0);
        }
        at += len;
    }
}

/// How an error message names what [`probe`] found.
pub(crate) fn describe(kind: &str) -> String {
    match kind {
        "swap" => "swap space".into(),
        "crypto_LUKS" => "a LUKS encrypted volume".into(),
        "LVM2_member" => "an LVM2 physical volume".into(),
        "linux_raid_member" => "an md RAID member".into(),
        "isw_raid_member" => "an Intel (IMSM) firmware RAID member".into(),
        "ddf_raid_member" => "a DDF firmware RAID member".into(),
        "zfs_member" => "a ZFS pool member".into(),
        "bcache" => "a bcache device".into(),
        "jbd" => "an ext journal device".into(),
        "gpt" => "a GPT partition table".into(),
        "dos" => "an MBR partition table".into(),
        OTHER_SIGNATURE => "a signature libblkid recognises (see the daemon's log)".into(),
        fs => format!("a {fs} filesystem"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn image(writes: &[(usize, &[u8])]) -> Vec<u8> {
        let mut b = vec![0u8; PROBE_LEN];
        for (off, bytes) in writes {
            b[*off..*off + bytes.len()].copy_from_slice(bytes);
        }
        b
    }

    fn probed(b: Vec<u8>) -> Option<&'static str> {
        probe(&mut Cursor::new(b)).unwrap()
    }

    #[test]
    fn blank_and_short_devices_hold_nothing() {
        assert_eq!(probed(vec![0; PROBE_LEN]), None);
        assert_eq!(probed(vec![0; 2 * PROBE_LEN]), None);
        assert_eq!(probed(Vec::new()), None);
        assert_eq!(probed(vec![0xff; 100]), None);
        // A magic cut off by the end of the device is no magic.
        let mut b = vec![0; 1024 + 0x39];
        b[1024 + 0x38] = 0x53;
        assert_eq!(probed(b), None);
    }

    #[test]
    fn filesystems() {
        assert_eq!(probed(image(&[(0, b"XFSB")])), Some("xfs"));
        assert_eq!(probed(image(&[(65600, b"_BHRfS_M")])), Some("btrfs"));
        assert_eq!(probed(image(&[(3, b"NTFS    "), (510, &[0x55, 0xaa])])), Some("ntfs"));
        assert_eq!(probed(image(&[(3, b"EXFAT   "), (510, &[0x55, 0xaa])])), Some("exfat"));
        assert_eq!(probed(image(&[(0x36, b"FAT16   "), (510, &[0x55, 0xaa])])), Some("vfat"));
        assert_eq!(probed(image(&[(0x52, b"FAT32   "), (510, &[0x55, 0xaa])])), Some("vfat"));
        // FAT's string without the boot signature is not enough.
        assert_eq!(probed(image(&[(0x52, b"FAT32   ")])), None);
        assert_eq!(probed(image(&[(1024, &0xf2f5_2010u32.to_le_bytes())])), Some("f2fs"));
        assert_eq!(probed(image(&[(0, b"hsqs")])), Some("squashfs"));
        assert_eq!(probed(image(&[(0x8001, b"CD001")])), Some("iso9660"));
        assert_eq!(probed(image(&[(0x10034, b"ReIsEr2Fs")])), Some("reiserfs"));
    }

    #[test]
    fn ext_generations() {
        let sb = |compat: u32, incompat: u32, ro: u32| {
            image(&[
                (1024 + 0x38, &[0x53, 0xef]),
                (1024 + 0x5c, &compat.to_le_bytes()),
                (1024 + 0x60, &incompat.to_le_bytes()),
                (1024 + 0x64, &ro.to_le_bytes()),
            ])
        };
        assert_eq!(probed(sb(0, 0x2, 0x1)), Some("ext2"));
        assert_eq!(probed(sb(0x4, 0x2, 0x3)), Some("ext3"));
        // extents (0x40) or huge_file (0x8 ro) make it ext4.
        assert_eq!(probed(sb(0x4, 0x2 | 0x40, 0x1)), Some("ext4"));
        assert_eq!(probed(sb(0x4, 0x2, 0x8)), Some("ext4"));
        assert_eq!(probed(sb(0, 0x8, 0)), Some("jbd"));
    }

    #[test]
    fn other_signatures() {
        assert_eq!(probed(image(&[(0, b"LUKS\xba\xbe")])), Some("crypto_LUKS"));
        assert_eq!(probed(image(&[(4086, b"SWAPSPACE2")])), Some("swap"));
        assert_eq!(probed(image(&[(65526, b"SWAPSPACE2")])), Some("swap"));
        assert_eq!(probed(image(&[(512, b"LABELONE"), (512 + 0x18, b"LVM2 001")])), Some("LVM2_member"));
        assert_eq!(probed(image(&[(4096, &0xa92b_4efcu32.to_le_bytes())])), Some("linux_raid_member"));
        let bcache = [0xc6, 0x85, 0x73, 0xf6, 0x4e, 0x1a, 0x45, 0xca, 0x82, 0x65, 0xf5, 0x7f, 0x48, 0xba, 0x6d, 0x81];
        assert_eq!(probed(image(&[(4096 + 24, &bcache)])), Some("bcache"));
    }

    #[test]
    fn partition_tables() {
        assert_eq!(probed(image(&[(512, b"EFI PART")])), Some("gpt"));
        assert_eq!(probed(image(&[(4096, b"EFI PART")])), Some("gpt"));
        // An MBR counts only with an entry in it.
        assert_eq!(probed(image(&[(510, &[0x55, 0xaa])])), None);
        assert_eq!(probed(image(&[(510, &[0x55, 0xaa]), (446 + 16 + 4, &[0x83])])), Some("dos"));
    }

    /// A device of any size, zero but for `writes`, without the memory.
    struct Sparse {
        size: u64,
        writes: Vec<(u64, Vec<u8>)>,
        pos: u64,
    }

    impl Sparse {
        fn new(size: u64, writes: &[(u64, &[u8])]) -> Sparse {
            Sparse { size, writes: writes.iter().map(|(o, b)| (*o, b.to_vec())).collect(), pos: 0 }
        }
    }

    impl Read for Sparse {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.size.saturating_sub(self.pos) as usize);
            buf[..n].fill(0);
            for (off, bytes) in &self.writes {
                for (i, &b) in bytes.iter().enumerate() {
                    let at = off + i as u64;
                    if at >= self.pos && at < self.pos + n as u64 {
                        buf[(at - self.pos) as usize] = b;
                    }
                }
            }
            self.pos += n as u64;
            Ok(n)
        }
    }

    impl Seek for Sparse {
        fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
            self.pos = match to {
                SeekFrom::Start(o) => o,
                SeekFrom::End(d) => self.size.checked_add_signed(d).unwrap(),
                SeekFrom::Current(d) => self.pos.checked_add_signed(d).unwrap(),
            };
            Ok(self.pos)
        }
    }

    fn sparse(size: u64, writes: &[(u64, &[u8])]) -> Option<&'static str> {
        probe(&mut Sparse::new(size, writes)).unwrap()
    }

    /// Device sizes: small, odd (not a multiple of 64 KiB or 256 KiB), large.
    const SIZES: [u64; 4] = [1 << 20, (3 << 20) + 7 * 4096 + 512, (100 << 30) + 12345 * 512, 1 << 40];

    #[test]
    fn end_of_device_signatures() {
        let md = MD_MAGIC.to_le_bytes();
        for size in SIZES {
            assert_eq!(sparse(size, &[]), None, "{size}");
            // A backup GPT header in the last LBA, for 512- and 4096-byte sectors.
            assert_eq!(sparse(size, &[(size - 512, b"EFI PART")]), Some("gpt"), "{size}");
            assert_eq!(sparse(size, &[(size - 4096, b"EFI PART")]), Some("gpt"), "{size}");
            assert_eq!(sparse(size, &[(size - 1024, b"EFI PART")]), None, "not a last LBA: {size}");
            // md 0.90, either byte order, major version 0.
            let off = (size & !0xffff) - 0x10000;
            assert_eq!(sparse(size, &[(off, &md)]), Some("linux_raid_member"), "{size}");
            assert_eq!(sparse(size, &[(off, &MD_MAGIC.to_be_bytes())]), Some("linux_raid_member"), "{size}");
            assert_eq!(sparse(size, &[(off, &md), (off + 4, &[5, 0, 0, 0])]), None, "major 5: {size}");
            // md 1.0, 8 KiB from the end aligned to 4 KiB, major version 1.
            let off = ((size / 512 - 16) & !7) * 512;
            assert_eq!(sparse(size, &[(off, &md), (off + 4, &[1, 0, 0, 0])]), Some("linux_raid_member"), "{size}");
            assert_eq!(sparse(size, &[(off, &md)]), None, "md 1.0 without its version: {size}");
            // Firmware RAID metadata.
            let isw = b"Intel Raid ISM Cfg Sig. ";
            assert_eq!(sparse(size, &[(size - 1024, isw)]), Some("isw_raid_member"), "{size}");
            assert_eq!(sparse(size, &[(size - 512, &[0xde, 0x11, 0xde, 0x11])]), Some("ddf_raid_member"), "{size}");
            assert_eq!(sparse(size, &[(size - 512, &[0x11, 0xde, 0x11, 0xde])]), None, "DDF is big endian");
        }
    }

    #[test]
    fn zfs_labels() {
        let ub = |be: bool, version: u64| {
            let mut b = Vec::new();
            if be {
                b.extend(ZFS_UBERBLOCK_MAGIC.to_be_bytes());
                b.extend(version.to_be_bytes());
            } else {
                b.extend(ZFS_UBERBLOCK_MAGIC.to_le_bytes());
                b.extend(version.to_le_bytes());
            }
            b
        };
        for size in SIZES {
            let aligned = size & !(ZFS_LABEL - 1);
            let labels = [0, ZFS_LABEL, aligned - 2 * ZFS_LABEL, aligned - ZFS_LABEL];
            for (n, label) in labels.into_iter().enumerate() {
                for (slot, be, version) in [(0, false, 5000), (37, true, 28), (127, false, 1)] {
                    let at = label + ZFS_UBERBLOCKS + slot * 1024;
                    assert_eq!(sparse(size, &[(at, &ub(be, version))]), Some("zfs_member"), "{size} L{n} {slot}");
                }
                let ring = label + ZFS_UBERBLOCKS;
                // Not a pool version, not at a slot, not in the ring.
                assert_eq!(sparse(size, &[(ring, &ub(false, 0))]), None, "{size} L{n}");
                assert_eq!(sparse(size, &[(ring, &ub(false, 5001))]), None, "{size} L{n}");
                assert_eq!(sparse(size, &[(ring + 8, &ub(false, 5000))]), None, "{size} L{n}");
                assert_eq!(sparse(size, &[(label + 1024, &ub(false, 5000))]), None, "{size} L{n}");
            }
        }
    }

    #[test]
    fn what_the_start_holds_ranks_against_the_end() {
        let size = SIZES[1];
        let md = MD_MAGIC.to_le_bytes();
        let md10 = ((size / 512 - 16) & !7) * 512;
        let ext4 = (1024 + 0x38, &[0x53u8, 0xef][..]);
        // An md 1.0 member starts with its array's filesystem: the member is what it is.
        assert_eq!(sparse(size, &[ext4, (md10, &md), (md10 + 4, &[1, 0, 0, 0])]), Some("linux_raid_member"));
        // Stale ZFS labels or a backup GPT behind a filesystem: the filesystem.
        let zfs = [ZFS_UBERBLOCK_MAGIC.to_le_bytes(), 5000u64.to_le_bytes()].concat();
        let l3 = (size & !(ZFS_LABEL - 1)) - ZFS_LABEL + ZFS_UBERBLOCKS;
        assert_eq!(sparse(size, &[(0, b"XFSB"), (l3, &zfs)]), Some("xfs"));
        assert_eq!(sparse(size, &[(0, b"XFSB"), (size - 512, b"EFI PART")]), Some("xfs"));
    }

    #[test]
    fn samples_map_offsets_to_head_or_tail() {
        let head = image(&[]);
        let size = (10u64 << 30) + 512 * 3;
        let start = tail_start(size);
        let mut tail = vec![0u8; (size - start) as usize];
        assert_eq!(start, (10 << 30) - 512 * 1024);
        assert!(size - start <= 768 * 1024);
        let at = (size - 512 - start) as usize;
        tail[at..at + 8].copy_from_slice(b"EFI PART");
        let s = Sample { size, head: &head, tail_start: start, tail: &tail };
        assert_eq!(identify_sample(&s), Some("gpt"));
        // Bytes between head and tail were not read: nothing is made up for them.
        assert_eq!(s.get(PROBE_LEN as u64, 4), None);
        assert_eq!(s.get(start - 2, 4), None);
        assert_eq!(s.get(size - 2, 4), None);
        assert_eq!(s.get(u64::MAX - 1, 4), None);
        // Nor past the end of the device, whatever the buffer holds.
        let longer = [tail.clone(), vec![1; 4096]].concat();
        assert_eq!(Sample { tail: &longer, ..s }.get(size - 2, 4), None);
        // A small device: everything is in the head.
        assert_eq!(tail_start(300 * 1024), 0);
        let small = image(&[(PROBE_LEN - 512, b"EFI PART")]);
        assert_eq!(probed(small), Some("gpt"));
    }

    #[test]
    fn more_start_signatures() {
        assert_eq!(probed(image(&[(32768, b"JFS1")])), Some("jfs"));
        assert_eq!(probed(image(&[(0x8001, b"BEA01"), (0x8801, b"NSR02"), (0x9001, b"TEA01")])), Some("udf"));
        assert_eq!(probed(image(&[(0x8001, b"CD001"), (0x8801, b"BEA01"), (0x9001, b"NSR03")])), Some("udf"));
        // 4 KiB sectors: one descriptor per sector.
        assert_eq!(probed(image(&[(0x9001, b"NSR03")])), Some("udf"));
        assert_eq!(probed(image(&[(0x8001, b"CD001"), (0x8801, b"CD001")])), Some("iso9660"));
        assert_eq!(probed(image(&[(0x8802, b"CD001")])), None, "not at a descriptor");
        assert_eq!(probed(image(&[(4096 + 24, &BCACHEFS_MAGIC)])), Some("bcachefs"));
        // bcache's magic: its own versions (0..=6), or an early bcachefs.
        assert_eq!(probed(image(&[(4096 + 24, &BCACHE_MAGIC), (4096 + 16, &[3])])), Some("bcache"));
        assert_eq!(probed(image(&[(4096 + 24, &BCACHE_MAGIC), (4096 + 16, &[0x0e, 0x04])])), Some("bcachefs"));
        assert_eq!(probed(image(&[(1024, &0xe0f5_e1e2u32.to_le_bytes())])), Some("erofs"));
        assert_eq!(probed(image(&[(0x8000, b"SKUL\xba\xbe")])), Some("crypto_LUKS"));
        assert_eq!(probed(image(&[(0x8001, b"SKUL\xba\xbe")])), None);
    }

    /// An MFT record of `size` bytes for `$Volume`, its update sequence applied (the last two
    /// bytes of each 512 are moved into the array), holding `$VOLUME_INFORMATION` with `flags`.
    /// `pad` makes the attributes before it long enough to put the flags across a stride end.
    fn volume_record(size: usize, flags: u16, pad: usize) -> Vec<u8> {
        let mut r = vec![0u8; size];
        r[0..4].copy_from_slice(b"FILE");
        let strides = size / 512;
        r[4..6].copy_from_slice(&0x30u16.to_le_bytes()); // update sequence array offset
        r[6..8].copy_from_slice(&(strides as u16 + 1).to_le_bytes());
        let first = 0x30 + 2 * (strides + 1);
        let first = (first + 7) & !7;
        r[0x14..0x16].copy_from_slice(&(first as u16).to_le_bytes());
        let mut at = first;
        // A $STANDARD_INFORMATION-like attribute of 72 + pad bytes.
        let len = 72 + pad;
        r[at..at + 4].copy_from_slice(&0x10u32.to_le_bytes());
        r[at + 4..at + 8].copy_from_slice(&(len as u32).to_le_bytes());
        at += len;
        // $VOLUME_INFORMATION, resident, 12-byte value at 24.
        r[at..at + 4].copy_from_slice(&0x70u32.to_le_bytes());
        r[at + 4..at + 8].copy_from_slice(&40u32.to_le_bytes());
        r[at + 16..at + 20].copy_from_slice(&12u32.to_le_bytes());
        r[at + 20..at + 22].copy_from_slice(&24u16.to_le_bytes());
        r[at + 24 + 8] = 3; // version 3.1
        r[at + 24 + 9] = 1;
        r[at + 24 + 10..at + 24 + 12].copy_from_slice(&flags.to_le_bytes());
        at += 40;
        r[at..at + 4].copy_from_slice(&0xffff_ffffu32.to_le_bytes());
        // The update sequence: number 0x0007 in place, the real bytes in the array.
        r[0x30..0x32].copy_from_slice(&7u16.to_le_bytes());
        for i in 1..=strides {
            let end = i * 512 - 2;
            let kept = [r[end], r[end + 1]];
            r[0x30 + 2 * i..0x30 + 2 * i + 2].copy_from_slice(&kept);
            r[end..end + 2].copy_from_slice(&7u16.to_le_bytes());
        }
        r
    }

    /// Padding that puts the flags of [`volume_record`] at 510, the end of the first stride
    /// (attributes from 56: 0x30 + 2 × 3 array bytes, rounded up to 8; flags 34 bytes into
    /// `$VOLUME_INFORMATION`, after the 72-byte attribute before it).
    const STRADDLE: usize = 510 - 56 - 72 - 34;

    #[test]
    fn ntfs_dirty_flag_from_crafted_records() {
        for (size, pad) in [(1024, 0), (1024, STRADDLE), (4096, 0), (4096, STRADDLE)] {
            assert_eq!(ntfs_record_dirty(&mut volume_record(size, 0x0000, pad)), Some(false), "{size} {pad}");
            assert_eq!(ntfs_record_dirty(&mut volume_record(size, 0x0001, pad)), Some(true), "{size} {pad}");
            assert_eq!(ntfs_record_dirty(&mut volume_record(size, 0x8000, pad)), Some(false), "{size} {pad}");
            assert_eq!(ntfs_record_dirty(&mut volume_record(size, 0x8001, pad)), Some(true), "{size} {pad}");
        }
        // With STRADDLE the flags sit where the first stride ends: on disk that holds the update
        // sequence number (7), the flags are only right once the sequence is undone.
        let r = volume_record(1024, 0x0001, STRADDLE);
        assert_eq!(&r[510..512], &7u16.to_le_bytes());
        assert_eq!(&r[0x32..0x34], &1u16.to_le_bytes(), "the flags, kept in the array");
        // A torn record (a stride's end not the sequence number), no record, no such attribute.
        let mut torn = volume_record(1024, 0x0001, 0);
        torn[1022] ^= 0xff;
        assert_eq!(ntfs_record_dirty(&mut torn), None);
        assert_eq!(ntfs_record_dirty(&mut vec![0u8; 1024]), None);
        let mut other = volume_record(1024, 0x0001, 0);
        let first = usize::from(u16::from_le_bytes([other[0x14], other[0x15]]));
        other[first + 72..first + 76].copy_from_slice(&0x60u32.to_le_bytes());
        assert_eq!(ntfs_record_dirty(&mut other), None);
        // Where the record is, from a boot sector: 4 KiB clusters, MFT at cluster 4, 1 KiB records.
        let mut boot = vec![0u8; 512];
        boot[3..11].copy_from_slice(b"NTFS    ");
        boot[0x0b..0x0d].copy_from_slice(&512u16.to_le_bytes());
        boot[0x0d] = 8;
        boot[0x30..0x38].copy_from_slice(&4u64.to_le_bytes());
        boot[0x40] = (-10i8) as u8;
        assert_eq!(ntfs_volume_record(&boot), Some((4 * 4096 + 3 * 1024, 1024)));
        boot[0x40] = 1; // one cluster per record
        assert_eq!(ntfs_volume_record(&boot), Some((4 * 4096 + 3 * 4096, 4096)));
        boot[0x0d] = 0xf4; // 2^12 sectors per cluster: 2 MiB
        boot[0x40] = (-10i8) as u8;
        assert_eq!(ntfs_volume_record(&boot), Some((4 * (2 << 20) + 3 * 1024, 1024)));
        boot[0x0d] = 0;
        assert_eq!(ntfs_volume_record(&boot), None);
        // Through a reader: boot sector, then the record where it says.
        boot[0x0d] = 8;
        let mut dev = vec![0u8; 64 * 1024];
        dev[..512].copy_from_slice(&boot);
        dev[4 * 4096 + 3 * 1024..4 * 4096 + 4 * 1024].copy_from_slice(&volume_record(1024, 1, 0));
        assert_eq!(ntfs_dirty(&mut Cursor::new(&dev)).unwrap(), Some(true));
        assert_eq!(ntfs_dirty(&mut Cursor::new(vec![0u8; 4096])).unwrap(), None);
    }

    /// The dirty flag as ntfs-3g's tools set and clear it, on a real image (skipped without
    /// them): mkntfs makes it clean, ntfsresize leaves it dirty, ntfsfix -d clears it.
    #[test]
    #[cfg(target_os = "linux")] // runs the Linux mkfs tools
    fn ntfs_dirty_flag_of_real_images() {
        let tool = |name: &str| {
            ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
                .iter()
                .map(|d| std::path::Path::new(d).join(name))
                .find(|p| p.exists())
        };
        let (Some(mkntfs), Some(resize), Some(fix)) = (tool("mkntfs"), tool("ntfsresize"), tool("ntfsfix")) else {
            eprintln!("skipped: ntfs-3g's tools are not installed");
            return;
        };
        let img = std::env::temp_dir().join(format!("csi-proxy-ntfs-dirty-{}.img", std::process::id()));
        let f = std::fs::File::create(&img).unwrap();
        f.set_len(64 << 20).unwrap();
        let run = |prog: &std::path::Path, args: &[&str]| {
            let out = std::process::Command::new(prog)
                .args(args)
                .arg(&img)
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            assert!(out.status.success(), "{prog:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        let dirty = || ntfs_dirty(&mut std::fs::File::open(&img).unwrap()).unwrap();
        run(&mkntfs, &["-Q", "-q", "-F"]);
        assert_eq!(dirty(), Some(false), "fresh from mkntfs");
        f.set_len(96 << 20).unwrap();
        run(&resize, &["-f", "-P"]);
        assert_eq!(dirty(), Some(true), "after ntfsresize");
        run(&fix, &["-d"]);
        assert_eq!(dirty(), Some(false), "after ntfsfix -d");
        drop(f);
        std::fs::remove_file(&img).unwrap();
    }

    #[test]
    fn filesystem_sizes_from_superblocks() {
        let ext = image(&[
            (1024 + 0x04, &1000u32.to_le_bytes()),
            (1024 + 0x18, &2u32.to_le_bytes()),
            (1024 + 0x60, &0x80u32.to_le_bytes()),
            (1024 + 0x150, &1u32.to_le_bytes()),
        ]);
        assert_eq!(fs_size("ext4", &ext), Some(((1 << 32) + 1000) * 4096));
        let xfs = image(&[(4, &4096u32.to_be_bytes()), (8, &3u64.to_be_bytes())]);
        assert_eq!(fs_size("xfs", &xfs), Some(3 * 4096));
        assert_eq!(fs_size("btrfs", &image(&[(0x10070, &(7u64 << 30).to_le_bytes())])), Some(7 << 30));
        let ntfs = image(&[(0x0b, &512u16.to_le_bytes()), (0x28, &2047u64.to_le_bytes())]);
        assert_eq!(fs_size("ntfs", &ntfs), Some(2047 * 512));
        assert_eq!(fs_size("vfat", &ntfs), None);
        assert_eq!(fs_size("btrfs", &ntfs[..100]), None, "cut off");
    }

    #[test]
    fn reads_from_the_start_whatever_the_position() {
        let mut c = Cursor::new(image(&[(0, b"XFSB")]));
        c.set_position(5000);
        assert_eq!(probe(&mut c).unwrap(), Some("xfs"));
    }

    /// Real mkfs output in sparse image files, cross-checked with `blkid -p` (test only; each
    /// tool is skipped when it is not installed).
    #[test]
    #[cfg(target_os = "linux")] // runs the Linux mkfs tools
    fn real_images_agree_with_blkid() {
        let dir = std::env::temp_dir().join(format!("csi-proxy-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cases: &[(&str, &[&str])] = &[
            ("ext4", &["mkfs.ext4", "-q", "-F"]),
            ("ext2", &["mkfs.ext2", "-q", "-F"]),
            ("xfs", &["mkfs.xfs", "-q", "-f"]),
            ("btrfs", &["mkfs.btrfs", "-q", "-f"]),
            ("ntfs", &["mkntfs", "-Q", "-q", "-F"]),
            ("swap", &["mkswap"]),
            ("vfat", &["mkfs.vfat"]),
        ];
        let tool = |name: &str| {
            ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
                .iter()
                .map(|d| std::path::Path::new(d).join(name))
                .find(|p| p.exists())
        };
        let mut checked = Vec::new();
        for (kind, argv) in cases {
            let Some(prog) = tool(argv[0]) else { continue };
            let img = dir.join(format!("{kind}.img"));
            let f = std::fs::File::create(&img).unwrap();
            f.set_len(400 << 20).unwrap();
            drop(f);
            let out = std::process::Command::new(prog)
                .args(&argv[1..])
                .arg(&img)
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            assert!(out.status.success(), "{argv:?}: {}", String::from_utf8_lossy(&out.stderr));
            let ours = probe(&mut std::fs::File::open(&img).unwrap()).unwrap();
            assert_eq!(ours, Some(*kind), "{kind}");
            if *kind != "swap" {
                let head = std::fs::read(&img).unwrap();
                let size = fs_size(kind, &head[..PROBE_LEN]).unwrap();
                assert!(size <= 400 << 20 && size > 399 << 20, "{kind}: filesystem size {size}");
            }
            if let Some(blkid) = tool("blkid") {
                let out = std::process::Command::new(blkid)
                    .args(["-p", "-o", "value", "-s", "TYPE"])
                    .arg(&img)
                    .output()
                    .unwrap();
                assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), *kind, "blkid on the {kind} image");
            }
            std::fs::remove_file(&img).unwrap();
            checked.push(*kind);
        }
        std::fs::remove_dir_all(&dir).unwrap();
        eprintln!("cross-checked with blkid: {checked:?}");
        assert!(!checked.is_empty(), "no mkfs tool found");
    }
}
