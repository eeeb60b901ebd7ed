//! ResizeVolume: the partition grown, then the filesystem in it (the rules: `volumes.rs`).

use super::device::{about, check_unused, fd_path, label, Device};
use super::format::reader;
use super::lookup::HeldVolume;
use super::sys::Sys;
use super::tools::{self, Grow};
use super::{Block, Volume};
use crate::formats::probe;
use crate::{Error, Result};
use std::os::fd::AsFd;
use std::path::Path;

/// Upstream's tolerance: a requested size within this of the partition's is no change.
const RESIZE_TOLERANCE: u64 = 100 << 20;

/// A filesystem less than this smaller than its partition fills it: growing tools leave a
/// remainder (ext4 drops a last block group too small for its metadata, xfs a last allocation
/// group under 64 blocks, NTFS its backup boot sector).
const FILLED_SLACK: u64 = 16 << 20;

/// `CAP_SYS_RESOURCE`: what ext4's online resize checks.
const CAP_SYS_RESOURCE: u32 = 24;

impl Block {
    /// What ResizeVolume would do to a resolved volume: every refusal that can come before the
    /// partition changes comes here. With `claim`, an offline growth's device is also opened
    /// exclusively for a moment ([`check_unused`]), which a dry run must not do.
    fn grow_checks(&self, v: &HeldVolume, size_bytes: u64, claim: bool) -> Result<GrowChecks> {
        let grow_to = match size_bytes {
            0 => Some(0),
            s if s > v.size.saturating_add(RESIZE_TOLERANCE) => Some(s),
            s if s.saturating_add(RESIZE_TOLERANCE) < v.size => {
                return Err(Error::precondition(format!(
                    "cannot resize {} to {s} bytes: it is {} bytes and shrinking is not supported",
                    label(v),
                    v.size
                )))
            }
            _ => None,
        };
        let device = self.open_device(v)?;
        let kind = self.probe_device(v, &device)?;
        let mounts = self.read_mounts()?;
        // The mount, and an `O_PATH` descriptor of it whose mount ID was checked: what
        // xfs_growfs and btrfs are given.
        let mounted = self.open_mount_of(device.num, &mounts).map(|(m, fd)| (m.clone(), fd));
        let mount_point = mounted.as_ref().map(|(m, _)| m.mount_point.clone());
        let plan = kind.map(|k| grow_plan(v, k, mounted.is_some()));
        // A growth asked for explicitly is refused before the partition changes when the
        // filesystem could not follow it in its present state.
        if let (Some(1..), Some(plan)) = (grow_to, &plan) {
            let refusal = match (plan, &mount_point) {
                (Err(e), _) => Some(e.to_string()),
                (Ok(Grow::Ext), Some(mp)) if !has_capability(CAP_SYS_RESOURCE) => {
                    Some(ext_online_refused(v, mp).to_string())
                }
                (Ok(g), None) => match offline_ready(v, &device, *g, claim) {
                    Ok(()) => None,
                    Err(Error::FailedPrecondition(why)) => Some(why),
                    Err(e) => return Err(e),
                },
                _ => None,
            };
            if let Some(why) = refusal {
                return Err(Error::precondition(format!("{why}; nothing was changed")));
            }
        }
        Ok(GrowChecks { grow_to, device, kind, mounted, plan })
    }

    /// Dry-run of ResizeVolume on a resolved volume: [`Self::grow_checks`], told.
    pub(crate) fn plan_resize(&self, v: &HeldVolume, size_bytes: u64) -> Result<String> {
        let GrowChecks { grow_to, device, kind, mounted, plan } = self.grow_checks(v, size_bytes, false)?;
        let fs = match (kind, &plan) {
            (None, _) => "it holds no filesystem to grow".to_string(),
            (Some(k), Some(Err(e))) => format!("its {} filesystem cannot be grown: {e}", probe::describe(k)),
            (Some(k), _) => {
                let how = if mounted.is_some() { "online, mounted" } else { "offline" };
                format!("then its {} filesystem, {how}, to fill it", probe::describe(k))
            }
        };
        let fills = match kind {
            Some(k) => probe::fs_size(k, &self.read_head(v, &device)?)
                .is_some_and(|f| f.saturating_add(FILLED_SLACK) >= v.size),
            None => true,
        };
        Ok(match grow_to {
            Some(0) => {
                format!("would grow the partition of {} ({} bytes) to the end of its disk; {fs}", label(v), v.size)
            }
            Some(s) => format!("would grow the partition of {} from {} to {s} bytes; {fs}", label(v), v.size),
            None if fills => {
                format!("{} already has {} bytes, filled by its filesystem: nothing would change", label(v), v.size)
            }
            None => format!("would leave the partition of {} at {} bytes; {fs}", label(v), v.size),
        })
    }

    /// ResizeVolume on a resolved volume.
    pub(crate) fn resize(&self, v: &HeldVolume, size_bytes: u64) -> Result<()> {
        let GrowChecks { grow_to, device, kind, mounted, plan } = self.grow_checks(v, size_bytes, true)?;
        let before = v.size;
        let (v, device) = match grow_to {
            Some(s) => {
                tracing::info!(volume = %v.id, size = s, "growing the partition");
                let v = self.grow_held(v, s)?;
                // Checked again: the kernel's partition may have been replaced.
                let grown = [format!("the partition of {} was grown from {before} to {} bytes", label(&v), v.size)];
                let device = self.open_device(&v).map_err(|e| crate::error::after_changes(e, &grown))?;
                (v, device)
            }
            None => (v.volume.clone(), device),
        };
        // A growth of the filesystem that fails after the partition grew says so.
        let done: Vec<String> = (v.size != before)
            .then(|| format!("the partition of {} was grown from {before} to {} bytes", label(&v), v.size))
            .into_iter()
            .collect();
        let later = |e: Error| crate::error::after_changes(e, &done);
        let (Some(kind), Some(plan)) = (kind, plan) else { return Ok(()) };
        // A filesystem that already fills its partition has nothing to grow, whatever its state.
        let fs_size = probe::fs_size(kind, &self.read_head(&v, &device).map_err(later)?);
        if fs_size.is_some_and(|f| f.saturating_add(FILLED_SLACK) >= v.size) {
            return Ok(());
        }
        let plan = plan.map_err(|e| {
            Error::precondition(format!(
                "{e}, then call ResizeVolume again (the partition {} {} bytes)",
                if v.size == before { "is" } else { "has been grown to" },
                v.size
            ))
        })?;
        let dev_arg = fd_path(&v, &device).map_err(later)?;
        // Every error from here on goes through `later`, those of the arms' own steps too.
        let grow = || -> Result<()> {
            match (plan, &mounted) {
                (Grow::Ext, Some((m, _))) => {
                    tracing::info!(volume = %v.id, mount_point = %m.mount_point.display(), "growing the filesystem online");
                    grow_ext(&*self.sys, &v, &dev_arg, Some(&m.mount_point))
                }
                (Grow::Ext, None) => {
                    offline_ready(&v, &device, plan, true)?;
                    tracing::info!(volume = %v.id, node = %v.node.display(), "growing the filesystem offline");
                    grow_ext(&*self.sys, &v, &dev_arg, None)
                }
                (Grow::Ntfs, _) => {
                    // ntfsresize leaves the volume marked dirty (a chkdsk request for Windows), which
                    // the kernel's ntfs3 refuses to mount; ntfsfix -d clears it. offline_ready made
                    // sure the volume was clean before, so nothing is hidden by that.
                    offline_ready(&v, &device, plan, true)?;
                    tracing::info!(volume = %v.id, node = %v.node.display(), "growing the filesystem offline");
                    self.run_checked(&plan.argv(&dev_arg.path()), &[&dev_arg]).map_err(|e| about(&v, e))?;
                    self.run_checked(&tools::ntfsfix_argv(&dev_arg.path()), &[&dev_arg]).map_err(|e| about(&v, e))?;
                    Ok(())
                }
                (g, Some((m, fd))) => {
                    let mp_arg = tools::FdPath::new(fd.as_fd()).map_err(|e| {
                        Error::io(format!("duplicating a descriptor of {}", m.mount_point.display()), e)
                    })?;
                    tracing::info!(volume = %v.id, mount_point = %m.mount_point.display(), "growing the filesystem online");
                    self.run_checked(&g.argv(&mp_arg.path()), &[&mp_arg]).map(drop).map_err(|e| about(&v, e))
                }
                (g, None) => Err(Error::internal(format!("{g:?} growth of {} planned while unmounted", label(&v)))),
            }
        };
        grow().map_err(later)
    }
}

/// What [`Block::grow_checks`] found: the size to grow the partition to (`Some(0)`: to the end
/// of the disk; `None`: no change), the device, its filesystem, its mount, and how that
/// filesystem would grow.
struct GrowChecks {
    grow_to: Option<u64>,
    device: Device,
    kind: Option<&'static str>,
    mounted: Option<(crate::formats::mountinfo::Mount, std::os::fd::OwnedFd)>,
    plan: Option<Result<Grow>>,
}

/// What growing an unmounted filesystem with a tool that writes the device needs: nothing else
/// using the device ([`check_unused`]: the filesystem may be mounted in another mount
/// namespace), and, for NTFS, a clean volume — ntfsresize would resize a dirty one and the
/// ntfsfix after it would hide that it was dirty.
fn offline_ready(v: &Volume, device: &Device, plan: Grow, claim: bool) -> Result<()> {
    if claim {
        check_unused(v, device, "refusing to grow its filesystem offline")?;
    }
    if plan != Grow::Ntfs {
        return Ok(());
    }
    let dirty =
        probe::ntfs_dirty(&mut reader(v, device)?).map_err(|e| Error::io(format!("reading {}", label(v)), e))?;
    match dirty {
        Some(false) => Ok(()),
        Some(true) => Err(Error::precondition(format!(
            "cannot grow the NTFS filesystem on {}: it is marked dirty (not cleanly unmounted, or a consistency \
             check is pending); have it checked first (chkdsk /f on Windows, or ntfsfix), then call ResizeVolume \
             again",
            label(v)
        ))),
        None => Err(Error::precondition(format!(
            "cannot grow the NTFS filesystem on {}: its $Volume record can't be read to tell whether it is clean",
            label(v)
        ))),
    }
}

/// How to grow the filesystem `kind` on `v` in its present state, or why it can't be.
fn grow_plan(v: &Volume, kind: &str, mounted: bool) -> Result<Grow> {
    let needs = |state: &str| {
        Error::precondition(format!(
            "cannot grow the {kind} filesystem on {}: it can be grown only while {state}",
            label(v)
        ))
    };
    match (kind, mounted) {
        ("ext2" | "ext3" | "ext4", _) => Ok(Grow::Ext),
        ("xfs", true) => Ok(Grow::Xfs),
        ("btrfs", true) => Ok(Grow::Btrfs),
        ("xfs" | "btrfs", false) => Err(needs("mounted; mount it")),
        ("ntfs", false) => Ok(Grow::Ntfs),
        ("ntfs", true) => Err(needs("unmounted; unmount it")),
        (other, _) => Err(Error::precondition(format!(
            "cannot resize {}: it holds {}, which ResizeVolume does not grow",
            label(v),
            probe::describe(other)
        ))),
    }
}

/// resize2fs on the checked device, with the e2fsck it may ask for first when unmounted; the
/// missing capability for an online resize is a FailedPrecondition.
fn grow_ext(sys: &dyn Sys, v: &Volume, dev: &tools::FdPath, mounted: Option<&Path>) -> Result<()> {
    let argv = Grow::Ext.argv(&dev.path());
    for attempt in 0..2 {
        let out = sys.run(&argv, &[dev])?;
        if out.status.success() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
        if let (Some(mp), true) = (mounted, text.contains("Permission denied to resize filesystem")) {
            return Err(ext_online_refused(v, mp));
        }
        if attempt == 0 && mounted.is_none() && text.contains("Please run 'e2fsck -f") {
            let fsck = tools::e2fsck_argv(&dev.path());
            let out = sys.run(&fsck, &[dev])?;
            // 0: clean, 1: errors corrected; anything else needs a human.
            if !matches!(out.status.code(), Some(0 | 1)) {
                return Err(Error::precondition(format!("{}: {}", label(v), tools::failure(&fsck, &out))));
            }
            continue;
        }
        return Err(Error::internal(format!("{}: {}", label(v), tools::failure(&argv, &out))));
    }
    unreachable!("the loop returns on its second attempt")
}

fn ext_online_refused(v: &Volume, mount_point: &Path) -> Error {
    Error::precondition(format!(
        "cannot grow the ext4 filesystem on {} while it is mounted at {}: online resize needs \
         CAP_SYS_RESOURCE, which this daemon lacks; unmount the volume and call ResizeVolume again \
         (offline growth works), or give the daemon that capability",
        label(v),
        mount_point.display()
    ))
}

/// Whether this process has `cap` in its effective set (`/proc/self/status`, `CapEff`).
fn has_capability(cap: u32) -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return true };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_none_or(|mask| mask & (1 << cap) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vol() -> Volume {
        Volume {
            id: r"\\?\Volume{0b0c2f6e-8a3b-4b43-9c1a-2f4f0e6c1d2a}\".into(),
            disk: 7 << 20,
            index: 1,
            name: "loop0p1".into(),
            node: "/dev/loop0p1".into(),
            start: 1 << 20,
            size: 511 << 20,
            type_guid: crate::formats::gpt::Guid([0; 16]),
        }
    }

    #[test]
    fn grow_plans_follow_what_each_filesystem_allows() {
        let v = vol();
        assert_eq!(grow_plan(&v, "ext4", false).unwrap(), Grow::Ext);
        assert_eq!(grow_plan(&v, "ext3", true).unwrap(), Grow::Ext);
        assert_eq!(grow_plan(&v, "xfs", true).unwrap(), Grow::Xfs);
        assert_eq!(grow_plan(&v, "btrfs", true).unwrap(), Grow::Btrfs);
        assert_eq!(grow_plan(&v, "ntfs", false).unwrap(), Grow::Ntfs);
        for (kind, mounted) in [("xfs", false), ("btrfs", false), ("ntfs", true), ("vfat", false), ("swap", false)] {
            let e = grow_plan(&v, kind, mounted).unwrap_err();
            assert!(matches!(e, Error::FailedPrecondition(_)), "{kind}: {e:?}");
            assert!(e.to_string().contains(&v.id), "{e}");
        }
    }

    #[test]
    fn capabilities_are_read() {
        // No kernel defines capability 63.
        assert!(!has_capability(63));
    }
}
