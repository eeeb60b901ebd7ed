//! Output buffers of the volume and disk I/O controls the volume group reads, parsed from bytes.
//!
//! The real layer hands back whatever the driver wrote; nothing here trusts a count or a length
//! before checking it against the buffer, so a short or hostile buffer is an error, never a
//! panic or an allocation larger than the buffer itself. Layouts are the documented x64/x86
//! ones (winioctl.h): little-endian, natural alignment, so 64-bit fields sit on 8-byte offsets.

use crate::{Error, Result};

/// `IOCTL_VOLUME_GET_VOLUME_DISK_EXTENTS`: CTL_CODE(IOCTL_VOLUME_BASE 0x56, 0, METHOD_BUFFERED,
/// FILE_ANY_ACCESS). Answers a [`parse_disk_extents`] buffer.
pub const IOCTL_VOLUME_GET_VOLUME_DISK_EXTENTS: u32 = 0x0056_0000;
/// `IOCTL_DISK_GET_PARTITION_INFO_EX`: CTL_CODE(IOCTL_DISK_BASE 7, 0x12, METHOD_BUFFERED,
/// FILE_ANY_ACCESS). Sent to a volume, its partition's entry; answers [`parse_partition_info`].
pub const IOCTL_DISK_GET_PARTITION_INFO_EX: u32 = 0x0007_0048;

/// `IOCTL_DISK_GET_DRIVE_LAYOUT_EX`: CTL_CODE(IOCTL_DISK_BASE 7, 0x14, METHOD_BUFFERED,
/// FILE_ANY_ACCESS). Sent to a disk, its partition table; answers [`parse_drive_layout`].
pub const IOCTL_DISK_GET_DRIVE_LAYOUT_EX: u32 = 0x0007_0050;

/// One `DISK_EXTENT`: (DiskNumber, StartingOffset, ExtentLength), offsets in bytes.
pub type DiskExtent = (u32, i64, i64);

/// `VOLUME_DISK_EXTENTS`: a DWORD count, 4 bytes of padding (the array's LARGE_INTEGERs align
/// it to 8), then `DISK_EXTENT`s of 24 bytes each (DWORD, padding, two LARGE_INTEGERs).
const EXTENTS_ARRAY: usize = 8;
const EXTENT_SIZE: usize = 24;

/// `PARTITION_INFORMATION_EX`: the union of the MBR and GPT parts starts at offset 32.
const PARTITION_UNION: usize = 32;
/// Bytes of the GPT part we read: PartitionType and PartitionId, two GUIDs.
const GPT_GUIDS: usize = 32;

/// `PARTITION_STYLE`.
pub const PARTITION_STYLE_MBR: u32 = 0;
pub const PARTITION_STYLE_GPT: u32 = 1;
pub const PARTITION_STYLE_RAW: u32 = 2;

/// The table a partition belongs to, with what identifies its kind there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionStyle {
    /// `PARTITION_INFORMATION_MBR.PartitionType`, e.g. 0x07 for NTFS.
    Mbr { partition_type: u8 },
    /// `PARTITION_INFORMATION_GPT`'s GUIDs as `{xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx}`, lower case.
    Gpt { partition_type: String, partition_id: String },
    /// A disk with no partition table (a "superfloppy"): the volume spans the whole disk.
    Raw,
}

/// What `IOCTL_DISK_GET_PARTITION_INFO_EX` says about a volume's partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    pub style: PartitionStyle,
    pub starting_offset: i64,
    pub length: i64,
    /// 1-based; 0 where the partition has no number (RAW disks).
    pub number: u32,
}

fn read<const N: usize>(buf: &[u8], at: usize, what: &str, field: &str) -> Result<[u8; N]> {
    at.checked_add(N).and_then(|end| buf.get(at..end)).map(|b| b.try_into().expect("slice of length N")).ok_or_else(
        || {
            Error::internal(format!(
                "{what} of {} bytes is too short for {field} at offset {at}; expected at least {} bytes",
                buf.len(),
                at.saturating_add(N)
            ))
        },
    )
}

fn u32_at(buf: &[u8], at: usize, what: &str, field: &str) -> Result<u32> {
    read::<4>(buf, at, what, field).map(u32::from_le_bytes)
}

/// A LARGE_INTEGER that is a byte offset or length, so never negative.
fn offset_at(buf: &[u8], at: usize, what: &str, field: &str) -> Result<i64> {
    let n = read::<8>(buf, at, what, field).map(i64::from_le_bytes)?;
    if n < 0 {
        return Err(Error::internal(format!("{what}: {field} is {n}; expected a byte count of 0 or more")));
    }
    Ok(n)
}

/// Parses `VOLUME_DISK_EXTENTS`: every extent of the volume, in the driver's order.
pub fn parse_disk_extents(buf: &[u8]) -> Result<Vec<DiskExtent>> {
    const WHAT: &str = "VOLUME_DISK_EXTENTS";
    let count = u32_at(buf, 0, WHAT, "NumberOfDiskExtents")?;
    let needed = (count as usize).checked_mul(EXTENT_SIZE).and_then(|n| n.checked_add(EXTENTS_ARRAY));
    match needed {
        Some(n) if n <= buf.len() => {}
        _ => {
            return Err(Error::internal(format!(
                "{WHAT} of {} bytes claims {count} extents; expected {EXTENTS_ARRAY} + {EXTENT_SIZE} bytes per extent",
                buf.len()
            )))
        }
    }
    // The count is now bounded by the buffer's length, and so is this allocation.
    let mut out = Vec::with_capacity(count as usize);
    for i in 0..count as usize {
        let at = EXTENTS_ARRAY + i * EXTENT_SIZE;
        out.push((
            u32_at(buf, at, WHAT, "DiskNumber")?,
            offset_at(buf, at + 8, WHAT, "StartingOffset")?,
            offset_at(buf, at + 16, WHAT, "ExtentLength")?,
        ));
    }
    Ok(out)
}

/// Parses `PARTITION_INFORMATION_EX`.
pub fn parse_partition_info(buf: &[u8]) -> Result<PartitionInfo> {
    const WHAT: &str = "PARTITION_INFORMATION_EX";
    let style = u32_at(buf, 0, WHAT, "PartitionStyle")?;
    let starting_offset = offset_at(buf, 8, WHAT, "StartingOffset")?;
    let length = offset_at(buf, 16, WHAT, "PartitionLength")?;
    let number = u32_at(buf, 24, WHAT, "PartitionNumber")?;
    let style = match style {
        PARTITION_STYLE_MBR => {
            PartitionStyle::Mbr { partition_type: read::<1>(buf, PARTITION_UNION, WHAT, "Mbr.PartitionType")?[0] }
        }
        PARTITION_STYLE_GPT => {
            let guids = read::<GPT_GUIDS>(buf, PARTITION_UNION, WHAT, "Gpt.PartitionType and Gpt.PartitionId")?;
            PartitionStyle::Gpt { partition_type: format_guid(&guids[..16]), partition_id: format_guid(&guids[16..]) }
        }
        PARTITION_STYLE_RAW => PartitionStyle::Raw,
        other => {
            return Err(Error::internal(format!(
                "{WHAT}: PartitionStyle is {other}; expected 0 (MBR), 1 (GPT) or 2 (RAW)"
            )))
        }
    };
    Ok(PartitionInfo { style, starting_offset, length, number })
}

/// `DRIVE_LAYOUT_INFORMATION_EX`: PartitionStyle (DWORD @0), PartitionCount (DWORD @4), the
/// union of DRIVE_LAYOUT_INFORMATION_MBR and _GPT at 8 (GPT: DiskId GUID @8,
/// StartingUsableOffset @24, UsableLength @32, MaxPartitionCount DWORD @40; padded to 40 bytes by
/// the LARGE_INTEGERs' alignment), then PartitionEntry\[PartitionCount\] of
/// PARTITION_INFORMATION_EX, 144 bytes each, from offset 48.
const LAYOUT_ENTRIES: usize = 48;
const PARTITION_INFO_SIZE: usize = 144;

/// What `IOCTL_DISK_GET_DRIVE_LAYOUT_EX` says of a disk's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriveLayout {
    /// `PARTITION_STYLE_MBR`, `_GPT` or `_RAW`.
    pub style: u32,
    /// GPT only: where the usable area starts and how long it is, in bytes, and how many entries
    /// the table's array holds.
    pub gpt_usable: Option<(i64, i64, u32)>,
    /// Every entry, including unused ones (length 0), in the driver's order.
    pub partitions: Vec<PartitionInfo>,
}

/// Parses `DRIVE_LAYOUT_INFORMATION_EX`.
pub fn parse_drive_layout(buf: &[u8]) -> Result<DriveLayout> {
    const WHAT: &str = "DRIVE_LAYOUT_INFORMATION_EX";
    let style = u32_at(buf, 0, WHAT, "PartitionStyle")?;
    let count = u32_at(buf, 4, WHAT, "PartitionCount")?;
    let gpt_usable = match style {
        PARTITION_STYLE_GPT => Some((
            offset_at(buf, 24, WHAT, "Gpt.StartingUsableOffset")?,
            offset_at(buf, 32, WHAT, "Gpt.UsableLength")?,
            u32_at(buf, 40, WHAT, "Gpt.MaxPartitionCount")?,
        )),
        PARTITION_STYLE_MBR | PARTITION_STYLE_RAW => None,
        other => {
            return Err(Error::internal(format!(
                "{WHAT}: PartitionStyle is {other}; expected 0 (MBR), 1 (GPT) or 2 (RAW)"
            )))
        }
    };
    let needed = (count as usize).checked_mul(PARTITION_INFO_SIZE).and_then(|n| n.checked_add(LAYOUT_ENTRIES));
    if count > 0 && !matches!(needed, Some(n) if n <= buf.len()) {
        return Err(Error::internal(format!(
            "{WHAT} of {} bytes claims {count} partitions; expected {LAYOUT_ENTRIES} + {PARTITION_INFO_SIZE} bytes per \
             partition",
            buf.len()
        )));
    }
    // Bounded by the buffer's length, as is this allocation.
    let mut partitions = Vec::with_capacity(count as usize);
    for i in 0..count as usize {
        let at = LAYOUT_ENTRIES + i * PARTITION_INFO_SIZE;
        partitions.push(parse_partition_info(&buf[at..at + PARTITION_INFO_SIZE])?);
    }
    Ok(DriveLayout { style, gpt_usable, partitions })
}

/// A GUID as stored in memory (Data1 u32, Data2 u16 and Data3 u16 little-endian, then Data4's
/// eight bytes in order), in the registry's spelling, lower case.
pub fn format_guid(raw: &[u8]) -> String {
    debug_assert_eq!(raw.len(), 16);
    let mut g = [0u8; 16];
    let n = raw.len().min(16);
    g[..n].copy_from_slice(&raw[..n]);
    let d1 = u32::from_le_bytes([g[0], g[1], g[2], g[3]]);
    let d2 = u16::from_le_bytes([g[4], g[5]]);
    let d3 = u16::from_le_bytes([g[6], g[7]]);
    let tail: String = g[10..].iter().map(|b| format!("{b:02x}")).collect();
    format!("{{{d1:08x}-{d2:04x}-{d3:04x}-{:02x}{:02x}-{tail}}}", g[8], g[9])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The basic data partition type, in memory order and as text.
    const BASIC_DATA_RAW: [u8; 16] =
        [0xa2, 0xa0, 0xd0, 0xeb, 0xe5, 0xb9, 0x33, 0x44, 0x87, 0xc0, 0x68, 0xb6, 0xb7, 0x26, 0x99, 0xc7];
    const BASIC_DATA: &str = "{ebd0a0a2-b9e5-4433-87c0-68b6b72699c7}";

    fn extents(count: u32, list: &[(u32, i64, i64)]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(count.to_le_bytes()); // NumberOfDiskExtents
        b.extend([0; 4]); // padding: Extents[] is 8-aligned
        for (disk, start, len) in list {
            b.extend(disk.to_le_bytes()); // DISK_EXTENT.DiskNumber
            b.extend([0; 4]); // padding before the LARGE_INTEGERs
            b.extend(start.to_le_bytes()); // DISK_EXTENT.StartingOffset
            b.extend(len.to_le_bytes()); // DISK_EXTENT.ExtentLength
        }
        b
    }

    fn partition(style: u32, start: i64, len: i64, number: u32, union: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(style.to_le_bytes()); // PartitionStyle
        b.extend([0; 4]); // padding: StartingOffset is 8-aligned
        b.extend(start.to_le_bytes()); // StartingOffset
        b.extend(len.to_le_bytes()); // PartitionLength
        b.extend(number.to_le_bytes()); // PartitionNumber
        b.push(1); // RewritePartition
        b.push(0); // IsServicePartition
        b.extend([0; 2]); // padding: the union is 8-aligned (GPT's Attributes)
        assert_eq!(b.len(), PARTITION_UNION);
        b.extend(union);
        b
    }

    fn gpt_union(kind: [u8; 16], id: [u8; 16]) -> Vec<u8> {
        let mut u = Vec::new();
        u.extend(kind); // Gpt.PartitionType
        u.extend(id); // Gpt.PartitionId
        u.extend(0x8000_0000_0000_0000u64.to_le_bytes()); // Gpt.Attributes
        u.extend([0; 72]); // Gpt.Name: WCHAR[36]
        u
    }

    fn mbr_union(kind: u8) -> Vec<u8> {
        let mut u = vec![kind, 1, 1, 0]; // Mbr.PartitionType, BootIndicator, RecognizedPartition, padding
        u.extend(2048u32.to_le_bytes()); // Mbr.HiddenSectors
        u.extend([0; 16]); // Mbr.PartitionId
        u.extend([0; 88]); // rest of the union (GPT's size)
        u
    }

    #[test]
    fn disk_extents_parse_with_the_array_at_offset_8() {
        let one = extents(1, &[(3, 1 << 20, 10 << 30)]);
        assert_eq!(one.len(), 32);
        assert_eq!(parse_disk_extents(&one).unwrap(), vec![(3, 1 << 20, 10 << 30)]);
        let two = extents(2, &[(1, 0, 512), (7, 4096, 1 << 40)]);
        assert_eq!(parse_disk_extents(&two).unwrap(), vec![(1, 0, 512), (7, 4096, 1 << 40)]);
        assert_eq!(parse_disk_extents(&extents(0, &[])).unwrap(), vec![]);
        // Trailing bytes beyond the counted extents (a larger buffer) are ignored.
        let mut long = extents(1, &[(2, 0, 1)]);
        long.extend([0xff; 40]);
        assert_eq!(parse_disk_extents(&long).unwrap(), vec![(2, 0, 1)]);
    }

    #[test]
    fn disk_extents_refuse_short_buffers_and_bad_values() {
        let err = parse_disk_extents(&extents(2, &[(1, 0, 512)])).unwrap_err().to_string();
        assert!(err.contains("claims 2 extents") && err.contains("32 bytes"), "{err}");
        let huge = parse_disk_extents(&extents(u32::MAX, &[])).unwrap_err().to_string();
        assert!(huge.contains(&u32::MAX.to_string()), "{huge}");
        assert!(parse_disk_extents(&[1, 0, 0]).unwrap_err().to_string().contains("NumberOfDiskExtents"));
        assert!(parse_disk_extents(&[]).is_err());
        // One byte short of the last extent.
        let mut cut = extents(1, &[(1, 0, 512)]);
        cut.pop();
        assert!(parse_disk_extents(&cut).is_err());
        let neg = parse_disk_extents(&extents(1, &[(1, -1, 512)])).unwrap_err().to_string();
        assert!(neg.contains("StartingOffset is -1"), "{neg}");
        assert!(parse_disk_extents(&extents(1, &[(1, 0, i64::MIN)])).unwrap_err().to_string().contains("ExtentLength"));
    }

    #[test]
    fn gpt_partition_info_carries_both_guids() {
        let id = [0x78, 0x56, 0x34, 0x12, 0xbc, 0x9a, 0xf0, 0xde, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef];
        let buf = partition(PARTITION_STYLE_GPT, 16 << 20, 5 << 30, 2, &gpt_union(BASIC_DATA_RAW, id));
        assert_eq!(buf.len(), 144, "sizeof(PARTITION_INFORMATION_EX)");
        let info = parse_partition_info(&buf).unwrap();
        assert_eq!(
            info,
            PartitionInfo {
                style: PartitionStyle::Gpt {
                    partition_type: BASIC_DATA.into(),
                    partition_id: "{12345678-9abc-def0-0123-456789abcdef}".into()
                },
                starting_offset: 16 << 20,
                length: 5 << 30,
                number: 2,
            }
        );
        // The two GUIDs are all the GPT part needs.
        assert!(parse_partition_info(&buf[..PARTITION_UNION + 32]).is_ok());
        let err = parse_partition_info(&buf[..PARTITION_UNION + 31]).unwrap_err().to_string();
        assert!(err.contains("Gpt.PartitionType") && err.contains("64 bytes"), "{err}");
    }

    #[test]
    fn mbr_and_raw_partition_info() {
        let mbr = parse_partition_info(&partition(PARTITION_STYLE_MBR, 1 << 20, 1 << 30, 1, &mbr_union(0x07))).unwrap();
        assert_eq!(mbr.style, PartitionStyle::Mbr { partition_type: 0x07 });
        assert_eq!((mbr.starting_offset, mbr.length, mbr.number), (1 << 20, 1 << 30, 1));
        let raw = parse_partition_info(&partition(PARTITION_STYLE_RAW, 0, 8 << 30, 0, &[0; 112])).unwrap();
        assert_eq!(raw.style, PartitionStyle::Raw);
        assert_eq!(raw.number, 0);
        // RAW needs nothing from the union; MBR needs its first byte.
        assert!(parse_partition_info(&partition(PARTITION_STYLE_RAW, 0, 1, 0, &[])).is_ok());
        assert!(parse_partition_info(&partition(PARTITION_STYLE_MBR, 0, 1, 1, &[])).is_err());
    }

    #[test]
    fn partition_info_refuses_unknown_styles_short_buffers_and_negative_sizes() {
        let err = parse_partition_info(&partition(3, 0, 1, 1, &[0; 112])).unwrap_err().to_string();
        assert!(err.contains("PartitionStyle is 3") && err.contains("0 (MBR)"), "{err}");
        let err = parse_partition_info(&partition(PARTITION_STYLE_MBR, 0, -5, 1, &mbr_union(7))).unwrap_err();
        assert!(err.to_string().contains("PartitionLength is -5"), "{err}");
        let err = parse_partition_info(&[0; 27]).unwrap_err().to_string();
        assert!(err.contains("PartitionNumber at offset 24") && err.contains("27 bytes"), "{err}");
        assert!(parse_partition_info(&[]).is_err());
    }

    #[test]
    fn guids_use_the_mixed_endian_layout() {
        assert_eq!(format_guid(&BASIC_DATA_RAW), BASIC_DATA);
        assert_eq!(format_guid(&[0; 16]), "{00000000-0000-0000-0000-000000000000}");
        assert_eq!(format_guid(&[0xff; 16]), "{ffffffff-ffff-ffff-ffff-ffffffffffff}");
    }

    /// DRIVE_LAYOUT_INFORMATION_EX of a GPT disk, field by field, with `entries` (each a
    /// PARTITION_INFORMATION_EX).
    fn gpt_layout(usable: (i64, i64), max: u32, entries: &[Vec<u8>]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(PARTITION_STYLE_GPT.to_le_bytes()); // PartitionStyle
        b.extend((entries.len() as u32).to_le_bytes()); // PartitionCount
        b.extend([9; 16]); // Gpt.DiskId
        b.extend(usable.0.to_le_bytes()); // Gpt.StartingUsableOffset
        b.extend(usable.1.to_le_bytes()); // Gpt.UsableLength
        b.extend(max.to_le_bytes()); // Gpt.MaxPartitionCount
        b.extend([0; 4]); // padding: the union is 40 bytes
        assert_eq!(b.len(), LAYOUT_ENTRIES);
        for e in entries {
            b.extend(e);
        }
        b
    }

    #[test]
    fn drive_layouts_list_every_entry() {
        let id = [1; 16];
        let msr = [0x16, 0xe3, 0xc9, 0xe3, 0x5c, 0x0b, 0xb8, 0x4d, 0x81, 0x7d, 0xf9, 0x2d, 0xf0, 0x02, 0x15, 0xae];
        let entries = [
            partition(PARTITION_STYLE_GPT, 17408, 16 << 20, 1, &gpt_union(msr, id)),
            partition(PARTITION_STYLE_GPT, 16 << 20, 5 << 30, 2, &gpt_union(BASIC_DATA_RAW, id)),
        ];
        let buf = gpt_layout((17408, (10 << 30) - 34 * 512), 128, &entries);
        assert_eq!(buf.len(), 48 + 2 * 144, "sizeof(DRIVE_LAYOUT_INFORMATION_EX) with two entries");
        let layout = parse_drive_layout(&buf).unwrap();
        assert_eq!(layout.style, PARTITION_STYLE_GPT);
        assert_eq!(layout.gpt_usable, Some((17408, (10 << 30) - 34 * 512, 128)));
        assert_eq!(layout.partitions.len(), 2);
        assert_eq!((layout.partitions[1].number, layout.partitions[1].starting_offset), (2, 16 << 20));

        let mut mbr = Vec::new();
        mbr.extend(PARTITION_STYLE_MBR.to_le_bytes());
        mbr.extend(1u32.to_le_bytes());
        mbr.extend([0; 40]); // Mbr.Signature, Mbr.CheckSum and the rest of the union
        mbr.extend(partition(PARTITION_STYLE_MBR, 1 << 20, 1 << 30, 1, &mbr_union(7)));
        let layout = parse_drive_layout(&mbr).unwrap();
        assert_eq!((layout.style, layout.gpt_usable, layout.partitions.len()), (PARTITION_STYLE_MBR, None, 1));
    }

    #[test]
    fn drive_layouts_refuse_counts_beyond_the_buffer() {
        let entry = partition(PARTITION_STYLE_GPT, 1 << 20, 1 << 30, 1, &gpt_union(BASIC_DATA_RAW, [1; 16]));
        let mut buf = gpt_layout((17408, 1 << 30), 128, &[entry]);
        buf[4..8].copy_from_slice(&2u32.to_le_bytes());
        let err = parse_drive_layout(&buf).unwrap_err().to_string();
        assert!(err.contains("claims 2 partitions") && err.contains("192 bytes"), "{err}");
        buf[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(parse_drive_layout(&buf).is_err());
        assert!(parse_drive_layout(&buf[..40]).is_err(), "a GPT layout without its usable area");
        buf[0..4].copy_from_slice(&7u32.to_le_bytes());
        assert!(parse_drive_layout(&buf).unwrap_err().to_string().contains("PartitionStyle is 7"));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(list) = parse_disk_extents(&bytes) {
                prop_assert!(EXTENTS_ARRAY + list.len() * EXTENT_SIZE <= bytes.len());
                prop_assert!(list.iter().all(|(_, s, l)| *s >= 0 && *l >= 0));
            }
            if let Ok(layout) = parse_drive_layout(&bytes) {
                prop_assert!(LAYOUT_ENTRIES + layout.partitions.len() * PARTITION_INFO_SIZE <= bytes.len().max(LAYOUT_ENTRIES));
            }
            if let Ok(info) = parse_partition_info(&bytes) {
                prop_assert!(bytes.len() >= PARTITION_UNION || info.style == PartitionStyle::Raw);
                prop_assert!(info.length >= 0 && info.starting_offset >= 0);
            }
        }

        #[test]
        fn written_extents_read_back(list in proptest::collection::vec((any::<u32>(), 0..i64::MAX, 0..i64::MAX), 0..8)) {
            prop_assert_eq!(parse_disk_extents(&extents(list.len() as u32, &list)).unwrap(), list);
        }
    }
}
