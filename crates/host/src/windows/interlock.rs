//! The interlocks of [`crate::interlock`] on Windows, from MSFT_Disk's documented flags
//! (learn.microsoft.com, windows-hardware/drivers/storage/msft-disk):
//! - `IsBoot`: the disk holds the boot volume, the one Windows runs from; its page file,
//!   hibernation file and crash dump are there unless moved;
//! - `IsSystem`: the disk holds the system partition (the boot manager's);
//! - `BootFromDisk`: the firmware boots from it (BIOS: the first disk; EFI: the one with the ESP).
//!
//! A page file or the crash dump moved off the boot volume makes its disk the system's too
//! (Azure's temporary disk `D:` holds `D:\pagefile.sys` by default): the disk's partitions'
//! access paths (MSFT_Partition.AccessPaths: drive letters and `\\?\Volume{…}\` names) are
//! compared with the volumes Win32_Volume says hold a page file (its `PageFilePresent`, which
//! the class's summary syntax leaves out but its Windows Server 2003 and later provider
//! reports) and with the drive of the crash dump file
//! (Win32_OSRecoveryConfiguration.ExpandedDebugFilePath, "the expanded version of the
//! DebugFilePath property", unless DebugInfoType is 0, none; learn.microsoft.com,
//! cimwin32prov/win32-osrecoveryconfiguration; the default `C:\Windows\MEMORY.DMP` is on the boot
//! volume, which `IsBoot` covers). A disk
//! without partitions holds no file, and costs only the one query of its access paths. The
//! hibernation file is always on the boot volume. A dedicated dump file (the registry's
//! CrashControl\DedicatedDumpFile) is not read here: name its disk with `-protected-disk`.
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

/// The access paths of disk `disk`'s partitions.
pub fn access_paths_query(disk: u32) -> Query {
    Query::select(Namespace::Storage, "MSFT_Partition", &["AccessPaths"]).eq("DiskNumber", disk)
}

/// The volumes that hold a page file.
pub fn page_file_query() -> Query {
    Query::select(Namespace::Cimv2, "Win32_Volume", &["DeviceID", "DriveLetter"]).eq("PageFilePresent", true)
}

/// Where the crash dump is written.
pub fn dump_query() -> Query {
    Query::select(Namespace::Cimv2, "Win32_OSRecoveryConfiguration", &["ExpandedDebugFilePath", "DebugInfoType"])
}

/// Why disk `disk` holds a page file or the crash dump, if it does: its partitions' access paths
/// against [`page_file_query`] and [`dump_query`].
fn system_files(wmi: &dyn Wmi, disk: u32) -> Result<Option<String>> {
    let mut paths = Vec::new();
    for row in wmi.query(&access_paths_query(disk))? {
        paths.extend(row.strs("AccessPaths")?.iter().map(|p| p.trim_end_matches('\\').to_ascii_uppercase()));
    }
    if paths.is_empty() {
        return Ok(None);
    }
    let on_disk = |path: &str| paths.contains(&path.trim_end_matches('\\').to_ascii_uppercase());
    for row in wmi.query(&page_file_query())? {
        let id = row.opt_str("DeviceID")?.unwrap_or_default();
        let letter = row.opt_str("DriveLetter")?.unwrap_or_default();
        if (!id.is_empty() && on_disk(id)) || (!letter.is_empty() && on_disk(letter)) {
            let name = if letter.is_empty() { id } else { letter };
            return Ok(Some(format!(
                "a page file is on its volume {} (Win32_Volume.PageFilePresent)",
                crate::error::clip(name)
            )));
        }
    }
    for row in wmi.query(&dump_query())? {
        // DebugInfoType 0: no dump is written at all.
        if matches!(row.get("DebugInfoType"), super::wmi::Value::I64(0) | super::wmi::Value::U64(0)) {
            continue;
        }
        let file = row.opt_str("ExpandedDebugFilePath")?.unwrap_or_default();
        // `X:\...`: the drive `X:`; anything else (a UNC or volume path) is not a drive here.
        let drive = file.get(..2).filter(|d| d.as_bytes()[0].is_ascii_alphabetic() && d.ends_with(':'));
        if let Some(drive) = drive.filter(|d| on_disk(d)) {
            return Ok(Some(format!(
                "the crash dump file {:?} is on its volume {drive} (Win32_OSRecoveryConfiguration.ExpandedDebugFilePath)",
                crate::error::clip(file)
            )));
        }
    }
    Ok(None)
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
    if let Some(why) = system_files(wmi, disk)? {
        return Err(refusal(action, what, &format!("disk {disk} is the system's: {why}")));
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

/// Scripts disk `disk` as a data disk to the interlocks: `row` for [`disk_query`] (a
/// [`data_disk_row`], or one a test made), no access paths for [`access_paths_query`].
#[cfg(any(test, feature = "scripted"))]
pub fn script_disk(s: &super::script::Script, disk: u32, row: super::wmi::Row) {
    s.on_query(&disk_query(disk), vec![row]);
    s.on_query(&access_paths_query(disk), vec![]);
}

/// The scripted platform's log lines of the interlock's queries of a data disk `disk` that has
/// no access paths ([`script_disk`]).
#[cfg(any(test, feature = "scripted"))]
pub fn disk_query_lines(disk: u32) -> [String; 2] {
    [
        format!("query {}", disk_query(disk).wql().expect("a fixed query")),
        format!("query {}", access_paths_query(disk).wql().expect("a fixed query")),
    ]
}
