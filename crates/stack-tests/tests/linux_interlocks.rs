#![cfg(target_os = "linux")]
//! The interlocks on real loop disks (root only; CI runs as root): a disk in each state that
//! means "not ours to change" (a volume mounted outside the working directories, active swap,
//! an active LVM logical volume, a device-mapper table, a `-protected-disk` match) refuses
//! PartitionDisk, FormatVolume and ResizeVolume before anything is written: its first and last
//! MiB (both GPT copies) and its partition's size are the same after. The disk's number is given
//! to ResizeVolume as azuredisk does, on a disk grown since it was partitioned, so the call
//! would grow the partition if nothing stopped it.
//!
//! The device-mapper cases need a kernel with device-mapper: they skip where there is none and
//! run in the storage VM (Debian's kernel; scripts/storage-vm-tests.sh), where skipping fails.

use csi_proxy_host::interlock::ProtectedDisk;
use csi_proxy_host::linux::block::Block;
use csi_proxy_host::paths::Roots;
use csi_proxy_host::types::FsType;
use csi_proxy_host::{DiskHost, Error, VolumeHost};
use csi_proxy_stack_tests::disks::{run, LoopDisk};
use csi_proxy_stack_tests::{needs_root, Scratch};
use std::os::unix::fs::FileExt;
use std::process::Command;

const MIB: u64 = 1 << 20;

type Call<'a> = (&'static str, Box<dyn Fn() -> csi_proxy_host::Result<()> + 'a>);

/// A loop disk partitioned by the backend, then grown by 64 MiB (the kernel told), and a backend
/// whose only root is `<scratch>/kubelet`.
struct Case {
    disk: LoopDisk,
    block: Block,
    volume: String,
    part: String,
    scratch: Scratch,
}

impl Case {
    fn new(tag: &str, protected: Vec<ProtectedDisk>) -> Case {
        let scratch = Scratch::new(&format!("csi-proxy-interlock-{tag}"));
        let kubelet = scratch.dir("kubelet");
        let block = Block::new(Roots::new(vec![kubelet]), FsType::Ext4).protecting(protected);
        let disk = LoopDisk::new(tag, 64 * MIB);
        block.partition_disk(disk.number()).unwrap();
        let volume = block.list_volumes_on_disk(disk.number(), 1).unwrap().remove(0);
        disk.grow_file(128 * MIB);
        run(&["losetup", "--set-capacity", disk.dev.to_str().unwrap()]);
        let part = format!("{}p1", disk.dev.display());
        Case { disk, block, volume, part, scratch }
    }

    /// The disk's first and last MiB and its partition's size in sectors.
    fn state(&self) -> (Vec<u8>, Vec<u8>, String) {
        let f = std::fs::File::open(&self.disk.dev).unwrap();
        let (mut head, mut tail) = (vec![0u8; MIB as usize], vec![0u8; MIB as usize]);
        f.read_exact_at(&mut head, 0).unwrap();
        f.read_exact_at(&mut tail, self.disk.size() - MIB).unwrap();
        let size = std::fs::read_to_string(format!("/sys/class/block/{}p1/size", self.disk.name)).unwrap();
        (head, tail, size)
    }

    /// PartitionDisk, FormatVolume and ResizeVolume(disk number, 0) are refused naming `why`,
    /// and the disk is as it was.
    fn all_refused(&self, why: &str) {
        let before = self.state();
        let number = self.disk.number();
        let calls: [Call; 3] = [
            ("PartitionDisk", Box::new(|| self.block.partition_disk(number))),
            ("FormatVolume", Box::new(|| self.block.format_volume(&self.volume))),
            ("ResizeVolume", Box::new(|| self.block.resize_volume(&number.to_string(), 0))),
        ];
        for (name, call) in calls {
            match call() {
                Err(Error::FailedPrecondition(msg)) => {
                    assert!(msg.starts_with(&format!("refusing {name} on ")) && msg.contains(why), "{name}: {msg}")
                }
                other => panic!("{name}: {other:?}"),
            }
        }
        assert!(self.state() == before, "the disk changed");
    }
}

/// Whether this kernel has device-mapper; where it must (the storage VM), a panic if not.
fn device_mapper() -> bool {
    // The kernel lists device-mapper's block major once the driver is there.
    let devices = std::fs::read_to_string("/proc/devices").unwrap_or_default();
    let there = devices.lines().any(|l| l.split_whitespace().nth(1) == Some("device-mapper"));
    if !there && std::env::var_os("STORAGE_VM").is_some() {
        panic!("no device-mapper in the storage VM (modprobe dm_mod first)");
    }
    if !there {
        eprintln!("skipped: this kernel has no device-mapper (the storage VM runs this test)");
    }
    there
}

/// Runs a test tool; false if it failed (its stderr printed). LVM and dmsetup do not wait for
/// udev, which a test VM may not run.
fn try_run(argv: &[&str]) -> bool {
    let out = Command::new(argv[0]).args(&argv[1..]).env("DM_DISABLE_UDEV", "1").output().unwrap();
    if !out.status.success() {
        eprintln!("{argv:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    out.status.success()
}

/// A disk laid out as a data disk another user mounted: the cloud image's OS disk case.
#[test]
fn a_volume_mounted_outside_the_working_directories_is_never_changed() {
    needs_root!();
    let c = Case::new("outside", Vec::new());
    run(&["mkfs.ext4", "-q", "-F", &c.part]);
    let at = c.scratch.dir("outside");
    run(&["mount", &c.part, &at]);
    c.all_refused(&format!("is mounted at {at}, outside the working directories"));
    run(&["umount", &at]);
}

#[test]
fn active_swap_is_never_changed() {
    needs_root!();
    let c = Case::new("swap", Vec::new());
    run(&["mkswap", "-q", &c.part]);
    if !try_run(&["swapon", &c.part]) {
        eprintln!("skipped: swapon is not allowed here");
        return;
    }
    c.all_refused(&format!("swap is active on {}p1", c.disk.name));
    run(&["swapoff", &c.part]);
}

#[test]
fn a_device_mapper_table_over_a_partition_is_never_changed() {
    needs_root!();
    if !device_mapper() {
        return;
    }
    let c = Case::new("dm", Vec::new());
    let name = format!("csi-proxy-interlock-{}", std::process::id());
    let sectors = std::fs::read_to_string(format!("/sys/class/block/{}p1/size", c.disk.name)).unwrap();
    let table = format!("0 {} linear {} 0", sectors.trim(), c.part);
    assert!(try_run(&["dmsetup", "create", &name, "--table", &table]));
    c.all_refused("p1 is held by dm-");
    c.all_refused(&format!(r#"(device-mapper "{name}""#));
    assert!(try_run(&["dmsetup", "remove", &name]));
}

#[test]
fn an_active_lvm_logical_volume_is_never_changed() {
    needs_root!();
    if !device_mapper() {
        return;
    }
    if Command::new("pvcreate").arg("--version").output().is_err() {
        panic!("pvcreate is missing: scripts/deps.sh test installs lvm2");
    }
    let c = Case::new("lvm", Vec::new());
    let vg = format!("csiproxyinterlock{}", std::process::id());
    // No udev in some test environments: LVM is told not to wait for it.
    let env_ok = try_run(&["pvcreate", "-q", "-y", &c.part])
        && try_run(&["vgcreate", "-q", &vg, &c.part])
        && try_run(&["lvcreate", "-q", "-y", "-Wn", "-Zn", "-L", "8M", "-n", "lv", &vg]);
    if env_ok {
        c.all_refused(&format!(r#"(device-mapper "{vg}-lv""#));
    }
    let _ = try_run(&["vgremove", "-q", "-f", &vg]);
    let _ = try_run(&["pvremove", "-q", "-f", &c.part]);
    assert!(env_ok, "could not make the LVM volume group");
}

#[test]
fn a_protected_disk_is_never_changed_by_number() {
    needs_root!();
    let c = Case::new("protected", Vec::new());
    let c = Case { block: c.block.protecting(vec![ProtectedDisk::Number(c.disk.number())]), ..c };
    c.all_refused(&format!("matches -protected-disk={}", c.disk.number()));
}

/// The same disk with nothing on it: ResizeVolume does grow it (so the refusals above are the
/// interlocks' and not the calls' own).
#[test]
fn an_idle_disk_is_grown() {
    needs_root!();
    let c = Case::new("idle", vec!["serial=NO-SUCH-DISK".parse().unwrap()]);
    let before = c.state();
    c.block.resize_volume(&c.disk.number().to_string(), 0).unwrap();
    assert_ne!(c.state().2, before.2, "the partition did not grow");
}
