//! Just enough HPACK (RFC 7541) for two jobs that share one walk over a block's representations
//! ([`walk_block`]):
//!
//! - [`BlockRewriter`] finds `:authority` literals in a request header block and replaces values
//!   `http::uri::Authority` rejects, while mirroring the server decoder's dynamic table so that
//!   names referenced by index are known. It never materialises header lists: it copies the
//!   block unchanged except for the values it replaces.
//! - [`HeaderDecoder`] decodes header blocks into header lists, for tests that read raw server
//!   frames.

use bytes::Bytes;
use std::collections::VecDeque;
use std::ops::Range;

/// Why a header block could not be decoded. For [`AuthorityFix`](super::AuthorityFix), any of
/// these means the adapter stops interpreting the connection and lets the HTTP/2 server see
/// (and reject) the original bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HpackError {
    /// A representation runs past the end of the block.
    #[error("truncated representation")]
    Truncated,
    /// An integer needs more continuation octets than h2 accepts.
    #[error("integer too long")]
    IntegerOverflow,
    /// Index 0, or an index past the end of the static + dynamic table.
    #[error("invalid table index {0}")]
    BadIndex(usize),
    /// Invalid Huffman code: EOS inside the string, or bad padding.
    #[error("invalid Huffman-coded string")]
    Huffman,
    /// Dynamic table size update above the limit the decoder advertised.
    #[error("table size update to {0} above limit")]
    TableSizeTooLarge(usize),
    /// Dynamic table size update after a header field (h2 rejects these).
    #[error("table size update after a header field")]
    TableSizeMisplaced,
}

// ===== integers (RFC 7541 §5.1) =====

/// Most continuation octets accepted after the prefix octet. h2 gives up after five octets in
/// total, so accepting more here could let the two decoders disagree about where a
/// representation ends.
const MAX_CONTINUATION_OCTETS: usize = 4;

/// Decodes an integer whose first octet keeps `prefix_bits` low bits for the value.
/// Returns the value and the number of octets it occupied.
pub(crate) fn decode_int(buf: &[u8], prefix_bits: u8) -> Result<(usize, usize), HpackError> {
    debug_assert!((1..=8).contains(&prefix_bits));
    let first = *buf.first().ok_or(HpackError::Truncated)?;
    let mask = (((1u16) << prefix_bits) - 1) as u8;
    let mut value = (first & mask) as usize;
    if value < mask as usize {
        return Ok((value, 1));
    }
    for i in 0..MAX_CONTINUATION_OCTETS {
        let b = *buf.get(1 + i).ok_or(HpackError::Truncated)?;
        // 4 octets carry at most 28 bits, so this cannot overflow even a 32-bit usize.
        value += ((b & 0x7f) as usize) << (7 * i);
        if b & 0x80 == 0 {
            return Ok((value, 2 + i));
        }
    }
    Err(HpackError::IntegerOverflow)
}

/// Appends `value` as an HPACK integer; `flags` supplies the bits above the prefix.
pub(crate) fn encode_int(mut value: usize, prefix_bits: u8, flags: u8, out: &mut Vec<u8>) {
    let mask = (((1u16) << prefix_bits) - 1) as usize;
    if value < mask {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | mask as u8);
    value -= mask;
    while value >= 0x80 {
        out.push((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

// ===== Huffman (RFC 7541 §5.2, Appendix B) =====

/// Code length in bits of each symbol of the HPACK Huffman code, indexed by symbol
/// (byte values 0..=255, then 256 = EOS), as listed in RFC 7541 Appendix B.
///
/// The code in Appendix B is canonical: within one length, codes are consecutive and ordered
/// by symbol, and shorter codes come first. The lengths alone therefore determine every code,
/// which keeps this table small and easy to check against the RFC.
const CODE_LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, // 0x00
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, // 0x10
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, // 0x20  !"#$%&'()*+,-./
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, // 0x30 0123456789:;<=>?
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, // 0x40 @ABCDEFGHIJKLMNO
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, // 0x50 PQRSTUVWXYZ[\]^_
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, // 0x60 `abcdefghijklmno
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, // 0x70 pqrstuvwxyz{|}~
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, // 0x80
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, // 0x90
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, // 0xa0
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, // 0xb0
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, // 0xc0
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, // 0xd0
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, // 0xe0
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, // 0xf0
    30, // EOS
];

const EOS: u16 = 256;
const MAX_CODE_LEN: usize = 30;

/// Canonical-code decoding tables, derived from [`CODE_LENGTHS`] at compile time.
struct Canonical {
    /// Number of codes of each length.
    count: [u32; MAX_CODE_LEN + 1],
    /// Numerically smallest code of each length.
    first_code: [u32; MAX_CODE_LEN + 1],
    /// Position in `symbols` of the first symbol of each length.
    first_index: [u32; MAX_CODE_LEN + 1],
    /// Symbols sorted by (code length, symbol).
    symbols: [u16; 257],
}

const fn build_canonical() -> Canonical {
    let mut count = [0u32; MAX_CODE_LEN + 1];
    let mut i = 0;
    while i < 257 {
        count[CODE_LENGTHS[i] as usize] += 1;
        i += 1;
    }
    let mut first_code = [0u32; MAX_CODE_LEN + 1];
    let mut first_index = [0u32; MAX_CODE_LEN + 1];
    let mut code = 0u32;
    let mut index = 0u32;
    let mut len = 1;
    while len <= MAX_CODE_LEN {
        first_code[len] = code;
        first_index[len] = index;
        code = (code + count[len]) << 1;
        index += count[len];
        len += 1;
    }
    let mut symbols = [0u16; 257];
    let mut next = first_index;
    let mut sym = 0;
    while sym < 257 {
        let l = CODE_LENGTHS[sym] as usize;
        symbols[next[l] as usize] = sym as u16;
        next[l] += 1;
        sym += 1;
    }
    Canonical { count, first_code, first_index, symbols }
}

static CANONICAL: Canonical = build_canonical();

/// Decodes a Huffman-coded string. Strings in header blocks are short, so a bit-at-a-time walk
/// over the canonical code is plenty fast and needs no large lookup table.
pub(crate) fn huffman_decode(input: &[u8]) -> Result<Vec<u8>, HpackError> {
    let t = &CANONICAL;
    let mut out = Vec::with_capacity(input.len() + input.len() / 2);
    let mut code = 0u32;
    let mut len = 0usize;
    for &byte in input {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            len += 1;
            if len > MAX_CODE_LEN {
                // Unreachable for a complete code like HPACK's; kept so bad input can't panic.
                return Err(HpackError::Huffman);
            }
            let offset = code.wrapping_sub(t.first_code[len]);
            if code >= t.first_code[len] && offset < t.count[len] {
                let sym = t.symbols[(t.first_index[len] + offset) as usize];
                if sym == EOS {
                    return Err(HpackError::Huffman);
                }
                out.push(sym as u8);
                code = 0;
                len = 0;
            }
        }
    }
    // Leftover bits must be padding: fewer than 8 of them, all ones (a prefix of EOS).
    if len > 7 || code != (1u32 << len) - 1 {
        return Err(HpackError::Huffman);
    }
    Ok(out)
}

/// Test helper: the encoder half, built from the same canonical code.
#[cfg(test)]
pub(crate) fn huffman_encode(input: &[u8]) -> Vec<u8> {
    let t = &CANONICAL;
    // Recover each symbol's code from its rank within its length.
    let mut codes = [0u32; 257];
    for len in 1..=MAX_CODE_LEN {
        for k in 0..t.count[len] {
            let sym = t.symbols[(t.first_index[len] + k) as usize];
            codes[sym as usize] = t.first_code[len] + k;
        }
    }
    let mut out = Vec::new();
    let mut acc: u64 = 0;
    let mut bits = 0u32;
    for &b in input {
        let len = u32::from(CODE_LENGTHS[b as usize]);
        acc = (acc << len) | u64::from(codes[b as usize]);
        bits += len;
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    if bits > 0 {
        let pad = 8 - bits;
        out.push(((acc << pad) as u8) | ((1u8 << pad) - 1));
    }
    out
}

/// Decodes a string literal (§5.2). Returns the decoded bytes and the octets consumed.
fn decode_string(buf: &[u8]) -> Result<(Bytes, usize), HpackError> {
    let huffman = buf.first().ok_or(HpackError::Truncated)? & 0x80 != 0;
    let (len, n) = decode_int(buf, 7)?;
    let end = n.checked_add(len).ok_or(HpackError::Truncated)?;
    let raw = buf.get(n..end).ok_or(HpackError::Truncated)?;
    let value = if huffman { Bytes::from(huffman_decode(raw)?) } else { Bytes::copy_from_slice(raw) };
    Ok((value, end))
}

// ===== tables (RFC 7541 §2.3, Appendix A) =====

/// The static table, entries 1..=61 (RFC 7541 Appendix A): name and value.
const STATIC_TABLE: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// Per-entry overhead the RFC adds to name and value lengths (§4.1).
const ENTRY_OVERHEAD: usize = 32;

/// The dynamic table, kept entry-for-entry identical to the one in the server's decoder.
#[derive(Debug, Default)]
pub(crate) struct DynamicTable {
    /// Newest entry first, so HPACK index 62 is `entries[0]`.
    entries: VecDeque<(Bytes, Bytes)>,
    size: usize,
    max_size: usize,
}

impl DynamicTable {
    pub(crate) fn new(max_size: usize) -> Self {
        DynamicTable { entries: VecDeque::new(), size: 0, max_size }
    }

    #[cfg(test)]
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    #[cfg(test)]
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.entries.iter().map(|(n, v)| (&n[..], &v[..]))
    }

    fn entry_size(name: &[u8], value: &[u8]) -> usize {
        name.len() + value.len() + ENTRY_OVERHEAD
    }

    fn evict_to(&mut self, limit: usize) {
        while self.size > limit {
            match self.entries.pop_back() {
                Some((n, v)) => self.size -= Self::entry_size(&n, &v),
                None => break,
            }
        }
    }

    pub(crate) fn insert(&mut self, name: Bytes, value: Bytes) {
        let len = Self::entry_size(&name, &value);
        if len > self.max_size {
            // An entry bigger than the whole table empties it and is not stored (§4.4).
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max_size - len);
        self.size += len;
        self.entries.push_front((name, value));
    }

    pub(crate) fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    /// Name and value of the entry at a 1-based HPACK index (static entries first).
    fn entry(&self, index: usize) -> Result<(Bytes, Bytes), HpackError> {
        match index {
            0 => Err(HpackError::BadIndex(0)),
            1..=61 => {
                let (name, value) = STATIC_TABLE[index - 1];
                Ok((Bytes::from_static(name.as_bytes()), Bytes::from_static(value.as_bytes())))
            }
            _ => self.entries.get(index - 62).cloned().ok_or(HpackError::BadIndex(index)),
        }
    }
}

// ===== walking a block (RFC 7541 §6) =====

/// One header field of a block, as handed to the visitor of [`walk_block`].
#[derive(Debug)]
struct Field {
    name: Bytes,
    value: Bytes,
    /// For a literal representation, where its value string (length prefix included) lies in
    /// the block; `None` for an indexed field.
    literal_value: Option<Range<usize>>,
}

/// Walks one complete header block, updating `table` exactly as a decoder would, and calls
/// `on_field` with each header field in order. When a literal is to be added to the table, the
/// table stores the value `on_field` returns instead of the decoded one, if it returns any.
///
/// `limit` is the SETTINGS_HEADER_TABLE_SIZE the decoding side advertised: the ceiling for
/// dynamic table size updates. On error the table may be partly updated.
fn walk_block(
    table: &mut DynamicTable,
    limit: usize,
    block: &[u8],
    mut on_field: impl FnMut(&Field) -> Option<Bytes>,
) -> Result<(), HpackError> {
    let mut seen_field = false;
    let mut pos = 0;

    while pos < block.len() {
        let rest = &block[pos..];
        let first = rest[0];

        if first & 0x80 != 0 {
            // Indexed field.
            let (index, n) = decode_int(rest, 7)?;
            let (name, value) = table.entry(index)?;
            pos += n;
            seen_field = true;
            on_field(&Field { name, value, literal_value: None });
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
            table.entry(name_index)?.0
        };
        let value_start = pos;
        let (value, n) = decode_string(&block[pos..])?;
        pos += n;
        seen_field = true;

        let field = Field { name, value, literal_value: Some(value_start..pos) };
        let stored = on_field(&field);
        if indexing {
            table.insert(field.name, stored.unwrap_or(field.value));
        }
    }
    Ok(())
}

// ===== block rewriting =====

const AUTHORITY: &[u8] = b":authority";

/// Result of walking a block that needed at least one replacement.
#[derive(Debug)]
pub(crate) struct Rewritten {
    /// The new header block fragment.
    pub(crate) block: Vec<u8>,
    /// The `:authority` values that were replaced, in order.
    pub(crate) originals: Vec<Bytes>,
}

/// True when h2's server would refuse `value` as `:authority` and a placeholder of the same
/// length would be accepted instead.
fn needs_placeholder(value: &Bytes) -> bool {
    if http::uri::Authority::from_maybe_shared(value.clone()).is_ok() {
        return false;
    }
    // An empty value has no same-length replacement that h2 accepts; leave it to be rejected.
    !value.is_empty() && http::uri::Authority::from_maybe_shared(placeholder(value.len())).is_ok()
}

fn placeholder(len: usize) -> Bytes {
    Bytes::from(vec![b'x'; len])
}

/// Mirror of the server's HPACK decoder state, able to rewrite header blocks.
#[derive(Debug)]
pub(crate) struct BlockRewriter {
    table: DynamicTable,
    /// SETTINGS_HEADER_TABLE_SIZE the server advertised: the ceiling for size updates.
    limit: usize,
}

impl BlockRewriter {
    pub(crate) fn new(header_table_size: usize) -> Self {
        BlockRewriter { table: DynamicTable::new(header_table_size), limit: header_table_size }
    }

    #[cfg(test)]
    pub(crate) fn table(&self) -> &DynamicTable {
        &self.table
    }

    /// Walks one complete header block, updating the dynamic table exactly as a decoder would.
    ///
    /// Returns `Ok(None)` when nothing needs changing. Otherwise returns the block with every
    /// rejected `:authority` literal value swapped for `x` repeated to the same decoded length.
    /// Keeping the length keeps the entry size, and with it all later eviction decisions,
    /// identical on both sides; the server's table simply holds the placeholder instead.
    ///
    /// On error the table may be partly updated; the caller must stop interpreting the
    /// connection.
    pub(crate) fn rewrite(&mut self, block: &[u8]) -> Result<Option<Rewritten>, HpackError> {
        let mut out = Vec::new();
        let mut originals = Vec::new();
        // `block[..copied]` has been accounted for in `out` (only once `out` is in use).
        let mut copied = 0;

        walk_block(&mut self.table, self.limit, block, |field| {
            let value_at = field.literal_value.clone()?;
            if &field.name[..] != AUTHORITY || !needs_placeholder(&field.value) {
                return None;
            }
            // Same representation type and name encoding; only the value changes, to a plain
            // (non-Huffman) literal of the same decoded length.
            let replacement = placeholder(field.value.len());
            if out.is_empty() {
                out.reserve(block.len() + 16);
            }
            out.extend_from_slice(&block[copied..value_at.start]);
            encode_int(replacement.len(), 7, 0x00, &mut out);
            out.extend_from_slice(&replacement);
            copied = value_at.end;
            originals.push(field.value.clone());
            Some(replacement)
        })?;

        if originals.is_empty() {
            return Ok(None);
        }
        out.extend_from_slice(&block[copied..]);
        Ok(Some(Rewritten { block: out, originals }))
    }
}

// ===== decoding =====

/// Decodes HTTP/2 header blocks (HPACK, RFC 7541) into header lists; used by tests that read
/// raw server frames.
///
/// The decoder keeps the dynamic table from block to block, so it must see every header block
/// sent in one direction of a connection, in order. It applies the same rules as `h2`'s
/// decoder: integers of at most five octets, and table size updates only at the start of a
/// block and never above the size given to [`HeaderDecoder::new`].
#[derive(Debug)]
pub struct HeaderDecoder {
    table: DynamicTable,
    /// SETTINGS_HEADER_TABLE_SIZE of the decoding side: the ceiling for size updates.
    limit: usize,
}

impl HeaderDecoder {
    /// A decoder for a peer that was told `SETTINGS_HEADER_TABLE_SIZE = max_table_size` (4096,
    /// [`DEFAULT_HEADER_TABLE_SIZE`](super::DEFAULT_HEADER_TABLE_SIZE), unless the receiving
    /// side's SETTINGS said otherwise).
    pub fn new(max_table_size: usize) -> Self {
        HeaderDecoder { table: DynamicTable::new(max_table_size), limit: max_table_size }
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
            None
        })?;
        Ok(headers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn integers_rfc_c1() {
        // C.1.1: 10 in a 5-bit prefix.
        assert_eq!(decode_int(&[0b0000_1010], 5), Ok((10, 1)));
        // C.1.2: 1337 in a 5-bit prefix takes three octets.
        assert_eq!(decode_int(&[0x1f, 0x9a, 0x0a], 5), Ok((1337, 3)));
        // C.1.3: 42 starting at an octet boundary.
        assert_eq!(decode_int(&[42], 8), Ok((42, 1)));
        // Bits above the prefix are ignored.
        assert_eq!(decode_int(&[0xea], 5), Ok((10, 1)));
        // Exactly the prefix maximum needs a zero continuation octet.
        assert_eq!(decode_int(&[0x1f, 0x00], 5), Ok((31, 2)));
    }

    #[test]
    fn integer_limits() {
        assert_eq!(decode_int(&[], 5), Err(HpackError::Truncated));
        assert_eq!(decode_int(&[0x1f, 0x80], 5), Err(HpackError::Truncated));
        // Four continuation octets are accepted (as in h2), a fifth is not.
        assert_eq!(decode_int(&[0x7f, 0xff, 0xff, 0xff, 0x7f], 7), Ok((127 + (1 << 28) - 1, 5)));
        assert_eq!(decode_int(&[0x7f, 0xff, 0xff, 0xff, 0xff, 0x01], 7), Err(HpackError::IntegerOverflow));
    }

    #[test]
    fn integer_round_trip() {
        for prefix in 1..=8u8 {
            for value in [0usize, 1, 30, 31, 126, 127, 128, 255, 1337, 16_384, 1 << 20] {
                let mut buf = Vec::new();
                encode_int(value, prefix, 0, &mut buf);
                assert_eq!(decode_int(&buf, prefix), Ok((value, buf.len())), "{value}/{prefix}");
            }
        }
    }

    #[test]
    fn huffman_rfc_c4_examples() {
        assert_eq!(huffman_decode(&hex("f1e3 c2e5 f23a 6ba0 ab90 f4ff")).unwrap(), b"www.example.com");
        assert_eq!(huffman_decode(&hex("a8eb 1064 9cbf")).unwrap(), b"no-cache");
        assert_eq!(huffman_decode(&hex("25a8 49e9 5ba9 7d7f")).unwrap(), b"custom-key");
        assert_eq!(huffman_decode(&hex("25a8 49e9 5bb8 e8b4 bf")).unwrap(), b"custom-value");
    }

    #[test]
    fn huffman_code_is_complete_and_round_trips() {
        // The longest code (EOS) must come out as thirty 1 bits if the lengths are right.
        let t = &CANONICAL;
        assert_eq!(t.first_code[30] + t.count[30] - 1, (1 << 30) - 1);
        let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        assert_eq!(huffman_decode(&huffman_encode(&all)).unwrap(), all);
        assert_eq!(huffman_decode(&[]).unwrap(), b"");
    }

    #[test]
    fn huffman_rejects_bad_padding_and_eos() {
        // '0' is 00000; padding with zeros instead of ones is invalid.
        assert_eq!(huffman_decode(&[0b0000_0000]), Err(HpackError::Huffman));
        // A whole octet of padding is too much.
        assert_eq!(huffman_decode(&[0x07, 0xff]), Err(HpackError::Huffman));
        // Thirty ones is EOS, which must not appear in a string.
        assert_eq!(huffman_decode(&[0xff, 0xff, 0xff, 0xff]), Err(HpackError::Huffman));
    }

    #[test]
    fn dynamic_table_eviction() {
        let mut t = DynamicTable::new(100);
        t.insert(Bytes::from_static(b"a"), Bytes::from_static(b"1234567")); // 40
        t.insert(Bytes::from_static(b"bb"), Bytes::from_static(b"123456")); // 40
        assert_eq!(t.size(), 80);
        // 40 more does not fit: the oldest entry goes.
        t.insert(Bytes::from_static(b"ccc"), Bytes::from_static(b"12345")); // 40
        assert_eq!(t.size(), 80);
        let names: Vec<_> = t.entries().map(|(n, _)| n.to_vec()).collect();
        assert_eq!(names, vec![b"ccc".to_vec(), b"bb".to_vec()]);
        assert_eq!(&t.entry(62).unwrap().0[..], b"ccc");
        assert_eq!(&t.entry(63).unwrap().0[..], b"bb");
        assert_eq!(t.entry(64), Err(HpackError::BadIndex(64)));
        // Shrinking evicts from the old end.
        t.set_max_size(50);
        assert_eq!(t.size(), 40);
        // An entry larger than the table empties it.
        t.insert(Bytes::from_static(b"x"), Bytes::from(vec![b'y'; 40]));
        assert_eq!(t.size(), 0);
        assert_eq!(t.entries().count(), 0);
        assert_eq!(&t.entry(1).unwrap().0[..], b":authority");
        assert_eq!(&t.entry(61).unwrap().0[..], b"www-authenticate");
    }

    #[test]
    fn rfc_c6_responses_with_huffman_and_eviction() {
        // RFC 7541 C.6: three responses with a 256-octet table, so entries get evicted.
        let mut r = BlockRewriter::new(256);
        let c61 = hex("4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
             2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3");
        assert!(r.rewrite(&c61).unwrap().is_none());
        let expect_61: Vec<(&[u8], &[u8])> = vec![
            (b"location", b"https://www.example.com"),
            (b"date", b"Mon, 21 Oct 2013 20:13:21 GMT"),
            (b"cache-control", b"private"),
            (b":status", b"302"),
        ];
        assert_eq!(r.table().entries().collect::<Vec<_>>(), expect_61);
        assert_eq!(r.table().size(), 222);

        assert!(r.rewrite(&hex("4883 640e ffc1 c0bf")).unwrap().is_none());
        assert_eq!(r.table().size(), 222);
        assert_eq!(r.table().entries().next().unwrap(), (&b":status"[..], &b"307"[..]));

        let c63 = hex("88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
             77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
             9587 3160 65c0 03ed 4ee5 b106 3d50 07");
        assert!(r.rewrite(&c63).unwrap().is_none());
        let expect_63: Vec<(&[u8], &[u8])> = vec![
            (b"set-cookie", b"foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"),
            (b"content-encoding", b"gzip"),
            (b"date", b"Mon, 21 Oct 2013 20:13:22 GMT"),
        ];
        assert_eq!(r.table().entries().collect::<Vec<_>>(), expect_63);
        assert_eq!(r.table().size(), 215);
    }

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
            let table: Vec<_> = d.table.entries().collect();
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

    #[test]
    fn decoder_sees_the_rewritten_block() {
        let bad = br"\\.\pipe\csi-proxy-disk-v1";
        let mut block = vec![0x83, 0x86];
        block.extend(authority_literal(bad, true));
        block.extend([0x44, 0x01, b'/']);
        // The original block decodes to the original value...
        let mut plain = HeaderDecoder::new(4096);
        let original = plain.decode(&block).unwrap();
        assert_eq!(original[2], (Bytes::from_static(b":authority"), Bytes::from_static(bad)));
        // ...and the rewritten one to the placeholder, with everything else the same, also
        // through the dynamic table on the next block.
        let mut r = BlockRewriter::new(4096);
        let rw = r.rewrite(&block).unwrap().unwrap();
        let mut d = HeaderDecoder::new(4096);
        let mut fixed = d.decode(&rw.block).unwrap();
        assert_eq!(&fixed[2].1[..], &vec![b'x'; bad.len()][..]);
        fixed[2].1 = Bytes::from_static(bad);
        assert_eq!(fixed, original);
        assert_eq!(
            as_strs(&d.decode(&[0x83, 0xbf, 0xbe]).unwrap()),
            vec![(":method", "POST"), (":authority", "xxxxxxxxxxxxxxxxxxxxxxxxxx"), (":path", "/"),]
        );
        assert!(r.rewrite(&[0x83, 0xbf, 0xbe]).unwrap().is_none());
    }

    /// Literal `:authority` with incremental indexing, name by static index 1.
    fn authority_literal(value: &[u8], huffman: bool) -> Vec<u8> {
        let mut b = vec![0x41];
        if huffman {
            let coded = huffman_encode(value);
            encode_int(coded.len(), 7, 0x80, &mut b);
            b.extend_from_slice(&coded);
        } else {
            encode_int(value.len(), 7, 0x00, &mut b);
            b.extend_from_slice(value);
        }
        b
    }

    #[test]
    fn rewrites_rejected_authority_and_keeps_table_in_step() {
        let bad = br"\\.\pipe\csi-proxy-disk-v1";
        let mut block = vec![0x83, 0x86]; // :method POST, :scheme http
        block.extend(authority_literal(bad, true));
        block.extend([0x44, 0x01, b'/']); // :path "/" with indexing
        let mut r = BlockRewriter::new(4096);
        let rw = r.rewrite(&block).unwrap().expect("rewritten");
        assert_eq!(rw.originals, vec![Bytes::from_static(bad)]);
        let mut expected = vec![0x83, 0x86, 0x41, bad.len() as u8];
        expected.extend(std::iter::repeat_n(b'x', bad.len()));
        expected.extend([0x44, 0x01, b'/']);
        assert_eq!(rw.block, expected);
        // The table holds the placeholder, with the original's size.
        let entries: Vec<_> = r.table().entries().collect();
        assert_eq!(entries[1], (&b":authority"[..], &vec![b'x'; bad.len()][..]));
        assert_eq!(r.table().size(), (32 + 5 + 1) + (32 + 10 + bad.len()));

        // Later blocks: indexed reference is copied; a literal with the dynamic name gets fixed.
        let mut block2 = vec![0xbf]; // index 63 = the :authority entry
        block2.extend([0x0f, 0x30, 0x02, b'%', b'%']); // without indexing, name index 63
        let rw2 = r.rewrite(&block2).unwrap().expect("rewritten");
        assert_eq!(rw2.block, vec![0xbf, 0x0f, 0x30, 0x02, b'x', b'x']);
    }

    #[test]
    fn literal_names_and_never_indexed_are_handled() {
        // Never-indexed, literal Huffman name ":authority", plain bad value.
        let mut block = vec![0x10];
        let name = huffman_encode(b":authority");
        encode_int(name.len(), 7, 0x80, &mut block);
        block.extend(&name);
        block.extend([0x03, b'a', b' ', b'b']);
        let mut r = BlockRewriter::new(4096);
        let rw = r.rewrite(&block).unwrap().unwrap();
        let mut expected = block[..block.len() - 4].to_vec();
        expected.extend([0x03, b'x', b'x', b'x']);
        assert_eq!(rw.block, expected);
        assert_eq!(r.table().size(), 0);
    }

    #[test]
    fn valid_and_empty_authorities_are_left_alone() {
        let mut r = BlockRewriter::new(4096);
        let mut block = authority_literal(b"localhost", true);
        block.extend(authority_literal(b"localhost:8080", false));
        block.extend(authority_literal(b"", false));
        assert!(r.rewrite(&block).unwrap().is_none());
    }

    #[test]
    fn size_updates_follow_h2_rules() {
        let mut r = BlockRewriter::new(4096);
        // 0x3f e1 1f = 4096 is allowed; 4097 is not.
        assert!(r.rewrite(&[0x3f, 0xe1, 0x1f]).unwrap().is_none());
        assert_eq!(r.rewrite(&[0x3f, 0xe2, 0x1f]).unwrap_err(), HpackError::TableSizeTooLarge(4097));
        assert_eq!(r.rewrite(&[0x82, 0x20]).unwrap_err(), HpackError::TableSizeMisplaced);
        assert!(r.rewrite(&[0x20, 0x82]).unwrap().is_none());
    }

    #[test]
    fn malformed_blocks_error_without_panicking() {
        let mut r = BlockRewriter::new(4096);
        assert_eq!(r.rewrite(&[0x80]).unwrap_err(), HpackError::BadIndex(0));
        assert_eq!(r.rewrite(&[0xbe]).unwrap_err(), HpackError::BadIndex(62));
        assert_eq!(r.rewrite(&[0x41, 0x05, b'a']).unwrap_err(), HpackError::Truncated);
        assert_eq!(r.rewrite(&[0x40]).unwrap_err(), HpackError::Truncated);
        // Pseudo-random garbage must never panic.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let len = (x % 40) as usize;
            let mut buf = Vec::with_capacity(len);
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                buf.push(x as u8);
            }
            let _ = BlockRewriter::new(4096).rewrite(&buf);
            let _ = huffman_decode(&buf);
        }
    }
}
