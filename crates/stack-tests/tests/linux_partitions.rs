#![cfg(target_os = "linux")]
//! Partition tables, the kernel's view of them, volume lookup and growth, on loop disks over
//! sparse files (root only; CI runs as root). Cross-checked with sysfs, `blkid -p` (test-only
//! tool) and the `gpt` crate reading the tables back.

use csi_proxy_host::linux::block::{Block, Disk, Volume};
use csi_proxy_host::paths::Roots;
use csi_proxy_host::types::FsType;
use csi_proxy_host::{DiskHost, Error, VolumeHost};
use csi_proxy_stack_tests::disks::{run, LoopDisk};
use csi_proxy_stack_tests::needs_root;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::RwLock;

const MIB: u64 = 1 << 20;
const LINUX_FS: &str = "0fc63daf-8483-4772-8e79-3d69d8477de4";

/// Rescan touches every disk: it runs alone, the other tests share.
static RESCAN: RwLock<()> = RwLock::new(());

/// The backend, with the temporary directory as its working directory: the tests' own mounts
/// there stand for a driver's staging mounts, which the interlocks let through (a disk mounted
/// outside the working directories is refused before the checks tested here).
fn block() -> Block {
    Block::new(Roots::new(vec![std::env::temp_dir().to_str().unwrap().to_string()]), FsType::Ext4)
}

fn disk_of(l: &LoopDisk) -> Disk {
    let (major, minor) = l.devnum();
    Disk { number: l.number(), name: l.name.clone(), major, minor }
}

fn read_at(dev: &Path, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    File::open(dev).unwrap().read_exact_at(&mut buf, offset).unwrap();
    buf
}

fn write_at(dev: &Path, offset: u64, data: &[u8]) {
    let f = OpenOptions::new().write(true).open(dev).unwrap();
    f.write_all_at(data, offset).unwrap();
    f.sync_all().unwrap();
}

/// The first and last MiB of a disk: both copies of a GPT, and LBA 0.
fn table_bytes(l: &LoopDisk) -> Vec<u8> {
    let size = std::fs::metadata(&l.file).unwrap().len();
    let mut b = read_at(&l.dev, 0, MIB as usize);
    b.extend(read_at(&l.dev, size - MIB, MIB as usize));
    b
}

/// A sysfs attribute of a block device, as a number.
fn sysfs_num(name: &str, attr: &str) -> u64 {
    std::fs::read_to_string(format!("/sys/class/block/{name}/{attr}")).unwrap().trim().parse().unwrap()
}

/// The kernel's partitions of a disk: (name, start bytes, size bytes).
fn kernel_partitions(l: &LoopDisk) -> Vec<(String, u64, u64)> {
    let mut parts: Vec<_> = std::fs::read_dir(format!("/sys/class/block/{}", l.name))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            let is_part = Path::new(&format!("/sys/class/block/{}/{name}/partition", l.name)).exists();
            is_part.then(|| (name.clone(), sysfs_num(&name, "start") * 512, sysfs_num(&name, "size") * 512))
        })
        .collect();
    parts.sort();
    parts
}

fn blkid(dev: &Path, tag: &str) -> String {
    run(&["blkid", "-p", "-o", "value", "-s", tag, dev.to_str().unwrap()]).trim().to_string()
}

fn guid_of(id: &str) -> &str {
    id.strip_prefix(r"\\?\Volume{").unwrap().strip_suffix(r"}\").unwrap()
}

/// Both GPT headers valid, the backup in the last block, as the `gpt` crate reads them.
fn gpt_of(l: &LoopDisk) -> gpt::GptDisk<File> {
    let lbs = gpt::disk::LogicalBlockSize::try_from(sysfs_num(&l.name, "queue/logical_block_size")).unwrap();
    let d = gpt::GptConfig::new().only_valid_headers(true).logical_block_size(lbs).open(&l.dev).unwrap();
    let total = sysfs_num(&l.name, "size") * 512 / lbs.as_u64();
    assert_eq!(d.primary_header().unwrap().backup_lba, total - 1, "backup header at the end of {}", l.name);
    assert_eq!(d.backup_header().unwrap().current_lba, total - 1);
    d
}

fn only_volume(b: &Block, l: &LoopDisk) -> Volume {
    let v = b.volumes_of(&disk_of(l)).unwrap();
    assert_eq!(v.len(), 1, "{v:?}");
    v.into_iter().next().unwrap()
}

/// Checks one partitioned disk against sysfs, blkid and the GPT; returns its volume.
fn check_partitioned(b: &Block, l: &LoopDisk) -> Volume {
    let v = only_volume(b, l);
    let sector = sysfs_num(&l.name, "queue/logical_block_size");
    assert_eq!(v.index, 1);
    assert_eq!(v.disk, l.number());
    assert_eq!(v.node, PathBuf::from(format!("/dev/{}", v.name)));
    assert!(v.node.exists(), "{}", v.node.display());
    assert_eq!(kernel_partitions(l), vec![(v.name.clone(), v.start, v.size)], "sysfs agrees with the GPT");
    assert_eq!(v.start, MIB, "first partition at 1 MiB");
    assert_eq!((v.start + v.size) % MIB, 0, "ends on a MiB boundary");
    let disk_size = sysfs_num(&l.name, "size") * 512;
    assert!(v.start + v.size + MIB >= disk_size - 33 * sector, "fills the disk: {v:?} on {disk_size}");
    assert_eq!(blkid(&v.node, "PART_ENTRY_UUID"), guid_of(&v.id));
    assert_eq!(blkid(&v.node, "PART_ENTRY_TYPE"), LINUX_FS);
    assert_eq!(blkid(&l.dev, "PTTYPE"), "gpt");
    let g = gpt_of(l);
    let p = &g.partitions()[&1];
    assert_eq!(p.part_guid.hyphenated().to_string(), guid_of(&v.id));
    assert_eq!((p.first_lba * sector, (p.last_lba + 1 - p.first_lba) * sector), (v.start, v.size));
    v
}

#[test]
fn a_blank_disk_gets_one_aligned_gpt_partition_the_kernel_knows() {
    needs_root!();
    let _shared = RESCAN.read().unwrap_or_else(|e| e.into_inner());
    for sector in [512, 4096] {
        let l = LoopDisk::with_sector(&format!("part-new-{sector}"), 64 * MIB, sector);
        let b = block();
        assert_eq!(b.list_volumes_on_disk(l.number(), 0).unwrap(), Vec::<String>::new());
        b.partition_disk(l.number()).unwrap();
        let v = check_partitioned(&b, &l);
        assert_eq!(v.name, format!("{}p1", l.name));
        assert_eq!(b.list_volumes_on_disk(l.number(), 0).unwrap(), vec![v.id.clone()]);
        assert_eq!(b.list_volumes_on_disk(l.number(), 1).unwrap(), vec![v.id.clone()]);
        match b.list_volumes_on_disk(l.number(), 2) {
            Err(Error::NotFound(msg)) => {
                assert!(msg.contains(&l.number().to_string()) && msg.contains("partition 2"), "{msg}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(b.volume(&v.id).unwrap(), v);
        assert_eq!(b.get_disk_number_from_volume_id(&v.id).unwrap(), l.number());
        // Upper case hex finds the same volume (Windows compares IDs without case).
        let upper = format!(r"\\?\Volume{{{}}}\", guid_of(&v.id).to_uppercase());
        assert_eq!(b.volume(&upper).unwrap(), v);
    }
}

#[test]
fn partitioning_twice_changes_nothing() {
    needs_root!();
    let _shared = RESCAN.read().unwrap_or_else(|e| e.into_inner());
    let l = LoopDisk::new("part-twice", 64 * MIB);
    let b = block();
    b.partition_disk(l.number()).unwrap();
    let (bytes, kernel, volumes) = (table_bytes(&l), kernel_partitions(&l), b.volumes_of(&disk_of(&l)).unwrap());
    b.partition_disk(l.number()).unwrap();
    assert!(table_bytes(&l) == bytes, "the second PartitionDisk wrote to the disk");
    assert_eq!(kernel_partitions(&l), kernel);
    assert_eq!(b.volumes_of(&disk_of(&l)).unwrap(), volumes);
}

#[test]
fn a_table_the_kernel_was_not_told_about_is_synced_not_rewritten() {
    needs_root!();
    let _shared = RESCAN.read().unwrap_or_else(|e| e.into_inner());
    let l = LoopDisk::new("part-untold", 64 * MIB);
    // A GPT with two partitions written behind the kernel's back (by the gpt crate).
    {
        let mut d = gpt::GptConfig::new()
            .writable(true)
            .logical_block_size(gpt::disk::LogicalBlockSize::Lb512)
            .create(&l.dev)
            .unwrap();
        d.add_partition_at("a", 1, 2048, 20480, gpt::partition_types::LINUX_FS, 0).unwrap();
        d.add_partition_at("b", 2, 22528, 20480, gpt::partition_types::BASIC, 0).unwrap();
        d.write().unwrap();
        gpt::mbr::ProtectiveMBR::with_lb_size(131071)
            .overwrite_lba0(&mut OpenOptions::new().write(true).open(&l.dev).unwrap())
            .unwrap();
    }
    let b = block();
    let before = b.volumes_of(&disk_of(&l)).unwrap();
    assert_eq!(before.len(), 2);
    assert!(before.iter().all(|v| v.name.is_empty() && v.node.as_os_str().is_empty()), "{before:?}");
    let bytes = table_bytes(&l);
    b.partition_disk(l.number()).unwrap();
    assert!(table_bytes(&l) == bytes, "an existing table is not rewritten");
    let after = b.volumes_of(&disk_of(&l)).unwrap();
    assert_eq!(
        kernel_partitions(&l),
        after.iter().map(|v| (v.name.clone(), v.start, v.size)).collect::<Vec<_>>(),
        "the kernel now has both"
    );
    assert_eq!(
        after.iter().map(|v| (v.index, v.start, v.size)).collect::<Vec<_>>(),
        [(1, MIB, 10 * MIB), (2, 11 * MIB, 10 * MIB)]
    );
    assert!(after.iter().all(|v| v.node.exists()));
    assert_eq!(b.list_volumes_on_disk(l.number(), 2).unwrap(), vec![after[1].id.clone()]);

    // Partition 2 removed from the table behind the kernel's back: a refresh removes it there too.
    {
        let mut d = gpt::GptConfig::new()
            .writable(true)
            .logical_block_size(gpt::disk::LogicalBlockSize::Lb512)
            .open(&l.dev)
            .unwrap();
        d.remove_partition(2).unwrap();
        d.write().unwrap();
    }
    b.refresh(&disk_of(&l)).unwrap();
    assert_eq!(kernel_partitions(&l), vec![(after[0].name.clone(), MIB, 10 * MIB)]);
    assert!(!after[1].node.exists());
    assert!(matches!(b.volume(&after[1].id), Err(Error::NotFound(_))));
}

#[test]
fn a_damaged_primary_gpt_is_repaired_from_the_backup() {
    needs_root!();
    let _shared = RESCAN.read().unwrap_or_else(|e| e.into_inner());
    let l = LoopDisk::new("part-repair", 64 * MIB);
    let b = block();
    b.partition_disk(l.number()).unwrap();
    let v = check_partitioned(&b, &l);
    let mut header = read_at(&l.dev, 512, 512);
    header[40] ^= 0xff; // first usable LBA: the CRC no longer matches
    write_at(&l.dev, 512, &header);
    assert_eq!(blkid(&l.dev, "PTTYPE"), "gpt", "blkid still finds the backup");
    assert_eq!(b.volume(&v.id).unwrap(), v, "the backup copy serves lookups");
    b.partition_disk(l.number()).unwrap();
    assert_eq!(check_partitioned(&b, &l), v, "both copies valid again, the partition the same");
}

#[test]
fn an_empty_gpt_gets_its_partition() {
    needs_root!();
    let _shared = RESCAN.read().unwrap_or_else(|e| e.into_inner());
    let l = LoopDisk::with_sector("part-empty-gpt", 64 * MIB, 4096);
    {
        let d = gpt::GptConfig::new()
            .writable(true)
            .logical_block_size(gpt::disk::LogicalBlockSize::Lb4096)
            .create(&l.dev)
            .unwrap();
        d.write().unwrap();
        gpt::mbr::ProtectiveMBR::with_lb_size(16383)
            .overwrite_lba0(&mut OpenOptions::new().write(true).open(&l.dev).unwrap())
            .unwrap();
    }
    let b = block();
    let disk_guid = *gpt_of(&l).guid();
    assert_eq!(b.list_volumes_on_disk(l.number(), 0).unwrap(), Vec::<String>::new());
    b.partition_disk(l.number()).unwrap();
    check_partitioned(&b, &l);
    assert_eq!(*gpt_of(&l).guid(), disk_guid, "the table was completed, not replaced");
}

#[test]
fn an_mbr_disk_is_left_alone_and_has_no_volumes() {
    needs_root!();
    let _shared = RESCAN.read().unwrap_or_else(|e| e.into_inner());
    let l = LoopDisk::new("part-mbr", 64 * MIB);
    let mut mbr = [0u8; 512];
    mbr[446 + 4] = 0x83;
    mbr[446 + 8..446 + 12].copy_from_slice(&2048u32.to_le_bytes());
    mbr[446 + 12..446 + 16].copy_from_slice(&16384u32.to_le_bytes());
    mbr[510] = 0x55;
    mbr[511] = 0xAA;
    write_at(&l.dev, 0, &mbr);
    let b = block();
    let bytes = table_bytes(&l);
    b.partition_disk(l.number()).unwrap();
    assert!(table_bytes(&l) == bytes, "an MBR disk is already partitioned");
    assert_eq!(blkid(&l.dev, "PTTYPE"), "dos");
    assert_eq!(b.list_volumes_on_disk(l.number(), 0).unwrap(), Vec::<String>::new());
    match b.list_volumes_on_disk(l.number(), 1) {
        Err(Error::NotFound(msg)) => assert!(msg.contains("MBR"), "{msg}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_whole_disk_filesystem_is_never_overwritten() {
    needs_root!();
    let _shared = RESCAN.read().unwrap_or_else(|e| e.into_inner());
    // A real ext4, and the magics of xfs, btrfs and ntfs at their offsets.
    type Magic = Option<(u64, &'static [u8])>;
    let cases: [(&str, Magic); 4] = [
        ("ext4", None),
        ("xfs", Some((0, b"XFSB"))),
        ("btrfs", Some((65600, b"_BHRfS_M"))),
        ("ntfs", Some((3, b"NTFS    "))),
    ];
    for (fs, magic) in cases {
        let l = LoopDisk::new(&format!("part-fs-{fs}"), 64 * MIB);
        match magic {
            None => {
                run(&["mkfs.ext4", "-q", "-F", l.dev.to_str().unwrap()]);
            }
            Some((at, bytes)) => write_at(&l.dev, at, bytes),
        }
        let b = block();
        let bytes = table_bytes(&l);
        match b.partition_disk(l.number()) {
            Err(Error::FailedPrecondition(msg)) => {
                assert!(msg.contains(fs) && msg.contains(&l.number().to_string()) && msg.contains(&l.name), "{msg}")
            }
            other => panic!("{fs}: {other:?}"),
        }
        assert!(table_bytes(&l) == bytes, "{fs}: the disk changed");
        assert!(kernel_partitions(&l).is_empty());
    }
}

/// The backup half of a GPT (entry array and header, the last 33 blocks) of a `size`-byte disk
/// of 512-byte blocks with one partition at 1 MiB: what a disk that had a GPT keeps at its end
/// when a filesystem is then made on the whole of it.
fn backup_gpt(size: u64) -> Vec<u8> {
    let mut dev = std::io::Cursor::new(vec![0u8; size as usize]);
    let mut d = gpt::GptConfig::new()
        .writable(true)
        .logical_block_size(gpt::disk::LogicalBlockSize::Lb512)
        .create_from_device(&mut dev, None)
        .unwrap();
    d.add_partition_at("old", 1, 2048, 20480, gpt::partition_types::LINUX_FS, 0).unwrap();
    d.write().unwrap();
    let img = dev.into_inner();
    img[img.len() - 33 * 512..].to_vec()
}

fn write_protective_mbr(l: &LoopDisk) {
    let blocks = sysfs_num(&l.name, "size") - 1;
    gpt::mbr::ProtectiveMBR::with_lb_size(blocks as u32)
        .overwrite_lba0(&mut OpenOptions::new().write(true).open(&l.dev).unwrap())
        .unwrap();
}

#[test]
fn a_whole_disk_filesystem_over_an_old_gpt_backup_is_never_overwritten() {
    needs_root!();
    let _shared = RESCAN.read().unwrap_or_else(|e| e.into_inner());
    // (a protective MBR in LBA 0 too, the filesystem mounted: the exclusive open fails)
    for (protective, mounted) in [(false, false), (true, false), (true, true)] {
        let l = LoopDisk::new(&format!("part-stale-backup-{protective}-{mounted}"), 64 * MIB);
        run(&["mkfs.ext4", "-q", "-F", l.dev.to_str().unwrap(), "60M"]);
        let backup = backup_gpt(64 * MIB);
        write_at(&l.dev, 64 * MIB - backup.len() as u64, &backup);
        if protective {
            write_protective_mbr(&l); // the ext4 leaves its first 1 KiB alone
        }
        let dir = std::env::temp_dir().join(format!("csi-proxy-part-stale-{}-{mounted}", std::process::id()));
        let _m = mounted.then(|| {
            std::fs::create_dir_all(&dir).unwrap();
            rustix::mount::mount(&l.dev, &dir, "ext4", rustix::mount::MountFlags::RDONLY, None).unwrap();
            Mounted(dir.clone())
        });
        let b = block();
        let superblock = read_at(&l.dev, 0, 68 * 1024);
        let bytes = table_bytes(&l);
        let case = format!("protective MBR {protective}, mounted {mounted}");
        match b.partition_disk(l.number()) {
            Err(Error::FailedPrecondition(msg)) => assert!(
                msg.contains("ext4") && msg.contains(&l.number().to_string()) && msg.contains(&l.name),
                "{case}: {msg}"
            ),
            other => panic!("{case}: {other:?}"),
        }
        // Nor does a refresh tell the kernel about the old partition, nor is it a volume.
        b.refresh(&disk_of(&l)).unwrap();
        assert!(kernel_partitions(&l).is_empty(), "{case}");
        assert_eq!(b.volumes_of(&disk_of(&l)).unwrap(), Vec::<Volume>::new(), "{case}");
        assert!(read_at(&l.dev, 0, 68 * 1024) == superblock, "{case}: the superblock changed");
        assert!(table_bytes(&l) == bytes, "{case}: the disk changed");
    }
}

#[test]
fn a_damaged_primary_gpt_is_not_rewritten_while_the_disk_is_in_use() {
    needs_root!();
    let _shared = RESCAN.read().unwrap_or_else(|e| e.into_inner());
    let l = LoopDisk::new("part-repair-busy", 64 * MIB);
    let b = block();
    b.partition_disk(l.number()).unwrap();
    let v = only_volume(&b, &l);
    let m = Mounted::new_ext4(&v, "repair-busy");
    let mut header = read_at(&l.dev, 512, 512);
    header[40] ^= 0xff;
    write_at(&l.dev, 512, &header);
    let bytes = table_bytes(&l);
    for result in [b.partition_disk(l.number()), b.grow_partition(&v, 0).map(drop)] {
        match result {
            Err(Error::FailedPrecondition(msg)) => {
                assert!(msg.contains("in use") && msg.contains("primary GPT") && msg.contains(&l.name), "{msg}")
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(table_bytes(&l) == bytes, "nothing written while in use");
    assert_eq!(b.volume(&v.id).unwrap(), v, "the backup copy still serves lookups");
    drop(m);
    b.partition_disk(l.number()).unwrap();
    assert_eq!(check_partitioned(&b, &l), v, "repaired once the disk is free");
}

#[test]
fn an_mbr_or_boot_sector_over_a_stale_gpt_keeps_the_kernels_partitions() {
    needs_root!();
    let _shared = RESCAN.read().unwrap_or_else(|e| e.into_inner());
    for lba0 in ["mbr", "boot sector"] {
        let l = LoopDisk::new(&format!("part-stale-gpt-{}", lba0.len()), 64 * MIB);
        // A valid GPT (both copies) with two partitions, then LBA 0 overwritten alone: a DOS
        // label made by a tool that leaves the GPT behind, or a boot sector.
        let stale: Vec<String> = {
            let mut d = gpt::GptConfig::new()
                .writable(true)
                .logical_block_size(gpt::disk::LogicalBlockSize::Lb512)
                .create(&l.dev)
                .unwrap();
            d.add_partition_at("a", 1, 4096, 20480, gpt::partition_types::LINUX_FS, 0).unwrap();
            d.add_partition_at("b", 2, 24576, 20480, gpt::partition_types::LINUX_FS, 0).unwrap();
            let ids =
                d.partitions().values().map(|p| format!(r"\\?\Volume{{{}}}\", p.part_guid.hyphenated())).collect();
            d.write().unwrap();
            ids
        };
        let mut mbr = [0u8; 512];
        mbr[446 + 4] = 0x83;
        mbr[446 + 8..446 + 12].copy_from_slice(&2048u32.to_le_bytes());
        mbr[446 + 12..446 + 16].copy_from_slice(&16384u32.to_le_bytes());
        mbr[510] = 0x55;
        mbr[511] = 0xAA;
        if lba0 == "boot sector" {
            mbr[446] = 0x12; // no boot flag: no partition table
        }
        write_at(&l.dev, 0, &mbr);
        // The kernel told about the MBR's partition (by partx, as this kernel has no MBR parser).
        if lba0 == "mbr" {
            run(&["partx", "-a", "-t", "dos", l.dev.to_str().unwrap()]);
        }
        let kernel = kernel_partitions(&l);
        if lba0 == "mbr" {
            assert_eq!(kernel, vec![(format!("{}p1", l.name), MIB, 8 * MIB)], "the kernel has the MBR's partition");
        } else {
            assert!(kernel.is_empty(), "{kernel:?}");
        }
        let bytes = table_bytes(&l);
        let b = block();
        // What Rescan does to each disk.
        b.refresh(&disk_of(&l)).unwrap();
        match (lba0, b.partition_disk(l.number())) {
            ("mbr", Ok(())) => {}
            ("boot sector", Err(Error::FailedPrecondition(msg))) => {
                assert!(msg.contains(&l.name) && msg.contains("boot sector"), "{msg}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(kernel_partitions(&l), kernel, "{lba0}: the kernel's partitions are left alone");
        assert!(table_bytes(&l) == bytes, "{lba0}: the disk changed");
        assert_eq!(b.volumes_of(&disk_of(&l)).unwrap(), Vec::<Volume>::new(), "{lba0}");
        assert_eq!(b.list_volumes_on_disk(l.number(), 0).unwrap(), Vec::<String>::new());
        assert_eq!(stale.len(), 2);
        for id in &stale {
            assert!(matches!(b.volume(id), Err(Error::NotFound(_))), "{lba0}: {id}");
        }
    }
}

#[test]
fn a_cloned_disks_volume_is_refused_whatever_the_listing_order() {
    needs_root!();
    let _shared = RESCAN.read().unwrap_or_else(|e| e.into_inner());
    let b = block();
    for order in [&[0, 1][..], &[1, 0], &[0, 1, 0], &[1, 0, 1]] {
        let a = LoopDisk::new("part-clone-a", 64 * MIB);
        b.partition_disk(a.number()).unwrap();
        let v = check_partitioned(&b, &a);
        assert_eq!(b.volume(&v.id).unwrap(), v);
        // A byte copy of the tables of A on another disk of its size.
        let c = LoopDisk::new("part-clone-c", 64 * MIB);
        write_at(&c.dev, 0, &read_at(&a.dev, 0, MIB as usize));
        write_at(&c.dev, 63 * MIB, &read_at(&a.dev, 63 * MIB, MIB as usize));
        let pair = [&a, &c];
        for &i in order {
            assert_eq!(b.volumes_of(&disk_of(pair[i])).unwrap().len(), 1);
        }
        for _ in 0..2 {
            for result in [b.volume(&v.id).map(|v| v.disk), b.get_disk_number_from_volume_id(&v.id)] {
                match result {
                    Err(Error::FailedPrecondition(msg)) => assert!(
                        msg.contains(&format!("disk {} ", a.number()))
                            && msg.contains(&format!("disk {} ", c.number())),
                        "{order:?}: {msg}"
                    ),
                    other => panic!("{order:?}: {other:?}"),
                }
            }
        }
        // The clone wiped: the ID is A's again.
        write_at(&c.dev, 0, &vec![0u8; MIB as usize]);
        write_at(&c.dev, 63 * MIB, &vec![0u8; MIB as usize]);
        assert_eq!(b.volume(&v.id).unwrap(), v, "{order:?}");
        assert_eq!(b.get_disk_number_from_volume_id(&v.id).unwrap(), a.number());
    }
}

#[test]
fn volume_ids_are_checked_and_looked_up() {
    needs_root!();
    let _shared = RESCAN.read().unwrap_or_else(|e| e.into_inner());
    let b = block();
    for bad in ["", "loop0p1", r"\\?\Volume{1234}\", r"\\?\Volume{0fc63daf-8483-4772-8e79-3d69d8477de4}"] {
        match b.get_disk_number_from_volume_id(bad) {
            Err(Error::InvalidArgument(msg)) => {
                assert!(msg.contains(&format!("{bad:?}")) && msg.contains(r"\\?\Volume{"), "{msg}")
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    let unknown = r"\\?\Volume{01234567-89ab-4cde-8f01-23456789abcd}\";
    match b.volume(unknown) {
        Err(Error::NotFound(msg)) => assert!(msg.contains(unknown), "{msg}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(b.list_volumes_on_disk(u32::MAX, 0), Err(Error::NotFound(_))));
}

/// Grows `l`'s backing file, makes the kernel see it, grows the partition.
fn grow_disk_and_partition(b: &Block, l: &LoopDisk, to: u64, refresh: impl Fn()) -> (Volume, Volume) {
    let v = b.volumes_of(&disk_of(l)).unwrap().remove(0);
    l.grow_file(to);
    refresh();
    assert_eq!(sysfs_num(&l.name, "size") * 512, to, "the kernel sees the new size");
    let seen = b.volume(&v.id).unwrap();
    assert_eq!((seen.index, seen.start, seen.size), (v.index, v.start, v.size), "the partition is unchanged");
    assert!(seen.node.exists(), "the kernel has the partition: {seen:?}");
    let v = seen;
    // An explicit size first, then all the space.
    let bigger = b.grow_partition(&v, v.size + 8 * MIB).unwrap();
    assert_eq!(bigger.size, v.size + 8 * MIB);
    assert_eq!(sysfs_num(&bigger.name, "size") * 512, bigger.size);
    let all = b.grow_partition(&bigger, 0).unwrap();
    assert_eq!((all.id.as_str(), all.index, all.start), (v.id.as_str(), v.index, v.start));
    assert_eq!(kernel_partitions(l), vec![(all.name.clone(), all.start, all.size)], "the kernel resized it");
    (v, all)
}

#[test]
fn growing_after_the_disk_grew() {
    needs_root!();
    let _shared = RESCAN.read().unwrap_or_else(|e| e.into_inner());
    for sector in [512, 4096] {
        let l = LoopDisk::with_sector(&format!("part-grow-{sector}"), 64 * MIB, sector);
        let b = block();
        b.partition_disk(l.number()).unwrap();
        let (before, after) = grow_disk_and_partition(&b, &l, 160 * MIB, || b.refresh(&disk_of(&l)).unwrap());
        assert_eq!(after.size, 160 * MIB - 2 * MIB, "1 MiB before it, and the end aligned down: {after:?}");
        assert!(after.size > before.size);
        check_partitioned(&b, &l);
        // At the target already: nothing written.
        let bytes = table_bytes(&l);
        assert_eq!(b.grow_partition(&after, 0).unwrap(), after);
        assert_eq!(b.grow_partition(&after, after.size).unwrap(), after);
        assert!(table_bytes(&l) == bytes);
        // Shrinking and over-growing are refused, naming the sizes, and change nothing.
        match b.grow_partition(&after, after.size - MIB) {
            Err(Error::FailedPrecondition(msg)) => {
                assert!(msg.contains(&after.size.to_string()) && msg.contains(&(after.size - MIB).to_string()), "{msg}")
            }
            other => panic!("{other:?}"),
        }
        match b.grow_partition(&after, 1 << 40) {
            Err(Error::FailedPrecondition(msg)) => assert!(msg.contains(&(1u64 << 40).to_string()), "{msg}"),
            other => panic!("{other:?}"),
        }
        assert!(table_bytes(&l) == bytes);
        assert_eq!(kernel_partitions(&l), vec![(after.name.clone(), after.start, after.size)]);
    }
}

/// Unmounts on drop (before the loop disk it is on is detached).
struct Mounted(PathBuf);

impl Mounted {
    /// A new ext4 (test tool) on `v`, mounted at a scratch directory named after `tag`.
    fn new_ext4(v: &Volume, tag: &str) -> Mounted {
        run(&["mkfs.ext4", "-q", "-F", v.node.to_str().unwrap()]);
        let dir = std::env::temp_dir().join(format!("csi-proxy-part-mnt-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        rustix::mount::mount(&v.node, &dir, "ext4", rustix::mount::MountFlags::empty(), None).unwrap();
        Mounted(dir)
    }
}
impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::empty());
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_mounted_partition_grows_in_place() {
    needs_root!();
    let _shared = RESCAN.read().unwrap_or_else(|e| e.into_inner());
    let l = LoopDisk::new("part-grow-mounted", 64 * MIB);
    let b = block();
    b.partition_disk(l.number()).unwrap();
    let v = only_volume(&b, &l);
    let m = Mounted::new_ext4(&v, "grow");
    let dir = m.0.clone();
    std::fs::write(dir.join("file"), "data").unwrap();
    // Mounted: the exclusive open fails, yet partitioning again is still the no-op it should be.
    b.partition_disk(l.number()).unwrap();
    let (_, after) = grow_disk_and_partition(&b, &l, 128 * MIB, || b.refresh(&disk_of(&l)).unwrap());
    assert_eq!(after.size, 126 * MIB);
    assert_eq!(std::fs::read_to_string(dir.join("file")).unwrap(), "data");
    // resize2fs offline is the volume group's business; the block device is already bigger.
    assert_eq!(sysfs_num(&after.name, "size") * 512, 126 * MIB);
}

#[test]
fn rescan_shows_a_grown_loop_disk() {
    needs_root!();
    let _alone = RESCAN.write().unwrap_or_else(|e| e.into_inner());
    let l = LoopDisk::new("part-rescan", 64 * MIB);
    let b = block();
    b.partition_disk(l.number()).unwrap();
    // Drop the kernel's partition behind our back: Rescan brings it back from the table.
    run(&["partx", "-d", "--nr", "1", l.dev.to_str().unwrap()]);
    assert!(kernel_partitions(&l).is_empty());
    let (_, after) = grow_disk_and_partition(&b, &l, 96 * MIB, || csi_proxy_host::rescan_and_refresh(&b).unwrap());
    assert_eq!(after.size, 94 * MIB);
}

#[test]
fn disks_are_partitioned_in_parallel() {
    needs_root!();
    let _shared = RESCAN.read().unwrap_or_else(|e| e.into_inner());
    let disks: Vec<LoopDisk> = (0..4).map(|i| LoopDisk::new(&format!("part-par-{i}"), 64 * MIB)).collect();
    let b = block();
    std::thread::scope(|s| {
        for l in &disks {
            let b = &b;
            s.spawn(move || b.partition_disk(l.number()).unwrap());
        }
    });
    let mut ids: Vec<String> = disks.iter().map(|l| check_partitioned(&b, l).id).collect();
    for (l, id) in disks.iter().zip(&ids) {
        assert_eq!(b.get_disk_number_from_volume_id(id).unwrap(), l.number());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4, "every partition has its own GUID");
}

#[test]
fn cross_check_tools_exist() {
    // The tests above lean on these test-only tools; say so clearly when one is missing.
    for tool in ["losetup", "blkid", "mkfs.ext4", "partx"] {
        assert!(Command::new(tool).arg("--version").output().is_ok(), "{tool} is needed by these tests");
    }
}
