//! The SMBIOS reader (`smbios`) on arbitrary bytes, and on tables written from the input.
//!
//! Properties: the header's length is honoured exactly; the structure walk makes progress, stops
//! after type 127 and after the first error; strings never hold a NUL; `system_serial` agrees with
//! a plain second reading of the format written here; a serial written into a table is read back.
#![no_main]

use csi_proxy_host::fuzzing::smbios;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    raw(data);
    walk(data);
    assert_eq!(smbios::system_serial(data).ok(), reference_serial(data), "{data:02x?}");
    let _ = written_table(&mut Unstructured::new(data));
});

fn raw(data: &[u8]) {
    let announced = data.get(4..8).map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize);
    match (smbios::raw_table(data), announced) {
        (Ok(table), Some(n)) => assert_eq!(table, &data[8..8 + n]),
        (Err(_), Some(n)) => assert!(n > data.len() - 8),
        (Ok(_), None) => panic!("a table from {} bytes", data.len()),
        (Err(_), None) => {}
    }
    if let Ok(table) = smbios::raw_table(data) {
        walk(table);
    }
}

fn walk(table: &[u8]) {
    let (mut count, mut ended, mut failed) = (0, false, false);
    for s in smbios::structures(table) {
        assert!(!ended && !failed, "the walk went on after type 127 or an error");
        count += 1;
        // A structure takes at least its 4-byte header and two NULs.
        assert!(count <= table.len() / 6 + 1);
        match s {
            Ok(s) => {
                assert!(s.formatted.len() >= 4 && s.formatted[0] == s.kind);
                assert_eq!(s.handle, u16::from_le_bytes([s.formatted[2], s.formatted[3]]));
                assert_eq!(s.string(0), None);
                for i in 1..=255 {
                    if let Some(text) = s.string(i) {
                        assert!(!text.contains(&0));
                    }
                }
                ended = s.kind == smbios::TYPE_END_OF_TABLE;
            }
            Err(_) => failed = true,
        }
    }
}

/// The serial by a second, plain reading of DSP0134 as the Linux kernel's `dmi_decode_table`
/// does it: `None` for an error (a malformed structure before the first type 1), else what the
/// first type 1 names at offset 7.
fn reference_serial(mut t: &[u8]) -> Option<Option<String>> {
    while !t.is_empty() {
        if t.len() < 4 || t[1] < 4 || usize::from(t[1]) > t.len() {
            return None;
        }
        let len = usize::from(t[1]);
        // The string-set runs to the first two NULs in a row.
        let end = (len..t.len().saturating_sub(1)).find(|&i| t[i] == 0 && t[i + 1] == 0)?;
        let set = &t[len..end];
        if t[0] == smbios::TYPE_SYSTEM_INFORMATION {
            let serial = t[..len]
                .get(7)
                .filter(|&&i| i != 0 && !set.is_empty())
                .and_then(|&i| set.split(|&b| b == 0).nth(usize::from(i) - 1))
                .map(|s| String::from_utf8_lossy(s).trim().to_string())
                .filter(|s| !s.is_empty());
            return Some(serial);
        }
        if t[0] == smbios::TYPE_END_OF_TABLE {
            break;
        }
        t = &t[end + 2..];
    }
    Some(None)
}

/// A table written from the input: other structures, one type 1 with a serial index, the end.
fn written_table(u: &mut Unstructured) -> Result<()> {
    let mut table = Vec::new();
    for _ in 0..u.int_in_range(0..=4)? {
        let kind = *u.choose(&[0u8, 2, 3, 4, 17, 126, 200])?;
        let body: Vec<u8> = u.arbitrary()?;
        let strings: Vec<Vec<u8>> = u.arbitrary()?;
        push_structure(&mut table, kind, &body, &strings);
    }
    let strings: Vec<Vec<u8>> = u.arbitrary()?;
    let index: u8 = u.arbitrary()?;
    let mut body = vec![1, 2, 3, index];
    body.extend(u.arbitrary::<Vec<u8>>()?);
    push_structure(&mut table, 1, &body, &strings);
    push_structure(&mut table, smbios::TYPE_END_OF_TABLE, &[], &[]);

    let kept: Vec<Vec<u8>> = strings.iter().map(|s| clean(s)).collect();
    let want = (index != 0)
        .then(|| kept.get(usize::from(index) - 1))
        .flatten()
        .map(|s| String::from_utf8_lossy(s).trim().to_string())
        .filter(|s| !s.is_empty());
    assert_eq!(smbios::system_serial(&table), Ok(want.clone()), "{table:02x?}");
    let mut raw = vec![0, 3, 4, 0];
    raw.extend((table.len() as u32).to_le_bytes());
    raw.extend(&table);
    raw.extend(u.arbitrary::<Vec<u8>>()?); // bytes after the announced length are ignored
    assert_eq!(smbios::raw_table(&raw).map(smbios::system_serial), Ok(Ok(want)));
    Ok(())
}

/// Strings can hold neither NUL nor be empty (an empty one would end the set).
fn clean(s: &[u8]) -> Vec<u8> {
    let s: Vec<u8> = s.iter().copied().filter(|&b| b != 0).collect();
    if s.is_empty() {
        b"-".to_vec()
    } else {
        s
    }
}

fn push_structure(out: &mut Vec<u8>, kind: u8, body: &[u8], strings: &[Vec<u8>]) {
    let body = &body[..body.len().min(251)];
    out.extend([kind, (4 + body.len()) as u8, 0x34, 0x12]);
    out.extend(body);
    for s in strings {
        out.extend(clean(s));
        out.push(0);
    }
    out.push(0);
    if strings.is_empty() {
        out.push(0);
    }
}
