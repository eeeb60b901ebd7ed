//! SCSI vital product data pages as sysfs hands them out (`device/vpd_pg80`, `device/vpd_pg83`):
//! the whole page, header included. Pure functions over bytes; anything truncated or malformed
//! gives `None`, never a panic.
//!
//! Page layout (SPC-4 §7.8): `[0]` peripheral qualifier and device type, `[1]` page code,
//! `[2..4]` big-endian length of what follows, then the page body.

/// The body of a page with this page code, or `None` when the header is wrong or the body is
/// shorter than the length the header announces. Bytes after the announced length are ignored.
fn body(page: &[u8], code: u8) -> Option<&[u8]> {
    let header = page.get(..4)?;
    if header[1] != code {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([header[2], header[3]]));
    page.get(4..4 + len)
}

/// Page 0x83 (device identification) reduced to one string by upstream's rule (Windows:
/// `IOCTL_STORAGE_QUERY_PROPERTY`/`StorageDeviceIdProperty`): the first
/// designator whose association is 0 (the logical unit) and whose code set is 1 (binary, given
/// as lower-case hex) or 2 (ASCII, given as it is). The designator type is not looked at.
///
/// Designator layout: `[0]` protocol (bits 7-4) and code set (3-0); `[1]` PIV (7), association
/// (5-4) and type (3-0); `[2]` reserved; `[3]` length; then the designator itself.
///
/// Two deliberate details: an ASCII designator loses trailing NUL bytes (padding, never part of
/// a name) but keeps its spaces (T10 vendor IDs are fixed-width fields: `"Linux   scsi_debug
/// 2000"` stays as it is), and an empty designator is passed over, so that a caller can fall back
/// to another source instead of reporting an empty ID.
pub(crate) fn page83(page: &[u8]) -> Option<String> {
    let mut rest = body(page, 0x83)?;
    while !rest.is_empty() {
        let head = rest.get(..4)?;
        let (code_set, association, len) = (head[0] & 0x0f, (head[1] >> 4) & 0x03, usize::from(head[3]));
        let designator = rest.get(4..4 + len)?;
        if association == 0 && !designator.is_empty() {
            match code_set {
                1 => return Some(hex(designator)),
                2 => {
                    let text = ascii(designator, |b| b == 0);
                    if !text.is_empty() {
                        return Some(text);
                    }
                }
                _ => {}
            }
        }
        rest = &rest[4 + len..];
    }
    None
}

/// Page 0x80 (unit serial number): the ASCII serial without the leading and trailing spaces and
/// NULs that pad it; `None` when the page is malformed or the serial is blank.
pub(crate) fn serial(page: &[u8]) -> Option<String> {
    let text = ascii(body(page, 0x80)?, |b| b == 0 || b.is_ascii_whitespace());
    let text = text.trim_start_matches(|c: char| c == '\0' || c.is_ascii_whitespace()).to_string();
    (!text.is_empty()).then_some(text)
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The bytes as text without the trailing bytes `strip` matches; bytes that are not UTF-8 (a
/// device breaking the ASCII promise) become U+FFFD rather than failing.
fn ascii(bytes: &[u8], strip: impl Fn(u8) -> bool) -> String {
    let end = bytes.iter().rposition(|&b| !strip(b)).map_or(0, |i| i + 1);
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A designator: code set, association, type, bytes.
    fn desig(code_set: u8, association: u8, kind: u8, data: &[u8]) -> Vec<u8> {
        let mut d = vec![code_set, (association << 4) | kind, 0, data.len() as u8];
        d.extend_from_slice(data);
        d
    }

    fn page(code: u8, body: &[u8]) -> Vec<u8> {
        let mut p = vec![0, code];
        p.extend_from_slice(&(body.len() as u16).to_be_bytes());
        p.extend_from_slice(body);
        p
    }

    /// What scsi_debug (host 0, target 0, lun 0) hands out in the storage VM, byte for byte.
    const SCSI_DEBUG_PG83: &[u8] = b"\x00\x83\x00\x70\x02\x01\x00\x1cLinux   scsi_debug      2000\
\x01\x03\x00\x08\x33\x33\x33\x30\x00\x00\x07\xd0\x61\x94\x00\x04\x00\x00\x00\x01\x61\x93\x00\x08\
\x32\x22\x22\x20\x00\x00\x07\xce\x61\x95\x00\x04\x00\x00\x01\x00\x61\xa3\x00\x08\x32\x22\x22\x20\
\x00\x00\x07\xcd\x63\xa8\x00\x18naa.32222220000007CD\x00\x00\x00\x00";

    #[test]
    fn scsi_debug_page83_gives_its_t10_ascii_designator() {
        assert_eq!(page83(SCSI_DEBUG_PG83).as_deref(), Some("Linux   scsi_debug      2000"));
    }

    #[test]
    fn binary_designators_are_lower_case_hex() {
        let naa = [0x60, 0x02, 0x24, 0x80, 0xAB, 0xCD, 0xEF, 0x01];
        assert_eq!(page83(&page(0x83, &desig(1, 0, 3, &naa))).as_deref(), Some("60022480abcdef01"));
    }

    #[test]
    fn only_logical_unit_designators_in_binary_or_ascii_count() {
        let mut body = Vec::new();
        body.extend(desig(1, 1, 3, &[0xaa; 8])); // target port: skipped
        body.extend(desig(1, 2, 3, &[0xbb; 8])); // target device: skipped
        body.extend(desig(3, 0, 8, b"naa.123\0")); // UTF-8 SCSI name: code set 3, skipped
        body.extend(desig(1, 0, 3, &[])); // empty: skipped
        body.extend(desig(2, 0, 1, b"\0\0")); // only padding: skipped
        body.extend(desig(0x61, 0, 3, &[0x12, 0x34])); // protocol bits set, binary: taken
        body.extend(desig(2, 0, 1, b"later"));
        assert_eq!(page83(&page(0x83, &body)).as_deref(), Some("1234"));
        // The PIV bit does not matter either.
        let piv = vec![0x02, 0x80 | 0x01, 0, 3, b'a', b'b', b'c'];
        assert_eq!(page83(&page(0x83, &piv)).as_deref(), Some("abc"));
    }

    #[test]
    fn ascii_designators_keep_spaces_and_lose_trailing_nuls() {
        assert_eq!(page83(&page(0x83, &desig(2, 0, 1, b" a  b \0\0"))).as_deref(), Some(" a  b "));
        // Not UTF-8: replaced, not refused.
        assert_eq!(page83(&page(0x83, &desig(2, 0, 1, b"x\xffy"))).as_deref(), Some("x\u{fffd}y"));
    }

    #[test]
    fn malformed_page83_gives_none() {
        assert_eq!(page83(&[]), None);
        assert_eq!(page83(&[0, 0x83, 0]), None);
        assert_eq!(page83(&page(0x80, &desig(1, 0, 3, &[1]))), None, "wrong page code");
        assert_eq!(page83(&page(0x83, &[])), None, "no designators");
        assert_eq!(page83(&page(0x83, &desig(1, 1, 3, &[1]))), None, "no LU designator");
        // The header announces more than there is.
        let mut p = page(0x83, &desig(1, 0, 3, &[1, 2]));
        p.pop();
        assert_eq!(page83(&p), None);
        // A designator runs past the page.
        let mut body = desig(1, 0, 3, &[1, 2, 3]);
        body.truncate(5);
        assert_eq!(page83(&page(0x83, &body)), None);
        // Half a designator header after skipped ones.
        let mut body = desig(1, 1, 3, &[9]);
        body.extend([0x01, 0x03]);
        assert_eq!(page83(&page(0x83, &body)), None);
        // Every prefix of a real page either fails or, once complete, gives the answer.
        for n in 0..SCSI_DEBUG_PG83.len() {
            assert_eq!(page83(&SCSI_DEBUG_PG83[..n]), None, "prefix of {n} bytes");
        }
    }

    #[test]
    fn bytes_after_the_announced_length_are_ignored() {
        let mut p = page(0x83, &desig(1, 1, 3, &[7]));
        p.extend(desig(1, 0, 3, &[8]));
        assert_eq!(page83(&p), None);
    }

    #[test]
    fn serial_pages() {
        assert_eq!(serial(b"\x00\x80\x00\x042000").as_deref(), Some("2000"));
        assert_eq!(serial(&page(0x80, b"  S4EW NX0R  \0\0")).as_deref(), Some("S4EW NX0R"));
        assert_eq!(serial(&page(0x80, b"   \0")), None, "blank");
        assert_eq!(serial(&page(0x80, b"")), None);
        assert_eq!(serial(&page(0x83, b"2000")), None, "wrong page code");
        assert_eq!(serial(b"\x00\x80\x00\x052000"), None, "truncated");
        assert_eq!(serial(b"\x00\x80"), None);
        assert_eq!(serial(&[]), None);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = page83(&bytes);
            let _ = serial(&bytes);
        }

        #[test]
        fn arbitrary_designator_lists_never_panic(
            designators in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..8),
            extra in 0usize..3,
        ) {
            let body: Vec<u8> = designators.concat();
            let mut p = page(0x83, &body);
            p.truncate(p.len().saturating_sub(extra));
            let _ = page83(&p);
        }
    }
}
