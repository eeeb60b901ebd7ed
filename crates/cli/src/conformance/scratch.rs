//! What the conformance run makes on the node, and how it is removed: scratch disks behind
//! [`ScratchDisks`] (Linux: loop devices over sparse files; Windows: dynamic VHDX files through
//! the virtual disk API, [`super::vhd`]), and the
//! [`Made`] guard that removes disks, mounts and directories at the end, on failure, on a signal
//! and when dropped.
//!
//! Each thing is recorded in the run's [`Marker`] before it is made, so that what a run killed
//! outright leaves is removed by a later one ([`super::marker`]).
//!
//! A disk is ours only while its backing file is a file we created in a directory we created
//! (Linux: a loop device's backing file, created with `O_EXCL`, looked up before it is grown and
//! when it is removed; Windows: every call goes through the handle CreateVirtualDisk gave for
//! our file), so no other disk is ever grown, unmounted or detached.

use super::marker::Marker;
use anyhow::{Context as _, Result};
use std::path::{Path, PathBuf};

pub use platform::{detach_backing, mounts_below, unmount_below};

/// Why a disk step cannot run here.
#[derive(Debug, Clone)]
pub enum Unavailable {
    /// The OS API this needs is not available or not implemented here.
    #[cfg_attr(target_os = "linux", allow(dead_code))]
    NeedsWindows(String),
}

/// Scratch disks the run makes and owns.
pub trait ScratchDisks {
    /// A new blank disk of `size` bytes; its number as the daemon numbers disks.
    fn create(&mut self, size: u64) -> Result<Result<u32, Unavailable>>;
    /// The disk grows to `size` bytes and the OS is told (what the cloud does on expansion).
    fn grow(&mut self, disk: u32, size: u64) -> Result<()>;
    /// Removes the disk: whatever of it is still mounted, the device, its backing store.
    fn remove(&mut self, disk: u32) -> Result<()>;
    /// Removes every disk still made; the problems met, if any.
    fn remove_all(&mut self) -> Vec<String>;
}

/// Everything the run made, removed by [`Made::clean`] or on drop.
pub struct Made {
    /// The scratch directory under the kubelet path (every path the checks use is in it).
    pub kubelet_dir: PathBuf,
    /// The same with links resolved, as the mount table spells it.
    kubelet_real: PathBuf,
    /// Where the disks' backing files are, links resolved (as the kernel reports a loop
    /// device's backing file).
    pub scratch_dir: PathBuf,
    pub disks: Box<dyn ScratchDisks + Send>,
    /// What was about to be made, for a later run if this one is killed.
    marker: Marker,
    cleaned: bool,
}

/// A directory name of this run's own.
fn run_name() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos());
    format!("csi-proxy-conformance-{}-{}", std::process::id(), nanos.unwrap_or(0))
}

impl Made {
    /// Writes the run's marker, then creates the two scratch directories (they must not exist
    /// yet: nothing in them is someone else's).
    pub fn new(kubelet_path: &Path, scratch_base: &Path) -> Result<Made> {
        let name = run_name();
        let kubelet_dir = kubelet_path.join(&name);
        let scratch_dir = scratch_base.join(&name);
        let marker = Marker::create(kubelet_path, &name)?;
        let made = marker.dir(&kubelet_dir).and_then(|()| marker.dir(&scratch_dir)).and_then(|()| {
            std::fs::create_dir(&kubelet_dir)
                .with_context(|| format!("making the scratch directory {}", kubelet_dir.display()))?;
            if let Err(e) = std::fs::create_dir(&scratch_dir) {
                let _ = std::fs::remove_dir(&kubelet_dir);
                return Err(e).with_context(|| format!("making the scratch directory {}", scratch_dir.display()));
            }
            Ok(())
        });
        if let Err(e) = made {
            marker.remove();
            return Err(e);
        }
        let real = |dir: &Path| std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
        let (kubelet_real, scratch_real) = (real(&kubelet_dir), real(&scratch_dir));
        // The loop devices' files are named below the resolved path (as the kernel names them).
        for (dir, real) in [(&kubelet_dir, &kubelet_real), (&scratch_dir, &scratch_real)] {
            if dir != real {
                marker.dir(real)?;
            }
        }
        let disks = platform::disks(scratch_real.clone(), marker.clone());
        Ok(Made { kubelet_dir, kubelet_real, scratch_dir: scratch_real, disks, marker, cleaned: false })
    }

    /// Removes everything: mounts below the kubelet scratch directory (deepest first), the
    /// disks, then both directories. Returns what could not be removed.
    pub fn clean(&mut self) -> Vec<String> {
        self.cleaned = true;
        let mut problems = platform::unmount_below(&self.kubelet_real);
        problems.extend(self.disks.remove_all());
        for dir in [&self.kubelet_real, &self.scratch_dir] {
            if !platform::mounts_below(dir).is_empty() {
                // Never delete through a mount: what is mounted there may not be ours.
                problems.push(format!("{} still has mounts below it; left in place", dir.display()));
                continue;
            }
            match std::fs::remove_dir_all(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => problems.push(format!("removing {}: {e}", dir.display())),
            }
        }
        if problems.is_empty() {
            self.marker.remove();
        }
        problems
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        if !self.cleaned {
            for p in self.clean() {
                eprintln!("conformance cleanup: {}", crate::term::printable(&p));
            }
        }
    }
}

#[cfg(target_os = "linux")]
mod platform {
    use super::*;
    use anyhow::bail;
    use std::os::unix::ffi::OsStringExt;
    use std::os::unix::fs::OpenOptionsExt;
    use std::process::{Command, Stdio};

    /// The tools run with this PATH and nothing else in their environment.
    const PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

    /// Runs `argv` (no shell) and returns its stdout; a failure quotes (bounded) its stderr.
    fn tool(argv: &[&std::ffi::OsStr]) -> Result<String> {
        let out = Command::new(argv[0])
            .args(&argv[1..])
            .env_clear()
            .env("PATH", PATH)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {:?}", argv[0]))?;
        if !out.status.success() {
            let err: String = String::from_utf8_lossy(&out.stderr).trim().chars().take(200).collect();
            bail!("{:?} failed ({}): {err}", argv[0], out.status);
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    struct Loop {
        file: PathBuf,
        number: u32,
    }

    pub struct Disks {
        dir: PathBuf,
        made: Vec<Loop>,
        next: u32,
        marker: Marker,
    }

    pub fn disks(dir: PathBuf, marker: Marker) -> Box<dyn ScratchDisks + Send> {
        Box::new(Disks { dir, made: Vec::new(), next: 0, marker })
    }

    impl Disks {
        fn find(&self, disk: u32) -> Result<&Loop> {
            self.made.iter().find(|l| l.number == disk).with_context(|| format!("disk {disk} is not one this run made"))
        }
    }

    /// The loop devices (`loopN`) whose backing file is `file`.
    fn loops_backed_by(file: &Path) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir("/sys/block") else { return Vec::new() };
        let mut found = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with("loop") {
                continue;
            }
            let Ok(backing) = std::fs::read(e.path().join("loop/backing_file")) else { continue };
            let mut backing = backing;
            while backing.last() == Some(&b'\n') {
                backing.pop();
            }
            // A deleted backing file is shown with this suffix.
            if let Some(stripped) = backing.strip_suffix(b" (deleted)") {
                backing = stripped.to_vec();
            }
            if Path::new(&std::ffi::OsString::from_vec(backing)) == file {
                found.push(name);
            }
        }
        found
    }

    /// `(major << 20) | minor` of `loopN`: the Linux backend's disk number (as its NotFound
    /// answers say).
    fn number_of(name: &str) -> Result<u32> {
        let dev = std::fs::read_to_string(format!("/sys/block/{name}/dev")).with_context(|| format!("{name}: dev"))?;
        let (major, minor) = dev.trim().split_once(':').with_context(|| format!("{name}: dev {:?}", dev.trim()))?;
        let (major, minor): (u32, u32) = (major.parse()?, minor.parse()?);
        Ok((major << 20) | minor)
    }

    /// The device `loopN` and its partitions (`loopNpM`) as mount sources.
    fn is_of(source: &Path, name: &str) -> bool {
        let Some(s) = source.to_str().and_then(|s| s.strip_prefix("/dev/")) else { return false };
        s == name || s.strip_prefix(name).and_then(|r| r.strip_prefix('p')).is_some_and(|r| r.parse::<u32>().is_ok())
    }

    impl ScratchDisks for Disks {
        fn create(&mut self, size: u64) -> Result<Result<u32, Unavailable>> {
            let file = self.dir.join(format!("disk-{}.img", self.next));
            self.next += 1;
            // Before the file: a run killed after losetup leaves a device a later run finds.
            self.marker.loop_file(&file)?;
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&file)
                .with_context(|| format!("creating {}", file.display()))?;
            f.set_len(size).with_context(|| format!("sizing {}", file.display()))?;
            drop(f);
            let shown = tool(&[
                "losetup".as_ref(),
                "--find".as_ref(),
                "--show".as_ref(),
                "--partscan".as_ref(),
                file.as_os_str(),
            ]);
            let shown = match shown {
                Ok(s) => s,
                Err(e) => {
                    let _ = std::fs::remove_file(&file);
                    return Err(e);
                }
            };
            // Recorded first: cleanup finds the device by its backing file whatever fails next.
            self.made.push(Loop { file: file.clone(), number: u32::MAX });
            let name = shown.trim().strip_prefix("/dev/").unwrap_or("").to_owned();
            if !loops_backed_by(&file).contains(&name) {
                let shown: String = shown.trim().chars().take(64).collect();
                bail!("losetup answered {shown:?}, which is not backed by {}", file.display());
            }
            let number = number_of(&name)?;
            if let Some(l) = self.made.last_mut() {
                l.number = number;
            }
            Ok(Ok(number))
        }

        fn grow(&mut self, disk: u32, size: u64) -> Result<()> {
            let l = self.find(disk)?;
            let names = loops_backed_by(&l.file);
            let name = names.iter().find(|n| number_of(n).ok() == Some(disk)).context("its loop device is gone")?;
            std::fs::OpenOptions::new().write(true).open(&l.file)?.set_len(size)?;
            tool(&["losetup".as_ref(), "--set-capacity".as_ref(), format!("/dev/{name}").as_ref()])?;
            Ok(())
        }

        fn remove(&mut self, disk: u32) -> Result<()> {
            let at = self.made.iter().position(|l| l.number == disk).context("not a disk this run made")?;
            let l = self.made.remove(at);
            detach(&l.file)
        }

        fn remove_all(&mut self) -> Vec<String> {
            let made = std::mem::take(&mut self.made);
            made.iter().filter_map(|l| detach(&l.file).err().map(|e| format!("{e:#}"))).collect()
        }
    }

    /// Unmounts what is mounted from the loop devices backed by `file`, detaches them, and
    /// deletes the file.
    pub fn detach_backing(file: &Path) -> Result<()> {
        detach(file)
    }

    fn detach(file: &Path) -> Result<()> {
        for name in loops_backed_by(file) {
            let mut points: Vec<PathBuf> =
                mounts().into_iter().filter(|(_, src)| is_of(src, &name)).map(|(p, _)| p).collect();
            points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
            for p in points {
                rustix::mount::unmount(&p, rustix::mount::UnmountFlags::DETACH)
                    .with_context(|| format!("unmounting {} (from {name})", p.display()))?;
            }
            tool(&["losetup".as_ref(), "--detach".as_ref(), format!("/dev/{name}").as_ref()])?;
        }
        match std::fs::remove_file(file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).context(format!("removing {}", file.display()))
            }
            _ => Ok(()),
        }
    }

    /// (mount point, source) of every mount in this mount namespace.
    pub fn mounts() -> Vec<(PathBuf, PathBuf)> {
        let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                let dash = f.iter().position(|x| *x == "-")?;
                Some((unescape(f.get(4)?), unescape(f.get(dash + 2)?)))
            })
            .collect()
    }

    pub fn mounts_below(dir: &Path) -> Vec<PathBuf> {
        mounts().into_iter().map(|(p, _)| p).filter(|p| p.starts_with(dir)).collect()
    }

    /// Unmounts (lazily, deepest first) everything mounted below `dir`.
    pub fn unmount_below(dir: &Path) -> Vec<String> {
        let mut points = mounts_below(dir);
        points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        points
            .iter()
            .filter_map(|p| {
                let r = rustix::mount::unmount(p, rustix::mount::UnmountFlags::DETACH);
                r.err().map(|e| format!("unmounting {}: {e}", p.display()))
            })
            .collect()
    }

    /// A mountinfo field with its octal escapes (`\040`) decoded.
    fn unescape(f: &str) -> PathBuf {
        let b = f.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            let octal = b.get(i + 1..i + 4).filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
            match octal {
                Some(d) => {
                    out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8).wrapping_add(c - b'0')));
                    i += 4;
                }
                None => {
                    out.push(b[i]);
                    i += 1;
                }
            }
        }
        PathBuf::from(std::ffi::OsString::from_vec(out))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn mount_sources_of_a_loop_device_and_its_partitions() {
            assert!(is_of(Path::new("/dev/loop3"), "loop3"));
            assert!(is_of(Path::new("/dev/loop3p1"), "loop3"));
            assert!(!is_of(Path::new("/dev/loop31"), "loop3"));
            assert!(!is_of(Path::new("/dev/loop3px"), "loop3"));
            assert_eq!(unescape(r"/a\040b"), PathBuf::from("/a b"));
        }
    }
}

/// Windows: the scratch disk is a dynamic VHDX made and attached through the virtual disk API
/// (see [`super::vhd`]); mounts are volume mount points in folders.
#[cfg(windows)]
mod platform {
    pub use super::super::vhd::{mounts_below, unmount_below};
    use super::*;

    /// The VHDX files are in the scratch directory, and a disk detaches when the run's handle
    /// closes (killed or not): the marker's directories are all a later run needs.
    pub fn disks(dir: PathBuf, _marker: Marker) -> Box<dyn ScratchDisks + Send> {
        Box::new(super::super::vhd::Disks::new(dir))
    }

    pub fn detach_backing(file: &Path) -> Result<()> {
        anyhow::bail!("{}: no loop devices on Windows", file.display())
    }
}

/// Elsewhere no scratch disk can be made.
#[cfg(not(any(target_os = "linux", windows)))]
mod platform {
    use super::*;
    use anyhow::bail;

    pub struct Disks;

    pub fn disks(_dir: PathBuf, _marker: Marker) -> Box<dyn ScratchDisks + Send> {
        Box::new(Disks)
    }

    pub fn detach_backing(file: &Path) -> Result<()> {
        bail!("{}: no loop devices on this OS", file.display())
    }

    impl ScratchDisks for Disks {
        fn create(&mut self, _size: u64) -> Result<Result<u32, Unavailable>> {
            Ok(Err(Unavailable::NeedsWindows("CreateVirtualDisk (not on this OS)".into())))
        }
        fn grow(&mut self, _disk: u32, _size: u64) -> Result<()> {
            bail!("no scratch disk")
        }
        fn remove(&mut self, _disk: u32) -> Result<()> {
            Ok(())
        }
        fn remove_all(&mut self) -> Vec<String> {
            Vec::new()
        }
    }

    /// Nothing is mounted without a scratch disk (volume mount points come with the VHDX).
    pub fn mounts_below(_dir: &Path) -> Vec<PathBuf> {
        Vec::new()
    }

    pub fn unmount_below(_dir: &Path) -> Vec<String> {
        Vec::new()
    }
}
