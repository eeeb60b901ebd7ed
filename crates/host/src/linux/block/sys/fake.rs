//! A recording [`Sys`] for the block logic's tests: disks are bytes in memory, the kernel's
//! partitions are what BLKPG made them, shown in a sysfs tree of the fake's own (a temporary
//! directory, as the kernel lays it out: `class/block/<disk>/<partition>/{partition,start,size,dev}`,
//! `dev/block/M:m`), with an empty file in its `dev/` for each node. Every call that changes
//! something is logged, one line each:
//!
//! - `open <disk> r|l|w|x` (read, lock, write, exclusive; reads and fstat are not logged)
//! - `lock <disk> shared|exclusive`, or `lock <disk> … busy` when another holds it
//! - `write <disk> <offset> <len>`, `sync <disk>`
//! - `add <disk> <pno> <start> <len>`, `resize <disk> <pno> <start> <len>`, `delete <disk> <pno>`
//!   (bytes)
//! - `flush_buffers <disk>`, `set_capacity <disk>`
//! - `run <argv>`, a device given to the tool named by its node (`run mkfs.xfs -q vda1`)
//!
//! Partition nodes open as windows onto their disk's bytes. A test can make a disk or a
//! partition busy (an exclusive open fails with EBUSY, as when it is mounted), say what libblkid
//! finds on a node, script what a tool does, and run something at the next flock (another host
//! changing the disks meanwhile).

use super::MountError;
use super::{DiskFd, FdPath, Open, Sys};
use crate::formats::mountinfo::Mount;
use crate::linux::block::{disk_number, Block, Disk};
use crate::paths::Roots;
use crate::sync::LockExt;
use crate::types::FsType;
use rustix::io::{Errno, Result};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::OsString;
use std::fs;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What runs at a flock, before the lock is decided.
type Hook = Box<dyn FnOnce(&FakeSys) + Send>;
/// What a tool does: given the fake and its argv (devices by node name), its exit status and
/// what it prints on stderr.
type Tool = Box<dyn Fn(&FakeSys, &[String]) -> (i32, String) + Send + Sync>;

/// The fake; clones share one set of disks.
#[derive(Clone)]
pub(crate) struct FakeSys(Arc<Inner>);

struct Inner {
    /// Holds `sys/` and `dev/`; removed on drop.
    root: PathBuf,
    state: Mutex<State>,
    hooks: Mutex<VecDeque<Hook>>,
    tool: Mutex<Option<Tool>>,
    next_fd: AtomicU64,
    /// What a fake descriptor hands a tool (a duplicate of it), so that a path is real.
    null: fs::File,
}

#[derive(Default)]
struct State {
    disks: BTreeMap<String, FakeDisk>,
    log: Vec<String>,
    /// Nodes an exclusive open finds busy.
    busy: BTreeSet<String>,
    /// What libblkid finds, by node.
    blkid: BTreeMap<String, String>,
    /// `/proc/self/fd/N` handed to tools -> the node it stands for.
    tool_paths: BTreeMap<String, String>,
    /// What was mounted through the fake, in mount order (the real root mount, ID 1, is shown
    /// before them).
    mounts: Vec<Mount>,
    /// Nodes with active swap.
    swaps: Vec<String>,
}

struct FakeDisk {
    major: u32,
    minor: u32,
    lbs: u32,
    data: Vec<u8>,
    /// Descriptors holding its flock, and whether shared.
    locks: Vec<(u64, bool)>,
    /// The kernel's partitions: number -> (start, length) in bytes.
    partitions: BTreeMap<u32, (u64, u64)>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

impl FakeSys {
    pub(crate) fn new() -> FakeSys {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("csi-proxy-fake-block-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        for dir in ["sys/class/block", "sys/dev/block", "dev"] {
            fs::create_dir_all(root.join(dir)).unwrap();
        }
        FakeSys(Arc::new(Inner {
            root,
            state: Mutex::default(),
            hooks: Mutex::default(),
            tool: Mutex::default(),
            next_fd: AtomicU64::new(1),
            null: fs::File::open("/dev/null").unwrap(),
        }))
    }

    /// A backend over this fake (sysfs and `/dev` below its directory).
    pub(crate) fn block(&self) -> Block {
        self.block_making(FsType::Ext4)
    }

    /// [`Self::block`] whose FormatVolume makes `fs_type`.
    pub(crate) fn block_making(&self, fs_type: FsType) -> Block {
        let root = self.0.root.join("kubelet");
        fs::create_dir_all(&root).unwrap();
        let roots = Roots::new(vec![root.to_str().unwrap().to_string()]);
        let mut b = Block::with_roots(&self.sys_dir(), &self.dev_dir(), roots, fs_type);
        b.sys = Arc::new(self.clone());
        b
    }

    pub(crate) fn sys_dir(&self) -> PathBuf {
        self.0.root.join("sys")
    }

    pub(crate) fn dev_dir(&self) -> PathBuf {
        self.0.root.join("dev")
    }

    /// A blank virtio disk `name` (`vda`, `vdb`, …) of `size` bytes, device 252:`minor`.
    pub(crate) fn add_disk(&self, name: &str, minor: u32, size: u64) -> Disk {
        let major = 252;
        let dir = self.sys_dir().join("class/block").join(name);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("dev"), format!("{major}:{minor}\n")).unwrap();
        fs::write(dir.join("ro"), "0\n").unwrap();
        std::os::unix::fs::symlink(
            format!("../../class/block/{name}"),
            self.sys_dir().join(format!("dev/block/{major}:{minor}")),
        )
        .unwrap();
        fs::write(self.dev_dir().join(name), "").unwrap();
        let disk =
            FakeDisk { major, minor, lbs: 512, data: Vec::new(), locks: Vec::new(), partitions: BTreeMap::new() };
        self.0.state.lock_ignoring_poison().disks.insert(name.to_string(), disk);
        self.set_size(name, size);
        Disk { number: disk_number(major, minor), name: name.to_string(), major, minor }
    }

    /// The disk grows (or shrinks) to `size` bytes, as sysfs then shows; its partitions stay.
    pub(crate) fn set_size(&self, name: &str, size: u64) {
        self.with(name, |d| d.data.resize(size as usize, 0));
        let size_file = self.sys_dir().join("class/block").join(name).join("size");
        fs::write(size_file, format!("{}\n", size / 512)).unwrap();
    }

    /// An exclusive open of the node (a disk's or a partition's) fails with EBUSY (mounted,
    /// held by device-mapper) while set.
    pub(crate) fn set_busy(&self, node: &str, busy: bool) {
        let mut state = self.0.state.lock_ignoring_poison();
        if busy {
            state.busy.insert(node.to_string());
        } else {
            state.busy.remove(node);
        }
    }

    /// What libblkid finds on the node.
    pub(crate) fn set_blkid(&self, node: &str, found: &str) {
        self.0.state.lock_ignoring_poison().blkid.insert(node.to_string(), found.to_string());
    }

    /// What the tools do from now on (by default: nothing, and exit 0).
    pub(crate) fn on_tool(&self, tool: impl Fn(&FakeSys, &[String]) -> (i32, String) + Send + Sync + 'static) {
        *self.0.tool.lock_ignoring_poison() = Some(Box::new(tool));
    }

    /// The containment root of [`Self::block`]'s filesystem checks, `<fake>/kubelet`.
    pub(crate) fn kubelet(&self) -> PathBuf {
        self.0.root.join("kubelet")
    }

    /// What the fake has mounted, as (node, fstype, mount point relative to the fake's directory).
    pub(crate) fn mounted(&self) -> Vec<(String, String, String)> {
        let state = self.0.state.lock_ignoring_poison();
        state.mounts.iter().map(|m| (self.shown(&m.source), m.fstype.clone(), self.shown(&m.mount_point))).collect()
    }

    /// A path as the log shows it: relative to the fake's directory or its `dev/`.
    fn shown(&self, path: &Path) -> String {
        let dev = self.dev_dir();
        path.strip_prefix(&dev).or_else(|_| path.strip_prefix(&self.0.root)).unwrap_or(path).display().to_string()
    }

    /// The device number of the partition (or disk) node at `path`, if the fake has it.
    fn device_of_node(&self, path: &Path) -> Option<(u32, u32)> {
        let name = path.strip_prefix(self.dev_dir()).ok()?.to_str()?;
        let state = self.0.state.lock_ignoring_poison();
        state.disks.iter().find_map(|(disk, d)| {
            if disk == name {
                return Some((d.major, d.minor));
            }
            d.partitions.keys().find(|pno| Self::part_name(disk, **pno) == name).map(|pno| (d.major, d.minor + pno))
        })
    }

    /// The mount visible at `path` (its root there) or holding it: (mount ID, is its root).
    fn mount_of_path(&self, path: &Path) -> (u64, bool) {
        let state = self.0.state.lock_ignoring_poison();
        if let Some(m) = state.mounts.iter().rev().find(|m| m.mount_point == path) {
            return (m.id, true);
        }
        match state.mounts.iter().rev().find(|m| path.starts_with(&m.mount_point)) {
            Some(m) => (m.id, false),
            None => (1, path == Path::new("/")),
        }
    }

    /// Writes `bytes` at `offset` of partition `pno` of `disk` (not logged).
    pub(crate) fn poke_partition(&self, disk: &str, pno: u32, offset: u64, bytes: &[u8]) {
        let start = self.kernel(disk)[&pno].0;
        self.poke(disk, start + offset, bytes);
    }

    /// sysfs `ro`.
    /// `node` (a disk's or a partition's) mounted at `at`, as if by someone else.
    pub(crate) fn add_mount(&self, node: &str, at: &str) {
        let (major, minor) =
            self.device_of_node(&self.dev_dir().join(node)).unwrap_or_else(|| panic!("no fake node {node}"));
        let mut state = self.0.state.lock_ignoring_poison();
        let id = 100 + state.mounts.len() as u64;
        state.mounts.push(Mount {
            id,
            parent: 1,
            major,
            minor,
            root: "/".into(),
            mount_point: at.into(),
            fstype: "ext4".into(),
            source: format!("/dev/{node}").into(),
        });
    }

    /// A SCSI disk's `device/state` (`running`, `offline`, ...).
    pub(crate) fn set_scsi_state(&self, name: &str, state: &str) {
        let dir = self.sys_dir().join("class/block").join(name).join("device");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("state"), format!("{state}\n")).unwrap();
    }

    /// What a disk's `device/state` holds now (`running` for a disk without one).
    pub(crate) fn read_state(&self, name: &str) -> String {
        let path = self.sys_dir().join("class/block").join(name).join("device/state");
        fs::read_to_string(path).map_or("running".into(), |s| s.trim().to_string())
    }

    /// A disk's serial number, as `device/serial` shows it.
    pub(crate) fn set_serial(&self, name: &str, serial: &str) {
        let dir = self.sys_dir().join("class/block").join(name).join("device");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("serial"), format!("{serial}\n")).unwrap();
    }

    /// Swap made active on `node`.
    pub(crate) fn add_swap(&self, node: &str) {
        self.0.state.lock_ignoring_poison().swaps.push(node.to_string());
    }

    /// `holder` (e.g. `dm-0`, with its dm name if given) built on `node` (a disk or partition of
    /// `disk`), as sysfs shows it.
    pub(crate) fn add_holder(&self, disk: &str, node: &str, holder: &str, dm_name: Option<&str>) {
        let block = self.sys_dir().join("class/block");
        let dir = if node == disk { block.join(disk) } else { block.join(disk).join(node) };
        fs::create_dir_all(dir.join("holders")).unwrap();
        fs::write(dir.join("holders").join(holder), "").unwrap();
        if let Some(n) = dm_name {
            fs::create_dir_all(block.join(holder).join("dm")).unwrap();
            fs::write(block.join(holder).join("dm/name"), format!("{n}\n")).unwrap();
        }
    }

    pub(crate) fn set_read_only(&self, name: &str) {
        fs::write(self.sys_dir().join("class/block").join(name).join("ro"), "1\n").unwrap();
    }

    /// The disk's bytes.
    pub(crate) fn data(&self, name: &str) -> Vec<u8> {
        self.with(name, |d| d.data.clone())
    }

    /// Writes `bytes` at `offset` behind the logic's back (not logged).
    pub(crate) fn poke(&self, name: &str, offset: u64, bytes: &[u8]) {
        self.with(name, |d| d.data[offset as usize..offset as usize + bytes.len()].copy_from_slice(bytes));
    }

    /// The kernel's partitions of a disk: number -> (start, length) in bytes.
    pub(crate) fn kernel(&self, name: &str) -> BTreeMap<u32, (u64, u64)> {
        self.with(name, |d| d.partitions.clone())
    }

    /// A partition the kernel has without anyone telling it through this fake (a table re-read).
    pub(crate) fn kernel_add(&self, name: &str, pno: u32, start: u64, len: u64) {
        self.blkpg_add(name, pno, start, len).unwrap();
    }

    /// The log so far, emptied.
    pub(crate) fn take_log(&self) -> Vec<String> {
        std::mem::take(&mut self.0.state.lock_ignoring_poison().log)
    }

    /// Runs `f` at the next flock of any disk, before the lock is decided.
    pub(crate) fn at_next_lock(&self, f: impl FnOnce(&FakeSys) + Send + 'static) {
        self.0.hooks.lock_ignoring_poison().push_back(Box::new(f));
    }

    /// The disk `to` gets `from`'s bytes and kernel partitions, `from` is left blank: the disk
    /// detached from one slot and attached at another.
    pub(crate) fn move_disk_contents(&self, from: &str, to: &str) {
        let (data, parts) = self.with(from, |d| (std::mem::take(&mut d.data), d.partitions.clone()));
        let size = data.len();
        self.with(from, |d| d.data = vec![0; size]);
        for pno in parts.keys() {
            self.blkpg_delete(from, *pno).unwrap();
        }
        self.with(to, |d| d.data = data);
        for (pno, (start, len)) in parts {
            self.blkpg_add(to, pno, start, len).unwrap();
        }
    }

    fn with<T>(&self, name: &str, f: impl FnOnce(&mut FakeDisk) -> T) -> T {
        let mut state = self.0.state.lock_ignoring_poison();
        f(state.disks.get_mut(name).unwrap_or_else(|| panic!("no fake disk {name}")))
    }

    fn log(&self, line: String) {
        self.0.state.lock_ignoring_poison().log.push(line);
    }

    fn part_name(disk: &str, pno: u32) -> String {
        if disk.ends_with(|c: char| c.is_ascii_digit()) {
            format!("{disk}p{pno}")
        } else {
            format!("{disk}{pno}")
        }
    }

    fn part_dir(&self, disk: &str, pno: u32) -> PathBuf {
        self.sys_dir().join("class/block").join(disk).join(Self::part_name(disk, pno))
    }

    fn write_part(&self, disk: &str, pno: u32, start: u64, len: u64) {
        let dir = self.part_dir(disk, pno);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("partition"), format!("{pno}\n")).unwrap();
        fs::write(dir.join("start"), format!("{}\n", start / 512)).unwrap();
        fs::write(dir.join("size"), format!("{}\n", len / 512)).unwrap();
    }

    fn blkpg_add(&self, disk: &str, pno: u32, start: u64, len: u64) -> Result<()> {
        let (major, minor) = self.with(disk, |d| -> Result<(u32, u32)> {
            let overlaps = d.partitions.values().any(|&(s, l)| start < s + l && s < start + len);
            if d.partitions.contains_key(&pno) || overlaps {
                return Err(Errno::BUSY);
            }
            d.partitions.insert(pno, (start, len));
            Ok((d.major, d.minor + pno))
        })?;
        self.write_part(disk, pno, start, len);
        let name = Self::part_name(disk, pno);
        fs::write(self.part_dir(disk, pno).join("dev"), format!("{major}:{minor}\n")).unwrap();
        std::os::unix::fs::symlink(format!("{disk}/{name}"), self.sys_dir().join("class/block").join(&name)).unwrap();
        let link = self.sys_dir().join(format!("dev/block/{major}:{minor}"));
        std::os::unix::fs::symlink(format!("../../class/block/{disk}/{name}"), link).unwrap();
        fs::write(self.dev_dir().join(&name), "").unwrap();
        Ok(())
    }

    fn blkpg_delete(&self, disk: &str, pno: u32) -> Result<()> {
        let (major, minor) = self.with(disk, |d| (d.major, d.minor + pno));
        self.with(disk, |d| d.partitions.remove(&pno)).ok_or(Errno::NXIO)?;
        fs::remove_file(self.sys_dir().join(format!("dev/block/{major}:{minor}"))).unwrap();
        let name = Self::part_name(disk, pno);
        fs::remove_dir_all(self.part_dir(disk, pno)).unwrap();
        fs::remove_file(self.sys_dir().join("class/block").join(&name)).unwrap();
        fs::remove_file(self.dev_dir().join(&name)).unwrap();
        Ok(())
    }
}

impl Sys for FakeSys {
    fn open(&self, path: &Path, how: Open) -> Result<Box<dyn DiskFd>> {
        let name = path.strip_prefix(self.dev_dir()).ok().and_then(Path::to_str).ok_or(Errno::NOENT)?.to_string();
        let mode = match how {
            Open::Read => "r",
            Open::Lock => "l",
            Open::Write => "w",
            Open::Exclusive => "x",
        };
        self.log(format!("open {name} {mode}"));
        let state = self.0.state.lock_ignoring_poison();
        let (disk, part) = match state.disks.get(&name) {
            Some(_) => (name.clone(), None),
            None => state
                .disks
                .iter()
                .find_map(|(disk, d)| {
                    let (pno, &(start, len)) =
                        d.partitions.iter().find(|(pno, _)| Self::part_name(disk, **pno) == name)?;
                    Some((disk.clone(), Some((*pno, start, len))))
                })
                .ok_or(Errno::NOENT)?,
        };
        if how == Open::Exclusive && state.busy.contains(&name) {
            return Err(Errno::BUSY);
        }
        let id = self.0.next_fd.fetch_add(1, Ordering::Relaxed);
        Ok(Box::new(FakeFd { sys: self.clone(), name: disk, node: name, part, id }))
    }
    fn run(&self, argv: &[OsString], _fds: &[&FdPath]) -> crate::Result<Output> {
        let argv: Vec<String> = {
            let state = self.0.state.lock_ignoring_poison();
            argv.iter()
                .map(|a| {
                    let a = a.to_string_lossy().into_owned();
                    state.tool_paths.get(&a).cloned().unwrap_or(a)
                })
                .collect()
        };
        self.log(format!("run {}", argv.join(" ")));
        let (code, stderr) = match &*self.0.tool.lock_ignoring_poison() {
            Some(tool) => tool(self, &argv),
            None => (0, String::new()),
        };
        Ok(Output { status: ExitStatus::from_raw(code << 8), stdout: Vec::new(), stderr: stderr.into_bytes() })
    }
    fn mounts(&self) -> std::io::Result<Vec<Mount>> {
        let root = Mount {
            id: 1,
            parent: 1,
            major: 0,
            minor: 1,
            root: "/".into(),
            mount_point: "/".into(),
            fstype: "rootfs".into(),
            source: "none".into(),
        };
        Ok(std::iter::once(root).chain(self.0.state.lock_ignoring_poison().mounts.iter().cloned()).collect())
    }
    fn mount_at(&self, dir: BorrowedFd<'_>, name: &Path) -> Result<Option<(u64, Option<bool>)>> {
        let (id, root) = self.mount_of_path(&path_of(dir, name)?);
        Ok(Some((id, Some(root))))
    }
    fn mount(
        &self,
        fstype: &str,
        source: &Path,
        dir: &OwnedFd,
        expect: Option<(u32, u32)>,
    ) -> std::result::Result<(), MountError> {
        let at = path_of(dir.as_fd(), Path::new("")).map_err(|e| MountError::Os(e, String::new()))?;
        self.log(format!("mount {fstype} {} {}", self.shown(source), self.shown(&at)));
        let got = self.device_of_node(source).ok_or(MountError::Os(Errno::NOENT, String::new()))?;
        if expect.is_some_and(|want| want != got) {
            return Err(MountError::Device(got));
        }
        let (parent, _) = self.mount_of_path(&at);
        // btrfs shows an anonymous device, as the kernel's does.
        let (major, minor) = if fstype == "btrfs" { (0, 99) } else { got };
        let id = 1000 + self.0.next_fd.fetch_add(1, Ordering::Relaxed);
        let mut state = self.0.state.lock_ignoring_poison();
        let m = Mount {
            id,
            parent,
            major,
            minor,
            root: "/".into(),
            mount_point: at,
            fstype: fstype.into(),
            source: source.into(),
        };
        state.mounts.push(m);
        Ok(())
    }
    fn unmount(&self, path: &Path) -> Result<()> {
        let at = resolve_fd_path(path)?;
        self.log(format!("umount {}", self.shown(&at)));
        let mut state = self.0.state.lock_ignoring_poison();
        if state.busy.contains(&self.shown(&at)) {
            return Err(Errno::BUSY);
        }
        if let Some(i) = state.mounts.iter().rposition(|m| m.mount_point == at) {
            state.mounts.remove(i);
        }
        Ok(())
    }
    fn syncfs(&self, fd: &OwnedFd) -> Result<()> {
        self.log(format!("syncfs {}", self.shown(&path_of(fd.as_fd(), Path::new(""))?)));
        Ok(())
    }
    fn statvfs(&self, _fd: &OwnedFd) -> Result<(u64, u64, u64)> {
        Ok((1000, 250, 4096))
    }
    fn open_mount_point(&self, path: &Path) -> Result<OwnedFd> {
        super::RealSys.open_mount_point(path)
    }
    fn block_device_at(&self, path: &Path) -> Option<(u32, u32)> {
        self.device_of_node(path)
    }
    fn swaps(&self) -> std::io::Result<Vec<(u32, u32)>> {
        let state = self.0.state.lock_ignoring_poison();
        let nodes: Vec<PathBuf> = state.swaps.iter().map(|n| self.dev_dir().join(n)).collect();
        drop(state);
        Ok(nodes.iter().filter_map(|p| self.device_of_node(p)).collect())
    }
}

/// The path a descriptor was opened by (`/proc/self/fd/N`), with `name` below it.
fn path_of(fd: BorrowedFd<'_>, name: &Path) -> Result<PathBuf> {
    let dir = fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(|_| Errno::BADF)?;
    Ok(if name.as_os_str().is_empty() { dir } else { dir.join(name) })
}

/// A path `/proc/self/fd/N/name` as the path of descriptor N, then `name`.
fn resolve_fd_path(path: &Path) -> Result<PathBuf> {
    let rest = path.strip_prefix("/proc/self/fd").map_err(|_| Errno::INVAL)?;
    let mut parts = rest.iter();
    let fd = parts.next().and_then(|n| n.to_str()).ok_or(Errno::INVAL)?;
    let dir = fs::read_link(format!("/proc/self/fd/{fd}")).map_err(|_| Errno::BADF)?;
    Ok(parts.fold(dir, |p, n| p.join(n)))
}

/// An open disk or partition of the fake; drop releases its flock.
struct FakeFd {
    sys: FakeSys,
    /// The disk.
    name: String,
    /// The node opened (the disk's, or a partition's).
    node: String,
    /// A partition: its number, start and length on the disk.
    part: Option<(u32, u64, u64)>,
    id: u64,
}

impl FakeFd {
    /// Where `len` bytes at `offset` of this node lie on the disk, if they are inside it.
    fn range(&self, offset: u64, len: usize, disk_len: usize) -> Option<std::ops::Range<usize>> {
        let (base, limit) = match self.part {
            Some((_, start, plen)) => (start, plen),
            None => (0, disk_len as u64),
        };
        let end = offset.checked_add(len as u64)?;
        (end <= limit).then(|| (base + offset) as usize..(base + end) as usize)
    }
}

impl Drop for FakeFd {
    fn drop(&mut self) {
        let id = self.id;
        self.sys.with(&self.name, |d| d.locks.retain(|(holder, _)| *holder != id));
    }
}

impl DiskFd for FakeFd {
    fn device(&self) -> Result<(bool, (u32, u32))> {
        let pno = self.part.map_or(0, |p| p.0);
        Ok((true, self.sys.with(&self.name, |d| (d.major, d.minor + pno))))
    }
    fn logical_block_size(&self) -> Result<u32> {
        Ok(self.sys.with(&self.name, |d| d.lbs))
    }
    fn size_bytes(&self) -> Result<u64> {
        Ok(self.part.map_or_else(|| self.sys.with(&self.name, |d| d.data.len() as u64), |p| p.2))
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.sys.with(&self.name, |d| {
            let range = self.range(offset, buf.len(), d.data.len());
            let bytes = range
                .and_then(|r| d.data.get(r))
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
            buf.copy_from_slice(bytes);
            Ok(())
        })
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        self.sys.log(format!("write {} {offset} {}", self.node, buf.len()));
        self.sys.with(&self.name, |d| {
            let range = self.range(offset, buf.len(), d.data.len());
            let bytes = range.and_then(|r| d.data.get_mut(r)).ok_or_else(|| std::io::Error::from(Errno::NOSPC))?;
            bytes.copy_from_slice(buf);
            Ok(())
        })
    }
    fn sync(&self) -> std::io::Result<()> {
        self.sys.log(format!("sync {}", self.node));
        Ok(())
    }
    fn try_lock(&self, shared: bool) -> Result<()> {
        let hook = self.sys.0.hooks.lock_ignoring_poison().pop_front();
        if let Some(hook) = hook {
            hook(&self.sys);
        }
        let kind = if shared { "shared" } else { "exclusive" };
        let id = self.id;
        let got = self.sys.with(&self.name, |d| {
            let others = d.locks.iter().filter(|(holder, _)| *holder != id);
            let conflict = others.clone().any(|(_, s)| !shared || !s);
            if conflict {
                return false;
            }
            d.locks.retain(|(holder, _)| *holder != id);
            d.locks.push((id, shared));
            true
        });
        self.sys.log(format!("lock {} {kind}{}", self.name, if got { "" } else { " busy" }));
        if got {
            Ok(())
        } else {
            Err(Errno::WOULDBLOCK)
        }
    }
    fn add_partition(&self, pno: u32, start: u64, length: u64) -> Result<()> {
        self.sys.log(format!("add {} {pno} {start} {length}", self.name));
        self.sys.blkpg_add(&self.name, pno, start, length)
    }
    fn resize_partition(&self, pno: u32, start: u64, length: u64) -> Result<()> {
        self.sys.log(format!("resize {} {pno} {start} {length}", self.name));
        self.sys.with(&self.name, |d| match d.partitions.get_mut(&pno) {
            Some(p) if p.0 == start => {
                p.1 = length;
                Ok(())
            }
            _ => Err(Errno::NXIO),
        })?;
        self.sys.write_part(&self.name, pno, start, length);
        Ok(())
    }
    fn delete_partition(&self, pno: u32) -> Result<()> {
        self.sys.log(format!("delete {} {pno}", self.name));
        self.sys.blkpg_delete(&self.name, pno)
    }
    fn flush_buffers(&self) -> Result<()> {
        self.sys.log(format!("flush_buffers {}", self.name));
        Ok(())
    }
    fn set_capacity(&self) -> Result<()> {
        self.sys.log(format!("set_capacity {}", self.name));
        Ok(())
    }
    fn drop_cache(&self, _offset: u64, _len: u64) {}
    fn open_exclusive_again(&self) -> Result<()> {
        if self.sys.0.state.lock_ignoring_poison().busy.contains(&self.node) {
            return Err(Errno::BUSY);
        }
        Ok(())
    }
    fn signature(&self) -> std::result::Result<Option<String>, String> {
        Ok(self.sys.0.state.lock_ignoring_poison().blkid.get(&self.node).cloned())
    }
    fn tool_path(&self) -> std::io::Result<FdPath> {
        let path = FdPath::new(self.sys.0.null.as_fd())?;
        let shown = path.path().to_string_lossy().into_owned();
        self.sys.0.state.lock_ignoring_poison().tool_paths.insert(shown, self.node.clone());
        Ok(path)
    }
}
