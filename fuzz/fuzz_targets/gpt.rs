//! The GPT reader and editor (`gpt_table`) on sparse disk images made from the input.
//!
//! Input: `flags: u8`, `total_lbas: u32 LE`, `head_len: u16 LE`, `param: u8`, then `head_len`
//! bytes placed at LBA 0 (at LBA 1 behind a made-up protective MBR), the rest placed from an LBA
//! boundary so that it ends in the disk's last blocks (where the backup copy lives).
//! flags: bits 0-1 block size (512 << n); bit 2 protective MBR; bits 3/4 recompute the CRCs of
//! the primary/backup copy (so that mutations get past them); bits 5-6 what to do with a table:
//! nothing, rewrite it, add a partition (PartitionDisk) or grow one (ResizeVolume).
//!
//! The same input also makes a new table (PartitionDisk's) on a blank disk of that size: it
//! exists exactly when both copies and a usable block fit, and reads back healthy with the
//! standard layout and its one partition behind the protective MBR.
//!
//! Properties: the reader never reads past the disk; a GPT is read only behind a protective or
//! blank LBA 0; every header bound holds; partitions lie on the disk; free extents and growth
//! room never overlap a partition; a rewrite reads back healthy with the same entries, never
//! touches LBA 0 and never changes a byte inside a partition (other than the one just grown or
//! created); the CRC agrees with a bitwise one; GUID text round-trips and agrees with the
//! Windows backend's spelling.
#![no_main]

use csi_proxy_host::fuzzing::{extents, gpt};
use libfuzzer_sys::fuzz_target;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io;

/// 0fc63daf-8483-4772-8e79-3d69d8477de4 and e3c9e316-0b5c-4db8-817d-f92df00215ae, GPT order.
const LINUX_FS: [u8; 16] =
    [0xaf, 0x3d, 0xc6, 0x0f, 0x83, 0x84, 0x72, 0x47, 0x8e, 0x79, 0x3d, 0x69, 0xd8, 0x47, 0x7d, 0xe4];
const MICROSOFT_RESERVED: [u8; 16] =
    [0x16, 0xe3, 0xc9, 0xe3, 0x5c, 0x0b, 0xb8, 0x4d, 0x81, 0x7d, 0xf9, 0x2d, 0xf0, 0x02, 0x15, 0xae];
const CHUNK: u64 = 512;

fuzz_target!(|data: &[u8]| {
    assert_eq!(gpt::crc32(data), bitwise_crc32(data));
    guids(data);
    if data.len() >= 8 {
        image(data);
        fresh(data);
    }
});

/// A disk of `size` bytes kept sparsely in 512-byte chunks; unwritten bytes read as zeros and
/// anything past the end fails, as on a block device. Writes are logged.
#[derive(Clone)]
struct Disk {
    size: u64,
    chunks: RefCell<BTreeMap<u64, [u8; CHUNK as usize]>>,
    writes: RefCell<Vec<(u64, u64)>>,
}

impl Disk {
    fn span(&self, offset: u64, len: usize) -> io::Result<u64> {
        offset
            .checked_add(len as u64)
            .filter(|&end| end <= self.size)
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, format!("{len} bytes at {offset}")))
    }

    fn put(&self, offset: u64, buf: &[u8]) {
        let mut chunks = self.chunks.borrow_mut();
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            let (n, within) = (at / CHUNK, (at % CHUNK) as usize);
            let take = (CHUNK as usize - within).min(buf.len() - done);
            chunks.entry(n).or_insert([0; CHUNK as usize])[within..within + take]
                .copy_from_slice(&buf[done..done + take]);
            done += take;
        }
    }

    fn bytes(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        gpt::Disk::read_at(self, offset, &mut v).expect("inside the disk");
        v
    }
}

impl gpt::Disk for Disk {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let end = self.span(offset, buf.len())?;
        buf.fill(0);
        if buf.is_empty() {
            return Ok(());
        }
        for (&n, chunk) in self.chunks.borrow().range(offset / CHUNK..=(end - 1) / CHUNK) {
            let (from, to) = ((n * CHUNK).max(offset), ((n + 1) * CHUNK).min(end));
            buf[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&chunk[(from - n * CHUNK) as usize..(to - n * CHUNK) as usize]);
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.span(offset, buf.len())?;
        self.writes.borrow_mut().push((offset, buf.len() as u64));
        self.put(offset, buf);
        Ok(())
    }
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn image(data: &[u8]) {
    let flags = data[0];
    let lbs = 512u64 << (flags & 3);
    let total = u64::from(u32::from_le_bytes(data[1..5].try_into().unwrap()));
    let head_len = usize::from(u16::from_le_bytes([data[5], data[6]])).min(data.len() - 8);
    let param = data[7];
    let (head, tail) = data[8..].split_at(head_len);
    let disk = Disk { size: total * lbs, chunks: Default::default(), writes: Default::default() };
    let fit = |offset: u64, bytes: &[u8]| {
        let room = disk.size.saturating_sub(offset).min(bytes.len() as u64) as usize;
        disk.put(offset, &bytes[..room]);
    };
    let mut head_at = 0;
    if flags & 4 != 0 && disk.size >= 512 {
        disk.put(0, &protective_mbr(total));
        head_at = lbs;
    }
    fit(head_at, head);
    let tail_lbas = (tail.len() as u64).div_ceil(lbs);
    fit(total.saturating_sub(tail_lbas) * lbs, tail);
    if flags & 8 != 0 {
        fix_crcs(&disk, lbs, 1);
    }
    if flags & 16 != 0 && total > 0 {
        fix_crcs(&disk, lbs, total - 1);
    }

    let table = gpt::Gpt::read(&disk, lbs, total).expect("the reader stays on the disk");
    let Some(mut t) = table else { return };
    let lba0 = disk.bytes(0, 512);
    let mbr = gpt::classify_mbr(&lba0);
    assert!(mbr == "Protective" || lba0.iter().all(|&b| b == 0), "a GPT read behind {mbr}");
    assert!(t.primary_ok() || (mbr == "Protective" && t.backup_ok()), "a backup copy alone behind {mbr}");
    check(&t, lbs, total);

    let before: Vec<(u64, u64)> = t.entries().iter().map(|e| (e.first_lba, e.last_lba)).collect();
    let align = ((1 << 20) / lbs).max(1);
    // The extent the edit adds: new space, which the rewrite may clear.
    let added = match (flags >> 5) & 3 {
        0 => return,
        1 => None,
        2 => {
            if !t.entries().iter().all(|e| e.type_guid == MICROSOFT_RESERVED) {
                return;
            }
            let extent = t.free_extents().into_iter().find_map(|(a, b)| {
                let got = gpt::aligned_extent(a, b, align);
                if let Some((s, e)) = got {
                    assert!(a <= s && s <= e && e <= b && s % align == 0 && (e + 1) % align == 0, "{a}..{b}: {s}..{e}");
                }
                got
            });
            let (Some((first, last)), Some(slot)) = (extent, t.free_slot()) else { return };
            t.set_entry(slot, LINUX_FS, [param; 16], first, last);
            Some((first, last))
        }
        _ => {
            let entries = t.entries();
            let Some(e) = entries.get(usize::from(param) % entries.len().max(1)) else { return };
            let room = t.room_after(e.number).unwrap_or(e.last_lba).max(e.last_lba);
            let last = ((room + 1) / align * align).saturating_sub(1).max(e.last_lba);
            t.set_last_lba(e.number, last);
            Some((e.first_lba, last))
        }
    };
    let want = t.entries();
    let want_last_usable = t.last_usable_at_end();
    let header = t.header();
    let old = disk.clone();
    disk.writes.borrow_mut().clear();
    match t.write(&disk, &before) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => return,
        Err(e) => panic!("the writer left the disk: {e}"),
    }
    let again = gpt::Gpt::read(&disk, lbs, total).unwrap().expect("a written table reads back");
    assert!(again.healthy(), "a written table is healthy");
    assert_eq!(again.entries(), want);
    let h = again.header();
    assert_eq!((h.first_usable, h.last_usable), (header.first_usable, want_last_usable));
    assert_eq!((h.disk_guid, h.num_entries, h.entry_size), (header.disk_guid, header.num_entries, header.entry_size));
    check(&again, lbs, total);
    // Partitions' data: every extent before the write and after it, but for the space just
    // added (the new partition, or a grown one as it now is; its old extent is in `before`).
    let mut kept = before.clone();
    kept.extend(want.iter().map(|e| (e.first_lba, e.last_lba)).filter(|&x| Some(x) != added));
    for &(off, len) in disk.writes.borrow().iter() {
        assert!(off >= 512, "the rewrite wrote LBA 0");
        for &(a, b) in &kept {
            let (from, to) = (off.max(a * lbs), (off + len).min((b + 1) * lbs));
            if from < to {
                let n = (to - from) as usize;
                assert!(
                    old.bytes(from, n) == disk.bytes(from, n),
                    "the rewrite changed bytes {from}..{to} inside partition {a}..={b} (lbs {lbs})"
                );
            }
        }
    }
}

/// A new table on a blank disk of the input's block size and block count.
fn fresh(data: &[u8]) {
    let lbs = 512u64 << (data[0] & 3);
    let total = u64::from(u32::from_le_bytes(data[1..5].try_into().unwrap()));
    let array = (128 * 128u64).div_ceil(lbs);
    let Some(mut t) = gpt::Gpt::new(lbs, total, [data[7]; 16]) else {
        assert!(total < 4 + 2 * array, "no new table on {total} blocks of {lbs}");
        return;
    };
    assert!(total >= 4 + 2 * array, "a new table on {total} blocks of {lbs}");
    let h = t.header();
    assert_eq!((h.current_lba, h.backup_lba, h.entries_lba, h.num_entries, h.entry_size), (1, total - 1, 2, 128, 128));
    assert_eq!((h.first_usable, h.last_usable), (2 + array, total - 2 - array));
    assert_eq!(t.free_extents(), vec![(h.first_usable, h.last_usable)]);
    let align = ((1 << 20) / lbs).max(1);
    if let Some((first, last)) = gpt::aligned_extent(h.first_usable, h.last_usable, align) {
        t.set_entry(1, LINUX_FS, [data[6]; 16], first, last);
    }
    let want = t.entries();
    let disk = Disk { size: total * lbs, chunks: Default::default(), writes: Default::default() };
    t.write(&disk, &[]).expect("a new table is written");
    assert!(disk.writes.borrow().iter().all(|&(off, _)| off >= lbs), "the table wrote LBA 0");
    let mbr = gpt::protective_mbr(total);
    assert_eq!(mbr, protective_mbr(total));
    gpt::Disk::write_at(&disk, 0, &mbr).unwrap();
    let again = gpt::Gpt::read(&disk, lbs, total).unwrap().expect("a new table reads back");
    assert!(again.healthy());
    assert_eq!(again.entries(), want);
    assert_eq!(again.header(), h);
    check(&again, lbs, total);
}

/// Invariants of any table the reader returns.
fn check(t: &gpt::Gpt, lbs: u64, total: u64) {
    let h = t.header();
    assert!(1 < h.first_usable && h.first_usable <= h.last_usable && h.last_usable < total, "{h:?}");
    assert!(h.entry_size >= 128 && h.entry_size.is_multiple_of(8) && u64::from(h.entry_size) <= lbs, "{h:?}");
    let array = u64::from(h.num_entries) * u64::from(h.entry_size);
    assert!(h.num_entries > 0 && array <= 1 << 20, "{h:?}");
    let array_end = h.entries_lba + array.div_ceil(lbs);
    assert!(h.entries_lba >= 2 && array_end <= total, "{h:?}");
    assert!(array_end <= h.first_usable || h.entries_lba > h.last_usable, "array inside the usable area: {h:?}");
    assert_eq!(h.current_lba, if t.primary_ok() { 1 } else { total - 1 });
    assert!(!t.healthy() || (t.primary_ok() && t.backup_ok() && h.backup_lba == total - 1));

    let entries = t.entries();
    let end = t.last_usable_at_end();
    assert!(end < total);
    let mut previous = 0;
    for e in &entries {
        assert!(e.number > previous && e.number <= h.num_entries, "{e:?}");
        previous = e.number;
        assert!(0 < e.first_lba && e.first_lba <= e.last_lba && e.last_lba < total, "off the disk: {e:?}");
        assert!(e.type_guid != [0; 16]);
        let room = t.room_after(e.number).expect("a used entry");
        assert!(room <= end);
        let hit = entries.iter().find(|o| o.first_lba > e.first_lba && o.first_lba <= room);
        assert!(hit.is_none(), "growing {e:?} to {room} would run into {hit:?}");
    }
    if let Some(slot) = t.free_slot() {
        assert!(slot >= 1 && slot <= h.num_entries && entries.iter().all(|e| e.number != slot));
    }

    let free = t.free_extents();
    for (i, &(a, b)) in free.iter().enumerate() {
        assert!(h.first_usable <= a && a <= b && b <= end, "free {a}..{b} outside {}..{end}", h.first_usable);
        assert!(entries.iter().all(|e| b < e.first_lba || e.last_lba < a), "free {a}..{b} overlaps a partition");
        assert!(free[..i].iter().all(|&(c, d)| b < c || d < a), "free extents overlap");
        assert!(i == 0 || free[i - 1].1 - free[i - 1].0 >= b - a, "not largest first: {free:?}");
    }
    // And nothing free is left out: the usable area less the partitions, block for block.
    let mut used: Vec<(u64, u64)> = entries.iter().map(|e| (e.first_lba, e.last_lba)).collect();
    used.sort_unstable();
    let (mut want, mut at) = (Vec::new(), h.first_usable);
    for (a, b) in used {
        if a > at && at <= end {
            want.push((at, (a - 1).min(end)));
        }
        at = at.max(b.saturating_add(1));
    }
    if at <= end {
        want.push((at, end));
    }
    let mut got = free.clone();
    got.sort_unstable();
    assert_eq!(got, want, "free extents of {:?} in {}..={end}", entries, h.first_usable);
}

/// A protective MBR as partitioning tools write it: one 0xEE record from LBA 1 over the disk.
fn protective_mbr(total: u64) -> [u8; 512] {
    let mut s = [0u8; 512];
    let r = &mut s[446..462];
    r[1..4].copy_from_slice(&[0x00, 0x02, 0x00]);
    r[4] = 0xEE;
    r[5..8].copy_from_slice(&[0xff, 0xff, 0xff]);
    r[8..12].copy_from_slice(&1u32.to_le_bytes());
    r[12..16].copy_from_slice(&(total.saturating_sub(1).min(u64::from(u32::MAX)) as u32).to_le_bytes());
    s[510..].copy_from_slice(&[0x55, 0xAA]);
    s
}

/// Makes the header at `lba` (if it has the signature) and its entry array pass their CRCs.
fn fix_crcs(disk: &Disk, lbs: u64, lba: u64) {
    let mut s = vec![0; lbs as usize];
    if gpt::Disk::read_at(disk, lba * lbs, &mut s).is_err() {
        return;
    }
    if &s[..8] != b"EFI PART" {
        return;
    }
    let array = u64::from(le32(&s, 80)) * u64::from(le32(&s, 84));
    let at = le64(&s, 72).checked_mul(lbs).filter(|at| at.checked_add(array).is_some_and(|end| end <= disk.size));
    if let (Some(at), true) = (at, array <= 1 << 20) {
        let crc = bitwise_crc32(&disk.bytes(at, array as usize));
        s[88..92].copy_from_slice(&crc.to_le_bytes());
    }
    let size = (le32(&s, 12) as usize).clamp(92, s.len());
    s[16..20].fill(0);
    let crc = bitwise_crc32(&s[..size]);
    s[16..20].copy_from_slice(&crc.to_le_bytes());
    disk.put(lba * lbs, &s);
}

/// CRC-32 as its definition reads (reflected, polynomial 0xEDB88320), a bit at a time.
fn bitwise_crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = (c >> 1) ^ (0xEDB8_8320 & (c & 1).wrapping_neg());
        }
    }
    !c
}

/// GUID text both ways, and the same spelling as the Windows backend's `format_guid`.
fn guids(data: &[u8]) {
    if let Some(raw) = data.get(..16) {
        let raw: [u8; 16] = raw.try_into().unwrap();
        let text = gpt::guid_text(raw);
        assert_eq!(gpt::guid_parse(&text), Some(raw));
        assert_eq!(gpt::guid_parse(&text.to_uppercase()), Some(raw));
        assert_eq!(format!("{{{text}}}"), extents::format_guid(&raw));
    }
    if let Some(Ok(text)) = data.get(..36).map(std::str::from_utf8) {
        if let Some(raw) = gpt::guid_parse(text) {
            assert_eq!(gpt::guid_text(raw), text.to_ascii_lowercase());
        }
    }
}
