//! Superblock probing: what a block device (or an image of one) already holds, told by the
//! magic numbers at fixed offsets near its start. Our own reading of the bytes — no blkid, no C.
//!
//! Offsets and magics follow util-linux's `libblkid/src/superblocks/*.c`; the names returned are
//! blkid's `TYPE` values (`gpt` and `dos` are its `PTTYPE` values), so tests can cross-check
//! them with `blkid -p`. Any hit means "in use": FormatVolume never writes over it.
//!
//! Not detected (their signatures lie beyond the first [`PROBE_LEN`] bytes or at the end of the
//! device): ZFS labels, md RAID 0.90/1.0 superblocks at the end of the device.

use std::io::{self, Read, Seek, SeekFrom};

/// Bytes read from the start of the device: enough for every signature below (the btrfs and
/// reiserfs superblocks sit at 64 KiB, swap's at up to 64 KiB − 10).
pub(crate) const PROBE_LEN: usize = 68 * 1024;

/// What `r` holds from its start: a filesystem, another known signature (swap, LUKS, LVM, RAID,
/// bcache) or a nested partition table; `None` when nothing known is there.
/// A device shorter than [`PROBE_LEN`] is probed on what it has.
pub(crate) fn probe(r: &mut (impl Read + Seek)) -> io::Result<Option<&'static str>> {
    r.seek(SeekFrom::Start(0))?;
    let mut buf = vec![0u8; PROBE_LEN];
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(identify(&buf[..n]))
}

/// [`probe`] on bytes already read from the start of a device.
pub(crate) fn identify(b: &[u8]) -> Option<&'static str> {
    let at = |off: usize, magic: &[u8]| b.get(off..off + magic.len()) == Some(magic);
    let u32_at = |off: usize| b.get(off..off + 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]));

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
    if u32_at(0) == Some(0xa92b_4efc) || u32_at(4096) == Some(0xa92b_4efc) {
        return Some("linux_raid_member");
    }
    if at(4096 + 24, &[0xc6, 0x85, 0x73, 0xf6, 0x4e, 0x1a, 0x45, 0xca, 0x82, 0x65, 0xf5, 0x7f, 0x48, 0xba, 0x6d, 0x81])
    {
        return Some("bcache");
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
    if at(0x8001, b"CD001") {
        return Some("iso9660");
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

/// How an error message names what [`probe`] found.
pub(crate) fn describe(kind: &str) -> String {
    match kind {
        "swap" => "swap space".into(),
        "crypto_LUKS" => "a LUKS encrypted volume".into(),
        "LVM2_member" => "an LVM2 physical volume".into(),
        "linux_raid_member" => "an md RAID member".into(),
        "bcache" => "a bcache device".into(),
        "jbd" => "an ext journal device".into(),
        "gpt" => "a GPT partition table".into(),
        "dos" => "an MBR partition table".into(),
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
