//! The external tools the Linux backend runs: mkfs, filesystem growers, ntfs-3g, iscsiadm.
//!
//! Every tool gets an argv vector (never a shell), stdin from /dev/null, a clean environment
//! with `LC_ALL=C` (messages we match are English) and a fixed `PATH`; it is looked up in that
//! `PATH` only, so what runs does not depend on the daemon's environment. It dies with the
//! daemon ([`super::super::die_with_daemon`]). Devices and mount
//! points reach tools as `/proc/self/fd/N` of descriptors the caller checked ([`FdPath`]).

use crate::types::FsType;
use crate::{Error, Result};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Where tools are looked up, and the `PATH` they run with.
pub(crate) const SEARCH_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The argv that creates a filesystem of `fs` on `dev`.
///
/// Options: ext4 as Kubernetes' mount-utils formats it (`-F` so mke2fs never prompts, `-m 0`: no
/// blocks reserved for root on a data volume); xfs and btrfs without `-f`, so they refuse
/// existing signatures themselves too; ntfs quick (`-Q`), as upstream's quick format.
/// The caller has already probed `dev` and found nothing on it.
pub(crate) fn mkfs_argv(fs: FsType, dev: &Path) -> Vec<OsString> {
    let opts: &[&str] = match fs {
        FsType::Ext4 => &["mkfs.ext4", "-q", "-F", "-m", "0"],
        FsType::Xfs => &["mkfs.xfs", "-q"],
        FsType::Btrfs => &["mkfs.btrfs", "-q"],
        FsType::Ntfs => &["mkntfs", "-Q", "-q"],
    };
    argv(opts, [dev.as_os_str()])
}

/// How a filesystem is grown to fill its (grown) partition. The tool is given the partition
/// device or the mount point as [`FdPath::path`] of a descriptor that was checked, never as a
/// path resolved again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grow {
    /// ext2/3/4: `resize2fs DEV`, mounted (online: needs CAP_SYS_RESOURCE) or not.
    Ext,
    /// xfs: `xfs_growfs MOUNT_POINT`; only while mounted.
    Xfs,
    /// btrfs: `btrfs filesystem resize max MOUNT_POINT`; only while mounted.
    Btrfs,
    /// ntfs: `ntfsresize -f -P DEV` (to the partition's size; `-f` skips its prompt), then
    /// [`ntfsfix_argv`]; only while unmounted, and only on a volume that was clean before.
    Ntfs,
}

impl Grow {
    /// The argv that grows the filesystem; `target` is the device, or for xfs and btrfs the
    /// mount point.
    pub(crate) fn argv(self, target: &Path) -> Vec<OsString> {
        let fixed: &[&str] = match self {
            Grow::Ext => &["resize2fs"],
            Grow::Xfs => &["xfs_growfs"],
            Grow::Btrfs => &["btrfs", "filesystem", "resize", "max"],
            Grow::Ntfs => &["ntfsresize", "-f", "-P"],
        };
        argv(fixed, [target.as_os_str()])
    }
}

/// `e2fsck -f -p DEV`: what resize2fs asks for before an offline resize of a filesystem that
/// was not checked since it was last mounted.
pub(crate) fn e2fsck_argv(dev: &Path) -> Vec<OsString> {
    argv(&["e2fsck", "-f", "-p"], [dev.as_os_str()])
}

/// `ntfsfix -d DEV`: clears the dirty flag ntfsresize leaves on a volume it resized (asking
/// Windows for a chkdsk). Linux's ntfs3 driver refuses to mount a dirty volume; ntfs-3g does not.
pub(crate) fn ntfsfix_argv(dev: &Path) -> Vec<OsString> {
    argv(&["ntfsfix", "-d"], [dev.as_os_str()])
}

/// `ntfs-3g DEV TARGET`: the FUSE NTFS driver mounts and stays in the background serving it.
pub(crate) fn ntfs3g_argv(dev: &Path, target: &Path) -> Vec<OsString> {
    argv(&["ntfs-3g"], [dev.as_os_str(), target.as_os_str()])
}

fn argv<'a>(fixed: &[&str], rest: impl IntoIterator<Item = &'a OsStr>) -> Vec<OsString> {
    fixed.iter().map(OsString::from).chain(rest.into_iter().map(OsStr::to_os_string)).collect()
}

/// The Debian package that provides a tool, for error messages.
fn package_of(tool: &str) -> &'static str {
    match tool {
        "mkfs.ext4" | "resize2fs" | "e2fsck" => "e2fsprogs",
        "mkfs.xfs" | "xfs_growfs" => "xfsprogs",
        "mkfs.btrfs" | "btrfs" => "btrfs-progs",
        "iscsiadm" => "open-iscsi",
        _ => "ntfs-3g",
    }
}

/// The full path of `tool` in [`SEARCH_PATH`].
pub(crate) fn find(tool: &str) -> Option<PathBuf> {
    SEARCH_PATH.split(':').map(|d| Path::new(d).join(tool)).find(|p| p.is_file())
}

/// A command for `argv`, set up as described in the module documentation; FailedPrecondition
/// naming the package when the tool is not installed.
pub(crate) fn command(argv: &[OsString]) -> Result<Command> {
    let name = argv[0].to_string_lossy();
    let program = find(&name).ok_or_else(|| {
        Error::precondition(format!(
            "{name} is not installed (looked in {SEARCH_PATH}); install the {} package",
            package_of(&name)
        ))
    })?;
    let mut cmd = Command::new(program);
    cmd.args(&argv[1..])
        .env_clear()
        .env("PATH", SEARCH_PATH)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    super::super::die_with_daemon(&mut cmd);
    Ok(cmd)
}

/// Runs a prepared command to completion; a failure to start it is an Internal error.
pub(crate) fn output(argv: &[OsString], mut cmd: Command) -> Result<Output> {
    tracing::debug!(argv = ?argv, "running");
    cmd.output().map_err(|e| Error::internal(format!("cannot run {}: {e}", show(argv))))
}

/// A descriptor a tool gets as the path `/proc/self/fd/N`: what was checked (a device node's
/// device number, a mount point's mount ID) is what the tool opens, whatever the path it was
/// reached by leads to meanwhile. A duplicate numbered above 2 (setting up the child's stdio
/// can't replace it), close-on-exec in this process, so that children other threads start
/// don't inherit it; [`output_with`] clears the flag in its own child only.
pub(crate) struct FdPath {
    fd: OwnedFd,
}

impl FdPath {
    pub(crate) fn new(fd: BorrowedFd<'_>) -> std::io::Result<FdPath> {
        Ok(FdPath { fd: rustix::io::fcntl_dupfd_cloexec(fd, 3)? })
    }

    /// `/proc/self/fd/N`, valid in the children of [`output_with`] (and in this process).
    pub(crate) fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }
}

/// Runs `argv` to completion with `fds` open in the child (as [`FdPath::path`]); the borrows
/// keep them open until the tool has exited.
#[allow(unsafe_code)] // pre_exec: a hook that runs between fork and exec
pub(crate) fn output_with(argv: &[OsString], fds: &[&FdPath]) -> Result<Output> {
    let mut cmd = command(argv)?;
    let raw: Vec<RawFd> = fds.iter().map(|f| f.fd.as_raw_fd()).collect();
    if !raw.is_empty() {
        // SAFETY: between fork and exec only fcntl runs, which is async-signal-safe, and the
        // loop over the vector allocated before the fork allocates nothing; every descriptor
        // in it is open in the child (fork copies descriptors, and only exec closes
        // close-on-exec ones; the borrows of `fds` keep them open here until `output` has
        // returned), and clearing the flag in the child does not affect this process.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                for &fd in &raw {
                    rustix::io::fcntl_setfd(BorrowedFd::borrow_raw(fd), rustix::io::FdFlags::empty())
                        .map_err(std::io::Error::from)?;
                }
                Ok(())
            });
        }
    }
    output(argv, cmd)
}

/// `out` when the tool exited with 0, else an Internal error saying what it printed.
pub(crate) fn checked(argv: &[OsString], out: Output) -> Result<Output> {
    if out.status.success() {
        Ok(out)
    } else {
        Err(Error::internal(failure(argv, &out)))
    }
}

/// [`output_with`], then [`checked`].
#[cfg(test)]
pub(crate) fn run_with(argv: &[OsString], fds: &[&FdPath]) -> Result<Output> {
    checked(argv, output_with(argv, fds)?)
}

/// "`argv` failed (exit N): what it printed".
pub(crate) fn failure(argv: &[OsString], out: &Output) -> String {
    let status = match out.status.code() {
        Some(code) => format!("exit status {code}"),
        None => format!("{}", out.status),
    };
    let text = [&out.stderr, &out.stdout]
        .iter()
        .map(|b| String::from_utf8_lossy(b).trim().to_string())
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    // Tools can be chatty; keep the end, where the reason is.
    let text = match text.char_indices().rev().nth(1500) {
        Some((i, _)) => format!("…{}", &text[i..]),
        None => text,
    };
    format!("{} failed ({status}): {text}", show(argv))
}

/// argv as one readable string, for messages only.
pub(crate) fn show(argv: &[OsString]) -> String {
    argv.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn strs(v: Vec<OsString>) -> Vec<String> {
        v.into_iter().map(|s| s.into_string().unwrap()).collect()
    }

    #[test]
    fn argvs() {
        let dev = Path::new("/dev/loop0p1");
        assert_eq!(strs(mkfs_argv(FsType::Ext4, dev)), ["mkfs.ext4", "-q", "-F", "-m", "0", "/dev/loop0p1"]);
        assert_eq!(strs(mkfs_argv(FsType::Xfs, dev)), ["mkfs.xfs", "-q", "/dev/loop0p1"]);
        assert_eq!(strs(mkfs_argv(FsType::Btrfs, dev)), ["mkfs.btrfs", "-q", "/dev/loop0p1"]);
        assert_eq!(strs(mkfs_argv(FsType::Ntfs, dev)), ["mkntfs", "-Q", "-q", "/dev/loop0p1"]);
        // A mount point with spaces or shell syntax stays one argument.
        let mp = Path::new("/k/a b;$(x)");
        assert_eq!(strs(Grow::Xfs.argv(mp)), ["xfs_growfs", "/k/a b;$(x)"]);
        assert_eq!(strs(Grow::Btrfs.argv(mp)), ["btrfs", "filesystem", "resize", "max", "/k/a b;$(x)"]);
        assert_eq!(strs(Grow::Ext.argv(dev)), ["resize2fs", "/dev/loop0p1"]);
        assert_eq!(strs(Grow::Ntfs.argv(dev)), ["ntfsresize", "-f", "-P", "/dev/loop0p1"]);
        assert_eq!(strs(e2fsck_argv(dev)), ["e2fsck", "-f", "-p", "/dev/loop0p1"]);
        assert_eq!(strs(ntfsfix_argv(dev)), ["ntfsfix", "-d", "/dev/loop0p1"]);
        assert_eq!(
            strs(ntfs3g_argv(dev, Path::new("/proc/self/fd/7"))),
            ["ntfs-3g", "/dev/loop0p1", "/proc/self/fd/7"]
        );
    }

    #[test]
    fn missing_tool_names_its_package() {
        let e = command(&[OsString::from("mkfs.nope")]).unwrap_err();
        assert!(matches!(e, Error::FailedPrecondition(_)), "{e:?}");
        assert!(e.to_string().contains("mkfs.nope is not installed"), "{e}");
    }

    #[test]
    fn runs_with_a_clean_environment() {
        let out = run_with(&["env".into()], &[]).unwrap();
        let env = String::from_utf8(out.stdout).unwrap();
        let mut lines: Vec<&str> = env.lines().collect();
        lines.sort();
        assert_eq!(lines, ["LC_ALL=C", &format!("PATH={SEARCH_PATH}")]);
        let e = run_with(&["false".into()], &[]).unwrap_err();
        assert!(e.to_string().starts_with("false failed (exit status 1)"), "{e}");
    }

    /// The "daemon" of [`a_tool_dies_with_the_daemon`]: a copy of this test binary that runs a
    /// tool which records its PID and waits, and never returns on its own.
    #[test]
    fn daemon_side_of_a_tool_dies_with_the_daemon() {
        let Ok(pid_file) = std::env::var("CSI_PROXY_TEST_PID_FILE") else { return };
        let _ = run_with(&["sh".into(), "-c".into(), "echo $$ > \"$0\"; exec sleep 120".into(), pid_file.into()], &[]);
    }

    /// A daemon killed with SIGKILL while a tool runs takes the tool with it (before, a killed
    /// daemon's mkfs went on writing the device the restarted daemon then saw as blank).
    #[test]
    fn a_tool_dies_with_the_daemon() {
        let pid_file = std::env::temp_dir().join(format!("csi-proxy-tool-pid-{}", std::process::id()));
        let _ = std::fs::remove_file(&pid_file);
        let mut daemon = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "linux::block::tools::tests::daemon_side_of_a_tool_dies_with_the_daemon"])
            .env("CSI_PROXY_TEST_PID_FILE", &pid_file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let read_pid = || std::fs::read_to_string(&pid_file).ok().and_then(|t| t.trim().parse::<i32>().ok());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let tool = loop {
            if let Some(pid) = read_pid() {
                break pid;
            }
            assert!(std::time::Instant::now() < deadline, "the tool never started");
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let alive = || {
            // A zombie still has a /proc entry: look at its state too.
            std::fs::read_to_string(format!("/proc/{tool}/stat"))
                .is_ok_and(|s| s.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
        };
        assert!(alive(), "tool {tool} runs");
        daemon.kill().unwrap();
        daemon.wait().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while alive() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let survived = alive();
        if survived {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(tool).unwrap(),
                rustix::process::Signal::KILL,
            );
        }
        let _ = std::fs::remove_file(&pid_file);
        assert!(!survived, "tool {tool} outlived the daemon that started it");
    }

    #[test]
    fn descriptors_reach_the_tool_and_only_it() {
        let dir = std::env::temp_dir().join(format!("csi-proxy-fdpath-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("data");
        std::fs::write(&file, b"through the descriptor").unwrap();
        let f = std::fs::File::open(&file).unwrap();
        let arg = FdPath::new(f.as_fd()).unwrap();
        drop(f);
        // The name now leads elsewhere; the tool still reads what was opened.
        std::fs::remove_file(&file).unwrap();
        std::fs::write(&file, b"replaced").unwrap();
        let path = arg.path();
        assert!(path.to_str().unwrap().starts_with("/proc/self/fd/"), "{path:?}");
        let out = run_with(&["cat".into(), path.clone().into()], &[&arg]).unwrap();
        assert_eq!(out.stdout, b"through the descriptor");
        // Close-on-exec here: a child not given it does not have it.
        let e = run_with(&["cat".into(), path.into()], &[]).unwrap_err();
        assert!(e.to_string().contains("No such file"), "{e}");
        // Still close-on-exec in this process after the run.
        let flags = rustix::io::fcntl_getfd(&arg.fd).unwrap();
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
