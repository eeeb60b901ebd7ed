#![cfg(target_os = "linux")]
//! One hung disk stalls only itself. A loop disk whose backing file is on a frozen filesystem
//! (`fsfreeze`) takes every write and never finishes it: the first PartitionDisk on it hangs in the
//! host, holding the disk's lock, and hundreds more queue behind it. Meanwhile, through the real
//! server over its unix sockets:
//!
//! - calls of other APIs, on fresh connections, keep answering, and so does PartitionDisk on another
//!   disk, even with a Rescan waiting for the hung disk;
//! - the queued calls hold no thread (the process's thread count stays small);
//! - cancelled calls leave the queue at once: after the clients give up, the next call on the
//!   thawed disk runs right after the hung one, not after every cancelled one.
//!
//! Needs root (loop devices, mount, fsfreeze); skipped otherwise.

use csi_proxy_host::types::FsType;
use csi_proxy_stack_tests::disks::{run, LoopDisk};
use csi_proxy_stack_tests::{needs_root, Scratch, TestServer};
use csi_proxy_wire::{v1, Group};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// A filesystem on its own loop disk, mounted, holding the backing file of a second loop disk.
/// Thawed, detached and unmounted on drop, whatever the test did.
struct FrozenDisk {
    mnt: PathBuf,
    /// `/dev/loopN` over a file in `mnt`.
    dev: PathBuf,
    number: u32,
    frozen: bool,
    // Dropped last: the filesystem's own disk.
    _outer: LoopDisk,
}

impl FrozenDisk {
    fn new(scratch: &Scratch) -> FrozenDisk {
        let outer = LoopDisk::new("hung-outer", 64 << 20);
        run(&["mkfs.ext4", "-q", "-F", outer.dev.to_str().unwrap()]);
        let mnt = scratch.path().join("outer");
        std::fs::create_dir_all(&mnt).unwrap();
        run(&["mount", outer.dev.to_str().unwrap(), mnt.to_str().unwrap()]);
        let file = mnt.join("inner.img");
        std::fs::File::create(&file).unwrap().set_len(32 << 20).unwrap();
        // Test-only tool (the daemon never runs losetup).
        let out = Command::new("losetup").args(["--find", "--show"]).arg(&file).output().unwrap();
        assert!(out.status.success(), "losetup: {}", String::from_utf8_lossy(&out.stderr));
        let dev = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        let name = dev.file_name().unwrap().to_str().unwrap().to_string();
        let devnum = std::fs::read_to_string(format!("/sys/class/block/{name}/dev")).unwrap();
        let (major, minor) = devnum.trim().split_once(':').unwrap();
        let number = (major.parse::<u32>().unwrap() << 20) | minor.parse::<u32>().unwrap();
        FrozenDisk { mnt, dev, number, frozen: false, _outer: outer }
    }

    fn freeze(&mut self) {
        run(&["fsfreeze", "--freeze", self.mnt.to_str().unwrap()]);
        self.frozen = true;
    }

    fn thaw(&mut self) {
        if std::mem::take(&mut self.frozen) {
            run(&["fsfreeze", "--unfreeze", self.mnt.to_str().unwrap()]);
        }
    }
}

impl Drop for FrozenDisk {
    fn drop(&mut self) {
        if self.frozen {
            let _ = Command::new("fsfreeze").arg("--unfreeze").arg(&self.mnt).status();
        }
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
        // A loop disk still open (by a call that failed this test) detaches when closed; the
        // filesystem is busy until then.
        for _ in 0..100 {
            let quiet = Command::new("umount").arg(&self.mnt).stderr(std::process::Stdio::null()).status();
            if quiet.is_ok_and(|s| s.success()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Threads of this process (the server runs in it).
fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Threads:")).unwrap();
    line["Threads:".len()..].trim().parse().unwrap()
}

/// PathExists on a fresh connection, given 5 s to answer.
async fn path_exists(s: &TestServer, path: &Path) -> Result<bool, String> {
    let call = async {
        let mut fs = v1::filesystem_client::FilesystemClient::new(s.channel(Group::Filesystem, "v1").await);
        fs.path_exists(v1::PathExistsRequest { path: path.to_str().unwrap().to_string() }).await
    };
    match tokio::time::timeout(Duration::from_secs(5), call).await {
        Ok(Ok(r)) => Ok(r.into_inner().exists),
        Ok(Err(status)) => Err(format!("{status:?}")),
        Err(_) => Err("no answer within 5 s".to_string()),
    }
}

/// A fresh connection to the disk API, given 5 s.
async fn disk_channel(s: &TestServer) -> Channel {
    tokio::time::timeout(Duration::from_secs(5), s.channel(Group::Disk, "v1")).await.expect("connect within 5 s")
}

fn partition(c: &Channel, disk: u32) -> impl std::future::Future<Output = Result<(), tonic::Status>> {
    let mut c = v1::disk_client::DiskClient::new(c.clone());
    async move { c.partition_disk(v1::PartitionDiskRequest { disk_number: disk }).await.map(|_| ()) }
}

/// Waits up to `within` for `f` to hold.
async fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    f()
}

/// Calls queued on the hung disk, over this many connections (each allows 256 streams).
const CONNECTIONS: usize = 4;
const PER_CONNECTION: usize = 150;

/// The server runs on its own runtime, as in the daemon: a server that stalls makes the test's
/// own time-outs fail, rather than stalling them too.
#[test]
fn a_hung_disk_stalls_only_itself() {
    needs_root!();
    let scratch = Scratch::new("csi-proxy-hung-disk");
    let hung = FrozenDisk::new(&scratch);
    let other = LoopDisk::new("hung-other", 16 << 20);
    let runtime = |name: &str| {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).thread_name(name).enable_all().build().unwrap()
    };
    let server_rt = runtime("server");
    let s = server_rt.block_on(TestServer::start_native(vec![scratch.p("")], FsType::Ext4));
    runtime("test").block_on(check(&s, &scratch, hung, &other));
    server_rt.block_on(s.stop());
}

async fn check(s: &TestServer, scratch: &Scratch, mut hung: FrozenDisk, other: &LoopDisk) {
    let before = threads();

    hung.freeze();
    let holder_conn = disk_channel(s).await;
    let holder = tokio::spawn(partition(&holder_conn, hung.number));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!holder.is_finished(), "PartitionDisk on the frozen disk hangs (else this test shows nothing)");

    let mut queued = Vec::new();
    let mut conns = Vec::new();
    for _ in 0..CONNECTIONS {
        let c = disk_channel(s).await;
        for _ in 0..PER_CONNECTION {
            queued.push(tokio::spawn(partition(&c, hung.number)));
        }
        conns.push(c);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let queued_threads = threads();
    eprintln!(
        "threads: {before} before, {queued_threads} with {} calls queued on the hung disk",
        CONNECTIONS * PER_CONNECTION
    );
    assert!(queued.iter().all(|t| !t.is_finished()), "the queued calls wait for the hung disk");

    // Other APIs, on fresh connections, answer.
    for _ in 0..3 {
        assert_eq!(path_exists(s, scratch.path()).await, Ok(true), "PathExists while a disk hangs");
    }
    // A rescan waits its turn on the hung disk, holding up no other disk meanwhile.
    let rescan_conn = disk_channel(s).await;
    let mut d = v1::disk_client::DiskClient::new(rescan_conn.clone());
    let rescan = tokio::spawn(async move { d.rescan(v1::RescanRequest {}).await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!rescan.is_finished(), "the rescan waits for the hung disk");
    // Calls on another disk neither wait behind the hung one (nor behind the rescan) nor fail.
    let c = disk_channel(s).await;
    let done = tokio::time::timeout(Duration::from_secs(20), partition(&c, other.number())).await;
    assert!(matches!(done, Ok(Ok(()))), "PartitionDisk on another disk while one hangs: {done:?}");
    // Waiting calls hold no thread.
    assert!(
        queued_threads < before + 32,
        "{} calls waiting for a disk took {} threads",
        CONNECTIONS * PER_CONNECTION,
        queued_threads.saturating_sub(before)
    );

    // The clients give up: every queued call is cancelled (its stream reset).
    for t in &queued {
        t.abort();
    }
    drop(conns);
    assert!(
        eventually(Duration::from_secs(10), || threads() < before + 32).await,
        "cancelled calls still hold {} threads",
        threads().saturating_sub(before)
    );
    assert_eq!(path_exists(s, scratch.path()).await, Ok(true), "PathExists after the cancellations");

    // Thawed, the hung call finishes; the next call on the disk runs right after it, not after
    // the hundreds of cancelled ones.
    hung.thaw();
    let held = tokio::time::timeout(Duration::from_secs(30), holder).await;
    assert!(matches!(held, Ok(Ok(Ok(())))), "the hung call completes once thawed: {held:?}");
    // The rescan's outcome depends on every disk of this machine; that it ends is what counts.
    let rescanned = tokio::time::timeout(Duration::from_secs(30), rescan).await;
    assert!(matches!(rescanned, Ok(Ok(_))), "the rescan ends once the disk is thawed: {rescanned:?}");
    let c = disk_channel(s).await;
    let next = tokio::time::timeout(Duration::from_secs(5), partition(&c, hung.number)).await;
    assert!(matches!(next, Ok(Ok(()))), "the next call on the thawed disk: {next:?}");
}
