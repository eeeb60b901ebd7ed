#![cfg(target_os = "linux")]
//! The volume group's filesystem calls on real loop disks (root only; CI runs as root): probe,
//! format, mount, stats, resize, target-path lookups and flushes, for every `-linux-fs-type`,
//! with mountinfo checked after every refusal. Disks are partitioned by the backend itself.
//!
//! Mount targets live below a root named `kube let`, so the kernel's mountinfo escapes (`\040`)
//! are on the path of every lookup. Mounts and loop devices are removed even when a test fails
//! (the fixture's Drop).

use csi_proxy_host::linux::block::Block;
use csi_proxy_host::paths::Roots;
use csi_proxy_host::types::FsType;
use csi_proxy_host::{DiskHost, Error, VolumeHost};
use csi_proxy_stack_tests::disks::{self, run, DiskFlock, LoopDisk, UdevSim};
use csi_proxy_stack_tests::mounts::{mounted_at, mounts_below};
use csi_proxy_stack_tests::{needs_root, Scratch};
use std::fs;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

const MIB: u64 = 1 << 20;

/// The test that mounts in another mount namespace copies every mount that exists when it
/// starts, which would keep the other tests' devices busy after they unmount them here: it runs
/// alone (`exclusive`), every other test holds `shared` while it has mounts.
static NAMESPACES: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    NAMESPACES.read().unwrap_or_else(|p| p.into_inner())
}

fn exclusive() -> std::sync::RwLockWriteGuard<'static, ()> {
    NAMESPACES.write().unwrap_or_else(|p| p.into_inner())
}

/// A scratch tree: `kube let` is the only root; `outside` is not in it. Whatever is mounted in
/// it is unmounted when it goes (the [`Scratch`]).
struct Env {
    base: Scratch,
    block: Block,
}

impl Env {
    fn new(tag: &str, fs_type: FsType) -> Env {
        let base = Scratch::new(&format!("csi-proxy-vol-{tag}"));
        base.dir("kube let/pods");
        base.dir("outside/m");
        let roots = Roots::new(vec![s(&base.join("kube let"))]);
        Env { base, block: Block::new(roots, fs_type) }
    }

    /// A path below the root.
    fn path(&self, rel: &str) -> String {
        s(&self.base.join("kube let").join(rel))
    }

    /// A new (empty) directory below the root.
    fn dir(&self, rel: &str) -> String {
        let p = self.path(rel);
        fs::create_dir_all(&p).unwrap();
        p
    }
}

/// One partitioned loop disk in an [`Env`]. Fields drop in order: mounts go before the disk.
struct Case {
    env: Env,
    /// Re-reading the disk's table as udev would, for the stress test.
    udev: Option<UdevSim>,
    disk: LoopDisk,
    id: String,
}

impl Case {
    fn new(tag: &str, fs_type: FsType, size: u64) -> Case {
        Self::build(tag, fs_type, size, false)
    }

    /// A case whose disk a [`UdevSim`] works on from before it is partitioned.
    fn with_udev(tag: &str, fs_type: FsType, size: u64) -> Case {
        Self::build(tag, fs_type, size, true)
    }

    fn build(tag: &str, fs_type: FsType, size: u64, udev: bool) -> Case {
        let env = Env::new(tag, fs_type);
        let disk = LoopDisk::new(tag, size);
        let udev = udev.then(|| UdevSim::start(&disk.dev));
        env.block.partition_disk(disk.number()).unwrap();
        let ids = env.block.list_volumes_on_disk(disk.number(), 0).unwrap();
        assert_eq!(ids.len(), 1, "{ids:?}");
        Case { id: ids[0].clone(), env, udev, disk }
    }

    fn node(&self) -> PathBuf {
        self.env.block.volume(&self.id).unwrap().node
    }

    /// The volume's partition node, for the test's own tools, with the disk locked as
    /// partitioning tools lock it (udev stays away until the lock is dropped). The backend
    /// waits for that lock: drop it before the next call.
    fn locked_node(&self) -> (DiskFlock, PathBuf) {
        let index = self.env.block.volume(&self.id).unwrap().index;
        self.disk.lock_with_partition(index)
    }

    /// The kind of filesystem blkid sees on the volume (under the disk's lock).
    fn blkid_type(&self) -> String {
        let (_lock, node) = self.locked_node();
        blkid_type(&node)
    }

    /// Runs a test tool on the volume's node (`{}` in `argv`), under the disk's lock.
    fn run_on_node(&self, argv: &[&str]) -> String {
        let (_lock, node) = self.locked_node();
        let node = s(&node);
        let argv: Vec<&str> = argv.iter().map(|a| if *a == "{}" { node.as_str() } else { a }).collect();
        run(&argv)
    }

    fn size(&self) -> u64 {
        self.env.block.volume(&self.id).unwrap().size
    }

    /// The disk's backing file grows; the loop device is told (LOOP_SET_CAPACITY, test tool).
    fn grow_disk(&self, size: u64) {
        self.disk.grow_file(size);
        run(&["losetup", "-c", &s(&self.disk.dev)]);
    }
}

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

fn blkid_type(node: &Path) -> String {
    run(&["blkid", "-p", "-o", "value", "-s", "TYPE", &s(node)]).trim().to_string()
}

fn has_cap_sys_resource() -> bool {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:")).unwrap().trim();
    u64::from_str_radix(hex, 16).unwrap() & (1 << 24) != 0
}

fn tools_present(fs_type: FsType) {
    let needed: &[&str] = match fs_type {
        FsType::Ext4 => &["mkfs.ext4", "resize2fs"],
        FsType::Xfs => &["mkfs.xfs", "xfs_growfs"],
        FsType::Btrfs => &["mkfs.btrfs", "btrfs"],
        FsType::Ntfs => &["mkntfs", "ntfs-3g", "ntfsresize"],
    };
    for tool in needed {
        let found = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"].iter().any(|d| Path::new(d).join(tool).exists());
        assert!(found, "{tool} is missing: apt-get install xfsprogs btrfs-progs ntfs-3g (as .ci/run does)");
    }
}

fn precondition(e: Error, needles: &[&str]) {
    assert!(matches!(e, Error::FailedPrecondition(_)), "{e:?}");
    for n in needles {
        assert!(e.to_string().contains(n), "{n:?} not in: {e}");
    }
}

/// Format, mount, use, look up, grow, flush, unmount and remount one volume of `fs_type`.
fn lifecycle(fs_type: FsType) {
    needs_root!();
    let _namespaces = shared();
    tools_present(fs_type);
    lifecycle_of(&Case::new(&format!("life-{fs_type}"), fs_type, 512 * MIB), fs_type);
}

/// [`lifecycle`] on a case made by the caller.
fn lifecycle_of(c: &Case, fs_type: FsType) {
    let (b, id) = (&c.env.block, c.id.as_str());

    assert!(!b.is_volume_formatted(id).unwrap());
    b.format_volume(id).unwrap();
    assert!(b.is_volume_formatted(id).unwrap());
    assert_eq!(c.blkid_type(), fs_type.name());

    let target = c.env.dir("pods/p1/volumes/vol mnt");
    b.mount_volume(id, &target).unwrap();
    let kernel_type = match fs_type {
        FsType::Ntfs => vec!["ntfs3", "fuseblk"],
        other => vec![other.name()],
    };
    let at = mounted_at(&target);
    assert!(at.len() == 1 && kernel_type.contains(&at[0].as_str()), "{at:?}");
    b.mount_volume(id, &target).unwrap();
    assert_eq!(mounted_at(&target).len(), 1, "mounting again changes nothing");

    fs::write(Path::new(&target).join("file"), b"kept").unwrap();
    fs::create_dir_all(Path::new(&target).join("sub/deeper")).unwrap();
    b.write_volume_cache(id).unwrap();
    let before = b.get_volume_stats(id).unwrap();
    assert!(before.total_bytes > 300 * MIB && before.total_bytes <= 512 * MIB, "{before:?}");
    assert!(before.used_bytes > 0 && before.used_bytes < before.total_bytes, "{before:?}");

    assert_eq!(b.get_volume_id_from_target_path(&target).unwrap(), id);
    assert_eq!(b.get_closest_volume_id_from_target_path(&format!("{target}/sub/deeper")).unwrap(), id);
    assert_eq!(b.get_closest_volume_id_from_target_path(&format!("{target}/file")).unwrap(), id);
    let e = b.get_volume_id_from_target_path(&format!("{target}/sub")).unwrap_err();
    assert!(
        matches!(e, Error::NotFound(_))
            && e.to_string().contains("not a mounted folder")
            && e.to_string().contains("because it does not exist"),
        "{e:?}"
    );

    // Never formatted over, mounted or not (the data is checked after the remount below).
    precondition(b.format_volume(id).unwrap_err(), &[id, fs_type.name()]);

    // Grow the disk, then the volume: online where the filesystem allows it.
    c.grow_disk(768 * MIB);
    let size = c.size();
    match fs_type {
        FsType::Xfs | FsType::Btrfs => b.resize_volume(id, 0).unwrap(),
        FsType::Ext4 if has_cap_sys_resource() => b.resize_volume(id, 0).unwrap(),
        FsType::Ext4 | FsType::Ntfs => {
            // An explicit growth the mounted filesystem can't follow is refused up front.
            let why = if fs_type == FsType::Ext4 { "CAP_SYS_RESOURCE" } else { "unmounted" };
            precondition(b.resize_volume(id, size + 200 * MIB).unwrap_err(), &[id, why, "nothing was changed"]);
            assert_eq!(c.size(), size, "the partition is as it was");
            b.unmount_volume(id, &target).unwrap();
            b.resize_volume(id, 0).unwrap();
            b.mount_volume(id, &target).unwrap();
        }
    }
    let after = b.get_volume_stats(id).unwrap();
    assert!(c.size() > size + 200 * MIB, "partition {size} -> {}", c.size());
    assert!(after.total_bytes > before.total_bytes + 200 * MIB, "{before:?} -> {after:?}");

    // At the target size: success and nothing changes, mounted, whatever the filesystem.
    let size = c.size();
    b.resize_volume(id, 0).unwrap();
    b.resize_volume(id, size).unwrap();
    b.resize_volume(id, size + 50 * MIB).unwrap(); // within upstream's 100 MiB: a no-op
    b.resize_volume(id, size - 50 * MIB).unwrap();
    assert_eq!(c.size(), size);
    precondition(b.resize_volume(id, size - 200 * MIB).unwrap_err(), &[id, "shrinking"]);
    assert_eq!(b.get_volume_stats(id).unwrap().total_bytes, after.total_bytes);

    b.unmount_volume(id, &target).unwrap();
    assert_eq!(mounted_at(&target), Vec::<String>::new());
    b.unmount_volume(id, &target).unwrap();
    precondition(b.get_volume_stats(id).unwrap_err(), &[id, "not mounted"]);
    b.write_volume_cache(id).unwrap();
    let e = b.get_volume_id_from_target_path(&target).unwrap_err();
    assert!(matches!(e, Error::NotFound(_)) && e.to_string().contains("not a mounted folder"), "{e:?}");
    // Unmounted, resize at the target size is a success too.
    b.resize_volume(id, 0).unwrap();

    b.mount_volume(id, &target).unwrap();
    assert_eq!(fs::read(Path::new(&target).join("file")).unwrap(), b"kept");
    assert_eq!(b.get_volume_stats(id).unwrap().total_bytes, after.total_bytes);
    b.unmount_volume(id, &target).unwrap();
    assert_eq!(mounted_at(&target), Vec::<String>::new());
}

/// The lifecycle while something re-reads the disk's partition table as udev does (see
/// [`UdevSim`]): after every close-after-write of the disk, again and again for a few hundred
/// milliseconds whenever the disk is not locked. Every re-read makes the partitions' sysfs
/// entries and nodes vanish for a moment; calls that resolved a volume without the disk's lock
/// failed on that at random ("has no partition device", a sysfs file gone). Needs a kernel with
/// partition parsers (the storage VM's): elsewhere a re-read only drops the partitions.
#[test]
fn lifecycle_while_udev_rereads_tables() {
    needs_root!();
    let _namespaces = shared();
    for (round, fs_type) in [FsType::Ext4, FsType::Ntfs, FsType::Ext4, FsType::Xfs].into_iter().enumerate() {
        tools_present(fs_type);
        let mut c = Case::with_udev(&format!("udev-{round}-{fs_type}"), fs_type, 512 * MIB);
        if !disks::kernel_reads_tables(&c.disk) {
            c.env.block.partition_disk(c.disk.number()).unwrap();
            eprintln!("skipped: this kernel has no partition-table parsers (run it in the storage VM)");
            return;
        }
        lifecycle_of(&c, fs_type);
        // Another table write and its re-reads, then IsVolumeFormatted at once, again and again.
        let (b, id) = (&c.env.block, c.id.as_str());
        let target = c.env.dir("pods/udev");
        for i in 0..5 {
            b.partition_disk(c.disk.number()).unwrap();
            c.grow_disk(c.disk.size() + 64 * MIB);
            // xfs grows only while mounted.
            if fs_type == FsType::Xfs {
                b.mount_volume(id, &target).unwrap();
            }
            b.resize_volume(id, 0).unwrap();
            assert!(b.is_volume_formatted(id).unwrap());
            b.mount_volume(id, &target).unwrap();
            assert!(b.get_volume_stats(id).unwrap().total_bytes > (700 + 60 * i) * MIB, "round {i}");
            b.unmount_volume(id, &target).unwrap();
        }
        let tally = c.udev.take().unwrap().finish();
        eprintln!("{fs_type}: {tally:?}");
        assert!(tally.rereads > 0 && tally.locked > 0, "the simulator re-read tables and was kept out: {tally:?}");
    }
}

#[test]
fn ext4_lifecycle() {
    lifecycle(FsType::Ext4);
}

#[test]
fn xfs_lifecycle() {
    lifecycle(FsType::Xfs);
}

#[test]
fn btrfs_lifecycle() {
    lifecycle(FsType::Btrfs);
}

#[test]
fn ntfs_lifecycle() {
    lifecycle(FsType::Ntfs);
}

#[test]
fn refusals_change_nothing() {
    needs_root!();
    let _namespaces = shared();
    let c = Case::new("refuse", FsType::Ext4, 128 * MIB);
    let (b, id, env) = (&c.env.block, c.id.as_str(), &c.env);
    let target = env.dir("pods/p/a");

    // Unformatted: nothing to mount.
    precondition(b.mount_volume(id, &target).unwrap_err(), &[id, "no filesystem"]);
    assert!(mounted_at(&target).is_empty());
    b.format_volume(id).unwrap();

    // Targets outside the root, spelled directly, with `..`, through a link inside the root.
    let outside = s(&env.base.join("outside/m"));
    std::os::unix::fs::symlink(&outside, env.path("pods/out")).unwrap();
    let before = mounts_below(&env.base);
    for bad in [outside.clone(), env.path("../outside/m"), env.path("pods/out"), "relative/dir".into()] {
        let e = b.mount_volume(id, &bad).unwrap_err();
        assert!(matches!(e, Error::PermissionDenied(_) | Error::InvalidArgument(_)), "{bad}: {e:?}");
        assert_eq!(mounts_below(&env.base), before, "{bad}: nothing mounted");
        let e = b.get_volume_id_from_target_path(&bad).unwrap_err();
        assert!(matches!(e, Error::PermissionDenied(_) | Error::InvalidArgument(_)), "{bad}: {e:?}");
        let e = b.get_closest_volume_id_from_target_path(&bad).unwrap_err();
        assert!(matches!(e, Error::PermissionDenied(_) | Error::InvalidArgument(_)), "{bad}: {e:?}");
    }
    let e = b.mount_volume(id, &env.path("pods/missing")).unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e:?}");

    // The root itself, named directly or through a link inside it: refused, naming it.
    let root = s(&env.base.join("kube let"));
    std::os::unix::fs::symlink("..", env.path("pods/up")).unwrap();
    for at_root in [root.clone(), format!("{root}/"), env.path("pods/up")] {
        let e = b.mount_volume(id, &at_root).unwrap_err();
        assert!(matches!(e, Error::PermissionDenied(_)), "{at_root}: {e:?}");
        assert!(e.to_string().contains(&root) && e.to_string().contains("working directories"), "{e}");
        assert_eq!(mounts_below(&env.base), before, "{at_root}: nothing mounted");
    }

    // A non-empty directory is not mounted over (as upstream).
    let full = env.dir("pods/p/full");
    fs::write(Path::new(&full).join("x"), b"x").unwrap();
    precondition(b.mount_volume(id, &full).unwrap_err(), &["not empty"]);
    assert!(mounted_at(&full).is_empty());

    // Something else mounted at the target: named, and left alone by UnmountVolume.
    let other = env.dir("pods/p/tmp");
    rustix::mount::mount("csi-test-tmpfs", other.as_str(), "tmpfs", rustix::mount::MountFlags::empty(), None).unwrap();
    precondition(b.mount_volume(id, &other).unwrap_err(), &["tmpfs", "already mounted there"]);
    precondition(b.unmount_volume(id, &other).unwrap_err(), &["tmpfs", "left alone"]);
    assert_eq!(mounted_at(&other), ["tmpfs"]);
    let e = b.get_volume_id_from_target_path(&other).unwrap_err();
    assert!(matches!(e, Error::NotFound(_)) && e.to_string().contains("tmpfs"), "{e:?}");

    // Mounted at one place: another is refused, naming the first; a link to it is the same place.
    b.mount_volume(id, &target).unwrap();
    let second = env.dir("pods/p/b");
    precondition(b.mount_volume(id, &second).unwrap_err(), &[id, target.as_str()]);
    assert!(mounted_at(&second).is_empty());
    std::os::unix::fs::symlink(&target, env.path("pods/link-to-a")).unwrap();
    b.mount_volume(id, &env.path("pods/link-to-a")).unwrap();
    assert_eq!(mounted_at(&target).len(), 1);
    assert_eq!(b.get_volume_id_from_target_path(&env.path("pods/link-to-a")).unwrap(), id);

    // Busy: a file open in it keeps it mounted, with a clear error.
    let open = fs::File::create(Path::new(&target).join("open")).unwrap();
    precondition(b.unmount_volume(id, &target).unwrap_err(), &[id, "busy"]);
    assert_eq!(mounted_at(&target).len(), 1);
    drop(open);

    // Unknown and malformed IDs.
    let unknown = r"\\?\Volume{00000000-0000-4000-8000-000000000001}\";
    assert!(matches!(b.mount_volume(unknown, &second).unwrap_err(), Error::NotFound(_)));
    assert!(matches!(b.unmount_volume(unknown, &target).unwrap_err(), Error::NotFound(_)));
    assert!(matches!(b.get_volume_stats("not-a-volume-id").unwrap_err(), Error::InvalidArgument(_)));
    assert!(matches!(b.format_volume("not-a-volume-id").unwrap_err(), Error::InvalidArgument(_)));
    assert_eq!(mounted_at(&target).len(), 1);

    // Unmount through the link; then a missing target and an unmounted one are successes.
    b.unmount_volume(id, &env.path("pods/link-to-a")).unwrap();
    assert!(mounted_at(&target).is_empty());
    b.unmount_volume(id, &env.path("pods/never-made")).unwrap();
    b.unmount_volume(id, &target).unwrap();
}

/// Eight disks formatted and mounted at once; a volume's target is not another's to unmount.
#[test]
fn eight_volumes_at_once() {
    needs_root!();
    let _namespaces = shared();
    let cases: Vec<Case> = (0..8).map(|i| Case::new(&format!("eight{i}"), FsType::Ext4, 64 * MIB)).collect();
    let targets: Vec<String> = cases.iter().map(|c| c.env.dir("pods/p/vol")).collect();
    std::thread::scope(|scope| {
        for (c, t) in cases.iter().zip(&targets) {
            scope.spawn(move || {
                c.env.block.format_volume(&c.id).unwrap();
                c.env.block.mount_volume(&c.id, t).unwrap();
                fs::write(Path::new(t).join("who"), &c.id).unwrap();
            });
        }
    });
    for (c, t) in cases.iter().zip(&targets) {
        assert_eq!(c.env.block.get_volume_id_from_target_path(t).unwrap(), c.id);
        assert_eq!(fs::read_to_string(Path::new(t).join("who")).unwrap(), c.id);
    }
    let (a, b) = (&cases[0], &cases[1]);
    precondition(a.env.block.unmount_volume(&b.id, &targets[0]).unwrap_err(), &[&b.id, "left alone"]);
    assert_eq!(mounted_at(&targets[0]).len(), 1);
    std::thread::scope(|scope| {
        for (c, t) in cases.iter().zip(&targets) {
            scope.spawn(move || c.env.block.unmount_volume(&c.id, t).unwrap());
        }
    });
    assert!(targets.iter().all(|t| mounted_at(t).is_empty()));
}

/// Makes a block device node `path` for `(major, minor)`.
fn mknod(path: &Path, (major, minor): (u32, u32)) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::BlockDevice,
        rustix::fs::Mode::from_bits_truncate(0o600),
        rustix::fs::makedev(major, minor),
    )
    .unwrap();
}

fn rdev(path: &Path) -> (u32, u32) {
    let st = rustix::fs::stat(path).unwrap();
    (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev))
}

/// A `/dev` copy whose node for one volume's partition has another partition's numbers (as a
/// static `/dev` can hold after partitions came and went): nothing reaches either partition
/// through it. With the right numbers, the same copy works, the tools going through the
/// checked descriptor.
#[test]
fn stale_device_nodes_are_refused() {
    needs_root!();
    let _namespaces = shared();
    let a = Case::new("stale-a", FsType::Ext4, 64 * MIB);
    let other = Case::new("stale-b", FsType::Ext4, 64 * MIB);
    let va = a.env.block.volume(&a.id).unwrap();
    let (mine, theirs) = (rdev(&va.node), rdev(&other.node()));
    let copy = a.env.base.join("dev copy");
    fs::create_dir_all(&copy).unwrap();
    mknod(&copy.join(&a.disk.name), a.disk.devnum());
    let node = copy.join(&va.name);
    mknod(&node, theirs);
    let roots = Roots::new(vec![s(&a.env.base.join("kube let"))]);
    let stale = Block::with_roots(Path::new("/sys"), &copy, roots, FsType::Ext4);
    let target = a.env.dir("pods/stale");
    let (id, t) = (a.id.as_str(), target.as_str());
    let needles = [s(&node), format!("{}:{}", theirs.0, theirs.1), format!("{}:{}", mine.0, mine.1)];
    // Each call waits for udev to fix the node first (5 s): all at once.
    let errors: Vec<Error> = std::thread::scope(|scope| {
        let calls: Vec<Box<dyn FnOnce() -> csi_proxy_host::Result<()> + Send + '_>> = vec![
            Box::new(|| stale.format_volume(id)),
            Box::new(|| stale.is_volume_formatted(id).map(drop)),
            Box::new(|| stale.mount_volume(id, t)),
            Box::new(|| stale.resize_volume(id, 0)),
            Box::new(|| stale.write_volume_cache(id)),
        ];
        let running: Vec<_> = calls.into_iter().map(|call| scope.spawn(call)).collect();
        running.into_iter().map(|h| h.join().unwrap().unwrap_err()).collect()
    });
    for e in errors {
        precondition(e, &[id, &needles[0], &needles[1], &needles[2], "stale"]);
    }
    assert!(mounted_at(&target).is_empty());
    assert!(!other.env.block.is_volume_formatted(&other.id).unwrap(), "the other partition is untouched");
    assert!(!a.env.block.is_volume_formatted(id).unwrap());

    // The node fixed: formatted, mounted and unmounted through the copy.
    fs::remove_file(&node).unwrap();
    mknod(&node, mine);
    stale.format_volume(id).unwrap();
    assert_eq!(blkid_type(&va.node), "ext4");
    assert!(!other.env.block.is_volume_formatted(&other.id).unwrap(), "the other partition is untouched");
    stale.mount_volume(id, t).unwrap();
    assert_eq!(mounted_at(t), ["ext4"]);
    assert_eq!(a.env.block.get_volume_id_from_target_path(t).unwrap(), id);
    stale.unmount_volume(id, t).unwrap();
    assert!(mounted_at(t).is_empty());
}

/// A partition's node whose numbers name no device for a moment (ENXIO, as while a table
/// re-read removes and re-adds the partitions: the cause of a storage VM failure of
/// stale_device_nodes_are_refused, which then got an I/O error instead of a refusal) is waited for
/// like a node udev has not made yet; one that stays so is refused as stale.
#[test]
fn a_node_naming_no_device_is_waited_for_then_refused_as_stale() {
    needs_root!();
    let _namespaces = shared();
    let a = Case::new("enxio", FsType::Ext4, 64 * MIB);
    let va = a.env.block.volume(&a.id).unwrap();
    // The kernel's numbers (its /dev node may not be there yet where udev runs). Where udev runs,
    // it re-reads the new table, and the partition's sysfs entry is gone for that moment.
    let entry = format!("/sys/class/block/{}/dev", va.name);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let numbers = loop {
        match fs::read_to_string(&entry) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            read => break read.unwrap(),
        }
    };
    let (major, minor) = numbers.trim().split_once(':').unwrap();
    let mine: (u32, u32) = (major.parse().unwrap(), minor.parse().unwrap());
    // The partition's major with a minor no device has.
    let nothing = (mine.0, (1000..).find(|m| !Path::new(&format!("/sys/dev/block/{}:{m}", mine.0)).exists()).unwrap());
    let copy = a.env.base.join("dev copy");
    fs::create_dir_all(&copy).unwrap();
    mknod(&copy.join(&a.disk.name), a.disk.devnum());
    let node = copy.join(&va.name);
    mknod(&node, nothing);
    let roots = Roots::new(vec![s(&a.env.base.join("kube let"))]);
    let copied = Block::with_roots(Path::new("/sys"), &copy, roots, FsType::Ext4);

    // Put right while the call waits: the call goes through.
    let answer = std::thread::scope(|scope| {
        let call = scope.spawn(|| copied.is_volume_formatted(&a.id));
        std::thread::sleep(std::time::Duration::from_millis(300));
        fs::remove_file(&node).unwrap();
        mknod(&node, mine);
        call.join().unwrap()
    });
    assert!(!answer.unwrap(), "a fresh partition is not formatted");

    // Never put right: refused, naming the node and the kernel's numbers.
    fs::remove_file(&node).unwrap();
    mknod(&node, nothing);
    let e = copied.is_volume_formatted(&a.id).unwrap_err();
    precondition(e, &[&a.id, &s(&node), &format!("{}:{}", mine.0, mine.1), "stale"]);
}

/// Offline growth of a filesystem this namespace does not see mounted, but another does: the
/// device is held, so resize2fs is never run on it.
#[test]
fn offline_growth_refuses_a_volume_mounted_elsewhere() {
    needs_root!();
    let _namespaces = exclusive();
    let Some(unshare) = ["/usr/bin/unshare", "/bin/unshare"].into_iter().find(|p| Path::new(p).exists()) else {
        eprintln!("skipped: unshare is not installed");
        return;
    };
    let c = Case::new("elsewhere", FsType::Ext4, 128 * MIB);
    let (b, id) = (&c.env.block, c.id.as_str());
    b.format_volume(id).unwrap();
    let hidden = c.env.dir("pods/hidden");
    // Mounted in a private mount namespace, which lives as long as the process in it.
    let mut other = std::process::Command::new(unshare)
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount \"$0\" \"$1\" && echo mounted && exec sleep 60",
        ])
        .arg(c.node())
        .arg(&hidden)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(other.stdout.take().unwrap()), &mut line).unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert_eq!(line.trim(), "mounted");
        assert!(mounted_at(&hidden).is_empty(), "not visible here");
        c.grow_disk(256 * MIB);
        let size = c.size();
        // Explicitly: refused before the partition changes.
        precondition(
            b.resize_volume(id, size + 100 * MIB + MIB).unwrap_err(),
            &[id, "in use elsewhere", "nothing was changed"],
        );
        assert_eq!(c.size(), size);
        // Everything free: the partition grows, the filesystem is refused.
        precondition(b.resize_volume(id, 0).unwrap_err(), &[id, "in use elsewhere"]);
        assert!(c.size() > size);
        precondition(b.format_volume(id).unwrap_err(), &[id, "ext4"]);
    }));
    other.kill().unwrap();
    other.wait().unwrap();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    // Unmounted everywhere now (the namespace went with its last process): it grows.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match b.resize_volume(id, 0) {
            Ok(()) => break,
            Err(e) if e.to_string().contains("in use elsewhere") && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(50))
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    let target = c.env.dir("pods/seen");
    b.mount_volume(id, &target).unwrap();
    assert!(b.get_volume_stats(id).unwrap().total_bytes > 200 * MIB);
    b.unmount_volume(id, &target).unwrap();
}

/// NTFS that was dirty before a resize is refused, not resized and quietly cleaned by ntfsfix.
#[test]
fn dirty_ntfs_is_not_grown() {
    needs_root!();
    let _namespaces = shared();
    tools_present(FsType::Ntfs);
    let c = Case::new("ntfs-dirty", FsType::Ntfs, 256 * MIB);
    let (b, id) = (&c.env.block, c.id.as_str());
    b.format_volume(id).unwrap();
    // ntfsresize (shrinking here) leaves the volume marked dirty.
    c.run_on_node(&["ntfsresize", "-f", "-P", "-s", "128M", "{}"]);
    precondition(b.resize_volume(id, 0).unwrap_err(), &[id, "dirty"]);
    c.grow_disk(384 * MIB);
    let size = c.size();
    precondition(b.resize_volume(id, size + 120 * MIB).unwrap_err(), &[id, "dirty", "nothing was changed"]);
    assert_eq!(c.size(), size);
    // Checked and cleaned by the operator: grown over everything.
    c.run_on_node(&["ntfsfix", "-d", "{}"]);
    b.resize_volume(id, 0).unwrap();
    assert!(c.size() > size + 100 * MIB);
    let target = c.env.dir("pods/nt");
    b.mount_volume(id, &target).unwrap();
    assert!(b.get_volume_stats(id).unwrap().total_bytes > 300 * MIB);
    b.unmount_volume(id, &target).unwrap();
    // Clean after the growth: ntfsresize's own dirty mark was cleared (its --info refuses a
    // dirty volume).
    c.run_on_node(&["ntfsresize", "--info", "-P", "{}"]);
}

/// A volume another process holds open exclusively — a mkfs still running for a daemon that
/// was killed (mke2fs holds its device with O_EXCL until it is done, and writes the superblock
/// last, so the volume still probes blank) — is not formatted again.
#[test]
fn a_volume_held_exclusively_is_not_formatted() {
    needs_root!();
    let _namespaces = shared();
    let c = Case::new("held", FsType::Ext4, 64 * MIB);
    let (lock, node) = c.locked_node();
    let held = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(rustix::fs::OFlags::EXCL.bits() as i32)
        .open(&node)
        .unwrap();
    drop(lock);
    assert!(!c.env.block.is_volume_formatted(&c.id).unwrap(), "blank while the other writer works");
    precondition(c.env.block.format_volume(&c.id).unwrap_err(), &[&c.id, "in use elsewhere", "refusing to format"]);
    drop(held);
    assert!(!c.env.block.is_volume_formatted(&c.id).unwrap(), "nothing was written");
    c.env.block.format_volume(&c.id).unwrap();
}

/// A filesystem our own probe does not know (minix) is still seen, through libblkid: the volume
/// counts as formatted and FormatVolume refuses it, bytes unchanged.
#[test]
fn libblkid_catches_what_our_probe_does_not_know() {
    needs_root!();
    let _namespaces = shared();
    let c = Case::new("minix", FsType::Ext4, 64 * MIB);
    c.run_on_node(&["mkfs.minix", "{}"]);
    let head = || {
        use std::io::Read;
        let (_lock, node) = c.locked_node();
        let mut b = vec![0u8; 4096];
        fs::File::open(node).unwrap().read_exact(&mut b).unwrap();
        b
    };
    let before = head();
    assert_eq!(c.blkid_type(), "minix", "the test tool made what we meant");
    assert!(c.env.block.is_volume_formatted(&c.id).unwrap());
    precondition(c.env.block.format_volume(&c.id).unwrap_err(), &[&c.id, "libblkid"]);
    assert_eq!(head(), before, "nothing was written");
}
