//! The HPACK mirror: follows header block fragments one octet at a time as `h2`'s decoder
//! reads them (keeping of the dynamic table only which names are `:authority`, their lengths
//! and the entries' sizes), holds each candidate `:authority` value in the sink until it is
//! complete, and judges it.

use super::hpack::{self, Entry, HuffmanStream, IntStep, Table};
use super::placeholder::{placeholder_payload, placeholder_text};
use super::sink::Sink;
use super::H2Limits;

/// Longest original value quoted in a log line.
const LOG_VALUE_MAX: usize = 64;

/// Which integer is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IntOf {
    Index,
    SizeUpdate,
    NameIndex,
    StringLen,
}

#[derive(Debug)]
enum Rep {
    /// Between representations.
    Start,
    Int {
        of: IntOf,
        step: IntStep,
    },
    /// The payload of a string literal.
    Str {
        remaining: usize,
    },
}

/// The literal representation being read.
#[derive(Debug, Default)]
struct Literal {
    indexing: bool,
    /// Reading the name string (as opposed to the value).
    in_name: bool,
    name_authority: bool,
    name_len: usize,
    /// The first octets of a literal name, enough to recognise `:authority`.
    name_start: Vec<u8>,
    huffman: bool,
    encoded_len: usize,
    huff: HuffmanStream,
    /// The value is an `:authority` candidate: its payload is being held.
    candidate: bool,
}

impl Literal {
    /// Whether its Huffman code is decoded: a name (to recognise `:authority`), a value that
    /// enters the table (its decoded length sizes the entry) or an `:authority` candidate. Any
    /// other value (`:path`, which clients send on every call without indexing) is only skipped:
    /// should its code be invalid, h2 ends the connection on that header block, so what the
    /// mirror makes of the bytes after it is never seen.
    fn decoded(&self) -> bool {
        self.in_name || self.indexing || self.candidate
    }
}

const AUTHORITY: &[u8] = b":authority";

/// What the mirror keeps of a dynamic table entry: whether its name is `:authority`, and the
/// name's length (a literal that indexes the name needs it for the new entry's size).
#[derive(Debug, Clone, Copy)]
struct NameOnly {
    authority: bool,
    name_len: usize,
}

/// A mirror of h2's HPACK decoder state: the dynamic table (as [`NameOnly`] entries) and where
/// in a representation the input is. Deliberately no stricter than h2: anything h2 rejects ends the
/// connection, so only the structure and the table have to match.
#[derive(Debug)]
pub(super) struct HpackMirror {
    limits: H2Limits,
    table: Table<NameOnly>,
    rep: Rep,
    lit: Literal,
}

impl HpackMirror {
    pub(super) fn new(limits: H2Limits) -> Self {
        HpackMirror { limits, table: Table::new(limits.header_table_size), rep: Rep::Start, lit: Literal::default() }
    }

    pub(super) fn at_boundary(&self) -> bool {
        matches!(self.rep, Rep::Start)
    }

    /// Forgets an incomplete representation (h2 dropped the block holding it).
    pub(super) fn drop_partial(&mut self) {
        self.rep = Rep::Start;
        self.lit = Literal::default();
    }

    /// (name is `:authority`, name length) of table entry `index`, as h2's `Table::get`.
    fn name_of(&self, index: usize) -> Option<(bool, usize)> {
        match self.table.get(index).ok()? {
            Entry::Static(name, _) => Some((name.as_bytes() == AUTHORITY, name.len())),
            Entry::Dynamic(e) => Some((e.authority, e.name_len)),
        }
    }

    /// Feeds fragment octets; every one is emitted into `sink` (or held) in order. `Err` names
    /// why h2 ends the connection at this point (the octets after it are emitted as they are).
    pub(super) fn feed(&mut self, mut data: &[u8], sink: &mut Sink, rewrites: &mut u64) -> Result<(), &'static str> {
        let result = self.feed_some(&mut data, sink, rewrites);
        if result.is_err() {
            sink.emit(data);
        }
        result
    }

    fn feed_some(&mut self, data: &mut &[u8], sink: &mut Sink, rewrites: &mut u64) -> Result<(), &'static str> {
        while !data.is_empty() {
            match &mut self.rep {
                Rep::Start => {
                    // Classify by the first octet, which the integer step then reads.
                    let b = data[0];
                    let (of, prefix) = if b & 0x80 != 0 {
                        (IntOf::Index, 7)
                    } else if b & 0x40 != 0 {
                        self.lit = Literal { indexing: true, ..Literal::default() };
                        (IntOf::NameIndex, 6)
                    } else if b & 0x20 != 0 {
                        (IntOf::SizeUpdate, 5)
                    } else {
                        self.lit = Literal::default();
                        (IntOf::NameIndex, 4)
                    };
                    self.rep = Rep::Int { of, step: IntStep::First { prefix } };
                }
                Rep::Int { of, step } => {
                    let of = *of;
                    let b = data[0];
                    sink.emit(&data[..1]);
                    *data = &data[1..];
                    if of == IntOf::StringLen && matches!(step, IntStep::First { .. }) {
                        self.lit.huffman = b & 0x80 != 0;
                    }
                    if let Some(value) = step.feed(b).map_err(|_| "integer too long")? {
                        self.int_done(of, value, sink, rewrites)?;
                    }
                }
                Rep::Str { remaining } => {
                    let n = (*remaining).min(data.len());
                    *remaining -= n;
                    let done = *remaining == 0;
                    let chunk = &data[..n];
                    *data = &data[n..];
                    let lit = &mut self.lit;
                    if lit.candidate {
                        sink.emit_payload(chunk);
                    } else {
                        sink.emit(chunk);
                    }
                    let room = if lit.in_name { AUTHORITY.len() + 1 } else { 0 };
                    if lit.huffman && lit.decoded() {
                        lit.huff.feed(chunk, &mut lit.name_start, room);
                    } else if lit.in_name {
                        let take = room.saturating_sub(lit.name_start.len()).min(chunk.len());
                        lit.name_start.extend_from_slice(&chunk[..take]);
                    }
                    if done {
                        self.string_done(sink, rewrites)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn int_done(&mut self, of: IntOf, value: usize, sink: &mut Sink, rewrites: &mut u64) -> Result<(), &'static str> {
        match of {
            IntOf::Index => {
                self.name_of(value).ok_or("invalid table index")?;
                self.rep = Rep::Start;
            }
            IntOf::SizeUpdate => {
                // Accepted anywhere: where h2 refuses a misplaced one it ends the connection.
                if value > self.limits.header_table_size {
                    return Err("table size update above the limit");
                }
                self.table.set_max_size(value);
                self.rep = Rep::Start;
            }
            IntOf::NameIndex => {
                if value == 0 {
                    self.lit.in_name = true;
                } else {
                    let (authority, len) = self.name_of(value).ok_or("invalid table index")?;
                    self.lit.name_authority = authority;
                    self.lit.name_len = len;
                }
                self.rep = Rep::Int { of: IntOf::StringLen, step: IntStep::First { prefix: 7 } };
            }
            IntOf::StringLen => self.begin_string(value, sink, rewrites)?,
        }
        Ok(())
    }

    fn begin_string(&mut self, len: usize, sink: &mut Sink, rewrites: &mut u64) -> Result<(), &'static str> {
        let lit = &mut self.lit;
        lit.encoded_len = len;
        lit.huff = HuffmanStream::default();
        lit.candidate = !lit.in_name && lit.name_authority && len > 0 && len <= self.limits.hold_cap();
        if lit.candidate {
            sink.hold();
        }
        self.rep = Rep::Str { remaining: len };
        if len == 0 {
            self.string_done(sink, rewrites)?;
        }
        Ok(())
    }

    fn string_done(&mut self, sink: &mut Sink, rewrites: &mut u64) -> Result<(), &'static str> {
        let lit = &mut self.lit;
        // Left at 0 for a value that is not decoded: nothing below reads its length.
        let decoded_len = if !lit.huffman {
            lit.encoded_len
        } else if lit.decoded() {
            lit.huff.finish().map_err(|_| "invalid Huffman string")?
        } else {
            0
        };
        if lit.in_name {
            if decoded_len == 0 {
                // h2 never gets past an empty name (it reports NeedMore until the block ends).
                return Err("empty header name");
            }
            lit.in_name = false;
            lit.name_len = decoded_len;
            lit.name_authority = lit.name_start == AUTHORITY;
            self.rep = Rep::Int { of: IntOf::StringLen, step: IntStep::First { prefix: 7 } };
            return Ok(());
        }
        if lit.candidate {
            let payload = sink.held_payload();
            let value = if lit.huffman { hpack::huffman_decode(&payload).unwrap_or_default() } else { payload };
            let verdict = judge(&value, lit.huffman, lit.encoded_len);
            match &verdict {
                Verdict::Rewrite(replacement) => {
                    *rewrites += 1;
                    tracing::debug!(
                        original = %clip(&value),
                        placeholder = %clip(&placeholder_text(lit.huffman, replacement)),
                        "replaced an :authority that h2 would reject with a placeholder of the same length"
                    );
                    sink.release(Some(replacement));
                }
                Verdict::Keep => sink.release(None),
                Verdict::NoPlaceholder => {
                    tracing::debug!(
                        original = %clip(&value),
                        "an :authority that h2 rejects has no same-length placeholder; left as is"
                    );
                    sink.release(None);
                }
                Verdict::Invalid(reason) => {
                    sink.release(None);
                    return Err(reason);
                }
            }
        }
        if lit.indexing {
            let (authority, name_len) = (lit.name_authority, lit.name_len);
            self.table.insert(NameOnly { authority, name_len }, name_len, decoded_len);
        }
        self.rep = Rep::Start;
        Ok(())
    }
}

/// What to do with a complete `:authority` value.
#[derive(Debug)]
enum Verdict {
    Keep,
    Rewrite(Vec<u8>),
    NoPlaceholder,
    /// h2 ends the connection on this value.
    Invalid(&'static str),
}

fn judge(value: &[u8], huffman: bool, encoded_len: usize) -> Verdict {
    if std::str::from_utf8(value).is_err() {
        // h2 refuses a non-UTF-8 pseudo-header with a connection error; it must stay refused.
        return Verdict::Invalid("non-UTF-8 :authority");
    }
    if http::uri::Authority::try_from(value).is_ok() {
        return Verdict::Keep;
    }
    match placeholder_payload(huffman, encoded_len, value.len()) {
        Some(p) => Verdict::Rewrite(p),
        None => Verdict::NoPlaceholder,
    }
}

/// A value for a log line: lossy UTF-8, control characters escaped, at most
/// [`LOG_VALUE_MAX`] characters.
fn clip(value: &[u8]) -> String {
    let text = String::from_utf8_lossy(value);
    let mut out: String = text.chars().take(LOG_VALUE_MAX).flat_map(char::escape_debug).collect();
    if text.chars().count() > LOG_VALUE_MAX {
        out.push('…');
    }
    out
}
