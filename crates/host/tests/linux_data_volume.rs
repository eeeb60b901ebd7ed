//! ResizeVolume with a disk number for a volume ID (azuredisk ≥ 1.32's NodeStageVolume) on a
//! real loop disk: the disk's data volume grows. Needs root (loop devices); skipped otherwise.
#![cfg(target_os = "linux")]

use csi_proxy_host::linux::block::Block;
use csi_proxy_host::paths::Roots;
use csi_proxy_host::types::FsType;
use csi_proxy_host::{DiskHost, Error, VolumeHost};
use std::path::PathBuf;
use std::process::Command;

const MIB: u64 = 1 << 20;

/// A loop device over a sparse file (test tool: losetup), detached and deleted on drop.
struct Loop {
    file: PathBuf,
    dev: String,
}

impl Loop {
    fn new(size: u64) -> Loop {
        let file = std::env::temp_dir().join(format!("csi-proxy-data-volume-{}.img", std::process::id()));
        std::fs::File::create(&file).unwrap().set_len(size).unwrap();
        let out = Command::new("losetup").args(["--find", "--show", "--partscan"]).arg(&file).output().unwrap();
        assert!(out.status.success(), "losetup: {}", String::from_utf8_lossy(&out.stderr));
        Loop { file, dev: String::from_utf8(out.stdout).unwrap().trim().to_owned() }
    }

    /// The backend's disk number: the kernel's (major << 20) | minor.
    fn number(&self) -> u32 {
        let name = self.dev.trim_start_matches("/dev/");
        let dev = std::fs::read_to_string(format!("/sys/class/block/{name}/dev")).unwrap();
        let (major, minor) = dev.trim().split_once(':').unwrap();
        (major.parse::<u32>().unwrap() << 20) | minor.parse::<u32>().unwrap()
    }

    fn grow(&self, size: u64) {
        std::fs::OpenOptions::new().write(true).open(&self.file).unwrap().set_len(size).unwrap();
        assert!(Command::new("losetup").args(["-c", &self.dev]).status().unwrap().success());
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
        let _ = std::fs::remove_file(&self.file);
    }
}

#[test]
fn a_disk_number_grows_that_disks_data_volume() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root for loop devices");
        return;
    }
    let disk = Loop::new(64 * MIB);
    let number = disk.number();
    let by_number = number.to_string();
    let block = Block::new(Roots::new(vec![std::env::temp_dir().to_str().unwrap().to_owned()]), FsType::Ext4);

    // A blank disk has no data volume.
    match block.resize_volume(&by_number, 0) {
        Err(Error::NotFound(m)) => assert!(m.contains(&format!("disk {number} has no volumes")), "{m}"),
        other => panic!("{other:?}"),
    }

    block.partition_disk(number).unwrap();
    let id = block.list_volumes_on_disk(number, 0).unwrap().remove(0);
    block.format_volume(&id).unwrap();
    let before = block.volume(&id).unwrap().size;
    assert!(before < 64 * MIB, "{before}");

    // A larger disk (a clone or a restore to a larger size): staging resizes by disk number.
    disk.grow(256 * MIB);
    block.resize_volume(&by_number, 0).unwrap();
    let after = block.volume(&id).unwrap().size;
    assert!(after > 250 * MIB, "the data volume grew from {before} to {after} bytes");
    // Again: nothing left to grow, no error (the kubelet retries stages).
    block.resize_volume(&by_number, 0).unwrap();
    assert_eq!(block.volume(&id).unwrap().size, after);

    // Only ResizeVolume takes a disk number.
    assert!(matches!(block.is_volume_formatted(&by_number), Err(Error::InvalidArgument(_))));
    assert!(matches!(block.get_disk_number_from_volume_id(&by_number), Err(Error::InvalidArgument(_))));
}
