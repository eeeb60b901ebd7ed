//! The interlocks of [`crate::interlock`] on Linux: what a disk is found to hold, from sysfs
//! (its partitions and their holders), the mount table and `/proc/swaps`.
//!
//! - The running system: a partition of the disk mounted at `/`, `/boot`, `/boot/efi`, `/usr` or
//!   `/var` (anywhere in the mount table, a bind mount of it included), or active swap on the
//!   disk or a partition.
//! - Held: anything in `holders/` of the disk or of a partition: a device-mapper device (LVM
//!   logical volumes, dm-crypt, multipath, a dm table of any kind) or an md array built on it.
//!   The holder is named, with its dm name where it has one. A filesystem on a holder is what the
//!   holder's user mounted; the disk under it is not ours to change.
//! - Mounted outside the working directories: the volume (or, for PartitionDisk and
//!   SetDiskState(offline), any partition of the disk, or the whole disk) mounted anywhere that
//!   is not inside a `-working-dir` or `-kubelet-path`: another user's data, or the node's.
//! - `-protected-disk`: by number, serial number or location.

use super::{Block, Disk, Volume};
use crate::formats::mountinfo::Mount;
use crate::interlock::{location_text, protected_by, refusal, Action};
use crate::{paths, Result};
use std::collections::BTreeMap;

/// Mount points that mean a disk holds the running system.
const SYSTEM_MOUNTS: [&str; 5] = ["/", "/boot", "/boot/efi", "/usr", "/var"];

impl Block {
    /// Refuses `action` on `disk` (on `volume` of it, for the volume calls) when an interlock
    /// holds (see the module documentation). Reads only; call it before changing anything.
    pub(crate) fn interlock(&self, disk: &Disk, volume: Option<&Volume>, action: Action) -> Result<()> {
        let what = match volume {
            Some(v) => format!("volume {} ({}, on {})", v.id, v.name, Self::disk_label(disk)),
            None => Self::disk_label(disk),
        };
        let refuse = |why: String| Err(refusal(action, &what, &why));
        if !self.protected.is_empty() {
            let serial = self.ids(disk).serial_number;
            let location = self.location(disk);
            if let Some(p) = protected_by(&self.protected, disk.number, &serial, &location) {
                let loc = location_text(&location);
                return refuse(format!(
                    "{} matches -protected-disk={p} (serial {serial:?}, location {loc})",
                    Self::disk_label(disk)
                ));
            }
        }
        // The disk and its partitions, by device number.
        let mut devices: BTreeMap<(u32, u32), String> = BTreeMap::new();
        devices.insert((disk.major, disk.minor), disk.name.clone());
        for p in self.kernel_partitions(disk)?.into_values() {
            if let Some(dev) = self.device_number(&p.name) {
                devices.insert(dev, p.name);
            }
        }
        for name in devices.values() {
            if let Some(holder) = self.holders(disk, name).into_iter().next() {
                return refuse(format!("{name} is held by {holder}"));
            }
        }
        let mounts = self.read_mounts()?;
        let on_disk = |m: &&Mount| devices.contains_key(&(m.major, m.minor));
        if let Some(m) =
            mounts.iter().filter(on_disk).find(|m| SYSTEM_MOUNTS.iter().any(|s| m.mount_point.as_os_str() == *s))
        {
            return refuse(format!(
                "it holds the running system ({} is mounted at {})",
                devices[&(m.major, m.minor)],
                m.mount_point.display()
            ));
        }
        for dev in self.sys.swaps().map_err(|e| crate::Error::internal(format!("reading /proc/swaps: {e}")))? {
            if let Some(name) = devices.get(&dev) {
                return refuse(format!("swap is active on {name}"));
            }
        }
        // The volume calls look at the volume's own mounts (its device, read once), the
        // whole-disk ones at every partition's.
        let only = match volume {
            Some(v) if !action.whole_disk() => Some(self.device_number(&v.name)),
            _ => None,
        };
        let ours = |m: &&Mount| only.is_none_or(|dev| dev == Some((m.major, m.minor)));
        let roots = self.fs.canonical_roots();
        let outside = |m: &&Mount| {
            let Some(text) = m.mount_point.to_str() else { return true };
            let names = paths::unix::parse(text).unwrap_or_default();
            !roots.iter().any(|r| paths::within(&names, r, false))
        };
        if let Some(m) = mounts.iter().filter(on_disk).filter(ours).find(outside) {
            return refuse(format!(
                "{} is mounted at {}, outside the working directories {}",
                devices[&(m.major, m.minor)],
                crate::error::clip(&m.mount_point.to_string_lossy()),
                self.fs.roots()
            ));
        }
        Ok(())
    }

    /// `major:minor` of a block device by its kernel name, from sysfs.
    fn device_number(&self, name: &str) -> Option<(u32, u32)> {
        let text = std::fs::read_to_string(self.block_dir(name).join("dev")).ok()?;
        let (major, minor) = text.trim().split_once(':')?;
        Some((major.parse().ok()?, minor.parse().ok()?))
    }

    /// What holds `name` (the disk itself or one of its partitions): each entry of its sysfs
    /// `holders/`, named with its device-mapper name where it has one (`dm-0 (device-mapper
    /// "vg-lv")`, `md0 (md RAID)`).
    fn holders(&self, disk: &Disk, name: &str) -> Vec<String> {
        let dir = if name == disk.name { self.block_dir(name) } else { self.block_dir(&disk.name).join(name) };
        let Ok(entries) = std::fs::read_dir(dir.join("holders")) else { return Vec::new() };
        let mut found: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .map(|h| {
                let dm = std::fs::read_to_string(self.block_dir(&h).join("dm/name")).ok();
                match dm {
                    Some(n) => {
                        format!("{h} (device-mapper {:?}: LVM, dm-crypt or multipath)", crate::error::clip(n.trim()))
                    }
                    None if h.starts_with("md") => format!("{h} (md RAID)"),
                    None => h,
                }
            })
            .collect();
        found.sort();
        found
    }
}
