//! Disk and storage device I/O controls: their codes, the input buffers the backend sends and
//! parsers for what the drivers answer.
//!
//! Layouts are the documented winioctl.h structures (little-endian, natural alignment). Every
//! offset and length read from a buffer is checked against it; a short or inconsistent buffer is
//! an [`Error::Internal`] naming the structure, never a panic.

use crate::{Error, Result};

/// `CTL_CODE(device, function, method, access)` of winioctl.h.
pub const fn ctl_code(device: u32, function: u32, method: u32, access: u32) -> u32 {
    (device << 16) | (access << 14) | (function << 2) | method
}

/// FILE_DEVICE_DISK: the device type of a disk in STORAGE_DEVICE_NUMBER and IOCTL_DISK_BASE.
pub const FILE_DEVICE_DISK: u32 = 0x07;
/// FILE_DEVICE_MASS_STORAGE, IOCTL_STORAGE_BASE.
pub const FILE_DEVICE_MASS_STORAGE: u32 = 0x2D;
pub const METHOD_BUFFERED: u32 = 0;
pub const FILE_ANY_ACCESS: u32 = 0;
pub const FILE_READ_ACCESS: u32 = 1;
pub const FILE_WRITE_ACCESS: u32 = 2;

/// CTL_CODE(IOCTL_STORAGE_BASE, 0x0420, METHOD_BUFFERED, FILE_ANY_ACCESS).
pub const IOCTL_STORAGE_GET_DEVICE_NUMBER: u32 = 0x2D_1080;
/// CTL_CODE(IOCTL_STORAGE_BASE, 0x0500, METHOD_BUFFERED, FILE_ANY_ACCESS).
pub const IOCTL_STORAGE_QUERY_PROPERTY: u32 = 0x2D_1400;
/// CTL_CODE(IOCTL_DISK_BASE, 0x0028, METHOD_BUFFERED, FILE_ANY_ACCESS). Its DiskSize is the
/// disk's length, as IOCTL_DISK_GET_LENGTH_INFO's, but it needs no data access (and Wine
/// implements it).
pub const IOCTL_DISK_GET_DRIVE_GEOMETRY_EX: u32 = 0x7_00A0;
/// CTL_CODE(IOCTL_DISK_BASE, 0x003c, METHOD_BUFFERED, FILE_ANY_ACCESS).
pub const IOCTL_DISK_GET_DISK_ATTRIBUTES: u32 = 0x7_00F0;
/// CTL_CODE(IOCTL_DISK_BASE, 0x003d, METHOD_BUFFERED, FILE_READ_ACCESS | FILE_WRITE_ACCESS): the
/// handle needs read and write access.
pub const IOCTL_DISK_SET_DISK_ATTRIBUTES: u32 = 0x7_C0F4;

/// DISK_ATTRIBUTE_* bits of GET/SET_DISK_ATTRIBUTES.
pub const DISK_ATTRIBUTE_OFFLINE: u64 = 0x1;
pub const DISK_ATTRIBUTE_READ_ONLY: u64 = 0x2;

/// STORAGE_PROPERTY_ID values.
pub const STORAGE_DEVICE_PROPERTY: u32 = 0;
pub const STORAGE_DEVICE_ID_PROPERTY: u32 = 2;
/// STORAGE_QUERY_TYPE PropertyStandardQuery.
pub const PROPERTY_STANDARD_QUERY: u32 = 0;

/// STORAGE_IDENTIFIER_CODE_SET values.
pub const CODE_SET_BINARY: u32 = 1;
pub const CODE_SET_ASCII: u32 = 2;
/// STORAGE_ASSOCIATION_TYPE StorageIdAssocDevice: the identifier names the logical unit itself
/// (not the port or the target).
pub const ASSOC_DEVICE: u32 = 0;

fn u16_at(buf: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(buf.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn u32_at(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(buf.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(buf: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(buf.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

fn short(structure: &str, len: usize, need: usize) -> Error {
    Error::internal(format!("{structure}: the driver answered {len} bytes, expected at least {need}"))
}

/// STORAGE_PROPERTY_QUERY { PropertyId: u32 @0, QueryType: u32 @4, AdditionalParameters\[1\] @8 },
/// 12 bytes with its padding.
pub fn property_query(property_id: u32) -> Vec<u8> {
    let mut buf = vec![0u8; 12];
    buf[0..4].copy_from_slice(&property_id.to_le_bytes());
    buf[4..8].copy_from_slice(&PROPERTY_STANDARD_QUERY.to_le_bytes());
    buf
}

/// SET_DISK_ATTRIBUTES: Version: u32 @0 (the structure's size, 40), Persist: BOOLEAN @4,
/// Reserved1\[3\] @5, Attributes: u64 @8, AttributesMask: u64 @16, Reserved2\[4\]: u32 @24.
pub fn set_disk_attributes(persist: bool, attributes: u64, mask: u64) -> Vec<u8> {
    const SIZE: usize = 40;
    let mut buf = vec![0u8; SIZE];
    buf[0..4].copy_from_slice(&(SIZE as u32).to_le_bytes());
    buf[4] = u8::from(persist);
    buf[8..16].copy_from_slice(&attributes.to_le_bytes());
    buf[16..24].copy_from_slice(&mask.to_le_bytes());
    buf
}

/// STORAGE_DEVICE_NUMBER { DeviceType: u32 @0, DeviceNumber: u32 @4, PartitionNumber: u32 @8 }.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceNumber {
    pub device_type: u32,
    pub device_number: u32,
    pub partition_number: u32,
}

pub fn device_number(buf: &[u8]) -> Result<DeviceNumber> {
    let field = |at| u32_at(buf, at).ok_or_else(|| short("STORAGE_DEVICE_NUMBER", buf.len(), 12));
    Ok(DeviceNumber { device_type: field(0)?, device_number: field(4)?, partition_number: field(8)? })
}

/// One STORAGE_IDENTIFIER of a device-id descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identifier {
    pub code_set: u32,
    pub kind: u32,
    pub association: u32,
    pub bytes: Vec<u8>,
}

/// STORAGE_DEVICE_ID_DESCRIPTOR { Version: u32 @0, Size: u32 @4, NumberOfIdentifiers: u32 @8,
/// Identifiers @12 }, each STORAGE_IDENTIFIER { CodeSet: u32 @0, Type: u32 @4,
/// IdentifierSize: u16 @8, NextOffset: u16 @10 (from this identifier's start),
/// Association: u32 @12, Identifier @16 }. Everything must lie within `Size` and within the
/// bytes the driver answered.
pub fn device_identifiers(buf: &[u8]) -> Result<Vec<Identifier>> {
    const NAME: &str = "STORAGE_DEVICE_ID_DESCRIPTOR";
    const HEADER: usize = 12;
    const ID_HEADER: usize = 16;
    let (Some(size), Some(count)) = (u32_at(buf, 4), u32_at(buf, 8)) else {
        return Err(short(NAME, buf.len(), HEADER));
    };
    let size = size as usize;
    if size < HEADER {
        return Err(Error::internal(format!("{NAME}: Size is {size}, less than its {HEADER}-byte header")));
    }
    // As in serial_number: drivers have answered a Size larger than the bytes they returned
    // (winioctl.h documents Size as "the total size of the data returned", which "may include
    // data that follows this structure"), so the bytes present bound it. Refusing the whole
    // descriptor would drop the disk from ListDiskIDs; an identifier that reaches past the
    // bytes present is still an error below.
    let size = size.min(buf.len());
    let desc = &buf[..size];
    let mut out = Vec::new();
    let mut at = HEADER;
    for i in 0..count {
        let bad = |what: String| Error::internal(format!("{NAME}: identifier {i} of {count} at offset {at}: {what}"));
        let (Some(code_set), Some(kind), Some(len), Some(next), Some(association)) = (
            u32_at(desc, at),
            u32_at(desc, at + 4),
            u16_at(desc, at + 8),
            u16_at(desc, at + 10),
            u32_at(desc, at + 12),
        ) else {
            return Err(bad(format!("its header ends past Size {size}")));
        };
        let start = at + ID_HEADER;
        let bytes = desc
            .get(start..start + usize::from(len))
            .ok_or_else(|| bad(format!("IdentifierSize {len} reaches past Size {size}")))?;
        out.push(Identifier { code_set, kind, association, bytes: bytes.to_vec() });
        if i + 1 < count {
            // A NextOffset that doesn't move past the header would read the same bytes again.
            if usize::from(next) < ID_HEADER {
                return Err(bad(format!("NextOffset {next} is less than the identifier header")));
            }
            at += usize::from(next);
        }
    }
    Ok(out)
}

/// The page 0x83 identifier as upstream picks it: the first one associated with the device whose
/// code set is binary (rendered as lowercase hex) or ASCII (its text as is). `None` when there
/// is none, e.g. on NVMe disks.
pub fn page83(ids: &[Identifier]) -> Option<String> {
    ids.iter().filter(|id| id.association == ASSOC_DEVICE).find_map(|id| match id.code_set {
        CODE_SET_BINARY => Some(id.bytes.iter().map(|b| format!("{b:02x}")).collect()),
        CODE_SET_ASCII => Some(String::from_utf8_lossy(&id.bytes).into_owned()),
        _ => None,
    })
}

/// The serial number of a STORAGE_DEVICE_DESCRIPTOR { Version: u32 @0, Size: u32 @4,
/// DeviceType: u8 @8, DeviceTypeModifier: u8 @9, RemovableMedia: u8 @10, CommandQueueing: u8
/// @11, VendorIdOffset: u32 @12, ProductIdOffset: u32 @16, ProductRevisionOffset: u32 @20,
/// SerialNumberOffset: u32 @24, BusType: u32 @28, RawPropertiesLength: u32 @32, … }: the string
/// at SerialNumberOffset up to its NUL (or the end of the descriptor), exactly as the driver
/// wrote it. `None` when the offset is 0 (no serial) or outside the descriptor.
pub fn serial_number(buf: &[u8]) -> Result<Option<String>> {
    const NAME: &str = "STORAGE_DEVICE_DESCRIPTOR";
    let (Some(size), Some(offset)) = (u32_at(buf, 4), u32_at(buf, 24)) else {
        return Err(short(NAME, buf.len(), 28));
    };
    // Drivers have answered a Size larger than what they wrote; the bytes present bound it.
    let end = (size as usize).min(buf.len());
    let offset = offset as usize;
    if offset == 0 || offset >= end {
        return Ok(None);
    }
    let text = &buf[offset..end];
    let text = &text[..text.iter().position(|&b| b == 0).unwrap_or(text.len())];
    Ok(Some(String::from_utf8_lossy(text).into_owned()))
}

/// DISK_GEOMETRY_EX { Geometry: DISK_GEOMETRY (24 bytes) @0, DiskSize: i64 @24, Data… }: the
/// disk's size in bytes.
pub fn disk_size(buf: &[u8]) -> Result<u64> {
    let raw = u64_at(buf, 24).ok_or_else(|| short("DISK_GEOMETRY_EX", buf.len(), 32))?;
    i64::try_from(raw)
        .map(|n| n as u64)
        .map_err(|_| Error::internal(format!("DISK_GEOMETRY_EX: DiskSize {} is negative", raw as i64)))
}

/// DISK_GEOMETRY_EX's Geometry.BytesPerSector (DISK_GEOMETRY { Cylinders: i64 @0, MediaType:
/// u32 @8, TracksPerCylinder: u32 @12, SectorsPerTrack: u32 @16, BytesPerSector: u32 @20 }).
pub fn bytes_per_sector(buf: &[u8]) -> Result<u32> {
    match u32_at(buf, 20).ok_or_else(|| short("DISK_GEOMETRY_EX", buf.len(), 24))? {
        0 => Err(Error::internal("DISK_GEOMETRY_EX: BytesPerSector is 0")),
        n => Ok(n),
    }
}

/// GET_DISK_ATTRIBUTES { Version: u32 @0, Reserved1: u32 @4, Attributes: u64 @8 }.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskAttributes(pub u64);

impl DiskAttributes {
    pub fn offline(self) -> bool {
        self.0 & DISK_ATTRIBUTE_OFFLINE != 0
    }
    pub fn read_only(self) -> bool {
        self.0 & DISK_ATTRIBUTE_READ_ONLY != 0
    }
}

pub fn disk_attributes(buf: &[u8]) -> Result<DiskAttributes> {
    u64_at(buf, 8).map(DiskAttributes).ok_or_else(|| short("GET_DISK_ATTRIBUTES", buf.len(), 16))
}
