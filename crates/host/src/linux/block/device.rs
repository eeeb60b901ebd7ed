//! The partition device of a volume, opened and checked, and what the volume calls share:
//! how they name a volume, the checks before a tool writes the device.
//!
//! The partition device: every call that touches it opens `/dev/<name>` and checks the node's
//! device number against sysfs (a static or copied `/dev` can hold stale nodes of other
//! partitions), then works through that descriptor; tools (mkfs, resize2fs, e2fsck,
//! ntfsresize, ntfsfix, ntfs-3g) get it as `/proc/self/fd/N`. The kernel's mount gets the
//! node's path (mountinfo shows it), and the new mount's device is checked before it is
//! attached.

use super::sys::{DiskFd, Open};
use super::tools;
use super::{Block, Volume};
use crate::{Error, Result};
use rustix::io::Errno;
use std::ffi::OsString;
use std::process::Output;
use std::time::{Duration, Instant};

/// How long a missing partition node is waited for: where udev runs, it re-reads a partition
/// table after the disk was written, and the partitions' nodes disappear for a moment.
pub(crate) const NODE_WAIT: Duration = Duration::from_secs(5);

/// A block device number: (major, minor).
pub(super) type DevNum = (u32, u32);

impl Block {
    /// The volume's partition device `/dev/<name>`, opened and checked to be the block device
    /// the kernel has for the partition (sysfs `dev`): a static or copied `/dev` can hold stale
    /// nodes whose numbers now belong to another partition. Everything done to the device goes
    /// through this descriptor (tools get it as `/proc/self/fd/N`). Where udev runs, a node is
    /// briefly missing or stale after the kernel re-read a partition table: both are waited for
    /// up to [`NODE_WAIT`].
    pub(super) fn open_device(&self, v: &Volume) -> Result<Device> {
        require_device(v)?;
        let deadline = Instant::now() + NODE_WAIT;
        loop {
            let want = self.devnum_of(v)?;
            let file = match self.sys.open(&v.node, Open::Read).map_err(std::io::Error::from) {
                Ok(f) => f,
                // ENOENT: udev has not made the node yet. ENXIO or ENODEV: the node is there but
                // the kernel has no device behind its numbers, as while a table re-read removes
                // and re-adds the disk's partitions. Both pass once udev and the kernel agree.
                Err(e) if node_not_ready(&e) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                Err(e) if node_not_ready(&e) && e.kind() != std::io::ErrorKind::NotFound => {
                    let want = self.devnum_of(v)?;
                    return Err(Error::precondition(format!(
                        "refusing to use {}: the device node {} names no device the kernel has ({e}), but the \
                         kernel's partition {} is block device {}:{} (a stale or copied /dev?)",
                        label(v),
                        v.node.display(),
                        v.name,
                        want.0,
                        want.1
                    )));
                }
                Err(e) => return Err(Error::io(format!("opening {}", label(v)), e)),
            };
            let (block, got) = file.device().map_err(|e| Error::io(format!("checking {}", label(v)), e.into()))?;
            if block && got == want {
                return Ok(Device { file, num: want });
            }
            if Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            let what = if block { format!("block device {}:{}", got.0, got.1) } else { "not a block device".into() };
            return Err(Error::precondition(format!(
                "refusing to use {}: the device node {} is {what}, but the kernel's partition {} is block \
                 device {}:{} (a stale or copied /dev?)",
                label(v),
                v.node.display(),
                v.name,
                want.0,
                want.1
            )));
        }
    }

    /// [`Sys::run`](super::sys::Sys::run), then [`tools::checked`].
    pub(super) fn run_checked(&self, argv: &[OsString], fds: &[&tools::FdPath]) -> Result<Output> {
        tools::checked(argv, self.sys.run(argv, fds)?)
    }

    /// (major, minor) of the volume's partition device, from sysfs.
    pub(super) fn devnum_of(&self, v: &Volume) -> Result<DevNum> {
        require_device(v)?;
        let path = self.sysfs.join("class/block").join(&v.name).join("dev");
        let text = std::fs::read_to_string(&path).map_err(|e| {
            Error::precondition(format!("{}: the kernel has no partition device {} ({e})", label(v), v.name))
        })?;
        parse_devnum(text.trim())
            .ok_or_else(|| Error::internal(format!("{}: unexpected contents {text:?}", path.display())))
    }
}

/// The volume's partition device, opened and checked by [`Block::open_device`].
pub(super) struct Device {
    pub(super) file: Box<dyn DiskFd>,
    /// Its device number, as sysfs and the node agree.
    pub(super) num: DevNum,
}

/// The checked device as a tool argument.
pub(super) fn fd_path(v: &Volume, device: &Device) -> Result<tools::FdPath> {
    device.file.tool_path().map_err(|e| Error::io(format!("duplicating a descriptor of {}", label(v)), e))
}

/// FailedPrecondition when something holds the device exclusively: a mount (in this mount
/// namespace or any other — mountinfo shows only ours), a RAID or device-mapper user. Opens
/// the checked device again, exclusively, and lets go at once.
pub(super) fn check_unused(v: &Volume, device: &Device, refusing: &str) -> Result<()> {
    // A FUSE filesystem (ntfs-3g) lets go of its device a moment after its unmount returns:
    // busy is the answer only if it lasts.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut opened = device.file.open_exclusive_again();
    while matches!(opened, Err(Errno::BUSY)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        opened = device.file.open_exclusive_again();
    }
    match opened {
        Ok(()) => Ok(()),
        Err(Errno::BUSY) => Err(Error::precondition(format!(
            "{} is in use elsewhere (mounted, possibly in another mount namespace, or held by another device); \
             {refusing}",
            label(v)
        ))),
        Err(e) => Err(Error::io(format!("opening {} exclusively", label(v)), e.into())),
    }
}

/// A tool's error about `v`, naming the volume (tools name the device as `/proc/self/fd/N`).
pub(super) fn about(v: &Volume, e: Error) -> Error {
    match e {
        Error::Internal(msg) => Error::Internal(format!("{}: {msg}", label(v))),
        Error::FailedPrecondition(msg) => Error::FailedPrecondition(format!("{}: {msg}", label(v))),
        other => other,
    }
}

pub(super) fn parse_devnum(text: &str) -> Option<DevNum> {
    let (a, b) = text.split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// A volume the kernel has no partition device for (its table changed behind the kernel's
/// back) can't be worked on until a Rescan tells the kernel.
pub(super) fn require_device(v: &Volume) -> Result<()> {
    if v.name.is_empty() {
        return Err(Error::precondition(format!(
            "volume {} has no partition device: the kernel does not know partition {} of disk {}; call Rescan",
            v.id, v.index, v.disk
        )));
    }
    Ok(())
}

/// An error opening a device node that waiting can cure: no node yet (ENOENT), or a node whose
/// numbers name no device at the moment (ENXIO, ENODEV).
pub(super) fn node_not_ready(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound
        || matches!(e.raw_os_error(), Some(code) if code == rustix::io::Errno::NXIO.raw_os_error()
            || code == rustix::io::Errno::NODEV.raw_os_error())
}

/// How messages name a volume: its ID and its device.
pub(super) fn label(v: &Volume) -> String {
    format!("volume {} ({})", v.id, v.node.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_are_parsed() {
        assert_eq!(parse_devnum("259:3"), Some((259, 3)));
        assert_eq!(parse_devnum("259"), None);
    }
}
