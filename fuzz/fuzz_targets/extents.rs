//! Volume IOCTL output parsers (`win::extents`) on arbitrary driver answers, and on answers
//! written from the input.
//!
//! Properties: VOLUME_DISK_EXTENTS parses exactly when the buffer holds every counted extent, and
//! then to the bytes' values, never negative; written extent lists parse back; PARTITION_
//! INFORMATION_EX reports its fields as stored, its GUIDs in registry spelling, and refuses what
//! it must (unknown styles, negative sizes, a union cut short).
#![no_main]

use csi_proxy_host::fuzzing::extents::{self, PartitionStyle};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    disk_extents(data);
    partition_info(data);
    let _ = written(&mut Unstructured::new(data));
});

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().unwrap()))
}
fn i64_at(b: &[u8], at: usize) -> Option<i64> {
    Some(i64::from_le_bytes(b.get(at..at + 8)?.try_into().unwrap()))
}

/// VOLUME_DISK_EXTENTS read a second way: count, padding, 24-byte extents.
fn reference_extents(b: &[u8]) -> Option<Vec<extents::DiskExtent>> {
    let count = u32_at(b, 0)? as usize;
    if count.checked_mul(24)?.checked_add(8)? > b.len() {
        return None;
    }
    (0..count)
        .map(|i| {
            let at = 8 + 24 * i;
            let (start, len) = (i64_at(b, at + 8)?, i64_at(b, at + 16)?);
            (start >= 0 && len >= 0).then_some((u32_at(b, at)?, start, len))
        })
        .collect()
}

fn disk_extents(b: &[u8]) {
    assert_eq!(extents::parse_disk_extents(b).ok(), reference_extents(b), "{b:02x?}");
}

fn partition_info(b: &[u8]) {
    let Ok(info) = extents::parse_partition_info(b) else {
        let style = u32_at(b, 0);
        let sizes_ok =
            matches!((i64_at(b, 8), i64_at(b, 16), u32_at(b, 24)), (Some(s), Some(l), Some(_)) if s >= 0 && l >= 0);
        let union_ok = match style {
            Some(extents::PARTITION_STYLE_MBR) => b.len() > 32,
            Some(extents::PARTITION_STYLE_GPT) => b.len() >= 64,
            Some(extents::PARTITION_STYLE_RAW) => true,
            _ => false,
        };
        assert!(!(sizes_ok && union_ok), "refused a good PARTITION_INFORMATION_EX: {b:02x?}");
        return;
    };
    assert_eq!(
        (Some(info.starting_offset), Some(info.length), Some(info.number)),
        (i64_at(b, 8), i64_at(b, 16), u32_at(b, 24))
    );
    assert!(info.starting_offset >= 0 && info.length >= 0);
    match (&info.style, u32_at(b, 0)) {
        (PartitionStyle::Mbr { partition_type }, Some(extents::PARTITION_STYLE_MBR)) => {
            assert_eq!(*partition_type, b[32])
        }
        (PartitionStyle::Gpt { partition_type, partition_id }, Some(extents::PARTITION_STYLE_GPT)) => {
            assert_eq!(partition_type, &extents::format_guid(&b[32..48]));
            assert_eq!(partition_id, &extents::format_guid(&b[48..64]));
            for g in [partition_type, partition_id] {
                assert!(registry_spelling(g), "{g}");
            }
        }
        (PartitionStyle::Raw, Some(extents::PARTITION_STYLE_RAW)) => {}
        (style, raw) => panic!("style {style:?} from PartitionStyle {raw:?}"),
    }
}

/// `{xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx}`, lower-case hex.
fn registry_spelling(g: &str) -> bool {
    let b = g.as_bytes();
    b.len() == 38
        && b[0] == b'{'
        && b[37] == b'}'
        && b[1..37].iter().enumerate().all(|(i, &c)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                c == b'-'
            } else {
                c.is_ascii_digit() || (b'a'..=b'f').contains(&c)
            }
        })
}

/// Extents and a partition entry written from the input, read back.
fn written(u: &mut Unstructured) -> Result<()> {
    let list: Vec<(u32, u64, u64)> = u.arbitrary()?;
    let list: Vec<extents::DiskExtent> = list.iter().map(|&(d, s, l)| (d, (s >> 1) as i64, (l >> 1) as i64)).collect();
    let mut buf = Vec::new();
    buf.extend((list.len() as u32).to_le_bytes());
    buf.extend([0; 4]);
    for &(disk, start, len) in &list {
        buf.extend(disk.to_le_bytes());
        buf.extend([0; 4]);
        buf.extend(start.to_le_bytes());
        buf.extend(len.to_le_bytes());
    }
    let slack: Vec<u8> = u.arbitrary()?;
    buf.extend(&slack);
    assert_eq!(extents::parse_disk_extents(&buf).ok().as_ref(), Some(&list));
    if !list.is_empty() {
        buf.truncate(buf.len() - slack.len() - 1);
        assert!(extents::parse_disk_extents(&buf).is_err(), "the last extent was cut");
    }

    let (raw_type, raw_id): ([u8; 16], [u8; 16]) = u.arbitrary()?;
    let (start, len, number): (u64, u64, u32) = u.arbitrary()?;
    let (start, len) = ((start >> 1) as i64, (len >> 1) as i64);
    let mut p = Vec::new();
    p.extend(extents::PARTITION_STYLE_GPT.to_le_bytes());
    p.extend([0; 4]);
    p.extend(start.to_le_bytes());
    p.extend(len.to_le_bytes());
    p.extend(number.to_le_bytes());
    p.extend([1, 0, 0, 0]);
    p.extend(raw_type);
    p.extend(raw_id);
    let info = extents::parse_partition_info(&p).expect("a GPT partition entry");
    assert_eq!((info.starting_offset, info.length, info.number), (start, len, number));
    let PartitionStyle::Gpt { partition_type, partition_id } = info.style else { panic!("{:?}", info.style) };
    assert_eq!(guid_bytes(&partition_type), Some(raw_type), "{partition_type}");
    assert_eq!(guid_bytes(&partition_id), Some(raw_id), "{partition_id}");
    Ok(())
}

/// The in-memory bytes of a registry-spelled GUID: Data1-3 little-endian, Data4 in order.
fn guid_bytes(g: &str) -> Option<[u8; 16]> {
    let hex: String = g.strip_prefix('{')?.strip_suffix('}')?.split('-').collect();
    let v: Vec<u8> = (0..16).map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()).collect::<Option<_>>()?;
    Some([v[3], v[2], v[1], v[0], v[5], v[4], v[7], v[6], v[8], v[9], v[10], v[11], v[12], v[13], v[14], v[15]])
}
