//! Storage IOCTL output parsers (`win::ioctl`) on arbitrary driver answers, and on answers
//! written from the input.
//!
//! Properties: each parser succeeds exactly when the buffer holds its structure and then reports
//! what the bytes say; identifiers never reach past the descriptor's Size; the page 0x83 string
//! follows upstream's rule; descriptors written from arbitrary identifiers parse back as written;
//! the request buffers have their documented layout.
#![no_main]

use csi_proxy_host::fuzzing::ioctl;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    answers(data);
    let _ = written(&mut Unstructured::new(data));
});

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().unwrap()))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().unwrap()))
}

fn answers(b: &[u8]) {
    match ioctl::device_number(b) {
        Ok(n) => assert_eq!(
            (Some(n.device_type), Some(n.device_number), Some(n.partition_number)),
            (u32_at(b, 0), u32_at(b, 4), u32_at(b, 8))
        ),
        Err(_) => assert!(b.len() < 12),
    }
    match ioctl::disk_size(b) {
        Ok(n) => assert_eq!(Some(n), u64_at(b, 24).filter(|&n| n <= i64::MAX as u64)),
        Err(_) => assert!(u64_at(b, 24).is_none_or(|n| n > i64::MAX as u64)),
    }
    match ioctl::disk_attributes(b) {
        Ok(a) => {
            assert_eq!(Some(a.0), u64_at(b, 8));
            assert_eq!((a.offline(), a.read_only()), (a.0 & 1 != 0, a.0 & 2 != 0));
        }
        Err(_) => assert!(b.len() < 16),
    }
    match ioctl::serial_number(b) {
        Ok(serial) => {
            let (size, offset) = (u32_at(b, 4).unwrap() as usize, u32_at(b, 24).unwrap() as usize);
            let end = size.min(b.len());
            let want = (offset != 0 && offset < end).then(|| {
                let text = b[offset..end].split(|&c| c == 0).next().unwrap();
                String::from_utf8_lossy(text).into_owned()
            });
            assert_eq!(serial, want);
        }
        Err(_) => assert!(b.len() < 28),
    }
    let ids = ioctl::device_identifiers(b);
    assert_eq!(ids.as_ref().ok(), reference_identifiers(b).as_ref(), "{b:02x?}");
    if let Ok(ids) = ids {
        check_page83(&ids);
    }
}

/// STORAGE_DEVICE_ID_DESCRIPTOR read a second way: Size (or the bytes returned, if fewer) bounds everything, each identifier is
/// a 16-byte header and its bytes, the next one NextOffset (at least the header) further on.
fn reference_identifiers(b: &[u8]) -> Option<Vec<ioctl::Identifier>> {
    let size = u32_at(b, 4)? as usize;
    let count = u32_at(b, 8)?;
    if size < 12 {
        return None;
    }
    // A Size past the bytes returned is bounded by them (drivers answer such descriptors).
    let desc = &b[..size.min(b.len())];
    let mut out = Vec::new();
    let mut at = 12;
    for i in 0..count {
        let header = desc.get(at..at + 16)?;
        let len = usize::from(u16::from_le_bytes([header[8], header[9]]));
        let next = usize::from(u16::from_le_bytes([header[10], header[11]]));
        out.push(ioctl::Identifier {
            code_set: u32_at(header, 0)?,
            kind: u32_at(header, 4)?,
            association: u32_at(header, 12)?,
            bytes: desc.get(at + 16..at + 16 + len)?.to_vec(),
        });
        if i + 1 < count {
            if next < 16 {
                return None;
            }
            at += next;
        }
    }
    Some(out)
}

fn check_page83(ids: &[ioctl::Identifier]) {
    let got = ioctl::page83(ids);
    let first = ids.iter().find(|id| {
        id.association == ioctl::ASSOC_DEVICE && matches!(id.code_set, ioctl::CODE_SET_BINARY | ioctl::CODE_SET_ASCII)
    });
    match first {
        None => assert_eq!(got, None),
        Some(id) if id.code_set == ioctl::CODE_SET_BINARY => {
            let hex = got.expect("a binary identifier");
            assert_eq!(hex.len(), 2 * id.bytes.len());
            assert!(hex.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)), "{hex}");
        }
        Some(id) => assert_eq!(got, Some(String::from_utf8_lossy(&id.bytes).into_owned())),
    }
}

/// A STORAGE_DEVICE_ID_DESCRIPTOR written from arbitrary identifiers (with arbitrary padding
/// between them), then the request buffers.
fn written(u: &mut Unstructured) -> Result<()> {
    let count = u.int_in_range(0..=6)?;
    let mut ids = Vec::new();
    let mut buf = vec![0u8; 12];
    for i in 0..count {
        let bytes: Vec<u8> = u.arbitrary()?;
        let bytes = bytes[..bytes.len().min(300)].to_vec();
        let id = ioctl::Identifier {
            code_set: u.int_in_range(0..=3)?,
            kind: u.arbitrary()?,
            association: u.int_in_range(0..=2)?,
            bytes,
        };
        let pad = usize::from(u.int_in_range(0u8..=7)?);
        let next = if i + 1 < count { 16 + id.bytes.len() + pad } else { u.arbitrary::<u16>()?.into() };
        buf.extend(id.code_set.to_le_bytes());
        buf.extend(id.kind.to_le_bytes());
        buf.extend((id.bytes.len() as u16).to_le_bytes());
        buf.extend((next as u16).to_le_bytes());
        buf.extend(id.association.to_le_bytes());
        buf.extend(&id.bytes);
        if i + 1 < count {
            buf.extend(std::iter::repeat_n(0xa5, pad));
        }
        ids.push(id);
    }
    let size = buf.len() as u32;
    buf[4..8].copy_from_slice(&size.to_le_bytes());
    buf[8..12].copy_from_slice(&(count as u32).to_le_bytes());
    buf.extend(u.arbitrary::<Vec<u8>>()?); // driver slack after Size is ignored
    assert_eq!(ioctl::device_identifiers(&buf).ok().as_ref(), Some(&ids), "{buf:02x?}");
    check_page83(&ids);
    // Cut inside the last identifier: refused, never read past Size.
    if let Some(last) = ids.last() {
        let cut = size as usize - 1 - usize::from(u.int_in_range(0..=(15 + last.bytes.len()) as u16)?);
        buf[4..8].copy_from_slice(&(cut as u32).to_le_bytes());
        assert!(ioctl::device_identifiers(&buf).is_err(), "Size {cut} of {size}");
    }

    let id: u32 = u.arbitrary()?;
    let q = ioctl::property_query(id);
    assert_eq!((q.len(), u32_at(&q, 0), u32_at(&q, 4)), (12, Some(id), Some(ioctl::PROPERTY_STANDARD_QUERY)));
    let (persist, attrs, mask): (bool, u64, u64) = u.arbitrary()?;
    let s = ioctl::set_disk_attributes(persist, attrs, mask);
    assert_eq!((s.len(), u32_at(&s, 0), s[4]), (40, Some(40), u8::from(persist)));
    assert_eq!((u64_at(&s, 8), u64_at(&s, 16)), (Some(attrs), Some(mask)));
    Ok(())
}
