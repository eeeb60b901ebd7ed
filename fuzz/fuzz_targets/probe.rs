//! The superblock probe (`probe`) on device images made from the input.
//!
//! Input: `flags: u8`, `size: u32 LE` (taken modulo 3 MiB, or 256 KiB when flags bit 0 is set),
//! then patches `where: u32 LE`, `len: u8`, `len` bytes, each written at `where` (counted from
//! the end of the device when its top bit is set) over zeros.
//!
//! Properties: never a panic or an endless walk (probe, filesystem sizes, the NTFS dirty flag);
//! the probe, which reads only the first 512 KiB and the last 768 KiB or so, answers exactly what
//! the same rules answer with the whole device in hand (for sizes in whole 512-byte sectors, as
//! block devices have); the answer does not depend on where the reader was positioned.
#![no_main]

use csi_proxy_host::fuzzing::probe;
use libfuzzer_sys::fuzz_target;
use std::io::{Cursor, Seek, SeekFrom};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let Some((size, mut patches)) = rest.split_first_chunk::<4>() else { return };
    let limit: u64 = if flags & 1 != 0 { 256 << 10 } else { 3 << 20 };
    let size = u64::from(u32::from_le_bytes(*size)) % (limit + 1);
    let mut img = vec![0u8; size as usize];
    while let Some((head, rest)) = patches.split_first_chunk::<5>() {
        let place = u32::from_le_bytes(head[..4].try_into().unwrap());
        let len = usize::from(head[4]).min(rest.len());
        let off = u64::from(place & 0x7fff_ffff);
        let off = if place >> 31 != 0 { size.saturating_sub(off) } else { off.min(size) } as usize;
        let n = len.min(img.len() - off);
        img[off..off + n].copy_from_slice(&rest[..n]);
        patches = &rest[len..];
    }

    let found = probe::probe(&mut Cursor::new(&img[..])).expect("reads from memory");
    let mut moved = Cursor::new(&img[..]);
    moved.seek(SeekFrom::Start(u64::from(flags) * 4099 % (size + 1))).unwrap();
    assert_eq!(probe::probe(&mut moved).unwrap(), found, "the answer moved with the reader's position");
    if size.is_multiple_of(512) {
        let whole = probe::identify_sample(size, &img, size, &[]);
        assert_eq!(
            found, whole,
            "probe read {found:?} from its windows, the whole device holds {whole:?} (size {size})"
        );
    }
    if let Some(kind) = found {
        assert!(!probe::describe(kind).is_empty());
    }
    let head = &img[..img.len().min(probe::PROBE_LEN)];
    for kind in ["ext2", "ext3", "ext4", "xfs", "btrfs", "ntfs"].into_iter().chain(found) {
        let _ = probe::fs_size(kind, head);
    }
    let _ = probe::ntfs_dirty(&mut Cursor::new(&img[..])).expect("reads from memory");
});
