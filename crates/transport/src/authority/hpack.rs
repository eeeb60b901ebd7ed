//! Just enough HPACK (RFC 7541) for two jobs:
//!
//! - the building blocks of the streaming `:authority` rewriter in the parent module: integers,
//!   a Huffman decoder that can be fed a string piece by piece, the static table's name lengths,
//!   and [`placeholder_payload`], which builds a replacement value of the same encoded and
//!   decoded length;
//! - [`HeaderDecoder`], a plain header block decoder for tests that read raw server frames.

use bytes::Bytes;
use std::collections::VecDeque;

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

/// An HPACK integer read one octet at a time, with h2's limit of five octets in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IntStep {
    /// Expecting the first octet, whose low `prefix` bits start the value.
    First {
        prefix: u8,
    },
    More {
        value: usize,
        shift: u32,
        octets: usize,
    },
}

impl IntStep {
    /// Takes the next octet; the value once complete.
    pub(crate) fn feed(&mut self, b: u8) -> Result<Option<usize>, HpackError> {
        match *self {
            IntStep::First { prefix } => {
                let mask = (((1u16) << prefix) - 1) as u8;
                let value = usize::from(b & mask);
                if value < usize::from(mask) {
                    return Ok(Some(value));
                }
                *self = IntStep::More { value, shift: 0, octets: 1 };
                Ok(None)
            }
            IntStep::More { value, shift, octets } => {
                // Four continuation octets carry at most 28 bits: no overflow even on 32 bits.
                let value = value + (usize::from(b & 0x7f) << shift);
                if b & 0x80 == 0 {
                    return Ok(Some(value));
                }
                if octets + 1 == MAX_CONTINUATION_OCTETS + 1 {
                    return Err(HpackError::IntegerOverflow);
                }
                *self = IntStep::More { value, shift: shift + 7, octets: octets + 1 };
                Ok(None)
            }
        }
    }
}

/// Appends `value` as an HPACK integer; `flags` supplies the bits above the prefix.
#[cfg(any(test, feature = "fuzzing"))]
pub fn encode_int(mut value: usize, prefix_bits: u8, flags: u8, out: &mut Vec<u8>) {
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

/// A Huffman decoder that can be fed a string in pieces (a value may span frames). Strings are
/// short, so a bit-at-a-time walk over the canonical code is plenty fast and needs no table.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HuffmanStream {
    code: u32,
    len: usize,
    decoded: usize,
    failed: bool,
}

impl HuffmanStream {
    /// Decodes `input`, appending symbols to `out` while it has room (`limit` symbols in all).
    pub(crate) fn feed(&mut self, input: &[u8], out: &mut Vec<u8>, limit: usize) {
        let t = &CANONICAL;
        for &byte in input {
            if self.failed {
                return;
            }
            for shift in (0..8).rev() {
                self.code = (self.code << 1) | u32::from((byte >> shift) & 1);
                self.len += 1;
                if self.len > MAX_CODE_LEN {
                    // Unreachable for a complete code like HPACK's; kept so bad input can't panic.
                    self.failed = true;
                    return;
                }
                let offset = self.code.wrapping_sub(t.first_code[self.len]);
                if self.code >= t.first_code[self.len] && offset < t.count[self.len] {
                    let sym = t.symbols[(t.first_index[self.len] + offset) as usize];
                    if sym == EOS {
                        self.failed = true;
                        return;
                    }
                    if out.len() < limit {
                        out.push(sym as u8);
                    }
                    self.decoded += 1;
                    self.code = 0;
                    self.len = 0;
                }
            }
        }
    }

    /// Number of symbols decoded, once the whole string has been fed; an error for EOS inside
    /// the string or padding that is not a prefix of EOS (fewer than 8 one bits), as h2 rules.
    pub(crate) fn finish(&self) -> Result<usize, HpackError> {
        if self.failed || self.len > 7 || self.code != (1u32 << self.len) - 1 {
            return Err(HpackError::Huffman);
        }
        Ok(self.decoded)
    }
}

/// Decodes a whole Huffman-coded string.
pub(crate) fn huffman_decode(input: &[u8]) -> Result<Vec<u8>, HpackError> {
    let mut h = HuffmanStream::default();
    let mut out = Vec::with_capacity(input.len() + input.len() / 2);
    h.feed(input, &mut out, usize::MAX);
    h.finish()?;
    Ok(out)
}

/// Huffman-encodes `input`, padding the last octet with one bits.
pub fn huffman_encode(input: &[u8]) -> Vec<u8> {
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

// ===== placeholders =====

/// Characters a placeholder is made of: each is valid anywhere in an `http::uri::Authority`
/// and its Huffman code is 5 bits plus the given extra (RFC 7541 Appendix B). With these,
/// `k` characters can carry any number of extra bits from 0 to `8k` except `8k - 1` (and 4
/// for a single character), which [`reachable`] encodes.
const PLACEHOLDER_CHARS: [(usize, u8); 7] =
    [(8, b'$'), (6, b'\''), (5, b'!'), (3, b'&'), (2, b'x'), (1, b'b'), (0, b'a')];

fn reachable(chars: usize, extra: usize) -> bool {
    extra == 0 || (extra <= 8 * chars && extra != 8 * chars - 1 && !(chars == 1 && extra == 4))
}

/// The bytes to put in place of a string literal's payload so that it decodes to a valid
/// `:authority` of `decoded_len` octets while keeping its `encoded_len` octets on the wire, its
/// Huffman flag and its length prefix: then no frame changes size, so `h2` sees the same frame
/// layout, CONTINUATION count and header-list size as it would have for a client that sent a
/// valid authority. Plain literals get `x` repeated; Huffman-coded ones a mix of characters
/// whose codes add up to the same number of octets. `None` when no such value exists (a
/// Huffman string averaging more than 13 bits per character, such as a run of backslashes or
/// non-ASCII text); the value is then left for `h2` to refuse.
pub(crate) fn placeholder_payload(huffman: bool, encoded_len: usize, decoded_len: usize) -> Option<Vec<u8>> {
    if decoded_len == 0 {
        return None;
    }
    let payload = if !huffman {
        if encoded_len != decoded_len {
            return None;
        }
        vec![b'x'; decoded_len]
    } else {
        // Total code bits must fill exactly `encoded_len` octets with 0-7 bits of padding.
        let base = 5 * decoded_len;
        let top = 8 * encoded_len;
        let low = base.max(top.checked_sub(7)?);
        let extra = (low..=top).map(|bits| bits - base).find(|&e| reachable(decoded_len, e))?;
        let mut text = Vec::with_capacity(decoded_len);
        let mut left = extra;
        for i in 0..decoded_len {
            let rest = decoded_len - i - 1;
            let &(add, ch) = PLACEHOLDER_CHARS.iter().find(|&&(add, _)| add <= left && reachable(rest, left - add))?;
            text.push(ch);
            left -= add;
        }
        let coded = huffman_encode(&text);
        if coded.len() != encoded_len {
            return None;
        }
        debug_assert!(huffman_decode(&coded).is_ok_and(|d| d == text));
        coded
    };
    Some(payload)
}

/// The decoded placeholder, for tests and logs.
pub(crate) fn placeholder_text(huffman: bool, payload: &[u8]) -> Vec<u8> {
    if huffman {
        huffman_decode(payload).unwrap_or_default()
    } else {
        payload.to_vec()
    }
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

/// What an index refers to: a static entry (name, value) or a dynamic one.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Entry<'a, E> {
    Static(&'static str, &'static str),
    Dynamic(&'a E),
}

/// The HPACK index space (§2.3): the static table, then a dynamic table whose entries are
/// whatever its user keeps of them (`E`: the [`HeaderDecoder`] keeps names and values, the
/// `:authority` adapter only what it needs to recognise an `:authority` name). Insertion,
/// eviction and size updates follow §4 exactly, as `h2`'s decoder does, so a table fed the same
/// representations holds the same entries as the server's.
#[derive(Debug)]
pub(crate) struct Table<E> {
    /// Newest entry first, so HPACK index 62 is `entries[0]`; each with its size (§4.1).
    entries: VecDeque<(E, usize)>,
    size: usize,
    max_size: usize,
}

impl<E> Table<E> {
    pub(crate) fn new(max_size: usize) -> Self {
        Table { entries: VecDeque::new(), size: 0, max_size }
    }

    #[cfg(test)]
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// The dynamic entries, newest first.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> impl Iterator<Item = &E> {
        self.entries.iter().map(|(e, _)| e)
    }

    fn evict_to(&mut self, limit: usize) {
        while self.size > limit {
            match self.entries.pop_back() {
                Some((_, s)) => self.size -= s,
                None => break,
            }
        }
    }

    /// Adds an entry whose name and value have these decoded lengths (§4.4).
    pub(crate) fn insert(&mut self, entry: E, name_len: usize, value_len: usize) {
        let len = name_len + value_len + ENTRY_OVERHEAD;
        if len > self.max_size {
            // An entry bigger than the whole table empties it and is not stored.
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max_size - len);
        self.size += len;
        self.entries.push_front((entry, len));
    }

    /// A dynamic table size update (§6.3): evicts down to the new size.
    pub(crate) fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    /// The entry at a 1-based HPACK index (static entries first).
    pub(crate) fn get(&self, index: usize) -> Result<Entry<'_, E>, HpackError> {
        match index {
            0 => Err(HpackError::BadIndex(0)),
            1..=STATIC_ENTRIES => {
                let (name, value) = STATIC_TABLE[index - 1];
                Ok(Entry::Static(name, value))
            }
            _ => self
                .entries
                .get(index - STATIC_ENTRIES - 1)
                .map(|(e, _)| Entry::Dynamic(e))
                .ok_or(HpackError::BadIndex(index)),
        }
    }
}

/// Number of entries in the static table.
const STATIC_ENTRIES: usize = STATIC_TABLE.len();

// ===== walking a block (RFC 7541 §6) =====

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
    table: Table<(Bytes, Bytes)>,
    /// SETTINGS_HEADER_TABLE_SIZE of the decoding side: the ceiling for size updates.
    limit: usize,
}

impl HeaderDecoder {
    /// A decoder for a peer that was told `SETTINGS_HEADER_TABLE_SIZE = max_table_size` (4096,
    /// [`DEFAULT_HEADER_TABLE_SIZE`](super::DEFAULT_HEADER_TABLE_SIZE), unless the receiving
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
        let mut t = Table::new(100);
        let insert = |t: &mut Table<(Bytes, Bytes)>, n: &'static [u8], v: Bytes| {
            let (nl, vl) = (n.len(), v.len());
            t.insert((Bytes::from_static(n), v), nl, vl);
        };
        insert(&mut t, b"a", Bytes::from_static(b"1234567")); // 40
        insert(&mut t, b"bb", Bytes::from_static(b"123456")); // 40
        assert_eq!(t.size(), 80);
        // 40 more does not fit: the oldest entry goes.
        insert(&mut t, b"ccc", Bytes::from_static(b"12345")); // 40
        assert_eq!(t.size(), 80);
        let names: Vec<_> = t.entries().map(|(n, _)| n.to_vec()).collect();
        assert_eq!(names, vec![b"ccc".to_vec(), b"bb".to_vec()]);
        assert_eq!(&field_at(&t, 62).unwrap().0[..], b"ccc");
        assert_eq!(&field_at(&t, 63).unwrap().0[..], b"bb");
        assert_eq!(field_at(&t, 64), Err(HpackError::BadIndex(64)));
        // Shrinking evicts from the old end.
        t.set_max_size(50);
        assert_eq!(t.size(), 40);
        // An entry larger than the table empties it.
        insert(&mut t, b"x", Bytes::from(vec![b'y'; 40]));
        assert_eq!(t.size(), 0);
        assert_eq!(t.entries().count(), 0);
        assert_eq!(&field_at(&t, 1).unwrap().0[..], b":authority");
        assert_eq!(&field_at(&t, 61).unwrap().0[..], b"www-authenticate");
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

    #[test]
    fn streaming_huffman_matches_whole_string_decoding() {
        let text = br"%5C%5C.%5C%5Cpipe%5C%5Ccsi-proxy-disk-v1 \\.\pipe\x";
        let coded = huffman_encode(text);
        for split in 0..=coded.len() {
            let mut h = HuffmanStream::default();
            let mut out = Vec::new();
            h.feed(&coded[..split], &mut out, usize::MAX);
            h.feed(&coded[split..], &mut out, usize::MAX);
            assert_eq!(h.finish(), Ok(text.len()));
            assert_eq!(out, text);
        }
        // The output limit bounds what is kept, not what is counted.
        let mut h = HuffmanStream::default();
        let mut out = Vec::new();
        h.feed(&coded, &mut out, 3);
        assert_eq!((h.finish(), out.len()), (Ok(text.len()), 3));
    }

    #[test]
    fn placeholder_alphabet_has_the_code_lengths_it_assumes() {
        for (extra, ch) in PLACEHOLDER_CHARS {
            assert_eq!(usize::from(CODE_LENGTHS[usize::from(ch)]), 5 + extra, "{}", ch as char);
        }
        let all: Vec<u8> = PLACEHOLDER_CHARS.iter().map(|&(_, c)| c).collect();
        assert!(http::uri::Authority::try_from(&all[..]).is_ok());
        // `reachable` agrees with brute force for small counts.
        for k in 0..4usize {
            let mut sums = std::collections::BTreeSet::from([0usize]);
            for _ in 0..k {
                sums = sums.iter().flat_map(|s| PLACEHOLDER_CHARS.iter().map(move |&(a, _)| s + a)).collect();
            }
            for extra in 0..=8 * k + 2 {
                assert_eq!(reachable(k, extra), sums.contains(&extra), "k={k} extra={extra}");
            }
        }
    }

    #[test]
    fn placeholders_keep_both_lengths_and_are_valid_authorities() {
        let originals: [&[u8]; 5] = [
            br"\\.\pipe\csi-proxy-disk-v1",
            b"%5C%5C.%5C%5Cpipe%5C%5Ccsi-proxy-disk-v1",
            b"/run/csi-proxy/csi-proxy-disk-v1.sock",
            b"a b",
            b"0",
        ];
        for original in originals {
            for huffman in [false, true] {
                let encoded = if huffman { huffman_encode(original) } else { original.to_vec() };
                let p = placeholder_payload(huffman, encoded.len(), original.len()).expect("placeholder");
                assert_eq!(p.len(), encoded.len());
                let text = placeholder_text(huffman, &p);
                assert_eq!(text.len(), original.len());
                assert!(http::uri::Authority::try_from(&text[..]).is_ok(), "{text:?}");
            }
        }
        // Every length pair a Huffman string can have, up to a size, either works or is
        // denser than 13 bits per character.
        for decoded in 1..40usize {
            for encoded in (5 * decoded).div_ceil(8)..=(30 * decoded).div_ceil(8) {
                match placeholder_payload(true, encoded, decoded) {
                    Some(p) => {
                        assert_eq!(p.len(), encoded);
                        let text = huffman_decode(&p).unwrap();
                        assert_eq!(text.len(), decoded);
                        assert!(http::uri::Authority::try_from(&text[..]).is_ok());
                    }
                    None => assert!(8 * encoded - 7 > 13 * decoded, "{decoded}/{encoded}"),
                }
            }
        }
        assert_eq!(placeholder_payload(false, 3, 3).unwrap(), b"xxx");
        assert_eq!(placeholder_payload(false, 0, 0), None);
        assert_eq!(placeholder_payload(true, 8, 2), None, "30 bits per character");
    }
}
