#![cfg(target_os = "linux")]
//! The disk group's identity calls on this machine's real block devices: loop disks over sparse
//! files (root only; CI runs as root), cross-checked with sysfs and `lsblk` (test-only tool).

use csi_proxy_host::linux::block::Block;
use csi_proxy_host::types::{DiskIds, DiskLocation};
use csi_proxy_host::{DiskHost, Error};
use csi_proxy_stack_tests::disks::{self, LoopDisk};
use csi_proxy_stack_tests::needs_root;
use std::collections::BTreeMap;

const MIB: u64 = 1 << 20;

fn host() -> Block {
    Block::new(Default::default(), Default::default())
}

fn lsblk() -> Vec<BTreeMap<String, String>> {
    disks::lsblk(&["-o", "NAME,MAJ:MIN,SIZE,HCTL,SERIAL,WWN,TYPE"])
}

fn number_of(maj_min: &str) -> u32 {
    let (major, minor) = maj_min.split_once(':').unwrap();
    (major.parse::<u32>().unwrap() << 20) | minor.parse::<u32>().unwrap()
}

#[test]
fn loop_disks_are_listed_with_their_numbers_sizes_and_no_ids() {
    needs_root!();
    let a = LoopDisk::new("disks-a", 64 * MIB);
    let b = LoopDisk::with_sector("disks-b", 96 * MIB, 4096);
    let h = host();
    let ids = h.list_disk_ids().unwrap();
    let locations = h.list_disk_locations().unwrap();
    for (disk, size) in [(&a, 64 * MIB), (&b, 96 * MIB)] {
        let n = disk.number();
        assert_eq!(ids.get(&n), Some(&DiskIds::default()), "{} ({n}) in {ids:?}", disk.name);
        assert_eq!(locations.get(&n), Some(&DiskLocation::default()), "{}", disk.name);
        assert_eq!(h.get_disk_stats(n).unwrap(), size, "{}", disk.name);
    }
    assert!(ids.keys().eq(locations.keys()), "both lists hold the same disks");
}

#[test]
fn the_lists_agree_with_lsblk() {
    needs_root!();
    let mine = LoopDisk::new("disks-lsblk", 80 * MIB);
    let h = host();
    // Other tests attach and detach loop devices meanwhile: devices lsblk shows before and after
    // our listing, unchanged, must be in it.
    let before = lsblk();
    let ids = h.list_disk_ids().unwrap();
    let locations = h.list_disk_locations().unwrap();
    let after = lsblk();
    let stable: Vec<_> = before.iter().filter(|row| after.contains(row)).collect();

    let mine_row = stable.iter().find(|r| r["NAME"] == mine.name).expect("our loop disk in lsblk");
    assert_eq!(number_of(&mine_row["MAJ:MIN"]), mine.number());
    assert_eq!(mine_row["SIZE"], (80 * MIB).to_string());

    for row in &stable {
        let name = &row["NAME"];
        let kind_served = ["sd", "vd", "xvd", "nvme", "loop"].iter().any(|p| name.starts_with(p));
        let whole = row["TYPE"] == "disk" || row["TYPE"] == "loop";
        if !(kind_served && whole && row["SIZE"] != "0") {
            continue;
        }
        let n = number_of(&row["MAJ:MIN"]);
        let id = ids.get(&n).unwrap_or_else(|| panic!("{name} ({n}) from lsblk is not in {ids:?}"));
        assert_eq!(h.get_disk_stats(n).unwrap().to_string(), row["SIZE"], "{name}");
        let loc = &locations[&n];
        let hctl = [&loc.adapter, &loc.bus, &loc.target, &loc.lun_id];
        if row["HCTL"].is_empty() {
            assert!(loc.adapter.is_empty() || !name.starts_with("sd"), "{name}: {loc:?}");
        } else {
            assert_eq!(hctl.map(String::as_str).join(":"), row["HCTL"], "{name}");
        }
        // lsblk without udev knows fewer serials than sysfs has (virtio's `serial`): compare
        // where it knows one.
        if !row["SERIAL"].is_empty() {
            assert_eq!(id.serial_number, row["SERIAL"].trim(), "{name}");
        }
        if name.starts_with("loop") {
            assert_eq!((id, loc), (&DiskIds::default(), &DiskLocation::default()), "{name}");
        }
    }
    // And nothing we list is unknown to lsblk (loop devices of other tests may come and go in
    // between: only ours is checked).
    let lsblk_numbers: Vec<u32> = before.iter().chain(&after).map(|r| number_of(&r["MAJ:MIN"])).collect();
    let loop_major = mine.devnum().0;
    for n in ids.keys().filter(|&&n| n >> 20 != loop_major || n == mine.number()) {
        assert!(lsblk_numbers.contains(n), "disk {n} is not in lsblk's output");
    }
}

/// Whatever real disks this machine has (here: a virtio disk with a `serial`): the answers are
/// sysfs's, read independently.
#[test]
fn real_disks_match_sysfs() {
    let h = host();
    let ids = h.list_disk_ids().unwrap();
    let locations = h.list_disk_locations().unwrap();
    for entry in std::fs::read_dir("/sys/class/block").unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        // Loop disks come and go with the other tests of this binary, running beside this one.
        if name.starts_with("loop") {
            continue;
        }
        let dir = format!("/sys/class/block/{name}");
        let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).map(|s| s.trim().to_string());
        let Ok(dev) = read("dev") else { continue };
        let n = number_of(&dev);
        let Some(id) = ids.get(&n) else { continue };
        if name.starts_with("vd") {
            assert_eq!(id.serial_number, read("serial").unwrap_or_default(), "{name}");
            let parent = std::fs::read_link(format!("{dir}/device")).unwrap();
            let parent = parent.file_name().unwrap().to_str().unwrap();
            assert_eq!(Some(locations[&n].adapter.as_str()), parent.strip_prefix("virtio"), "{name}");
        }
        assert_eq!(h.get_disk_stats(n).unwrap(), read("size").unwrap().parse::<u64>().unwrap() * 512, "{name}");
    }
}

#[test]
fn only_scsi_disks_have_a_state() {
    needs_root!();
    let d = LoopDisk::new("disks-state", 16 * MIB);
    let h = host();
    let n = d.number();
    let expected = format!("{} (disk {n}) is not a SCSI disk; only SCSI disks have an online state on Linux", d.name);
    for result in [h.get_disk_state(n).map(drop), h.set_disk_state(n, true), h.set_disk_state(n, false)] {
        match result {
            Err(Error::FailedPrecondition(msg)) => assert_eq!(msg, expected),
            other => panic!("expected FailedPrecondition, got {other:?}"),
        }
    }
}

#[test]
fn unknown_disk_numbers_are_not_found_with_an_explanation() {
    let h = host();
    let n = (4000 << 20) | 7;
    for err in
        [h.get_disk_stats(n).unwrap_err(), h.get_disk_state(n).unwrap_err(), h.set_disk_state(n, true).unwrap_err()]
    {
        match err {
            Error::NotFound(msg) => {
                assert!(msg.starts_with(&format!("disk {n} (device 4000:7) not found")), "{msg}");
                assert!(msg.contains("(major << 20) | minor"), "{msg}");
            }
            other => panic!("expected NotFound, got {other:?}"),
        }
    }
}
