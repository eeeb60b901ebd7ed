//! Block devices for the tests of the Linux block backend: loop disks over sparse files (root
//! only), a udev simulator, and the test tools' view (`lsblk`).

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A loop device over a sparse file, detached and deleted on drop.
pub struct LoopDisk {
    pub file: PathBuf,
    /// `/dev/loopN`
    pub dev: PathBuf,
    /// `loopN`
    pub name: String,
}

impl LoopDisk {
    /// `size` bytes, 512-byte sectors, partition scanning on.
    pub fn new(tag: &str, size: u64) -> LoopDisk {
        Self::with_sector(tag, size, 512)
    }

    pub fn with_sector(tag: &str, size: u64, sector: u32) -> LoopDisk {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let file = std::env::temp_dir().join(format!("csi-proxy-loop-{tag}-{}-{n}.img", std::process::id()));
        let f = std::fs::File::create(&file).unwrap();
        f.set_len(size).unwrap();
        drop(f);
        // Test-only: losetup is the quickest way to a loop device here; the daemon never runs it.
        let out = Command::new("losetup")
            .args(["--find", "--show", "--partscan", "--sector-size", &sector.to_string()])
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "losetup: {}", String::from_utf8_lossy(&out.stderr));
        let dev = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        let name = dev.file_name().unwrap().to_str().unwrap().to_string();
        LoopDisk { file, dev, name }
    }

    /// (major, minor) from sysfs.
    pub fn devnum(&self) -> (u32, u32) {
        let s = std::fs::read_to_string(format!("/sys/class/block/{}/dev", self.name)).unwrap();
        let (a, b) = s.trim().split_once(':').unwrap();
        (a.parse().unwrap(), b.parse().unwrap())
    }

    /// The disk number the backend gives this disk.
    pub fn number(&self) -> u32 {
        let (major, minor) = self.devnum();
        (major << 20) | minor
    }

    /// Size of the backing file.
    pub fn size(&self) -> u64 {
        std::fs::metadata(&self.file).unwrap().len()
    }

    /// Grows the backing file (the loop device sees it after a Rescan).
    pub fn grow_file(&self, size: u64) {
        std::fs::OpenOptions::new().write(true).open(&self.file).unwrap().set_len(size).unwrap();
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
        let _ = std::fs::remove_file(&self.file);
    }
}

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Returns from the calling test, with a note, unless it runs as root (loop devices and mounts
/// need it; CI runs as root).
#[macro_export]
macro_rules! needs_root {
    () => {
        if !$crate::disks::is_root() {
            eprintln!("skipped: needs root for loop devices and mounts (CI runs as root)");
            return;
        }
    };
}

/// Runs a test tool (never the daemon's way of doing things) and returns its stdout.
pub fn run(argv: &[&str]) -> String {
    let out = Command::new(argv[0]).args(&argv[1..]).output().unwrap();
    assert!(out.status.success(), "{argv:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// `lsblk -P` rows (`KEY="value"` pairs) as maps, for cross-checks; `args` choose the columns.
pub fn lsblk(args: &[&str]) -> Vec<std::collections::BTreeMap<String, String>> {
    let mut argv = vec!["lsblk", "-P", "-b"];
    argv.extend_from_slice(args);
    run(&argv)
        .lines()
        .map(|line| {
            let mut row = std::collections::BTreeMap::new();
            let mut rest = line.trim();
            while let Some((key, after)) = rest.split_once("=\"") {
                let (value, after) = after.split_once('"').unwrap();
                row.insert(key.trim().to_string(), value.to_string());
                rest = after;
            }
            row
        })
        .collect()
}

/// Holds `flock(LOCK_EX)` on a whole disk, as partitioning tools do to keep udev (and the
/// daemon) away while they work: the test's own tools that touch a partition node run under it.
pub struct DiskFlock(#[allow(dead_code)] std::fs::File);

impl LoopDisk {
    /// Waits for the disk's lock (udev holds it while it re-reads the table), then for the
    /// partition `part`'s node, and returns the lock and the node's path.
    pub fn lock_with_partition(&self, part: u32) -> (DiskFlock, PathBuf) {
        let f = std::fs::File::open(&self.dev).unwrap();
        rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive).unwrap();
        let node = PathBuf::from(format!("/dev/{}p{part}", self.name));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !node.exists() {
            assert!(std::time::Instant::now() < deadline, "{} did not appear", node.display());
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        (DiskFlock(f), node)
    }
}

/// What systemd-udevd does to a whole disk that a writer closed, made certain instead of rare:
/// on every close-after-write of the disk's node (inotify `IN_CLOSE_WRITE`, udevd's "watch"),
/// it re-reads the partition table (BLKRRPART, under its own `LOCK_EX|LOCK_NB`) once the disk is
/// not locked (a locked disk's event is retried, as udevd requeues it), then again and again for
/// [`UdevSim::WINDOW`], the first time after a short delay (udevd handles events late under load). Each re-read drops every
/// partition and adds them again: their sysfs entries and nodes vanish meanwhile.
pub struct UdevSim {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<UdevTally>>,
}

/// What a [`UdevSim`] did.
#[derive(Debug, Default, Clone, Copy)]
pub struct UdevTally {
    /// Close-after-write events seen.
    pub events: u32,
    /// Table re-reads done.
    pub rereads: u32,
    /// Attempts that found the disk locked.
    pub locked: u32,
    /// Re-reads the kernel refused (a partition in use).
    pub busy: u32,
}

impl UdevSim {
    pub const WINDOW: std::time::Duration = std::time::Duration::from_millis(400);

    pub fn start(disk: &Path) -> UdevSim {
        use rustix::fs::inotify;
        let ino = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).unwrap();
        inotify::add_watch(&ino, disk, inotify::WatchFlags::CLOSE_WRITE).unwrap();
        let disk = disk.to_path_buf();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut tally = UdevTally::default();
            let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 1024];
            // An event not yet handled: tried until the disk is free, as udevd requeues an event
            // whose disk is locked instead of dropping it. Then re-reads go on until `until`.
            let mut owed = false;
            let mut until: Option<std::time::Instant> = None;
            let mut seed = std::process::id() as u64;
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                let mut reader = inotify::Reader::new(&ino, &mut buf);
                let mut new_event = false;
                while let Ok(_event) = reader.next() {
                    tally.events += 1;
                    new_event = true;
                }
                if new_event {
                    // A late start, 0-150 ms (xorshift: no rand crate for one number).
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    std::thread::sleep(std::time::Duration::from_millis(seed % 150));
                    owed = true;
                }
                if owed || until.is_some_and(|t| std::time::Instant::now() < t) {
                    let done = match reread_unless_locked(&disk) {
                        Reread::Done => {
                            tally.rereads += 1;
                            true
                        }
                        Reread::Locked => {
                            tally.locked += 1;
                            false
                        }
                        // The kernel refused (a partition in use): udevd gives up on it too.
                        Reread::Busy => {
                            tally.busy += 1;
                            true
                        }
                    };
                    if owed && done {
                        owed = false;
                        until = Some(std::time::Instant::now() + Self::WINDOW);
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            tally
        });
        UdevSim { stop, thread: Some(thread) }
    }

    /// Stops the simulator and tells what it did.
    pub fn finish(mut self) -> UdevTally {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for UdevSim {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

enum Reread {
    Done,
    Locked,
    Busy,
}

/// udevd's `synthesize_change` for a whole disk: a read-only open (its close is no write),
/// `LOCK_EX|LOCK_NB`, BLKRRPART.
#[allow(unsafe_code)] // the BLKRRPART ioctl, as udevd sends it
fn reread_unless_locked(disk: &Path) -> Reread {
    use rustix::ioctl::{ioctl, NoArg, Opcode};
    let Ok(f) =
        std::fs::OpenOptions::new().read(true).custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32).open(disk)
    else {
        return Reread::Busy;
    };
    if rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        return Reread::Locked;
    }
    // _IO(0x12, 95)
    const BLKRRPART: Opcode = 0x125f;
    // SAFETY: BLKRRPART takes no argument; `f` is an open block device.
    match unsafe { ioctl(&f, NoArg::<BLKRRPART>::new()) } {
        Ok(()) => Reread::Done,
        Err(_) => Reread::Busy,
    }
}

/// Whether this kernel reads partition tables itself: re-reads `disk`'s table (under its lock)
/// and tells whether partition 1 is there afterwards. A kernel without partition parsers (this
/// project's build machines) drops every partition on a re-read and adds none back; the caller
/// puts them back (PartitionDisk tells the kernel again).
pub fn kernel_reads_tables(disk: &LoopDisk) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match reread_unless_locked(&disk.dev) {
            Reread::Done => break,
            _ if std::time::Instant::now() < deadline => std::thread::sleep(std::time::Duration::from_millis(20)),
            _ => panic!("could not re-read the table of {}", disk.dev.display()),
        }
    }
    Path::new(&format!("/sys/class/block/{}/{}p1", disk.name, disk.name)).exists()
}
