//! The whole-disk logic (PartitionDisk, telling the kernel, volume lookup, holding a volume's
//! disk, growing a partition) over the recording fake (`sys::fake`): no root, no loop disk. The
//! same behaviours on real loop disks are crates/stack-tests/tests/linux_partitions.rs.

use super::disklock::Lock;
use super::sys::fake::FakeSys;
use super::*;
use crate::{DiskHost, Error, VolumeHost};

const MIB: u64 = 1 << 20;

#[test]
fn disk_numbers_pack_major_and_minor() {
    assert_eq!(disk_number(7, 0), 7 << 20);
    assert_eq!(disk_number(259, 3), (259 << 20) | 3);
    assert_eq!(split_disk_number(disk_number(511, 0xf_ffff)), (511, 0xf_ffff));
}

/// Lines of `log` that change a disk or what the kernel has (not opens and locks).
fn changes(log: &[String]) -> Vec<&String> {
    log.iter().filter(|l| !l.starts_with("open ") && !l.starts_with("lock ")).collect()
}

/// A 64 MiB disk `vda`, partitioned by the backend; its one volume.
fn partitioned() -> (FakeSys, Block, Disk, Volume) {
    let fake = FakeSys::new();
    let b = fake.block();
    let disk = fake.add_disk("vda", 0, 64 * MIB);
    b.partition(&disk).unwrap();
    let mut volumes = b.volumes_of(&disk).unwrap();
    assert_eq!(volumes.len(), 1, "{volumes:?}");
    (fake, b, disk, volumes.remove(0))
}

#[test]
fn a_blank_disk_gets_one_aligned_gpt_partition_the_kernel_knows() {
    let fake = FakeSys::new();
    let b = fake.block();
    let disk = fake.add_disk("vda", 0, 64 * MIB);
    b.partition_disk(disk.number).unwrap();
    let log = fake.take_log();
    assert!(log.contains(&"open vda x".to_string()), "opened exclusively to write a new table: {log:?}");
    assert!(log.iter().position(|l| l == "lock vda exclusive") < log.iter().position(|l| l.starts_with("write ")));
    let data = fake.data("vda");
    assert_eq!(&data[510..512], &[0x55, 0xaa], "an MBR");
    assert_eq!(data[446 + 4], 0xee, "a protective one");
    assert_eq!(&data[512..520], b"EFI PART", "the primary GPT header");
    assert_eq!(&data[data.len() - 512..data.len() - 504], b"EFI PART", "the backup header at the end");
    // The last usable block is 131038 (backup array and header after it): the partition ends
    // on the last 1 MiB boundary before.
    let end = 63 * MIB;
    assert_eq!(fake.kernel("vda"), [(1, (MIB, end - MIB))].into(), "the kernel was told");
    assert!(log.contains(&format!("add vda 1 {MIB} {}", end - MIB)), "{log:?}");
    let v = b.volumes_of(&disk).unwrap().remove(0);
    assert_eq!((v.index, v.start, v.size, v.name.as_str()), (1, MIB, end - MIB, "vda1"));
    assert_eq!(v.node, fake.dev_dir().join("vda1"));
    assert_eq!(b.volume(&v.id).unwrap(), v);
    assert_eq!(b.get_disk_number_from_volume_id(&v.id).unwrap(), disk.number);
    assert_eq!(b.list_volumes_on_disk(disk.number, 1).unwrap(), vec![v.id.clone()]);
    assert!(matches!(b.list_volumes_on_disk(disk.number, 2), Err(Error::NotFound(_))));
}

#[test]
fn partitioning_twice_writes_nothing() {
    let (fake, b, disk, v) = partitioned();
    fake.take_log();
    let before = fake.data("vda");
    b.partition(&disk).unwrap();
    let log = fake.take_log();
    assert!(changes(&log).is_empty(), "{log:?}");
    assert!(!log.iter().any(|l| l.ends_with(" w") || l.ends_with(" x")), "never opened for writing: {log:?}");
    assert!(fake.data("vda") == before);
    assert_eq!(b.volumes_of(&disk).unwrap(), vec![v]);
}

#[test]
fn a_whole_disk_filesystem_is_never_overwritten() {
    let fake = FakeSys::new();
    let b = fake.block();
    let disk = fake.add_disk("vda", 0, 64 * MIB);
    fake.poke("vda", 0, b"XFSB");
    match b.partition(&disk) {
        Err(Error::FailedPrecondition(msg)) => {
            assert!(msg.contains("no partition table") && msg.contains("xfs"), "{msg}")
        }
        other => panic!("{other:?}"),
    }
    assert!(changes(&fake.take_log()).is_empty());
    assert!(b.volumes_of(&disk).unwrap().is_empty());
}

#[test]
fn a_disk_in_use_or_read_only_gets_no_table() {
    let fake = FakeSys::new();
    let b = fake.block();
    let busy = fake.add_disk("vda", 0, 64 * MIB);
    fake.set_busy("vda", true);
    match b.partition(&busy) {
        Err(Error::FailedPrecondition(msg)) => assert!(msg.contains("in use"), "{msg}"),
        other => panic!("{other:?}"),
    }
    let ro = fake.add_disk("vdb", 16, 64 * MIB);
    fake.set_read_only("vdb");
    match b.partition(&ro) {
        Err(Error::FailedPrecondition(msg)) => assert!(msg.contains("read-only"), "{msg}"),
        other => panic!("{other:?}"),
    }
    let log = fake.take_log();
    assert!(changes(&log).is_empty(), "{log:?}");
    assert!(fake.data("vda").iter().chain(fake.data("vdb").iter()).all(|&b| b == 0));
}

/// What the kernel has and the table does not have goes first (a refresh after the table
/// changed behind the kernel's back), so that what is added does not overlap it.
#[test]
fn a_refresh_removes_before_it_adds_and_writes_nothing() {
    let (fake, b, disk, v) = partitioned();
    // A copy of vda's table on vdb, whose kernel view is of another table: partition 1
    // elsewhere, and a partition 2.
    let stale = fake.add_disk("vdb", 16, 64 * MIB);
    fake.poke("vdb", 0, &fake.data("vda")[..MIB as usize]);
    let tail = fake.data("vda")[(63 * MIB) as usize..].to_vec();
    fake.poke("vdb", 63 * MIB, &tail);
    fake.kernel_add("vdb", 1, 2 * MIB, MIB);
    fake.kernel_add("vdb", 2, 40 * MIB, MIB);
    fake.take_log();
    b.refresh(&stale).unwrap();
    let log = fake.take_log();
    let log = changes(&log);
    assert_eq!(
        log,
        ["flush_buffers vdb", "delete vdb 1", "delete vdb 2", &format!("add vdb 1 {MIB} {}", 62 * MIB)],
        "{log:?}"
    );
    assert_eq!(fake.kernel("vdb"), fake.kernel("vda"));
    assert_eq!(b.volumes_of(&disk).unwrap(), vec![v]);
}

#[test]
fn a_cloned_disks_volume_is_refused_whatever_the_listing_order() {
    for order in [&[0, 1][..], &[1, 0], &[0, 1, 0], &[1, 0, 1]] {
        let (fake, b, a, v) = partitioned();
        let c = fake.add_disk("vdb", 16, 64 * MIB);
        fake.poke("vdb", 0, &fake.data("vda"));
        let pair = [&a, &c];
        for &i in order {
            assert_eq!(b.volumes_of(pair[i]).unwrap().len(), 1);
        }
        for _ in 0..2 {
            for result in [b.volume(&v.id).map(|v| v.disk), b.get_disk_number_from_volume_id(&v.id)] {
                match result {
                    Err(Error::FailedPrecondition(msg)) => assert!(
                        msg.contains(&format!("disk {} ", a.number)) && msg.contains(&format!("disk {} ", c.number)),
                        "{order:?}: {msg}"
                    ),
                    other => panic!("{order:?}: {other:?}"),
                }
            }
        }
        fake.poke("vdb", 0, &vec![0; 64 * MIB as usize]);
        assert_eq!(b.volume(&v.id).unwrap(), v, "{order:?}: the clone wiped, the ID is A's again");
    }
}

#[test]
fn volume_ids_are_checked_and_looked_up() {
    let (_fake, b, _disk, _v) = partitioned();
    for bad in ["", "vda1", r"\\?\Volume{1234}\"] {
        assert!(matches!(b.get_disk_number_from_volume_id(bad), Err(Error::InvalidArgument(_))), "{bad:?}");
    }
    let unknown = r"\\?\Volume{01234567-89ab-4cde-8f01-23456789abcd}\";
    match b.volume(unknown) {
        Err(Error::NotFound(msg)) => assert!(msg.contains(unknown), "{msg}"),
        other => panic!("{other:?}"),
    }
}

/// A volume whose disk is swapped for another between its lookup and its lock is followed to
/// the disk it is on now; one that moves at every lock gives up with the one "moved" error.
#[test]
fn a_volume_that_moves_while_its_disk_is_locked_is_followed_then_given_up() {
    let (fake, b, _a, v) = partitioned();
    fake.add_disk("vdb", 16, 64 * MIB);
    fake.take_log();
    fake.at_next_lock(|f| f.move_disk_contents("vda", "vdb"));
    let held = b.hold_volume(&v.id, Lock::Exclusive).unwrap();
    assert_eq!(held.lock.disk.name, "vdb");
    assert_eq!((held.volume.name.as_str(), held.volume.start, held.volume.size), ("vdb1", v.start, v.size));
    drop(held);
    for (from, to) in [("vdb", "vda"), ("vda", "vdb"), ("vdb", "vda")] {
        fake.at_next_lock(move |f| f.move_disk_contents(from, to));
    }
    match b.hold_volume(&v.id, Lock::Exclusive) {
        Err(Error::Aborted(msg)) => assert!(msg.contains(&v.id) && msg.contains("keeps moving"), "{msg}"),
        Err(e) => panic!("{e:?}"),
        Ok(h) => panic!("held on {}", h.lock.disk.name),
    }
    let log = fake.take_log();
    assert_eq!(log.iter().filter(|l| l.starts_with("lock ")).count(), 2 + crate::error::MOVED_TRIES, "{log:?}");
}

/// A volume call holds its volume with one read of its disk's table, under the disk's lock,
/// once a lookup (the server's, for its own lock) has found the volume: no lookup before the lock.
#[test]
fn a_held_volume_is_read_once_under_its_disks_lock() {
    let (fake, b, disk, v) = partitioned();
    assert_eq!(b.get_disk_number_from_volume_id(&v.id).unwrap(), disk.number);
    fake.take_log();
    let held = b.hold_volume(&v.id, Lock::Exclusive).unwrap();
    assert_eq!(held.volume, v);
    assert_eq!(fake.take_log(), ["open vda l", "lock vda exclusive", "open vda r"]);
    drop(held);
}

/// A shared lock lets other shared holders in and keeps an exclusive one out (the fake's flock
/// is what the logic relies on; the wait itself is bounded by LOCK_WAIT, 20 s, not waited here).
#[test]
fn shared_locks_share_and_exclude_writers() {
    let (fake, b, disk, _v) = partitioned();
    let one = b.lock_disk(&disk, Lock::Shared).unwrap();
    let two = b.lock_disk(&disk, Lock::Shared).unwrap();
    drop((one, two));
    let held = b.lock_disk(&disk, Lock::Exclusive).unwrap();
    fake.take_log();
    drop(held);
    let again = b.lock_disk(&disk, Lock::Exclusive).unwrap();
    assert_eq!(fake.take_log(), ["open vda l", "lock vda exclusive"], "released on drop, taken at once");
    drop(again);
}

#[test]
fn growing_after_the_disk_grew() {
    let (fake, b, disk, v) = partitioned();
    fake.set_size("vda", 128 * MIB);
    b.refresh(&disk).unwrap();
    assert_eq!(b.volumes_of(&disk).unwrap(), vec![v.clone()], "a refresh changes no partition");
    fake.take_log();
    let grown = b.grow_partition(&v, 0).unwrap();
    assert_eq!((grown.id.as_str(), grown.start, grown.size), (v.id.as_str(), MIB, 126 * MIB));
    let log = fake.take_log();
    assert!(log.contains(&format!("resize vda 1 {MIB} {}", 126 * MIB)), "{log:?}");
    assert_eq!(fake.kernel("vda"), [(1, (MIB, 126 * MIB))].into());
    let data = fake.data("vda");
    assert_eq!(&data[data.len() - 512..data.len() - 504], b"EFI PART", "the backup moved to the new end");
    // Again: nothing to do, nothing written.
    assert_eq!(b.grow_partition(&grown, 0).unwrap(), grown);
    assert!(!fake.take_log().iter().any(|l| l.starts_with("write ") || l.starts_with("resize ")));
    // Smaller: refused, naming both sizes.
    match b.grow_partition(&grown, 2 * MIB) {
        Err(Error::FailedPrecondition(msg)) => assert!(msg.contains(&(2 * MIB).to_string()), "{msg}"),
        other => panic!("{other:?}"),
    }
}

/// The volume group's probe and mkfs over the fake's partition nodes: IsVolumeFormatted and
/// FormatVolume's refusals, the tool's argv, and the check of what it made (the same behaviours
/// on loop disks: linux_volumes.rs).
mod format {
    use super::*;
    use crate::types::FsType;

    /// A partitioned disk whose backend formats xfs, and a fake mkfs.xfs that writes xfs's
    /// signature on the device it is given.
    fn xfs_volume() -> (FakeSys, Block, Volume) {
        let (fake, _b, _disk, v) = partitioned();
        fake.on_tool(|f, argv| match argv {
            [tool, q, node] if tool == "mkfs.xfs" && q == "-q" && node == "vda1" => {
                f.poke_partition("vda", 1, 0, b"XFSB");
                (0, String::new())
            }
            other => (1, format!("unexpected {other:?}")),
        });
        (fake.clone(), fake.block_making(FsType::Xfs), v)
    }

    fn runs(log: &[String]) -> Vec<&String> {
        log.iter().filter(|l| l.starts_with("run ")).collect()
    }

    #[test]
    fn formatted_is_any_signature_ours_or_libblkids() {
        let (fake, b, v) = xfs_volume();
        assert!(!b.is_volume_formatted(&v.id).unwrap(), "blank");
        fake.set_blkid("vda1", "zfs_member");
        assert!(b.is_volume_formatted(&v.id).unwrap(), "what only libblkid knows counts");
        let (fake, b, v) = xfs_volume();
        fake.poke_partition("vda", 1, 1024 + 0x38, &[0x53, 0xef]);
        assert!(b.is_volume_formatted(&v.id).unwrap(), "ext's magic");
        assert!(runs(&fake.take_log()).is_empty());
    }

    #[test]
    fn a_blank_volume_is_formatted_once_and_never_over_data() {
        let (fake, b, v) = xfs_volume();
        fake.take_log();
        b.format_volume(&v.id).unwrap();
        let log = fake.take_log();
        assert_eq!(runs(&log), ["run mkfs.xfs -q vda1"], "{log:?}");
        assert!(log.iter().position(|l| l == "lock vda exclusive") < log.iter().position(|l| l.starts_with("run ")));
        assert!(b.is_volume_formatted(&v.id).unwrap());
        match b.format_volume(&v.id) {
            Err(Error::FailedPrecondition(msg)) => assert!(msg.contains(&v.id) && msg.contains("xfs"), "{msg}"),
            other => panic!("{other:?}"),
        }
        // Nor over what only libblkid sees.
        let (fake, b, v) = xfs_volume();
        fake.set_blkid("vda1", "zfs_member");
        assert!(matches!(b.format_volume(&v.id), Err(Error::FailedPrecondition(_))));
        assert!(runs(&fake.take_log()).is_empty());
    }

    #[test]
    fn a_volume_in_use_elsewhere_is_not_formatted() {
        let (fake, b, v) = xfs_volume();
        fake.set_busy("vda1", true);
        match b.format_volume(&v.id) {
            Err(Error::FailedPrecondition(msg)) => assert!(msg.contains("in use elsewhere"), "{msg}"),
            other => panic!("{other:?}"),
        }
        assert!(runs(&fake.take_log()).is_empty());
    }

    #[test]
    fn a_tool_that_fails_or_makes_nothing_is_an_error_naming_the_volume() {
        let (fake, b, v) = xfs_volume();
        fake.on_tool(|_, _| (1, "mkfs.xfs: cannot open: Device or resource busy".into()));
        match b.format_volume(&v.id) {
            Err(Error::Internal(msg)) => {
                assert!(msg.contains(&v.id) && msg.contains("exit status 1") && msg.contains("resource busy"), "{msg}")
            }
            other => panic!("{other:?}"),
        }
        fake.on_tool(|_, _| (0, String::new()));
        match b.format_volume(&v.id) {
            Err(Error::Internal(msg)) => {
                assert!(msg.contains("succeeded but") && msg.contains("no filesystem"), "{msg}")
            }
            other => panic!("{other:?}"),
        }
    }
}

/// The mount table's calls over the fake (mountinfo, statx mount IDs, fsmount, umount, syncfs,
/// statvfs): MountVolume, UnmountVolume, GetVolumeStats, WriteVolumeCache and the target-path
/// lookups, in real directories below the fake's containment root (the same behaviours on loop
/// disks: linux_volumes.rs).
mod mounts {
    use super::*;

    /// An xfs volume (its signature poked in) and a new empty directory `name` below the root.
    fn xfs_volume_and_dir(name: &str) -> (FakeSys, Block, Volume, String) {
        let (fake, b, _disk, v) = partitioned();
        fake.poke_partition("vda", 1, 0, b"XFSB");
        let dir = fake.kubelet().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        (fake, b, v, dir.to_str().unwrap().to_string())
    }

    fn of(log: &[String], prefix: &str) -> Vec<String> {
        log.iter().filter(|l| l.starts_with(prefix)).cloned().collect()
    }

    #[test]
    fn mount_lookups_stats_flush_unmount() {
        let (fake, b, v, target) = xfs_volume_and_dir("stage");
        fake.take_log();
        b.mount_volume(&v.id, &target).unwrap();
        let log = fake.take_log();
        assert_eq!(of(&log, "mount "), ["mount xfs vda1 kubelet/stage"], "{log:?}");
        assert_eq!(fake.mounted(), [("vda1".into(), "xfs".into(), "kubelet/stage".into())]);
        b.mount_volume(&v.id, &target).unwrap();
        assert!(of(&fake.take_log(), "mount ").is_empty(), "already mounted there: nothing to do");

        assert_eq!(b.get_volume_id_from_target_path(&target).unwrap(), v.id);
        std::fs::create_dir_all(format!("{target}/a/b")).unwrap();
        assert_eq!(b.get_closest_volume_id_from_target_path(&format!("{target}/a/b")).unwrap(), v.id);
        match b.get_volume_id_from_target_path(&format!("{target}/a")) {
            Err(Error::NotFound(msg)) => assert!(msg.contains(crate::error::DOES_NOT_EXIST), "{msg}"),
            other => panic!("{other:?}"),
        }
        let stats = b.get_volume_stats(&v.id).unwrap();
        assert_eq!((stats.total_bytes, stats.used_bytes), (1000 * 4096, 750 * 4096));
        b.write_volume_cache(&v.id).unwrap();
        assert_eq!(of(&fake.take_log(), "syncfs "), ["syncfs kubelet/stage"]);

        std::fs::remove_dir_all(format!("{target}/a")).unwrap();
        b.unmount_volume(&v.id, &target).unwrap();
        let log = fake.take_log();
        let steps: Vec<_> = log.iter().filter(|l| l.starts_with("syncfs ") || l.starts_with("umount ")).collect();
        assert_eq!(steps, ["syncfs kubelet/stage", "umount kubelet/stage"], "flushed, then unmounted");
        assert!(fake.mounted().is_empty());
        b.unmount_volume(&v.id, &target).unwrap();
        assert!(of(&fake.take_log(), "umount ").is_empty(), "nothing mounted: success, nothing done");
        match b.get_volume_stats(&v.id) {
            Err(Error::FailedPrecondition(msg)) => assert!(msg.contains("not mounted"), "{msg}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refusals_mount_nothing() {
        let (fake, b, v, target) = xfs_volume_and_dir("one");
        b.mount_volume(&v.id, &target).unwrap();
        let other = fake.kubelet().join("two");
        std::fs::create_dir_all(other.join("file-inside")).unwrap();
        let other = other.to_str().unwrap();
        match b.mount_volume(&v.id, other) {
            Err(Error::FailedPrecondition(msg)) => assert!(msg.contains("already mounted at"), "{msg}"),
            e => panic!("{e:?}"),
        }
        b.unmount_volume(&v.id, &target).unwrap();
        match b.mount_volume(&v.id, other) {
            Err(Error::FailedPrecondition(msg)) => assert!(msg.contains("not empty"), "{msg}"),
            e => panic!("{e:?}"),
        }
        match b.mount_volume(&v.id, fake.kubelet().to_str().unwrap()) {
            Err(Error::PermissionDenied(msg)) => assert!(msg.contains("working directories"), "{msg}"),
            e => panic!("{e:?}"),
        }
        fake.poke_partition("vda", 1, 0, b"\0\0\0\0");
        match b.mount_volume(&v.id, &target) {
            Err(Error::FailedPrecondition(msg)) => assert!(msg.contains("format it first"), "{msg}"),
            e => panic!("{e:?}"),
        }
        assert!(fake.mounted().is_empty());
        assert_eq!(of(&fake.take_log(), "mount ").len(), 1, "only the first mount reached the kernel");
    }

    /// MountVolume's dry run answers the real call's refusals (mounted elsewhere, a folder that
    /// is not empty, a working directory itself, no filesystem) and its plan, and mounts nothing.
    #[test]
    fn dry_runs_refuse_as_the_real_call_and_mount_nothing() {
        let (fake, b, v, target) = xfs_volume_and_dir("one");
        let plan = b.plan_mount_volume(&v.id, &target).unwrap();
        assert!(plan.starts_with("would mount") && plan.contains("as xfs"), "{plan}");
        assert!(fake.mounted().is_empty(), "planned, not mounted");
        b.mount_volume(&v.id, &target).unwrap();
        assert!(b.plan_mount_volume(&v.id, &target).unwrap().contains("already mounted"));
        let other = fake.kubelet().join("two");
        std::fs::create_dir_all(other.join("file-inside")).unwrap();
        let other = other.to_str().unwrap();
        let refusal = |target: &str| match (b.plan_mount_volume(&v.id, target), b.mount_volume(&v.id, target)) {
            (Err(plan), Err(real)) => {
                assert_eq!(plan.to_string(), real.to_string());
                plan.to_string()
            }
            other => panic!("{other:?}"),
        };
        assert!(refusal(other).contains("already mounted at"));
        b.unmount_volume(&v.id, &target).unwrap();
        assert!(refusal(other).contains("not empty"));
        assert!(refusal(fake.kubelet().to_str().unwrap()).contains("working directories"));
        fake.poke_partition("vda", 1, 0, b"\0\0\0\0");
        assert!(refusal(&target).contains("format it first"));
        assert!(fake.mounted().is_empty());
    }

    /// Another filesystem mounted at the target is left alone by UnmountVolume, and a busy one
    /// is a FailedPrecondition.
    #[test]
    fn unmount_touches_only_its_own_volume() {
        let (fake, b, v, target) = xfs_volume_and_dir("stage");
        let disk = fake.add_disk("vdb", 16, 64 * MIB);
        b.partition(&disk).unwrap();
        fake.poke_partition("vdb", 1, 0, b"XFSB");
        let w = b.volumes_of(&disk).unwrap().remove(0);
        b.mount_volume(&w.id, &target).unwrap();
        match b.unmount_volume(&v.id, &target) {
            Err(Error::FailedPrecondition(msg)) => assert!(msg.contains("left alone"), "{msg}"),
            e => panic!("{e:?}"),
        }
        fake.set_busy("kubelet/stage", true);
        match b.unmount_volume(&w.id, &target) {
            Err(Error::FailedPrecondition(msg)) => assert!(msg.contains("busy"), "{msg}"),
            e => panic!("{e:?}"),
        }
        fake.set_busy("kubelet/stage", false);
        b.unmount_volume(&w.id, &target).unwrap();
        assert!(fake.mounted().is_empty());
    }
}

/// ResizeVolume's rules over the fake (resize.rs): what size 0 means, the 100 MiB tolerance, a
/// disk number as the volume, and the refusals that leave the disk as it was. The filesystem
/// growth on real tools is crates/stack-tests/tests/linux_volumes.rs.
mod resize {
    use super::*;

    /// An 8 MiB disk `vda` partitioned by the backend (its one partition: 1 MiB..7 MiB), then
    /// grown to `size` bytes and refreshed, as a Rescan leaves it.
    fn grown_disk(size: u64) -> (FakeSys, Block, Disk, Volume) {
        let fake = FakeSys::new();
        let b = fake.block();
        let disk = fake.add_disk("vda", 0, 8 * MIB);
        b.partition(&disk).unwrap();
        let v = b.volumes_of(&disk).unwrap().remove(0);
        assert_eq!((v.start, v.size), (MIB, 6 * MIB));
        fake.set_size("vda", size);
        b.refresh(&disk).unwrap();
        fake.take_log();
        (fake, b, disk, v)
    }

    /// Whether the log shows the table written or the kernel's partition changed.
    fn changed(log: &[String]) -> bool {
        log.iter().any(|l| l.starts_with("write ") || l.starts_with("resize "))
    }

    #[test]
    fn size_zero_takes_all_the_room_after_the_partition() {
        // 32 MiB: the last usable block is 65502, so the partition ends on the 31 MiB boundary.
        let (fake, b, _disk, v) = grown_disk(32 * MIB);
        b.resize_volume(&v.id, 0).unwrap();
        let log = fake.take_log();
        assert!(log.contains(&format!("resize vda 1 {MIB} {}", 30 * MIB)), "{log:?}");
        assert_eq!(fake.kernel("vda"), [(1, (MIB, 30 * MIB))].into());
        assert_eq!(b.volume(&v.id).unwrap().size, 30 * MIB);
        // Nothing left to take: nothing written.
        b.resize_volume(&v.id, 0).unwrap();
        let log = fake.take_log();
        assert!(!changed(&log), "{log:?}");
    }

    #[test]
    fn sizes_within_100_mib_of_the_partitions_change_nothing() {
        // Room for a partition of up to 110 MiB; it is 6 MiB.
        let (fake, b, _disk, v) = grown_disk(112 * MIB);
        b.resize_volume(&v.id, 106 * MIB).unwrap();
        let log = fake.take_log();
        assert!(!changed(&log), "100 MiB more is no change: {log:?}");
        assert_eq!(b.volume(&v.id).unwrap().size, 6 * MIB);
        b.resize_volume(&v.id, 107 * MIB).unwrap();
        let log = fake.take_log();
        assert!(log.contains(&format!("resize vda 1 {MIB} {}", 107 * MIB)), "grown to the size asked: {log:?}");
        assert_eq!(b.volume(&v.id).unwrap().size, 107 * MIB);
        // Smaller by 100 MiB: no change, and no refusal.
        b.resize_volume(&v.id, 7 * MIB).unwrap();
        assert!(!changed(&fake.take_log()));
        // Smaller by more: refused, naming the volume and both sizes.
        match b.resize_volume(&v.id, 6 * MIB) {
            Err(Error::FailedPrecondition(msg)) => {
                assert!(msg.contains(&v.id) && msg.contains("shrinking is not supported"), "{msg}");
                assert!(msg.contains(&(6 * MIB).to_string()) && msg.contains(&(107 * MIB).to_string()), "{msg}");
            }
            other => panic!("{other:?}"),
        }
        assert!(!changed(&fake.take_log()));
        assert_eq!(fake.kernel("vda"), [(1, (MIB, 107 * MIB))].into());
    }

    #[test]
    fn a_disk_number_stands_for_its_data_volume() {
        let (fake, b, disk, v) = grown_disk(32 * MIB);
        b.resize_volume(&disk.number.to_string(), 0).unwrap();
        assert_eq!(fake.kernel("vda"), [(1, (MIB, 30 * MIB))].into());
        assert_eq!(b.volume(&v.id).unwrap().size, 30 * MIB);
        // A number no disk has is not found, and named.
        let missing = disk_number(252, 16).to_string();
        match b.resize_volume(&missing, 0) {
            Err(Error::NotFound(msg)) => assert!(msg.contains(&missing), "{msg}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refusals_leave_the_disk_as_it_was() {
        // More than the disk holds: what is there is said (up to the last usable block, 65502).
        let (fake, b, _disk, v) = grown_disk(32 * MIB);
        match b.resize_volume(&v.id, 200 * MIB) {
            Err(Error::FailedPrecondition(msg)) => {
                let most = (65502 - 2048 + 1) * 512;
                assert!(msg.contains(&v.id) && msg.contains(&format!("at most {most} bytes")), "{msg}")
            }
            other => panic!("{other:?}"),
        }
        assert!(!changed(&fake.take_log()));
        // A filesystem that could not follow (xfs grows only mounted): refused before the
        // partition changes.
        let (fake, b, _disk, v) = grown_disk(200 * MIB);
        fake.poke_partition("vda", 1, 0, b"XFSB");
        match b.resize_volume(&v.id, 150 * MIB) {
            Err(Error::FailedPrecondition(msg)) => {
                assert!(msg.contains("only while mounted") && msg.contains("nothing was changed"), "{msg}")
            }
            other => panic!("{other:?}"),
        }
        let log = fake.take_log();
        assert!(!changed(&log), "{log:?}");
        assert_eq!(fake.kernel("vda"), [(1, (MIB, 6 * MIB))].into());
        // A read-only disk.
        let (fake, b, _disk, v) = grown_disk(32 * MIB);
        fake.set_read_only("vda");
        match b.resize_volume(&v.id, 0) {
            Err(Error::FailedPrecondition(msg)) => assert!(msg.contains("read-only"), "{msg}"),
            other => panic!("{other:?}"),
        }
        assert!(!changed(&fake.take_log()));
        assert_eq!(fake.kernel("vda"), [(1, (MIB, 6 * MIB))].into());
    }
}

/// The interlocks (`interlock.rs`): on a disk holding the running system, held by another
/// device, with a volume mounted outside the working directories, or named by
/// `-protected-disk`, PartitionDisk, FormatVolume, ResizeVolume and SetDiskState(offline) are
/// refused before anything is written, naming the call, the disk and the reason.
mod interlocks {
    use super::*;
    use crate::interlock::ProtectedDisk;

    type Call<'a> = (&'static str, Box<dyn Fn() -> crate::Result<()> + 'a>);

    /// Every guarded call on `b`'s disk `disk` and its volume `v` (one partition) is refused
    /// with a message containing `why`, and nothing is written.
    fn all_refused(fake: &FakeSys, b: &Block, disk: &Disk, v: &Volume, why: &str) {
        fake.take_log();
        let before = fake.data(&disk.name);
        let calls: [Call; 4] = [
            ("PartitionDisk", Box::new(|| b.partition_disk(disk.number))),
            ("FormatVolume", Box::new(|| b.format_volume(&v.id))),
            ("ResizeVolume", Box::new(|| b.resize_volume(&disk.number.to_string(), 0))),
            ("SetDiskState(offline)", Box::new(|| b.set_disk_state(disk.number, false))),
        ];
        for (name, call) in calls {
            match call() {
                Err(Error::FailedPrecondition(msg)) => assert!(
                    msg.starts_with(&format!("refusing {name} on "))
                        && msg.contains(why)
                        && msg.contains(&format!("disk {}", disk.number))
                        && msg.ends_with("nothing was changed"),
                    "{name}: {msg}"
                ),
                other => panic!("{name}: {other:?}"),
            }
        }
        let log = fake.take_log();
        assert!(changes(&log).is_empty(), "{log:?}");
        assert!(fake.data(&disk.name) == before, "the disk was written");
        assert_eq!(fake.read_state(&disk.name), "running", "the disk was taken offline");
    }

    /// A SCSI disk `sda` (online) partitioned by the backend, and its volume.
    fn scsi_disk(fake: &FakeSys, b: &Block) -> (Disk, Volume) {
        let disk = fake.add_disk("sda", 0, 64 * MIB);
        fake.set_scsi_state("sda", "running");
        b.partition(&disk).unwrap();
        let v = b.volumes_of(&disk).unwrap().remove(0);
        (disk, v)
    }

    #[test]
    fn a_disk_holding_the_running_system_is_never_changed() {
        for at in ["/", "/boot", "/boot/efi", "/usr", "/var"] {
            let fake = FakeSys::new();
            let b = fake.block();
            let (disk, v) = scsi_disk(&fake, &b);
            fake.add_mount("sda1", at);
            all_refused(&fake, &b, &disk, &v, &format!("it holds the running system (sda1 is mounted at {at})"));
        }
    }

    #[test]
    fn active_swap_on_a_disk_refuses_it() {
        let fake = FakeSys::new();
        let b = fake.block();
        let (disk, v) = scsi_disk(&fake, &b);
        fake.add_swap("sda1");
        all_refused(&fake, &b, &disk, &v, "swap is active on sda1");
    }

    #[test]
    fn a_disk_another_device_is_built_on_is_never_changed() {
        for (on, holder, dm, shown) in [
            ("sda1", "dm-0", Some("vg0-root"), r#"sda1 is held by dm-0 (device-mapper "vg0-root""#),
            ("sda", "dm-3", Some("mpatha"), r#"sda is held by dm-3 (device-mapper "mpatha""#),
            ("sda1", "md127", None, "sda1 is held by md127 (md RAID)"),
        ] {
            let fake = FakeSys::new();
            let b = fake.block();
            let (disk, v) = scsi_disk(&fake, &b);
            fake.add_holder("sda", on, holder, dm);
            all_refused(&fake, &b, &disk, &v, shown);
        }
    }

    #[test]
    fn a_volume_mounted_outside_the_working_directories_is_never_changed() {
        let fake = FakeSys::new();
        let b = fake.block();
        let (disk, v) = scsi_disk(&fake, &b);
        fake.add_mount("sda1", "/mnt/data");
        all_refused(&fake, &b, &disk, &v, "sda1 is mounted at /mnt/data, outside the working directories");
    }

    /// Mounted at a staging path inside the kubelet's directory is what a driver's own stage
    /// leaves: every call goes on (here FormatVolume finds the filesystem and refuses for that
    /// reason instead, and ResizeVolume finds nothing to grow).
    #[test]
    fn a_volume_mounted_inside_the_working_directories_passes_the_interlocks() {
        let fake = FakeSys::new();
        let b = fake.block();
        let (disk, v) = scsi_disk(&fake, &b);
        let staging = fake.kubelet().join("plugins/x/globalmount");
        fake.add_mount("sda1", staging.to_str().unwrap());
        b.interlock(&disk, Some(&v), crate::interlock::Action::FormatVolume).unwrap();
        b.interlock(&disk, None, crate::interlock::Action::PartitionDisk).unwrap();
        b.partition_disk(disk.number).unwrap();
    }

    #[test]
    fn a_protected_disk_is_never_changed() {
        for (flag, shown) in [("0", "matches -protected-disk=0"), ("serial=OS*", "matches -protected-disk=serial=OS*")]
        {
            let fake = FakeSys::new();
            let b = fake.block();
            let (disk, v) = scsi_disk(&fake, &b);
            fake.set_serial("sda", "OS-DISK-1");
            let protected: ProtectedDisk =
                if flag == "0" { ProtectedDisk::Number(disk.number) } else { flag.parse().unwrap() };
            let b = b.protecting(vec![protected]);
            all_refused(&fake, &b, &disk, &v, if flag == "0" { "matches -protected-disk=" } else { shown });
        }
    }

    #[test]
    fn an_unprotected_idle_disk_can_be_taken_offline() {
        let fake = FakeSys::new();
        let b = fake.block().protecting(vec!["serial=OS*".parse().unwrap()]);
        let (disk, _) = scsi_disk(&fake, &b);
        b.set_disk_state(disk.number, false).unwrap();
        assert_eq!(fake.read_state("sda"), "offline");
    }
}
