#![cfg(target_os = "linux")]
//! Real SCSI identity, inside the storage VM only (`scripts/storage-vm-tests.sh`): scsi_debug
//! disks, whose host:channel:target:lun, VPD pages and state the kernel reports, checked against
//! sysfs read independently, the SCSI device itself (`sg_vpd`, through SG_IO) and `lsblk`.
//! Elsewhere every test returns at once.
//!
//! What scsi_debug reports (drivers/scsi/scsi_debug.c, `vpd_use_hostno=1`): LU number
//! `(host + 1) * 2000 + target * 1000 + lun`; page 0x80 = that number in decimal; page 0x83 = a
//! T10 designator `"Linux   scsi_debug      <n>"` (ASCII, LU), then an NAA one `0x3333333…<n>`
//! (binary, LU), then port and target designators. Upstream's rule (the first LU designator in
//! binary or ASCII) picks the T10 one; the kernel's `wwid` and lsblk's WWN are the NAA one.

use csi_proxy_host::linux::block::Block;
use csi_proxy_host::types::DiskLocation;
use csi_proxy_host::DiskHost;
use csi_proxy_stack_tests::disks;
use csi_proxy_sync::LockExt;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

/// Held by tests that take a disk offline and by those that do I/O on every disk.
static DEVICE_IO: Mutex<()> = Mutex::new(());

/// A scsi_debug disk as sysfs and lsblk describe it, read without the backend.
#[derive(Debug)]
struct Expected {
    name: String,
    number: u32,
    hctl: [String; 4],
    serial: String,
    wwid: String,
    lsblk: BTreeMap<String, String>,
}

/// The scsi_debug disks, or `None` outside the VM.
fn scsi_debug_disks() -> Option<Vec<Expected>> {
    if std::env::var("STORAGE_VM").as_deref() != Ok("1") {
        eprintln!("skipped: only inside storage-vm (scripts/storage-vm-tests.sh)");
        return None;
    }
    let devs = std::env::var("SCSI_DEBUG_DEVS").expect("run after eval \"$(storage-vm-peers scsi-debug)\"");
    let rows = lsblk();
    let disks: Vec<Expected> = devs
        .split_whitespace()
        .map(|dev| {
            let name = dev.trim_start_matches("/dev/").to_string();
            let dir = Path::new("/sys/class/block").join(&name);
            let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap().trim().to_string();
            let (major, minor): (u32, u32) =
                read("dev").split_once(':').map(|(a, b)| (a.parse().unwrap(), b.parse().unwrap())).unwrap();
            // The SCSI device's own directory lists its address under scsi_device/.
            let hctl = std::fs::read_dir(dir.join("device/scsi_device")).unwrap().next().unwrap().unwrap().file_name();
            let hctl: Vec<String> = hctl.to_str().unwrap().split(':').map(str::to_string).collect();
            let lsblk =
                rows.iter().find(|r| r["NAME"] == name).unwrap_or_else(|| panic!("{name} not in lsblk")).clone();
            Expected {
                number: (major << 20) | minor,
                hctl: hctl.try_into().unwrap(),
                serial: String::from_utf8(std::fs::read(dir.join("device/vpd_pg80")).unwrap()[4..].to_vec()).unwrap(),
                wwid: read("device/wwid"),
                lsblk,
                name,
            }
        })
        .collect();
    assert!(!disks.is_empty(), "no scsi_debug disks in SCSI_DEBUG_DEVS={devs:?}");
    Some(disks)
}

fn lsblk() -> Vec<BTreeMap<String, String>> {
    disks::lsblk(&["-d", "-o", "NAME,MAJ:MIN,SIZE,HCTL,SERIAL,WWN,STATE,TYPE"])
}

fn host() -> Block {
    Block::new(Default::default(), Default::default())
}

#[test]
fn locations_are_host_channel_target_lun() {
    let Some(disks) = scsi_debug_disks() else { return };
    let locations = host().list_disk_locations().unwrap();
    for d in &disks {
        let [h, c, t, l] = d.hctl.clone();
        assert_eq!(locations[&d.number], DiskLocation { adapter: h, bus: c, target: t, lun_id: l }, "{}", d.name);
        assert_eq!(d.lsblk["HCTL"], d.hctl.join(":"), "{}", d.name);
        assert_eq!(number_of(&d.lsblk["MAJ:MIN"]), d.number, "{}", d.name);
    }
    eprintln!(
        "{} SCSI disks: {:?}",
        disks.len(),
        disks.iter().map(|d| (&d.name, d.hctl.join(":"))).collect::<Vec<_>>()
    );
}

#[test]
fn ids_are_the_t10_designator_and_the_unit_serial() {
    let Some(disks) = scsi_debug_disks() else { return };
    let _io = DEVICE_IO.lock_ignoring_poison();
    let ids = host().list_disk_ids().unwrap();
    for d in &disks {
        let id = &ids[&d.number];
        assert_eq!(id.serial_number, d.serial, "{}", d.name);
        assert_eq!(id.serial_number, d.lsblk["SERIAL"], "{}", d.name);
        // Upstream's rule picks scsi_debug's T10 vendor designator, spaces kept.
        assert_eq!(id.page83, format!("Linux   scsi_debug      {}", d.serial), "{}", d.name);
        // The kernel's wwid (and lsblk's WWN) is the NAA designator that follows it.
        assert_eq!(d.wwid, format!("naa.{}", d.lsblk["WWN"].trim_start_matches("0x")), "{}", d.name);
        let lu: u64 = d.serial.parse().unwrap();
        assert_eq!(d.wwid, format!("naa.{:x}", 0x3333333000000000u64 + lu), "{}", d.name);
        // sysfs's page is what the device answers to INQUIRY (SG_IO, no sysfs involved).
        let raw =
            Command::new("sg_vpd").args(["--page=0x83", "--raw"]).arg(format!("/dev/{}", d.name)).output().unwrap();
        assert!(raw.status.success(), "sg_vpd: {}", String::from_utf8_lossy(&raw.stderr));
        let sysfs = std::fs::read(format!("/sys/class/block/{}/device/vpd_pg83", d.name)).unwrap();
        assert_eq!(raw.stdout, sysfs, "{}", d.name);
    }
}

#[test]
fn page83_names_lead_to_their_disk_numbers() {
    let Some(disks) = scsi_debug_disks() else { return };
    // What the server's GetDiskNumberByName does with the host's list.
    let ids = host().list_disk_ids().unwrap();
    for d in &disks {
        let page83 = &ids[&d.number].page83;
        let found: Vec<u32> = ids.iter().filter(|(_, i)| &i.page83 == page83).map(|(n, _)| *n).collect();
        assert_eq!(found, [d.number], "{} {page83:?}", d.name);
    }
}

#[test]
fn sizes_match_lsblk() {
    let Some(disks) = scsi_debug_disks() else { return };
    let h = host();
    for d in &disks {
        assert_eq!(h.get_disk_stats(d.number).unwrap().to_string(), d.lsblk["SIZE"], "{}", d.name);
    }
}

#[test]
fn disk_state_is_the_scsi_device_state() {
    let Some(disks) = scsi_debug_disks() else { return };
    let _io = DEVICE_IO.lock_ignoring_poison();
    let h = host();
    let d = &disks[0];
    let state = || std::fs::read_to_string(format!("/sys/class/block/{}/device/state", d.name)).unwrap();
    let lsblk_state = || lsblk().into_iter().find(|r| r["NAME"] == d.name).unwrap()["STATE"].clone();
    assert_eq!(state(), "running\n");
    assert!(h.get_disk_state(d.number).unwrap());
    h.set_disk_state(d.number, true).unwrap();
    assert_eq!(state(), "running\n");

    h.set_disk_state(d.number, false).unwrap();
    assert_eq!(state(), "offline\n");
    assert_eq!(lsblk_state(), "offline");
    assert!(!h.get_disk_state(d.number).unwrap());
    // An offline device refuses I/O.
    let read = Command::new("dd")
        .args([&format!("if=/dev/{}", d.name), "of=/dev/null", "bs=4096", "count=1", "iflag=direct"])
        .output()
        .unwrap();
    assert!(!read.status.success(), "reading an offline disk succeeded");
    h.set_disk_state(d.number, false).unwrap();
    assert_eq!(state(), "offline\n");

    h.set_disk_state(d.number, true).unwrap();
    assert_eq!(state(), "running\n");
    assert_eq!(lsblk_state(), "running");
    assert!(h.get_disk_state(d.number).unwrap());
    let read = Command::new("dd")
        .args([&format!("if=/dev/{}", d.name), "of=/dev/null", "bs=4096", "count=1", "iflag=direct"])
        .output()
        .unwrap();
    assert!(read.status.success(), "reading the disk online again: {}", String::from_utf8_lossy(&read.stderr));
}

fn number_of(maj_min: &str) -> u32 {
    let (major, minor) = maj_min.split_once(':').unwrap();
    (major.parse::<u32>().unwrap() << 20) | minor.parse::<u32>().unwrap()
}
