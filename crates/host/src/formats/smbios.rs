//! A reader of SMBIOS tables, as Windows hands them out (`GetSystemFirmwareTable('RSMB', 0)`):
//! only what is needed for the system serial number. Pure code, compiled and tested on every OS.
//!
//! Layout (DMTF DSP0134):
//! - Windows' `RawSMBIOSData` header: `Used20CallingMethod: u8`, `SMBIOSMajorVersion: u8`,
//!   `SMBIOSMinorVersion: u8`, `DmiRevision: u8`, `Length: u32` (little-endian), then `Length`
//!   bytes of structure table;
//! - each structure: a formatted area that starts with `type: u8`, `length: u8` (of the formatted
//!   area, header included, at least 4), `handle: u16`; then its string-set: NUL-terminated
//!   strings, the set ended by one more NUL (a structure without strings ends in two NULs);
//! - strings are referred to by 1-based index; index 0 means "no string";
//! - type 1 (System Information) holds the serial number's string index at offset 0x07 (SMBIOS
//!   2.0 and later, formatted length at least 8); type 127 ends the table.
//!
//! Every length is checked: a malformed table is an error, never a panic or an out-of-bounds read.

use std::fmt;

/// Length of Windows' `RawSMBIOSData` header before the structure table.
pub const RAW_HEADER_LEN: usize = 8;
/// Structure type of System Information.
pub const TYPE_SYSTEM_INFORMATION: u8 = 1;
/// Structure type that ends the table.
pub const TYPE_END_OF_TABLE: u8 = 127;
/// Offset of the serial number's string index in a type 1 structure.
const SYSTEM_SERIAL_OFFSET: usize = 0x07;

/// Why a table could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed SMBIOS table: {}", self.0)
    }
}

impl std::error::Error for Malformed {}

/// One structure of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Structure<'a> {
    pub kind: u8,
    pub handle: u16,
    /// The formatted area, header included (`formatted[0] == kind`).
    pub formatted: &'a [u8],
    /// The string-set without its two final NULs: the strings separated by NULs; empty when the
    /// structure has none.
    strings: &'a [u8],
}

impl<'a> Structure<'a> {
    /// Byte at `offset` of the formatted area, if the structure is that long.
    pub fn byte(&self, offset: usize) -> Option<u8> {
        self.formatted.get(offset).copied()
    }

    /// The string with 1-based `index`; `None` for index 0 (no string) and for an index past the
    /// last string (what the Linux kernel also reads as "no string").
    pub fn string(&self, index: u8) -> Option<&'a [u8]> {
        if index == 0 || self.strings.is_empty() {
            return None;
        }
        self.strings.split(|&b| b == 0).nth(usize::from(index) - 1)
    }
}

/// The structure table inside Windows' `RawSMBIOSData`: checks the header's length against what
/// was actually returned. Extra bytes after the table are ignored.
pub fn raw_table(raw: &[u8]) -> Result<&[u8], Malformed> {
    if raw.len() < RAW_HEADER_LEN {
        return Err(Malformed(format!(
            "{} bytes are too few for the {RAW_HEADER_LEN}-byte RawSMBIOSData header",
            raw.len()
        )));
    }
    let len = u32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]]);
    let body = &raw[RAW_HEADER_LEN..];
    match usize::try_from(len) {
        Ok(n) if n <= body.len() => Ok(&body[..n]),
        _ => Err(Malformed(format!("the header announces {len} bytes of table but only {} follow", body.len()))),
    }
}

/// Walks the structures of a table, stopping after the end-of-table structure (type 127) or at
/// the end of the data. After the first error the iterator ends.
pub fn structures(table: &[u8]) -> Structures<'_> {
    Structures { rest: table, offset: 0, done: false }
}

/// Iterator of [`structures`].
pub struct Structures<'a> {
    rest: &'a [u8],
    offset: usize,
    done: bool,
}

impl<'a> Iterator for Structures<'a> {
    type Item = Result<Structure<'a>, Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.rest.is_empty() {
            return None;
        }
        let item = self.parse_one();
        match &item {
            Ok(s) if s.kind == TYPE_END_OF_TABLE => self.done = true,
            Ok(_) => {}
            Err(_) => self.done = true,
        }
        Some(item)
    }
}

impl<'a> Structures<'a> {
    fn parse_one(&mut self) -> Result<Structure<'a>, Malformed> {
        let rest = self.rest;
        let at = self.offset;
        if rest.len() < 4 {
            return Err(Malformed(format!(
                "{} stray bytes at offset {at}, too few for a structure header",
                rest.len()
            )));
        }
        let (kind, len) = (rest[0], usize::from(rest[1]));
        if len < 4 {
            return Err(Malformed(format!("structure of type {kind} at offset {at} has length {len}, less than 4")));
        }
        if len > rest.len() {
            return Err(Malformed(format!(
                "structure of type {kind} at offset {at} has length {len} but only {} bytes remain",
                rest.len()
            )));
        }
        let (formatted, after) = rest.split_at(len);
        // The string-set ends at the first double NUL; a set with no strings is just two NULs.
        let end = after.windows(2).position(|w| w == [0, 0]).ok_or_else(|| {
            Malformed(format!("structure of type {kind} at offset {at} has an unterminated string-set"))
        })?;
        let strings = &after[..end];
        let consumed = len + end + 2;
        self.rest = &rest[consumed..];
        self.offset = at + consumed;
        Ok(Structure { kind, handle: u16::from_le_bytes([rest[2], rest[3]]), formatted, strings })
    }
}

/// The serial number of the first System Information (type 1) structure of a structure table.
///
/// `Ok(None)` when the firmware has none: no type 1 structure, a structure too short to hold the
/// field (SMBIOS before 2.0), string index 0 or past the last string, or a string of only blanks.
/// Surrounding whitespace is trimmed; bytes that are not UTF-8 are replaced.
pub fn system_serial(table: &[u8]) -> Result<Option<String>, Malformed> {
    for s in structures(table) {
        let s = s?;
        if s.kind != TYPE_SYSTEM_INFORMATION {
            continue;
        }
        let serial = s
            .byte(SYSTEM_SERIAL_OFFSET)
            .and_then(|i| s.string(i))
            .map(|b| String::from_utf8_lossy(b).trim().to_string())
            .filter(|v| !v.is_empty());
        return Ok(serial);
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One structure: header, `body` (the formatted area after the 4-byte header), strings.
    fn structure(kind: u8, handle: u16, body: &[u8], strings: &[&str]) -> Vec<u8> {
        let mut v = vec![kind, (4 + body.len()) as u8];
        v.extend_from_slice(&handle.to_le_bytes());
        v.extend_from_slice(body);
        if strings.is_empty() {
            v.extend_from_slice(&[0, 0]);
        } else {
            for s in strings {
                v.extend_from_slice(s.as_bytes());
                v.push(0);
            }
            v.push(0);
        }
        v
    }

    /// Type 1 with manufacturer, product, version and serial string indexes.
    fn system_info(serial_index: u8, strings: &[&str]) -> Vec<u8> {
        // offsets 4..=7: manufacturer, product name, version, serial number; then UUID (16),
        // wake-up type, SKU, family (SMBIOS 2.4: length 0x1b).
        let mut body = vec![1, 2, 3, serial_index];
        body.extend_from_slice(&[0xaa; 16]);
        body.extend_from_slice(&[6, 0, 0]);
        structure(1, 0x0100, &body, strings)
    }

    fn bios() -> Vec<u8> {
        structure(0, 0x0000, &[1, 2, 0, 0xe8, 0x03, 0x00, 0, 0, 0, 0, 0, 0, 0, 0], &["Vendor Inc.", "1.2.3"])
    }

    fn end() -> Vec<u8> {
        structure(127, 0xfeff, &[], &[])
    }

    fn table(parts: &[Vec<u8>]) -> Vec<u8> {
        parts.concat()
    }

    fn raw(table: &[u8]) -> Vec<u8> {
        let mut v = vec![0, 3, 4, 0];
        v.extend_from_slice(&(table.len() as u32).to_le_bytes());
        v.extend_from_slice(table);
        v
    }

    #[test]
    fn serial_of_a_typical_table() {
        let t = table(&[bios(), system_info(4, &["ACME", "Box 9000", "v1", "SN-12345"]), end()]);
        assert_eq!(system_serial(&t).unwrap().as_deref(), Some("SN-12345"));
        let r = raw(&t);
        assert_eq!(raw_table(&r).unwrap(), &t[..]);
        assert_eq!(system_serial(raw_table(&r).unwrap()).unwrap().as_deref(), Some("SN-12345"));

        let all: Vec<_> = structures(&t).collect::<Result<_, _>>().unwrap();
        assert_eq!(all.iter().map(|s| s.kind).collect::<Vec<_>>(), [0, 1, 127]);
        assert_eq!(all[1].handle, 0x0100);
        assert_eq!(all[0].string(1), Some(&b"Vendor Inc."[..]));
        assert_eq!(all[0].string(2), Some(&b"1.2.3"[..]));
        assert_eq!(all[0].string(3), None);
        assert_eq!(all[2].string(1), None, "no strings at all");
    }

    #[test]
    fn serial_is_trimmed_and_blank_or_missing_is_none() {
        let t = table(&[system_info(2, &["ACME", "  VMware-56 4d  "]), end()]);
        assert_eq!(system_serial(&t).unwrap().as_deref(), Some("VMware-56 4d"));
        // String index 0: no serial.
        assert_eq!(system_serial(&table(&[system_info(0, &["ACME"]), end()])).unwrap(), None);
        // Index past the last string.
        assert_eq!(system_serial(&table(&[system_info(4, &["ACME", "X"]), end()])).unwrap(), None);
        assert_eq!(system_serial(&table(&[system_info(255, &[]), end()])).unwrap(), None);
        // Only blanks.
        assert_eq!(system_serial(&table(&[system_info(1, &["    "]), end()])).unwrap(), None);
        // No type 1 structure.
        assert_eq!(system_serial(&table(&[bios(), end()])).unwrap(), None);
        assert_eq!(system_serial(&[]).unwrap(), None);
        // SMBIOS before 2.0: type 1 too short to hold the serial field.
        assert_eq!(system_serial(&table(&[structure(1, 1, &[1, 2, 3], &["A", "B", "C"]), end()])).unwrap(), None);
        // Non-UTF-8 bytes do not fail the call.
        let mut odd = structure(1, 1, &[0, 0, 0, 1], &[]);
        odd.truncate(odd.len() - 2);
        odd.extend_from_slice(&[b'S', 0xff, b'N', 0, 0]);
        assert_eq!(system_serial(&odd).unwrap().as_deref(), Some("S\u{fffd}N"));
    }

    #[test]
    fn first_type_1_wins_and_end_of_table_stops_the_walk() {
        let t = table(&[system_info(1, &["FIRST"]), system_info(1, &["SECOND"]), end()]);
        assert_eq!(system_serial(&t).unwrap().as_deref(), Some("FIRST"));
        // Anything after type 127, even garbage, is not read.
        let t = table(&[bios(), end(), vec![1, 2, 3]]);
        assert_eq!(structures(&t).count(), 2);
        assert_eq!(system_serial(&t).unwrap(), None);
        let t = table(&[end(), system_info(1, &["AFTER-END"])]);
        assert_eq!(system_serial(&t).unwrap(), None);
    }

    #[test]
    fn bad_lengths_and_truncation_are_errors() {
        // Formatted length below the 4-byte header.
        let mut t = bios();
        t[1] = 3;
        let e = system_serial(&t).unwrap_err();
        assert!(e.to_string().contains("length 3, less than 4"), "{e}");
        // Formatted length beyond the data.
        let mut t = table(&[bios(), system_info(1, &["S"])]);
        let at = bios().len();
        t[at + 1] = 200;
        let e = system_serial(&t).unwrap_err();
        assert!(e.to_string().contains("type 1") && e.to_string().contains("length 200"), "{e}");
        // Truncated in the middle of the string-set.
        let t = table(&[system_info(1, &["SERIAL"])]);
        for cut in 1..t.len() {
            let r = system_serial(&t[..cut]);
            assert!(r.is_err(), "cut at {cut}: {r:?}");
        }
        // A serial in a structure that precedes the damage is still read.
        let t = table(&[system_info(1, &["OK-1"]), vec![9, 2]]);
        assert_eq!(system_serial(&t).unwrap().as_deref(), Some("OK-1"));
        // The iterator ends after an error.
        let t = vec![0, 1, 0, 0, 0, 0, 0, 0, 0];
        let items: Vec<_> = structures(&t).collect();
        assert_eq!(items.len(), 1);
        assert!(items[0].is_err());
    }

    #[test]
    fn raw_header_is_checked() {
        assert!(raw_table(&[]).is_err());
        assert!(raw_table(&[0, 3, 4, 0, 9, 0, 0]).is_err(), "short header");
        let e = raw_table(&[0, 3, 4, 0, 9, 0, 0, 0, 1, 2]).unwrap_err();
        assert!(e.to_string().contains("announces 9 bytes"), "{e}");
        assert!(raw_table(&[0, 3, 4, 0, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert_eq!(raw_table(&[0, 3, 4, 0, 0, 0, 0, 0]).unwrap(), &[] as &[u8]);
        // Trailing bytes beyond the announced length are ignored.
        assert_eq!(raw_table(&[0, 3, 4, 0, 2, 0, 0, 0, 7, 8, 9]).unwrap(), &[7, 8]);
    }

    /// Arbitrary bytes never panic (a small deterministic fuzz).
    #[test]
    fn never_panics() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let base = table(&[bios(), system_info(4, &["A", "B", "C", "D"]), end()]);
        for round in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut t = if round % 2 == 0 { base.clone() } else { Vec::new() };
            let len = (x % 64) as usize;
            for i in 0..len {
                let b = (x >> (i % 56)) as u8;
                if t.is_empty() || round % 3 == 0 {
                    t.push(b);
                } else {
                    let at = (x as usize >> 3) % t.len();
                    t[at] = b;
                }
            }
            let _ = system_serial(&t);
            let _ = raw_table(&t).map(system_serial);
            for s in structures(&t).flatten() {
                for i in 0..=255u8 {
                    let _ = s.string(i);
                }
            }
        }
    }
}
