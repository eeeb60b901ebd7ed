//! The disk group on Windows.
//!
//! Semantics, where they differ from upstream (docs/upstream.md#disk, #idempotency):
//!
//! - **ListDiskIDs**: the present disk interfaces (not MSFT_Disk), each opened without data
//!   access: IOCTL_STORAGE_GET_DEVICE_NUMBER gives the key (devices other than disks are left
//!   out), StorageDeviceIdProperty the page 0x83 ID by upstream's rule ("" when the device has
//!   none, as on NVMe) and StorageDeviceProperty the serial, trimmed of the blanks that pad it
//!   (upstream hands out MSFT_Disk.SerialNumber, padding and all). A disk that can't be opened
//!   or answers an IOCTL with an error is logged and left out; upstream fails the whole RPC.
//! - **GetDiskStats**: the DiskSize of IOCTL_DISK_GET_DRIVE_GEOMETRY_EX on `\\.\PhysicalDriveN`
//!   (no data access needed, unlike IOCTL_DISK_GET_LENGTH_INFO, which gives the same length).
//! - **GetDiskState / SetDiskState**: the disk's OFFLINE attribute (IOCTL_DISK_GET/
//!   SET_DISK_ATTRIBUTES), persisted as MSFT_Disk.Online/Offline do; a change is read back and
//!   the call fails when it didn't take. Online also clears the READ_ONLY attribute, persistently
//!   (upstream only calls MSFT_Disk.Online, which leaves a read-only disk read-only); the wire's
//!   GetDiskState has no field for read-only, so an online, read-only disk is logged.
//! - **PartitionDisk**: upstream's WMI steps, but "a data partition exists" is decided here:
//!   on GPT every partition but the MSR counts, on MBR every partition with a type; MBR disks get
//!   an IFS (type 7) partition where upstream asks for a GPT type. An offline or read-only disk
//!   that needs work is FailedPrecondition before anything is written; offline is the disk's
//!   attribute, as SetDiskState sets it, and a Storage-provider cache that disagrees is
//!   updated before the provider is asked to write.
//! - WMI method failures name the class, method, object and the documented meaning of the code.

use super::ioctl::{self, DiskAttributes};
use super::wmi::{Namespace, Query, Row, Value, Wmi};
use super::{code, Access, Win32};
use crate::interlock::{Action, ProtectedDisk};
use crate::types::{DiskIds, DiskLocation};
use crate::{DiskHost, Error, Result};
use std::collections::btree_map::{BTreeMap, Entry};
use std::io;
use std::sync::Arc;

/// The attribute bits SetDiskState sets (`.0`) under its mask (`.1`): online also means
/// writable (see `set_disk_state`); offline leaves read-only alone.
fn state_bits(online: bool) -> (u64, u64) {
    if online {
        (0, ioctl::DISK_ATTRIBUTE_OFFLINE | ioctl::DISK_ATTRIBUTE_READ_ONLY)
    } else {
        (ioctl::DISK_ATTRIBUTE_OFFLINE, ioctl::DISK_ATTRIBUTE_OFFLINE)
    }
}

/// PartitionDisk's refusal of a disk it cannot write.
fn refuse_unwritable(disk: u32, offline: bool, read_only: bool) -> Result<()> {
    if offline {
        return Err(Error::precondition(format!("disk {disk} is offline: bring it online before partitioning it")));
    }
    if read_only {
        return Err(Error::precondition(format!("disk {disk} is read-only: it can't be partitioned")));
    }
    Ok(())
}

#[cfg(test)]
mod tests;

/// GPT type of the Microsoft Reserved partition, which Initialize creates by itself.
pub const GPT_MSR: &str = "{e3c9e316-0b5c-4db8-817d-f92df00215ae}";
/// GPT type of a basic data partition.
pub const GPT_BASIC_DATA: &str = "{ebd0a0a2-b9e5-4433-87c0-68b6b72699c7}";
/// MBR type IFS (NTFS, exFAT).
pub const MBR_IFS: u16 = 7;

/// MSFT_Disk.PartitionStyle values.
const STYLE_RAW: u16 = 0;
const STYLE_MBR: u16 = 1;
const STYLE_GPT: u16 = 2;

/// MSFT_Disk.CreatePartition's "the requested access path is already in use": documented for a
/// partition that was created but could not get the drive letter asked for. We ask for none, so
/// it shouldn't come; if it does, the partition exists and the re-query below decides.
const ACCESS_PATH_IN_USE: u32 = 42002;

pub struct Disks {
    win32: Arc<dyn Win32>,
    wmi: Arc<dyn Wmi>,
    /// `-protected-disk` ([`crate::interlock`]).
    protected: Vec<ProtectedDisk>,
}

impl Disks {
    pub fn new(win32: Arc<dyn Win32>, wmi: Arc<dyn Wmi>) -> Self {
        Disks { win32, wmi, protected: Vec::new() }
    }

    /// This group with `-protected-disk`'s disks.
    pub fn protecting(mut self, disks: Vec<ProtectedDisk>) -> Self {
        self.protected = disks;
        self
    }

    /// The interlocks ([`super::interlock`]) for `action` on disk `disk`.
    fn interlock(&self, disk: u32, action: Action) -> Result<()> {
        super::interlock::check_disk(&*self.wmi, &self.protected, disk, action, &format!("disk {disk}"))
    }

    fn drive(disk: u32) -> String {
        format!(r"\\.\PhysicalDrive{disk}")
    }

    /// An IOCTL on `\\.\PhysicalDriveN`; a disk that isn't there is NotFound.
    fn disk_ioctl(&self, disk: u32, code: u32, name: &str, input: &[u8], access: Access) -> Result<Vec<u8>> {
        self.win32.ioctl(&Self::drive(disk), code, input, access).map_err(|e| match e.raw_os_error() {
            Some(code::ERROR_FILE_NOT_FOUND | code::ERROR_PATH_NOT_FOUND) => {
                Error::not_found(format!("disk {disk} not found"))
            }
            _ => win32_error(format!("{name} on disk {disk}"), e),
        })
    }

    fn attributes(&self, disk: u32) -> Result<DiskAttributes> {
        let out = self.disk_ioctl(
            disk,
            ioctl::IOCTL_DISK_GET_DISK_ATTRIBUTES,
            "IOCTL_DISK_GET_DISK_ATTRIBUTES",
            &[],
            Access::Query,
        )?;
        ioctl::disk_attributes(&out)
    }

    /// The IDs of one disk interface: `None` when it is not a disk.
    fn ids_of(&self, interface: &str) -> io::Result<Option<(u32, DiskIds)>> {
        let number = parse(ioctl::device_number(&self.win32.ioctl(
            interface,
            ioctl::IOCTL_STORAGE_GET_DEVICE_NUMBER,
            &[],
            Access::Query,
        )?))?;
        if number.device_type != ioctl::FILE_DEVICE_DISK {
            tracing::debug!(interface, device_type = number.device_type, "not a disk, left out");
            return Ok(None);
        }
        let query = ioctl::property_query(ioctl::STORAGE_DEVICE_ID_PROPERTY);
        let page83 = match self.win32.ioctl(interface, ioctl::IOCTL_STORAGE_QUERY_PROPERTY, &query, Access::Query) {
            Ok(out) => ioctl::page83(&parse(ioctl::device_identifiers(&out))?).unwrap_or_default(),
            // The documented answer of a device without the property (NVMe and others).
            Err(e) if e.raw_os_error() == Some(code::ERROR_NOT_SUPPORTED) => String::new(),
            Err(e) => return Err(e),
        };
        let query = ioctl::property_query(ioctl::STORAGE_DEVICE_PROPERTY);
        let out = self.win32.ioctl(interface, ioctl::IOCTL_STORAGE_QUERY_PROPERTY, &query, Access::Query)?;
        // Devices pad serials with blanks (SCSI INQUIRY fields, NVMe's 20 bytes); "" when blank.
        let serial_number = parse(ioctl::serial_number(&out))?
            .map(|s| s.trim_matches(|c: char| c == ' ' || c == '\0').to_owned())
            .unwrap_or_default();
        Ok(Some((number.device_number, DiskIds { page83, serial_number })))
    }

    fn disk_row(&self, disk: u32) -> Result<Row> {
        let q =
            Query::select(Namespace::Storage, "MSFT_Disk", &["Number", "PartitionStyle", "IsOffline", "IsReadOnly"])
                .eq("Number", disk);
        self.wmi.query(&q)?.into_iter().next().ok_or_else(|| Error::not_found(format!("disk {disk} not found")))
    }

    /// Refuses an offline or read-only disk before PartitionDisk writes to it.
    ///
    /// Online/offline is the disk's own attribute (IOCTL_DISK_GET_DISK_ATTRIBUTES), which
    /// SetDiskState changes, not MSFT_Disk.IsOffline: that is the Storage provider's cache,
    /// which an IOCTL does not go through, so right after SetDiskState it can still say
    /// offline. Where `row` disagrees with the disk, the provider's cache is updated first
    /// (MSFT_StorageSetting.UpdateHostStorageCache: "updates the internal cache of software
    /// objects (Disks, Partitions, Volumes)") and `row` re-read, because the provider's own
    /// Initialize and CreatePartition check their cached state ("the disk is offline", 41003).
    /// Read-only is refused when either says so: MSFT_Disk.IsReadOnly also covers media the
    /// attribute may not (write-protected hardware).
    fn ensure_writable(&self, disk: u32, row: &mut Row) -> Result<()> {
        let live = self.attributes(disk)?;
        if row.bool("IsOffline")? != live.offline() || row.bool("IsReadOnly")? != live.read_only() {
            tracing::info!(
                disk,
                offline = live.offline(),
                read_only = live.read_only(),
                "MSFT_Disk disagrees with the disk's attributes; updating the Storage provider's cache"
            );
            self.rescan()?;
            *row = self.disk_row(disk)?;
        }
        refuse_unwritable(disk, live.offline(), live.read_only() || row.bool("IsReadOnly")?)
    }

    /// What PartitionDisk would do, by reading only. No storage-cache update either: where the
    /// provider's row disagrees with the disk's live attributes (just after SetDiskState), the
    /// live attributes decide, as the real call's refreshed row would.
    fn plan_partition(&self, disk: u32) -> Result<String> {
        self.interlock(disk, Action::PartitionDisk)?;
        let row = self.disk_row(disk)?;
        let writable = || -> Result<()> {
            let live = self.attributes(disk)?;
            refuse_unwritable(disk, live.offline(), live.read_only())
        };
        let style = row.u16("PartitionStyle")?;
        const CREATE: &str = "one basic data partition of the maximum size, without a drive letter";
        if style == STYLE_RAW {
            writable()?;
            return Ok(format!("would initialize disk {disk} as GPT (MSFT_Disk.Initialize), then create {CREATE}"));
        }
        if style != STYLE_GPT && style != STYLE_MBR {
            return Err(Error::internal(format!(
                "disk {disk} has partition style {style}, expected 1 (MBR) or 2 (GPT)"
            )));
        }
        if !data_partitions(style, self.partitions(disk)?)?.is_empty() {
            return Ok(format!("disk {disk} already has a data partition: nothing would change"));
        }
        writable()?;
        Ok(format!("would create {CREATE} on disk {disk} (MSFT_Disk.CreatePartition) and bring it online"))
    }

    fn partitions(&self, disk: u32) -> Result<Vec<Row>> {
        let q = Query::select(
            Namespace::Storage,
            "MSFT_Partition",
            &["PartitionNumber", "GptType", "MbrType", "Size", "Offset"],
        )
        .eq("DiskNumber", disk);
        self.wmi.query(&q)
    }

    /// Calls `method` on `target` and turns a non-zero ReturnValue (other than those in `ok`)
    /// into an error.
    fn call(
        &self,
        class: &str,
        target: &str,
        method: &str,
        what: &str,
        args: &[(&'static str, Value)],
        ok: &[u32],
    ) -> Result<()> {
        let out = self.wmi.call(Namespace::Storage, target, method, args)?;
        match out.return_value()? {
            0 => Ok(()),
            code if ok.contains(&code) => {
                tracing::info!(class, method, what, code, meaning = return_code_meaning(code), "tolerated return code");
                Ok(())
            }
            code => Err(storage_method_error(class, method, what, code)),
        }
    }
}

/// A buffer the driver answered that doesn't parse, as an I/O error of that disk.
fn parse<T>(r: Result<T>) -> io::Result<T> {
    r.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
}

/// A Win32 failure while doing `what`, classified by the backend's one table
/// ([`super::failure`]).
pub(super) fn win32_error(what: String, e: io::Error) -> Error {
    super::failure(format_args!("{what} failed"), e)
}

/// Does `partition` hold data, on a disk of partition style `style`?
///
/// GPT: everything but the MSR counts. Other non-data types (EFI system, recovery, LDM) count
/// too, on purpose: Initialize creates only the MSR, so any other partition means someone laid
/// the disk out, and adding a partition to it would be guessing (upstream's rule, #145).
/// MBR: every partition with a type; GptType is NULL there, which is what breaks upstream's
/// `GptType <> MSR` filter.
fn is_data_partition(style: u16, partition: &Row) -> Result<bool> {
    Ok(match style {
        STYLE_GPT => match partition.opt_str("GptType")? {
            Some(t) => !t.trim_matches(['{', '}']).eq_ignore_ascii_case(GPT_MSR.trim_matches(['{', '}'])),
            // Unknown type: count it, so that nothing is created next to it.
            None => true,
        },
        _ => match partition.get("MbrType") {
            Value::Null => true,
            _ => partition.u16("MbrType")? != 0,
        },
    })
}

fn data_partitions(style: u16, partitions: Vec<Row>) -> Result<Vec<Row>> {
    let mut out = Vec::new();
    for p in partitions {
        if is_data_partition(style, &p)? {
            out.push(p);
        }
    }
    Ok(out)
}

/// The documented meaning of a Storage Management API method return code (MSFT_StorageObject
/// and its subclasses: MSFT_Disk, MSFT_Partition, MSFT_Volume, MSFT_StorageSetting).
pub(crate) fn return_code_meaning(code: u32) -> &'static str {
    match code {
        0 => "success",
        1 => "not supported",
        2 => "unspecified error",
        3 => "timeout",
        4 => "failed",
        5 => "invalid parameter",
        6 => "in use",
        7 => "not supported on x86 running in an x64 environment",
        8 => "object not found",
        4096 => "method parameters checked, job started",
        4097 => "size not supported",
        4098 => "timeout not supported",
        4099 => "the device is busy",
        40000 => "not enough available capacity",
        40001 => "access denied",
        40002 => "there are not enough resources to complete the operation",
        40003 => "cache out of date",
        40004 => "an unexpected I/O error has occurred",
        40005 => "a size must be given by either Size or UseMaximumSize, not both",
        40006 => "the object or object type requested does not exist in cache",
        40007 => "the request failed due to a fatal device hardware error",
        40018 => "the object is managed by Failover Clustering",
        41000 => "the disk has not been initialized",
        41001 => "the disk has already been initialized",
        41002 => "the disk is read only",
        41003 => "the disk is offline",
        41004 => "the disk's partition limit has been reached",
        41005 => "the partition alignment is not valid: it must be a multiple of the disk's sector size",
        41006 => "a parameter is not valid for this type of partition",
        41007 => "cannot clear with OEM partitions present",
        41008 => "cannot clear with data partitions present",
        41009 => "operation not supported on a critical disk",
        41010 => "the partition type is not valid",
        41011 => "only the first 2 TB are usable on MBR disks",
        41012 => "the offset is not valid",
        41013 => "cannot convert the style of a disk with data or other known partitions on it",
        41014 => "the disk is not large enough to support a GPT partition style",
        42000 => "the partition was deleted, although its access paths were not",
        42001 => "the extended partition still contains other partitions",
        42002 => "the requested access path is already in use",
        42004 => "cannot assign access paths to hidden partitions",
        42005 => "cannot remove a volume GUID path",
        42006 => "cannot remove the drive letter of a boot or paging file partition",
        42007 => "the access path is not valid",
        42008 => "cannot shrink a partition containing a volume with errors",
        42009 => "cannot resize a partition containing an unknown file system",
        42010 => "the operation is not allowed on a system or critical partition",
        42011 => "this operation is only supported on data partitions",
        42012 => "cannot assign multiple drive letters to a partition",
        42013 => "cannot assign a drive letter to this type of partition",
        43000 => "the cluster size is not valid",
        43001 => "the file system is not supported",
        43002 => "the volume cannot be quick formatted",
        43003 => "the number of clusters exceeds 32 bits",
        43004 => "the UDF version is not supported",
        43005 => "the cluster size must be a multiple of the disk's physical sector size",
        43006 => "cannot perform the operation when the drive is read only",
        43007 => "the repair failed",
        43008 => "the scan failed",
        43013 => "cannot open the drive for direct access",
        43014 => "cannot determine the file system of the drive",
        _ => "undocumented return code",
    }
}

/// The error for a Storage Management method `class.method` on `what` (e.g. "disk 3") that
/// returned `code`. States the caller can change (offline, read-only, in use, busy, already or
/// not yet initialized, stale cache) are FailedPrecondition, access denied is PermissionDenied,
/// everything else Internal.
pub(crate) fn storage_method_error(class: &str, method: &str, what: &str, code: u32) -> Error {
    let msg = format!("WMI {class}.{method} on {what} failed: {code} ({})", return_code_meaning(code));
    match code {
        40001 => Error::denied(msg),
        6 | 4099 | 40000 | 40003 | 40018 | 41000..=41004 | 41007..=41009 | 41013 | 42001 | 42008..=42011 | 43006 => {
            Error::precondition(msg)
        }
        _ => Error::internal(msg),
    }
}

/// Parses MSFT_Disk.Location (`PCI Slot 3 : Adapter 0 : Port 0 : Target 1 : LUN 0`) upstream's
/// way: at least 5 `:`-separated parts; a trimmed part that splits on single spaces into exactly
/// 2 tokens is a field (Adapter, Target, LUN, Bus; others are ignored). `None` when there are
/// fewer parts or no 2-token part.
pub fn parse_location(location: &str) -> Option<DiskLocation> {
    let parts: Vec<&str> = location.split(':').collect();
    if parts.len() < 5 {
        return None;
    }
    let mut loc = DiskLocation::default();
    let mut found = false;
    for part in parts {
        let tokens: Vec<&str> = part.trim().split(' ').collect();
        let [name, value] = tokens[..] else { continue };
        found = true;
        let value = value.trim().to_owned();
        match name.trim() {
            "Adapter" => loc.adapter = value,
            "Target" => loc.target = value,
            "LUN" => loc.lun_id = value,
            "Bus" => loc.bus = value,
            other => tracing::debug!(location, field = other, value, "unknown disk location field"),
        }
    }
    found.then_some(loc)
}

impl DiskHost for Disks {
    fn list_disk_locations(&self) -> Result<BTreeMap<u32, DiskLocation>> {
        let q = Query::select(Namespace::Storage, "MSFT_Disk", &["Number", "Location"]);
        let mut out = BTreeMap::new();
        for row in self.wmi.query(&q)? {
            let number = row.u32("Number")?;
            let location = row.opt_str("Location")?.unwrap_or_default();
            match parse_location(location) {
                Some(loc) => {
                    out.insert(number, loc);
                }
                None => tracing::debug!(disk = number, location, "disk location not understood, left out"),
            }
        }
        Ok(out)
    }

    fn partition_disk(&self, disk: u32) -> Result<()> {
        self.interlock(disk, Action::PartitionDisk)?;
        let mut row = self.disk_row(disk)?;
        let what = format!("disk {disk}");
        // Checked once, and only when there is something to write.
        let mut checked = false;
        let mut writable = |row: &mut Row| -> Result<()> {
            if !checked {
                self.ensure_writable(disk, row)?;
                checked = true;
            }
            Ok(())
        };
        let mut style = row.u16("PartitionStyle")?;
        if style == STYLE_RAW {
            writable(&mut row)?;
            // The check may have re-read a stale row.
            style = row.u16("PartitionStyle")?;
        }
        // What this call has changed so far, for the error of a later step.
        let mut done: Vec<String> = Vec::new();
        if style == STYLE_RAW {
            tracing::info!(disk, "initializing the disk as GPT");
            self.call("MSFT_Disk", &row.path, "Initialize", &what, &[("PartitionStyle", STYLE_GPT.into())], &[])?;
            style = STYLE_GPT;
            done.push(format!("disk {disk} was initialized as GPT"));
        }
        let later = |e: Error, done: &[String]| crate::error::after_changes(e, done);
        if style != STYLE_GPT && style != STYLE_MBR {
            return Err(Error::internal(format!(
                "disk {disk} has partition style {style}, expected 1 (MBR) or 2 (GPT)"
            )));
        }
        // Upstream leaves an existing partition as it is, without bringing it online.
        let existing = self.partitions(disk).and_then(|p| data_partitions(style, p)).map_err(|e| later(e, &done))?;
        if !existing.is_empty() {
            tracing::debug!(disk, "the disk already has a data partition");
            return Ok(());
        }
        writable(&mut row).map_err(|e| later(e, &done))?;
        let kind: (&'static str, Value) =
            if style == STYLE_GPT { ("GptType", GPT_BASIC_DATA.into()) } else { ("MbrType", MBR_IFS.into()) };
        let args = [
            ("UseMaximumSize", Value::Bool(true)),
            ("AssignDriveLetter", Value::Bool(false)),
            kind,
            ("IsHidden", Value::Bool(false)),
            ("IsActive", Value::Bool(false)),
        ];
        tracing::info!(disk, style, "creating a data partition over the whole disk");
        self.call("MSFT_Disk", &row.path, "CreatePartition", &what, &args, &[ACCESS_PATH_IN_USE])
            .map_err(|e| later(e, &done))?;
        done.push(format!("a data partition was created on disk {disk}"));
        let online = || -> Result<()> {
            self.call("MSFT_Disk", &row.path, "Refresh", &what, &[], &[])?;
            let created = data_partitions(style, self.partitions(disk)?)?;
            let first = created.first().ok_or_else(|| {
                Error::internal(format!("disk {disk} has no data partition after MSFT_Disk.CreatePartition succeeded"))
            })?;
            let partition = format!("partition {} of disk {disk}", first.u32("PartitionNumber")?);
            self.call("MSFT_Partition", &first.path, "Online", &partition, &[], &[])
        };
        online().map_err(|e| later(e, &done))
    }

    fn plan_partition_disk(&self, disk: u32) -> Result<String> {
        self.plan_partition(disk)
    }

    fn plan_set_disk_state(&self, disk: u32, online: bool) -> Result<String> {
        let now = self.attributes(disk)?;
        let (attributes, mask) = state_bits(online);
        if now.0 & mask == attributes {
            return Ok(format!(
                "disk {disk} is already {}: nothing would change",
                if online { "online and writable" } else { "offline" }
            ));
        }
        if !online {
            self.interlock(disk, Action::SetDiskOffline)?;
        }
        Ok(format!(
            "would set disk {disk} {} (IOCTL_DISK_SET_DISK_ATTRIBUTES, persisted); it is now {}{}",
            if online { "online and writable" } else { "offline" },
            if now.offline() { "offline" } else { "online" },
            if now.read_only() { " and read-only" } else { "" }
        ))
    }

    fn rescan(&self) -> Result<()> {
        self.call("MSFT_StorageSetting", "MSFT_StorageSetting", "UpdateHostStorageCache", "the host", &[], &[])
    }

    fn list_disk_ids(&self) -> Result<BTreeMap<u32, DiskIds>> {
        let interfaces =
            self.win32.disk_interfaces().map_err(|e| win32_error("listing the disk interfaces".to_owned(), e))?;
        let mut out = BTreeMap::new();
        for interface in interfaces {
            match self.ids_of(&interface) {
                Ok(Some((number, ids))) => match out.entry(number) {
                    Entry::Vacant(slot) => {
                        slot.insert(ids);
                    }
                    Entry::Occupied(_) => {
                        tracing::debug!(interface, disk = number, "second interface of a disk, left out")
                    }
                },
                Ok(None) => {}
                // One bad disk (GitHub's runners answer ERROR_INVALID_FUNCTION for some) must not
                // hide the others.
                Err(error) => {
                    tracing::warn!(interface, code = error.raw_os_error(), %error, "disk left out of the IDs")
                }
            }
        }
        Ok(out)
    }

    fn get_disk_stats(&self, disk: u32) -> Result<u64> {
        // The IOCTL needs read access, which the trait only offers together with write access.
        let out = self.disk_ioctl(
            disk,
            ioctl::IOCTL_DISK_GET_DRIVE_GEOMETRY_EX,
            "IOCTL_DISK_GET_DRIVE_GEOMETRY_EX",
            &[],
            Access::Query,
        )?;
        ioctl::disk_size(&out)
    }

    fn set_disk_state(&self, disk: u32, online: bool) -> Result<()> {
        let now = self.attributes(disk)?;
        // Online also means writable: a disk re-attached read-only, or left offline and
        // read-only by a signature collision (kubernetes-csi/csi-proxy#437, #287), is cleared as
        // `diskpart attributes disk clear readonly` clears it. Offline leaves read-only alone.
        let (attributes, mask) = state_bits(online);
        if now.0 & mask == attributes {
            tracing::debug!(disk, online, "the disk is already in the desired state");
            return Ok(());
        }
        if !online {
            self.interlock(disk, Action::SetDiskOffline)?;
        }
        // SET_DISK_ATTRIBUTES (winioctl.h, learn.microsoft.com ns-winioctl-set_disk_attributes):
        // only the attributes whose bit is set in AttributesMask change, to their bit in
        // Attributes; Persist TRUE keeps them across reboots, as MSFT_Disk.Online/Offline and
        // diskpart do, instead of falling back to the SAN policy's.
        let input = ioctl::set_disk_attributes(true, attributes, mask);
        tracing::info!(disk, online, offline = now.offline(), read_only = now.read_only(), "changing the disk's state");
        self.disk_ioctl(
            disk,
            ioctl::IOCTL_DISK_SET_DISK_ATTRIBUTES,
            "IOCTL_DISK_SET_DISK_ATTRIBUTES",
            &input,
            Access::ReadWrite,
        )?;
        let after = self.attributes(disk)?;
        if after.0 & mask != attributes {
            let still = match (after.offline(), online) {
                (true, true) => "offline",
                (false, false) => "online",
                _ => "read-only",
            };
            return Err(Error::internal(format!(
                "disk {disk} is still {still} after IOCTL_DISK_SET_DISK_ATTRIBUTES succeeded"
            )));
        }
        Ok(())
    }

    /// The wire's GetDiskState has only `is_online`: a disk that is online but read-only is
    /// online there, and said so in the log.
    fn get_disk_state(&self, disk: u32) -> Result<bool> {
        let now = self.attributes(disk)?;
        if !now.offline() && now.read_only() {
            tracing::warn!(disk, "the disk is online but read-only; SetDiskState(online) clears that");
        }
        Ok(!now.offline())
    }
}
