//! The interlocks of [`crate::interlock`] on Windows, from MSFT_Disk's documented flags
//! (learn.microsoft.com, windows-hardware/drivers/storage/msft-disk):
//! - `IsBoot`: the disk holds the boot volume, the one Windows runs from; its page file,
//!   hibernation file and crash dump are there unless moved;
//! - `IsSystem`: the disk holds the system partition (the boot manager's);
//! - `BootFromDisk`: the firmware boots from it (BIOS: the first disk; EFI: the one with the ESP).
//!
//! Then `-protected-disk` (number, MSFT_Disk.SerialNumber trimmed, MSFT_Disk.Location as
//! ListDiskLocations parses it), and for the volume calls the volume's mount points
//! (GetVolumePathNamesForVolumeNameW): a drive letter or a folder outside the working directories
//! means someone else's volume (the temporary disk's `D:\` in azuredisk-csi-driver#2661).
//!
//! One query of MSFT_Disk by number per guarded call, made before anything is written.

use super::disks::parse_location;
use super::wmi::{Namespace, Query, Wmi};
use crate::interlock::{location_text, protected_by, refusal, Action, ProtectedDisk};
use crate::{Error, Result};

/// What the interlock reads of a disk.
pub const DISK_PROPS: [&str; 6] = ["Number", "IsBoot", "IsSystem", "BootFromDisk", "SerialNumber", "Location"];

/// The query of [`DISK_PROPS`] for disk `disk` (the scripted tests answer it).
pub fn disk_query(disk: u32) -> Query {
    Query::select(Namespace::Storage, "MSFT_Disk", &DISK_PROPS).eq("Number", disk)
}

/// Refuses `action` on `what` (disk `disk`, or a volume of it) when the disk holds the running
/// system or is protected.
pub fn check_disk(wmi: &dyn Wmi, protected: &[ProtectedDisk], disk: u32, action: Action, what: &str) -> Result<()> {
    let row = (wmi.query(&disk_query(disk))?.into_iter().next())
        .ok_or_else(|| Error::not_found(format!("disk {disk} not found")))?;
    let flags = [
        ("IsBoot", "it holds the boot volume (Windows, and by default its page file, hibernation file and crash dump)"),
        ("IsSystem", "it holds the system partition (the boot manager)"),
        ("BootFromDisk", "the firmware boots from it"),
    ];
    for (flag, why) in flags {
        if row.bool(flag)? {
            return Err(refusal(action, what, &format!("disk {disk} is the system's: {why} (MSFT_Disk.{flag})")));
        }
    }
    if !protected.is_empty() {
        let serial = row.opt_str("SerialNumber")?.unwrap_or_default().trim();
        let location = parse_location(row.opt_str("Location")?.unwrap_or_default()).unwrap_or_default();
        if let Some(p) = protected_by(protected, disk, serial, &location) {
            let why = format!(
                "disk {disk} matches -protected-disk={p} (serial {:?}, location {})",
                crate::error::clip(serial),
                location_text(&location)
            );
            return Err(refusal(action, what, &why));
        }
    }
    Ok(())
}

/// A data disk as [`disk_query`] answers it: none of the system's, no serial, no location; for
/// the scripted platform.
#[cfg(any(test, feature = "scripted"))]
pub fn data_disk_row(disk: u32) -> super::wmi::Row {
    super::wmi::Row::new("MSFT_Disk", format!("MSFT_Disk{disk}"))
        .with("Number", disk)
        .with("IsBoot", false)
        .with("IsSystem", false)
        .with("BootFromDisk", false)
        .with("SerialNumber", super::wmi::Value::Null)
        .with("Location", super::wmi::Value::Null)
}

/// The scripted platform's log line of [`disk_query`] for `disk`.
#[cfg(any(test, feature = "scripted"))]
pub fn disk_query_line(disk: u32) -> String {
    format!("query {}", disk_query(disk).wql().expect("a fixed query"))
}
