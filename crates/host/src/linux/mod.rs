//! The Linux backend: each group's logic over real system calls and tools, in one module per
//! group. The platform layer is thin and sits beside the logic: `rustix` calls, ioctls
//! (`block::blkpg`, `block::loopdev`), and the tools run by `block::tools` and
//! `system::Systemctl`.

pub mod block;
pub mod fs;
pub mod iscsi;
pub mod smb;
pub mod system;
pub mod systemd;

use crate::{Config, Error, Hosts};
use rustix::io::Errno;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Every group of the Linux host. The filesystem group and the volume group's mount targets
/// share one containment model ([`fs::Filesystem`]).
pub fn hosts(config: Config) -> Hosts {
    let block = Arc::new(block::Block::new(config.roots.clone(), config.fs_type).protecting(config.protected_disks));
    Hosts {
        disk: block.clone(),
        volume: block,
        smb: Arc::new(smb::Smb::real(config.smb_dir, fs::Filesystem::new(config.roots.clone()))),
        filesystem: Arc::new(fs::Filesystem::new(config.roots)),
        iscsi: Arc::new(iscsi::Iscsi::real()),
        system: Arc::new(system::System::real()),
    }
}

/// A failed system call `doing` something to `path`, classified by its errno (see [`Error::io`]).
pub(crate) fn io_err(path: &str, doing: &str, e: Errno) -> Error {
    Error::io(format!("{doing} {path}"), std::io::Error::from(e))
}

/// How long an unmount retries a busy mount: a child process another thread is starting holds
/// copies of our descriptors until it execs, which makes a mount busy for a moment.
const UNMOUNT_BUSY_WAIT: Duration = Duration::from_millis(500);

/// Unmounts what is mounted at `path` (its final name not followed), retrying for a moment
/// while it is busy. `Ok` also when nothing is mounted there any more (EINVAL: unmounted by
/// someone else meanwhile); `Err(BUSY)` when it stayed busy.
pub(crate) fn unmount_waiting(path: &Path) -> rustix::io::Result<()> {
    let deadline = Instant::now() + UNMOUNT_BUSY_WAIT;
    loop {
        match rustix::mount::unmount(path, rustix::mount::UnmountFlags::NOFOLLOW) {
            Ok(()) | Err(Errno::INVAL) => return Ok(()),
            Err(Errno::BUSY) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            other => return other,
        }
    }
}

/// Makes `cmd`'s child die with the daemon: SIGKILL from the kernel when the thread that
/// started it goes away (the daemon killed, or crashed). The thread waits for the child, so it
/// outlives it in every other case. A tool left running by a dead daemon would go on writing a
/// device (mkfs) that the restarted daemon sees as blank and hands out again. Tools that daemonise
/// (ntfs-3g serving a mount) detach a grandchild, which keeps running: the kernel clears the
/// signal on fork.
#[allow(unsafe_code)] // pre_exec: a hook that runs between fork and exec
pub(crate) fn die_with_daemon(cmd: &mut std::process::Command) {
    let parent = rustix::process::getpid();
    // SAFETY: between fork and exec only prctl and getppid run, both plain system calls
    // (async-signal-safe); nothing is allocated or locked.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            // The daemon may have died before the signal was armed: then nobody sends it.
            if rustix::process::getppid() != Some(parent) {
                return Err(std::io::Error::other("the daemon exited while the tool was starting"));
            }
            Ok(())
        });
    }
}
