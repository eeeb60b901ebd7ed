//! [`HeaderDecoder`]: whole header blocks to header lists (RFC 7541 §6), for tests that read
//! the server's raw frames.

use super::table::{Entry, Table};
use super::{decode_int, huffman_decode, HpackError};
use bytes::Bytes;

/// Decodes a string literal (§5.2). Returns the decoded bytes and the octets consumed.
fn decode_string(buf: &[u8]) -> Result<(Bytes, usize), HpackError> {
    let huffman = buf.first().ok_or(HpackError::Truncated)? & 0x80 != 0;
    let (len, n) = decode_int(buf, 7)?;
    let end = n.checked_add(len).ok_or(HpackError::Truncated)?;
    let raw = buf.get(n..end).ok_or(HpackError::Truncated)?;
    let value = if huffman { Bytes::from(huffman_decode(raw)?) } else { Bytes::copy_from_slice(raw) };
    Ok((value, end))
}

/// One header field of a block, as handed to the visitor of [`walk_block`].
#[derive(Debug)]
struct Field {
    name: Bytes,
    value: Bytes,
}

/// Name and value at a 1-based HPACK index.
fn field_at(table: &Table<(Bytes, Bytes)>, index: usize) -> Result<(Bytes, Bytes), HpackError> {
    Ok(match table.get(index)? {
        Entry::Static(name, value) => (Bytes::from_static(name.as_bytes()), Bytes::from_static(value.as_bytes())),
        Entry::Dynamic((name, value)) => (name.clone(), value.clone()),
    })
}

/// Walks one complete header block, updating `table` exactly as a decoder would, and calls
/// `on_field` with each header field in order.
///
/// `limit` is the SETTINGS_HEADER_TABLE_SIZE the decoding side advertised: the ceiling for
/// dynamic table size updates. On error the table may be partly updated.
fn walk_block(
    table: &mut Table<(Bytes, Bytes)>,
    limit: usize,
    block: &[u8],
    mut on_field: impl FnMut(&Field),
) -> Result<(), HpackError> {
    let mut seen_field = false;
    let mut pos = 0;

    while pos < block.len() {
        let rest = &block[pos..];
        let first = rest[0];

        if first & 0x80 != 0 {
            // Indexed field.
            let (index, n) = decode_int(rest, 7)?;
            let (name, value) = field_at(table, index)?;
            pos += n;
            seen_field = true;
            on_field(&Field { name, value });
            continue;
        }

        if first & 0xe0 == 0x20 {
            // Dynamic table size update; h2 only allows these before the first field.
            if seen_field {
                return Err(HpackError::TableSizeMisplaced);
            }
            let (size, n) = decode_int(rest, 5)?;
            if size > limit {
                return Err(HpackError::TableSizeTooLarge(size));
            }
            table.set_max_size(size);
            pos += n;
            continue;
        }

        // Literal field: 01 = with incremental indexing (6-bit name index),
        // 0000 = without indexing, 0001 = never indexed (both 4-bit name index).
        let indexing = first & 0xc0 == 0x40;
        let (name_index, n) = decode_int(rest, if indexing { 6 } else { 4 })?;
        pos += n;
        let name = if name_index == 0 {
            let (name, n) = decode_string(&block[pos..])?;
            pos += n;
            name
        } else {
            field_at(table, name_index)?.0
        };
        let (value, n) = decode_string(&block[pos..])?;
        pos += n;
        seen_field = true;

        let field = Field { name, value };
        on_field(&field);
        if indexing {
            let (name_len, value_len) = (field.name.len(), field.value.len());
            table.insert((field.name, field.value), name_len, value_len);
        }
    }
    Ok(())
}

/// Decodes HTTP/2 header blocks (HPACK, RFC 7541) into header lists; used by tests that read
/// raw server frames.
///
/// The decoder keeps the dynamic table from block to block, so it must see every header block
/// sent in one direction of a connection, in order. It applies the same rules as `h2`'s
/// decoder: integers of at most five octets, and table size updates only at the start of a
/// block and never above the size given to [`HeaderDecoder::new`].
#[derive(Debug)]
pub struct HeaderDecoder {
    table: Table<(Bytes, Bytes)>,
    /// SETTINGS_HEADER_TABLE_SIZE of the decoding side: the ceiling for size updates.
    limit: usize,
}

impl HeaderDecoder {
    /// A decoder for a peer that was told `SETTINGS_HEADER_TABLE_SIZE = max_table_size` (4096,
    /// [`DEFAULT_HEADER_TABLE_SIZE`](crate::authority::DEFAULT_HEADER_TABLE_SIZE), unless the receiving
    /// side's SETTINGS said otherwise).
    pub fn new(max_table_size: usize) -> Self {
        HeaderDecoder { table: Table::new(max_table_size), limit: max_table_size }
    }

    /// Decodes one complete header block (the fragments of a HEADERS frame and its
    /// CONTINUATION frames, concatenated, without padding or priority fields) into its
    /// `(name, value)` pairs, in order.
    ///
    /// On error the dynamic table may be partly updated, so later blocks on the same
    /// connection cannot be decoded reliably.
    pub fn decode(&mut self, block: &[u8]) -> Result<Vec<(Bytes, Bytes)>, HpackError> {
        let mut headers = Vec::new();
        walk_block(&mut self.table, self.limit, block, |field| {
            headers.push((field.name.clone(), field.value.clone()));
        })?;
        Ok(headers)
    }
}

#[cfg(test)]
mod tests {
    use super::super::hex;
    use super::*;

    fn as_strs(headers: &[(Bytes, Bytes)]) -> Vec<(&str, &str)> {
        headers.iter().map(|(n, v)| (std::str::from_utf8(n).unwrap(), std::str::from_utf8(v).unwrap())).collect()
    }

    #[test]
    fn decoder_rfc_c3_c4_requests_across_blocks() {
        // RFC 7541 C.3 (plain literals) and C.4 (the same requests, Huffman-coded): each later
        // block refers to entries the earlier ones added to the dynamic table.
        let c3 = [
            "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
            "8286 84be 5808 6e6f 2d63 6163 6865",
            "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
        ];
        let c4 = [
            "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
            "8286 84be 5886 a8eb 1064 9cbf",
            "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
        ];
        let expected: [Vec<(&str, &str)>; 3] = [
            vec![(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")],
            vec![
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache"),
            ],
            vec![
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value"),
            ],
        ];
        for blocks in [c3, c4] {
            let mut d = HeaderDecoder::new(4096);
            for (block, want) in blocks.iter().zip(&expected) {
                assert_eq!(as_strs(&d.decode(&hex(block)).unwrap()), *want, "{block}");
            }
            let table: Vec<_> = d.table.entries().map(|(n, v)| (&n[..], &v[..])).collect();
            let want_table: Vec<(&[u8], &[u8])> = vec![
                (b"custom-key", b"custom-value"),
                (b"cache-control", b"no-cache"),
                (b":authority", b"www.example.com"),
            ];
            assert_eq!(table, want_table);
            assert_eq!(d.table.size(), 164);
        }
    }

    #[test]
    fn decoder_rfc_c6_responses_across_blocks() {
        // RFC 7541 C.6: a 256-octet table, so the third response evicts earlier entries and
        // refers to what is left.
        let mut d = HeaderDecoder::new(256);
        let blocks = [
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
             2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
            "4883 640e ffc1 c0bf",
            "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
             77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
             9587 3160 65c0 03ed 4ee5 b106 3d50 07",
        ];
        let expected: [Vec<(&str, &str)>; 3] = [
            vec![
                (":status", "302"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
                ("location", "https://www.example.com"),
            ],
            vec![
                (":status", "307"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
                ("location", "https://www.example.com"),
            ],
            vec![
                (":status", "200"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
                ("location", "https://www.example.com"),
                ("content-encoding", "gzip"),
                ("set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"),
            ],
        ];
        for (block, want) in blocks.iter().zip(&expected) {
            assert_eq!(as_strs(&d.decode(&hex(block)).unwrap()), *want, "{block}");
        }
        assert_eq!(d.table.size(), 215);
    }

    #[test]
    fn decoder_errors() {
        let mut d = HeaderDecoder::new(4096);
        assert_eq!(d.decode(&[0x80]), Err(HpackError::BadIndex(0)));
        assert_eq!(d.decode(&[0xbe]), Err(HpackError::BadIndex(62)));
        assert_eq!(d.decode(&[0x41, 0x05, b'a']), Err(HpackError::Truncated));
        assert_eq!(d.decode(&[0x3f, 0xe2, 0x1f]), Err(HpackError::TableSizeTooLarge(4097)));
        assert_eq!(d.decode(&[0x82, 0x20]), Err(HpackError::TableSizeMisplaced));
        assert_eq!(d.decode(&[0x41, 0x81, 0x00]), Err(HpackError::Huffman));
        assert_eq!(d.decode(&[]), Ok(vec![]));
        // A size update alone is a valid block with no fields; size 0 empties the table.
        let ab = vec![(Bytes::from_static(b"a"), Bytes::from_static(b"b"))];
        assert_eq!(d.decode(&[0x40, 0x01, b'a', 0x01, b'b']), Ok(ab.clone()));
        assert_eq!(d.decode(&[0xbe]), Ok(ab));
        assert_eq!(d.decode(&[0x20]), Ok(vec![]));
        assert_eq!(d.decode(&[0xbe]), Err(HpackError::BadIndex(62)));
        assert_eq!(HpackError::BadIndex(62).to_string(), "invalid table index 62");
    }
}
