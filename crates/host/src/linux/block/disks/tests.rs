//! The disk calls over a fake sysfs tree, laid out as the kernel lays out the real one; and, in
//! the storage VM only, a SCSI rescan on real scsi_debug disks.

use super::*;
use crate::paths::Roots;
use crate::types::FsType;
use std::os::unix::fs::symlink;

/// A temporary directory holding `sys/`, removed on drop.
struct FakeSys {
    root: PathBuf,
}

impl FakeSys {
    fn new() -> FakeSys {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("csi-proxy-fake-sysfs-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("class/block")).unwrap();
        fs::create_dir_all(root.join("dev/block")).unwrap();
        FakeSys { root }
    }

    fn block(&self) -> Block {
        Block::with_roots(&self.root, Path::new("/nonexistent-dev"), Roots::default(), FsType::Ext4)
    }

    fn write(&self, rel: &str, content: impl AsRef<[u8]>) {
        let path = self.root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }

    /// A link at `rel` pointing to `target` (a path relative to the link's directory, as sysfs
    /// has them).
    fn link(&self, rel: &str, target: &str) {
        let path = self.root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        symlink(target, path).unwrap();
    }

    /// A block device at `devices/<parent>/block/<name>` (or `devices/virtual/block/<name>`),
    /// linked from `class/block` and `dev/block`, with `dev`, `size` and, when it has a parent
    /// device, a `device` link to it. Returns the path of its directory relative to the root.
    fn blockdev(&self, name: &str, dev: &str, sectors: u64, parent: Option<&str>) -> String {
        let dir = match parent {
            Some(parent) => format!("devices/{parent}/block/{name}"),
            None => format!("devices/virtual/block/{name}"),
        };
        self.write(&format!("{dir}/dev"), format!("{dev}\n"));
        self.write(&format!("{dir}/size"), format!("{sectors}\n"));
        if let Some(parent) = parent {
            // As the kernel writes them: up to the parent's parent, then down by name.
            let last = parent.rsplit('/').next().unwrap();
            self.link(&format!("{dir}/device"), &format!("../../../{last}"));
        }
        self.link(&format!("class/block/{name}"), &format!("../../{dir}"));
        self.link(&format!("dev/block/{dev}"), &format!("../../{dir}"));
        dir
    }

    /// A partition of the device at `disk_dir`.
    fn partition(&self, disk_dir: &str, name: &str, dev: &str, number: u32) {
        let dir = format!("{disk_dir}/{name}");
        self.write(&format!("{dir}/dev"), format!("{dev}\n"));
        self.write(&format!("{dir}/size"), "2048\n");
        self.write(&format!("{dir}/start"), "2048\n");
        self.write(&format!("{dir}/partition"), format!("{number}\n"));
        self.link(&format!("class/block/{name}"), &format!("../../{dir}"));
        self.link(&format!("dev/block/{dev}"), &format!("../../{dir}"));
    }

    fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.root.join(rel)).unwrap()
    }
}

impl Drop for FakeSys {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

const SCSI_DEV: &str = "platform/host2/target2:0:1/2:0:1:3";
const SDA_PG83: &[u8] = &[
    0x00, 0x83, 0x00, 0x20, // header, 32 bytes follow
    0x01, 0x93, 0x00, 0x08, 1, 2, 3, 4, 5, 6, 7, 8, // binary NAA of the target port (association 1)
    0x63, 0x08, 0x00, 0x04, b'a', b'b', b'c', 0, // UTF-8 SCSI name of the LU (code set 3)
    0x01, 0x03, 0x00, 0x08, 0x60, 0x02, 0x24, 0x80, 0xAB, 0xCD, 0xEF, 0x01, // binary NAA of the LU
];
const N_SDA: u32 = 8 << 20;
const N_SDE: u32 = (8 << 20) | 64;
const N_SDD: u32 = (8 << 20) | 48;
const N_NVME: u32 = 259 << 20;
const N_VDA: u32 = 254 << 20;
const N_XVDA: u32 = 202 << 20;
const N_LOOP0: u32 = 7 << 20;

/// Every kind of entry the enumeration has to tell apart.
fn fake_machine() -> FakeSys {
    let s = FakeSys::new();
    // A SCSI disk at 2:0:1:3 with both VPD pages, a partition and a host to scan.
    let sda = s.blockdev("sda", "8:0", 2_097_152, Some(SCSI_DEV));
    s.write(&format!("devices/{SCSI_DEV}/vpd_pg83"), SDA_PG83);
    s.write(&format!("devices/{SCSI_DEV}/vpd_pg80"), b"\x00\x80\x00\x0a  SER-123 ");
    s.write(&format!("devices/{SCSI_DEV}/wwid"), "naa.60022480abcdef01\n");
    s.write(&format!("devices/{SCSI_DEV}/state"), "running\n");
    s.write(&format!("devices/{SCSI_DEV}/rescan"), "");
    s.write(&format!("devices/{SCSI_DEV}/type"), "0\n");
    s.write("devices/platform/host2/scsi_host/host2/scan", "");
    s.link("class/scsi_host/host2", "../../devices/platform/host2/scsi_host/host2");
    s.link("bus/scsi/devices/2:0:1:3", &format!("../../../devices/{SCSI_DEV}"));
    s.partition(&sda, "sda1", "8:1", 1);
    // A SCSI disk with a garbage page 0x83, only wwid, no page 0x80, and state "blocked".
    let sde_dev = "platform/host0/target0:0:0/0:0:0:0";
    s.blockdev("sde", "8:64", 1024, Some(sde_dev));
    s.write(&format!("devices/{sde_dev}/vpd_pg83"), b"\x00\x83\xff\xff\x01");
    s.write(&format!("devices/{sde_dev}/rescan"), "");
    s.write(&format!("devices/{sde_dev}/wwid"), "t10.ATA     QEMU HARDDISK   QM00001\n");
    s.write(&format!("devices/{sde_dev}/state"), "blocked\n");
    // A SCSI disk whose parent is not named H:C:T:L: no location, no IDs, still listed.
    s.blockdev("sdd", "8:48", 1024, Some("platform/odd"));
    // NVMe: a namespace of controller 0 and its hidden multipath path.
    s.blockdev("nvme0n1", "259:0", 4096, Some("pci/nvme/nvme0"));
    s.write("devices/pci/nvme/nvme0/block/nvme0n1/nsid", "1\n");
    s.write("devices/pci/nvme/nvme0/block/nvme0n1/wwid", "eui.0025388b91c3a1e2\n");
    s.write("devices/pci/nvme/nvme0/serial", "S4EWNX0R123456      \n");
    let path = s.blockdev("nvme0c0n1", "259:1", 4096, Some("pci/nvme/nvme0c"));
    s.write(&format!("{path}/hidden"), "1\n");
    // virtio-blk and Xen.
    s.blockdev("vda", "254:0", 8192, Some("pci/0000:00:02.0/virtio1"));
    s.write("devices/pci/0000:00:02.0/virtio1/block/vda/serial", "overlayblk");
    s.blockdev("xvda", "202:0", 8192, Some("vbd-51712"));
    // Loops: backed, unbacked, backed but empty.
    let l0 = s.blockdev("loop0", "7:0", 2048, None);
    s.write(&format!("{l0}/loop/backing_file"), "/tmp/disk.img\n");
    s.blockdev("loop1", "7:1", 0, None);
    let l2 = s.blockdev("loop2", "7:2", 0, None);
    s.write(&format!("{l2}/loop/backing_file"), "/tmp/gone.img (deleted)\n");
    s.partition(&l0, "loop0p1", "259:5", 1);
    // Left out by kind.
    for (name, dev) in [("dm-0", "253:0"), ("zram0", "252:0"), ("sr0", "11:0"), ("md0", "9:0"), ("ram0", "1:0")] {
        s.blockdev(name, dev, 4096, None);
    }
    // Broken: a garbage dev file, a dangling link, a size that is no number.
    let sdb = s.blockdev("sdb", "8:16", 100, None);
    s.write(&format!("{sdb}/dev"), "garbage\n");
    s.link("class/block/sdc", "../../devices/virtual/block/nothing-here");
    let vdb = s.blockdev("vdb", "254:16", 100, None);
    s.write(&format!("{vdb}/size"), "lots\n");
    s
}

fn location(adapter: &str, bus: &str, target: &str, lun_id: &str) -> DiskLocation {
    DiskLocation { adapter: adapter.into(), bus: bus.into(), target: target.into(), lun_id: lun_id.into() }
}

fn ids(page83: &str, serial_number: &str) -> DiskIds {
    DiskIds { page83: page83.into(), serial_number: serial_number.into() }
}

#[test]
fn names_select_the_kinds_of_disk() {
    for name in ["sda", "sdaa", "vdb", "xvdf", "nvme0n1", "nvme12n3", "nvme0c1n1", "loop0", "loop17"] {
        assert!(bus_of(name).is_some(), "{name}");
    }
    for name in
        ["sda1", "sd", "vda2", "xvda1", "nvme0", "nvme0n1p1", "nvmen1", "loop", "loop0p1", "dm-0", "md0", "md127"]
    {
        assert!(bus_of(name).is_none(), "{name}");
    }
    for name in ["ram0", "zram0", "sr0", "nbd0", "mmcblk0", "fd0", "SDA", "loopa"] {
        assert!(bus_of(name).is_none(), "{name}");
    }
}

#[test]
fn small_parsers() {
    assert_eq!(parse_dev("8:16\n"), Some((8, 16)));
    assert_eq!(parse_dev("259:1048575"), Some((259, 0xf_ffff)));
    for bad in ["", "8", "8:", ":1", "a:b", "8:1:2", "4096:0", "1:1048576", "-1:0"] {
        assert_eq!(parse_dev(bad), None, "{bad:?}");
    }
    assert_eq!(parse_hctl("2:0:1:3"), Some([2, 0, 1, 3]));
    assert_eq!(parse_hctl("0:0:0:281474976710656"), Some([0, 0, 0, 1 << 48]));
    for bad in ["", "2:0:1", "2:0:1:3:4", "host2", "target2:0:1", "2:0:x:3", "2::1:3"] {
        assert_eq!(parse_hctl(bad), None, "{bad:?}");
    }
    assert_eq!(trailing_number("virtio12"), Some(12));
    assert_eq!(trailing_number("vbd-51712"), Some(51712));
    assert_eq!(trailing_number("virtio"), None);
}

#[test]
fn enumeration_keeps_whole_disks_only_in_number_order() {
    let s = fake_machine();
    let disks = s.block().disks().unwrap();
    let names: Vec<&str> = disks.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["loop0", "sda", "sdd", "sde", "xvda", "vda", "nvme0n1"]);
    let sda = &disks[1];
    assert_eq!((sda.number, sda.major, sda.minor), (N_SDA, 8, 0));
    assert!(disks.windows(2).all(|w| w[0].number < w[1].number));
    assert_eq!(
        disks.iter().map(|d| d.number).collect::<Vec<_>>(),
        [N_LOOP0, N_SDA, N_SDD, N_SDE, N_XVDA, N_VDA, N_NVME]
    );
}

#[test]
fn lookup_by_number_and_why_a_number_is_not_a_disk() {
    let s = fake_machine();
    let b = s.block();
    assert_eq!(b.disk(N_SDA).unwrap().name, "sda");
    assert_eq!(b.disk(N_NVME).unwrap().name, "nvme0n1");
    let not_found = |number: u32, parts: &[&str]| {
        let err = b.disk(number).unwrap_err();
        assert!(matches!(err, Error::NotFound(_)), "{number}: {err:?}");
        let msg = err.to_string();
        for part in parts {
            assert!(msg.contains(part), "{msg:?} lacks {part:?}");
        }
        assert!(msg.contains("(major << 20) | minor"), "{msg}");
    };
    not_found(N_SDA | 1, &["disk 8388609", "8:1 is sda1", "partition"]);
    not_found((7 << 20) | 1, &["loop1", "without a backing file"]);
    not_found((7 << 20) | 2, &["loop2", "size 0"]);
    not_found((259 << 20) | 1, &["nvme0c0n1", "hidden"]);
    not_found(253 << 20, &["dm-0", "not a kind of disk"]);
    not_found(12345, &["disk 12345 (device 0:12345) not found", "no block device has that number"]);
    not_found(u32::MAX, &["disk 4294967295 (device 4095:1048575)"]);
    // A disk whose attributes are broken is an error, not "not found".
    assert!(matches!(b.disk((8 << 20) | 16), Err(Error::Internal(m)) if m.contains("garbage")));
}

#[test]
fn locations_per_bus() {
    let s = fake_machine();
    let locs = s.block().list_disk_locations().unwrap();
    assert_eq!(locs.len(), 7);
    assert_eq!(locs[&N_SDA], location("2", "0", "1", "3"));
    assert_eq!(locs[&N_SDE], location("0", "0", "0", "0"));
    assert_eq!(locs[&N_SDD], DiskLocation::default());
    assert_eq!(locs[&N_NVME], location("0", "", "", "1"));
    assert_eq!(locs[&N_VDA], location("1", "", "", ""));
    assert_eq!(locs[&N_XVDA], location("", "", "51712", ""));
    assert_eq!(locs[&N_LOOP0], DiskLocation::default());
}

#[test]
fn ids_per_bus_with_fallbacks() {
    let s = fake_machine();
    let all = s.block().list_disk_ids().unwrap();
    assert_eq!(all.len(), 7);
    // Upstream's rule skips the port designator and the UTF-8 name, and takes the LU's NAA.
    assert_eq!(all[&N_SDA], ids("60022480abcdef01", "SER-123"));
    // A garbage page 0x83 falls back to wwid; no page 0x80 and nothing else: no serial.
    assert_eq!(all[&N_SDE], ids("t10.ATA     QEMU HARDDISK   QM00001", ""));
    assert_eq!(all[&N_SDD], ids("", ""));
    assert_eq!(all[&N_NVME], ids("eui.0025388b91c3a1e2", "S4EWNX0R123456"));
    assert_eq!(all[&N_VDA], ids("", "overlayblk"));
    assert_eq!(all[&N_XVDA], ids("", ""));
    assert_eq!(all[&N_LOOP0], ids("", ""));
}

#[test]
fn sizes_are_in_512_byte_units() {
    let s = fake_machine();
    let b = s.block();
    assert_eq!(b.get_disk_stats(N_SDA).unwrap(), 2_097_152 * 512);
    assert_eq!(b.get_disk_stats(N_LOOP0).unwrap(), 2048 * 512);
    assert!(matches!(b.get_disk_stats(N_SDA | 1), Err(Error::NotFound(_))));
}

#[test]
fn scsi_state_reads_and_writes_device_state() {
    let s = fake_machine();
    let b = s.block();
    let state = format!("devices/{SCSI_DEV}/state");
    assert!(b.get_disk_state(N_SDA).unwrap());
    b.set_disk_state(N_SDA, true).unwrap();
    assert_eq!(s.read(&state), "running\n", "already online: nothing written");
    b.set_disk_state(N_SDA, false).unwrap();
    assert_eq!(s.read(&state), "offline\n");
    assert!(!b.get_disk_state(N_SDA).unwrap());
    s.write(&state, "offline\n");
    b.set_disk_state(N_SDA, false).unwrap();
    assert_eq!(s.read(&state), "offline\n", "already offline: nothing written");
    b.set_disk_state(N_SDA, true).unwrap();
    assert_eq!(s.read(&state), "running\n");

    // Other states read as offline and cannot be switched.
    assert!(!b.get_disk_state(N_SDE).unwrap());
    let err = b.set_disk_state(N_SDE, true).unwrap_err();
    assert!(matches!(&err, Error::FailedPrecondition(m) if m.contains("sde") && m.contains("\"blocked\"")), "{err:?}");
    // A SCSI disk without a state file is an error naming it.
    assert!(matches!(b.get_disk_state(N_SDD), Err(Error::NotFound(m)) if m.contains("sdd")));
}

#[test]
fn only_scsi_disks_have_a_state() {
    let s = fake_machine();
    let b = s.block();
    for (number, name) in [(N_LOOP0, "loop0"), (N_NVME, "nvme0n1"), (N_VDA, "vda"), (N_XVDA, "xvda")] {
        for result in
            [b.get_disk_state(number).map(drop), b.set_disk_state(number, false), b.set_disk_state(number, true)]
        {
            let err = result.unwrap_err();
            assert!(matches!(err, Error::FailedPrecondition(_)), "{err:?}");
            assert_eq!(
                err.to_string(),
                format!("{name} (disk {number}) is not a SCSI disk; only SCSI disks have an online state on Linux")
            );
        }
    }
    // NVMe controllers have a `state` file too ("live"); it is never touched.
    assert!(b.set_disk_state(N_NVME, false).is_err());
}

#[test]
fn rescan_scans_every_host_and_rereads_every_scsi_disk() {
    let s = fake_machine();
    s.write("devices/platform/host7/scsi_host/host7/scan", "");
    s.link("class/scsi_host/host7", "../../devices/platform/host7/scsi_host/host7");
    s.write("devices/platform/odd/rescan", "");
    s.block().rescan_scsi().unwrap();
    assert_eq!(s.read("devices/platform/host2/scsi_host/host2/scan"), "- - -");
    assert_eq!(s.read("devices/platform/host7/scsi_host/host7/scan"), "- - -");
    assert_eq!(s.read(&format!("devices/{SCSI_DEV}/rescan")), "1");

    // A disk whose rescan file is missing makes the call fail, naming it, after doing the rest.
    s.write("devices/platform/host7/scsi_host/host7/scan", "");
    fs::remove_file(s.root.join("devices/platform/odd/rescan")).unwrap();
    let err = s.block().rescan_scsi().unwrap_err().to_string();
    assert!(err.contains("SCSI rescan failed") && err.contains("sdd/device/rescan"), "{err}");
    assert_eq!(s.read("devices/platform/host7/scsi_host/host7/scan"), "- - -");
}

#[test]
fn rescan_without_scsi_hosts_does_nothing() {
    let s = FakeSys::new();
    s.block().rescan_scsi().unwrap();
    let l0 = s.blockdev("loop0", "7:0", 2048, None);
    s.write(&format!("{l0}/loop/backing_file"), "/tmp/disk.img\n");
    s.block().rescan_scsi().unwrap();
}

#[test]
fn rescan_waits_a_bounded_time_for_sd_to_attach() {
    let s = fake_machine();
    s.write("bus/scsi/drivers/sd/uevent", "");
    // Already attached (it has a block dir): no waiting.
    let t = Instant::now();
    s.block().wait_for_sd_probes(Duration::from_secs(5));
    assert!(t.elapsed() < Duration::from_secs(1));
    // A disk-type device without its block device yet, plus a tape that never gets one.
    s.write("devices/platform/host2/target2:0:2/2:0:2:0/type", "0\n");
    s.link("bus/scsi/devices/2:0:2:0", "../../../devices/platform/host2/target2:0:2/2:0:2:0");
    s.write("devices/platform/host2/target2:0:3/2:0:3:0/type", "1\n");
    s.link("bus/scsi/devices/2:0:3:0", "../../../devices/platform/host2/target2:0:3/2:0:3:0");
    let t = Instant::now();
    s.block().wait_for_sd_probes(Duration::from_millis(200));
    assert!(t.elapsed() >= Duration::from_millis(200));
    // It appears while we wait.
    let root = s.root.clone();
    let appear = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        fs::create_dir_all(root.join("devices/platform/host2/target2:0:2/2:0:2:0/block/sdf")).unwrap();
    });
    let t = Instant::now();
    s.block().wait_for_sd_probes(Duration::from_secs(5));
    assert!(t.elapsed() < Duration::from_secs(4));
    appear.join().unwrap();
}

#[test]
fn a_missing_sysfs_is_an_error_not_an_empty_list() {
    let b = Block::with_roots(Path::new("/nonexistent-sysfs"), Path::new("/dev"), Roots::default(), FsType::Ext4);
    assert!(matches!(b.list_disk_ids(), Err(Error::Internal(m)) if m.contains("/nonexistent-sysfs/class/block")));
    assert!(matches!(b.disk(N_SDA), Err(Error::NotFound(_))));
}

/// In the storage VM only (`scripts/storage-vm-tests.sh`), with scsi_debug disks: a deleted SCSI
/// device is back, as a disk, when `rescan_scsi` returns.
#[test]
fn vm_rescan_brings_back_a_deleted_scsi_disk() {
    if std::env::var("STORAGE_VM").as_deref() != Ok("1") {
        return;
    }
    let devs = std::env::var("SCSI_DEBUG_DEVS").expect("run after eval \"$(storage-vm-peers scsi-debug)\"");
    let name = devs.split_whitespace().last().unwrap().trim_start_matches("/dev/").to_string();
    let b = Block::new(Roots::default(), FsType::Ext4);
    let before = b.disks().unwrap();
    let disk = before.iter().find(|d| d.name == name).unwrap().clone();
    let hctl = b.parent_device(&disk).unwrap();
    fs::write(format!("/sys/class/block/{name}/device/delete"), "1").unwrap();
    assert!(!b.disks().unwrap().iter().any(|d| d.name == name), "{name} deleted");
    b.rescan_scsi().unwrap();
    let after = b.disks().unwrap();
    let back = after.iter().find(|d| b.parent_device(d).as_deref() == Some(hctl.as_str()));
    let back = back.unwrap_or_else(|| panic!("{hctl} not back after the rescan: {after:?}"));
    assert_eq!(b.list_disk_locations().unwrap()[&back.number].lun_id, hctl.rsplit(':').next().unwrap());
    assert_eq!(after.len(), before.len());
}
