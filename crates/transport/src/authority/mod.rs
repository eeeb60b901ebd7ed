//! Rewrites `:authority` values that stock `h2` would reject, on the raw client→server bytes.
//!
//! Clients that dial a named pipe or a unix socket put the endpoint itself into `:authority`:
//! grpc-go sends the pipe path (`\\.\pipe\csi-proxy-disk-v1`, or percent-encoded in current
//! releases), and other stacks send percent-encoded socket paths. `h2`'s server parses the value
//! with `http::uri::Authority` and resets the stream with PROTOCOL_ERROR when that fails
//! (hyperium/h2#442). The value carries no meaning for csi-proxy, so [`AuthorityFix`] sits
//! between the connection and the HTTP/2 server and replaces such values before `h2` sees them.
//!
//! The adapter is a pass-through with exactly one change: the payload octets of an
//! `:authority` string literal that is valid UTF-8 but not a valid authority are overwritten,
//! in place, with a placeholder of the same decoded length *and* the same encoded length (see
//! [`hpack::placeholder_payload`]). No frame changes size, so `h2` applies its own limits
//! (frame size, CONTINUATION count, header-list size) to exactly the frames the client sent.
//!
//! To know which octets those are, the adapter follows the frame layer and HPACK as `h2`'s
//! decoder does, representation by representation, as bytes arrive. It keeps for itself only
//! a copy of the dynamic table's names and sizes. Bytes are handed on as soon as they are read,
//! except from the first payload octet of a candidate `:authority` value to its last: those are
//! held back (with any frame headers and padding in between) until the value can be judged.
//! `h2` cannot use an incomplete representation either, and buffers at least as much for it.
//! Wherever `h2` would end the connection (oversized frame, misplaced or excess CONTINUATION,
//! undecodable HPACK, …) the adapter releases what it holds and forwards everything after it
//! untouched, so `h2` sees the same bytes and reaches the same verdict.
//!
//! The same HPACK code also backs [`HeaderDecoder`], a plain header block decoder for tests
//! that read the server's raw frames.

mod hpack;

use bytes::BytesMut;
use pin_project_lite::pin_project;
use std::fmt;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use self::hpack::{Entry, HuffmanStream, IntStep, Table};
pub use self::hpack::{HeaderDecoder, HpackError};
use crate::frame::{
    FrameHead, HeadReader, FLAG_END_HEADERS, FLAG_PADDED, FLAG_PRIORITY, PREFACE, TYPE_CONTINUATION, TYPE_HEADERS,
    TYPE_PUSH_PROMISE,
};

/// SETTINGS_HEADER_TABLE_SIZE the server is assumed to advertise unless told otherwise: the
/// protocol default, which is what the tonic/hyper server uses.
pub const DEFAULT_HEADER_TABLE_SIZE: usize = 4096;

/// The HTTP/2 limits of the server behind the adapter; they must be the ones its `h2` decoder
/// applies, or the adapter's view of the stream drifts from the server's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H2Limits {
    /// SETTINGS_HEADER_TABLE_SIZE advertised by the server (the ceiling for size updates).
    pub header_table_size: usize,
    /// SETTINGS_MAX_FRAME_SIZE advertised by the server: longer frames are a connection error.
    pub max_frame_size: usize,
    /// SETTINGS_MAX_HEADER_LIST_SIZE advertised by the server.
    pub max_header_list_size: usize,
}

impl H2Limits {
    /// What [`crate::serve`] configures hyper with (also hyper's defaults).
    pub const SERVER: H2Limits =
        H2Limits { header_table_size: DEFAULT_HEADER_TABLE_SIZE, max_frame_size: 16_384, max_header_list_size: 16_384 };

    /// How many CONTINUATION frames without END_HEADERS one header block may have before `h2`
    /// ends the connection with ENHANCE_YOUR_CALM (`calc_max_continuation_frames` in h2 0.4).
    pub fn max_continuations(&self) -> usize {
        let min_frames = (self.max_header_list_size / self.max_frame_size.max(1)).max(1);
        min_frames.saturating_add(min_frames >> 2).max(5)
    }

    /// Longest `:authority` value (octets on the wire) the adapter holds back to judge; longer
    /// ones pass unchanged. A header list that long is at `h2`'s own limit anyway.
    fn hold_cap(&self) -> usize {
        self.max_header_list_size
    }
}

/// Longest original value quoted in a log line.
const LOG_VALUE_MAX: usize = 64;

pin_project! {
    /// Wraps a server-side byte stream carrying HTTP/2 with prior knowledge (h2c) and replaces,
    /// in place, every `:authority` value that `h2` would refuse only because
    /// `http::uri::Authority` rejects it (see the module documentation).
    ///
    /// Writes pass through untouched. Once the input stops being something `h2` would go on
    /// reading, the adapter forwards the rest unchanged and leaves the verdict to `h2`.
    pub struct AuthorityFix<IO> {
        #[pin]
        io: IO,
        filter: Filter,
        eof: bool,
    }
}

impl<IO> AuthorityFix<IO> {
    /// Wraps `io` for a server with [`H2Limits::SERVER`].
    pub fn new(io: IO) -> Self {
        Self::with_limits(io, H2Limits::SERVER)
    }

    /// Wraps `io` for a server whose `h2` applies `limits`.
    pub fn with_limits(io: IO, limits: H2Limits) -> Self {
        AuthorityFix { io, filter: Filter::new(limits), eof: false }
    }

    /// Number of `:authority` values replaced so far on this connection.
    pub fn rewrites(&self) -> u64 {
        self.filter.rewrites
    }

    /// Whether the adapter has stopped interpreting the stream and only forwards bytes.
    pub fn is_bypassed(&self) -> bool {
        matches!(self.filter.frame, FrameState::Bypass)
    }

    /// Input octets the adapter holds right now: read from the connection but not yet handed
    /// on (a candidate `:authority` value and the framing around it, plus output not yet
    /// taken by the reader).
    pub fn buffered(&self) -> usize {
        self.filter.sink.held_len() + self.filter.sink.output.len()
    }

    pub fn get_ref(&self) -> &IO {
        &self.io
    }

    pub fn get_mut(&mut self) -> &mut IO {
        &mut self.io
    }

    /// Returns the inner stream. Input already read from it but not yet handed out is lost.
    pub fn into_inner(self) -> IO {
        self.io
    }
}

impl<IO: fmt::Debug> fmt::Debug for AuthorityFix<IO> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthorityFix")
            .field("io", &self.io)
            .field("rewrites", &self.filter.rewrites)
            .field("bypassed", &self.is_bypassed())
            .finish_non_exhaustive()
    }
}

impl<IO: AsyncRead> AsyncRead for AuthorityFix<IO> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let mut this = self.project();
        let filter = this.filter;
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if !filter.sink.output.is_empty() {
                let n = filter.sink.output.len().min(buf.remaining());
                buf.put_slice(&filter.sink.output.split_to(n));
                return Poll::Ready(Ok(()));
            }
            if *this.eof {
                // Whatever is still held goes out as it came: the server sees the same
                // truncated input it would have seen without us.
                filter.finish();
                if filter.sink.output.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            // Read straight into the caller's buffer; what passes unchanged stays there.
            let start = buf.filled().len();
            let res = this.io.as_mut().poll_read(cx, buf);
            let end = buf.filled().len();
            match res {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) if end == start => *this.eof = true,
                Poll::Ready(Ok(())) => {
                    let kept = filter.consume(&buf.filled()[start..end]);
                    buf.set_filled(start + kept);
                    if kept > 0 {
                        return Poll::Ready(Ok(()));
                    }
                }
            }
        }
    }
}

impl<IO: AsyncWrite> AsyncWrite for AuthorityFix<IO> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.project().io.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().io.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }
}

/// Encoders for building test and fuzz input.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod test_support {
    pub use super::hpack::{encode_int, huffman_encode};

    /// Whether a Huffman `:authority` of these lengths can be replaced in place.
    pub fn placeholder_exists(encoded_len: usize, decoded_len: usize) -> bool {
        super::hpack::placeholder_payload(true, encoded_len, decoded_len).is_some()
    }
}

// ===== where input octets go =====

/// Octets held back while a candidate `:authority` value is incomplete.
#[derive(Debug, Default)]
struct Held {
    bytes: BytesMut,
    /// Where the value's payload octets lie in `bytes` (frame headers may sit in between).
    payload: Vec<(usize, usize)>,
}

/// Every input octet is emitted exactly once, in order: into the caller's buffer where it was
/// read (`inline`), into `held`, or into `output` once anything has been diverted.
#[derive(Debug, Default)]
struct Sink {
    /// While true, emitted octets are still exactly the ones in place in the read buffer.
    inline: bool,
    inline_len: usize,
    output: BytesMut,
    held: Option<Held>,
}

impl Sink {
    fn emit(&mut self, b: &[u8]) {
        if let Some(h) = &mut self.held {
            h.bytes.extend_from_slice(b);
        } else if self.inline {
            self.inline_len += b.len();
        } else {
            self.output.extend_from_slice(b);
        }
    }

    fn emit_payload(&mut self, b: &[u8]) {
        let Some(h) = &mut self.held else { return self.emit(b) };
        let at = h.bytes.len();
        match h.payload.last_mut() {
            Some((_, end)) if *end == at => *end += b.len(),
            _ => h.payload.push((at, at + b.len())),
        }
        h.bytes.extend_from_slice(b);
    }

    fn hold(&mut self) {
        self.inline = false;
        self.held.get_or_insert_with(Held::default);
    }

    fn held_len(&self) -> usize {
        self.held.as_ref().map_or(0, |h| h.bytes.len())
    }

    /// The held value's payload octets, joined.
    fn held_payload(&self) -> Vec<u8> {
        let Some(h) = &self.held else { return Vec::new() };
        h.payload.iter().flat_map(|&(a, b)| h.bytes[a..b].iter().copied()).collect()
    }

    /// Hands on what is held, with the payload replaced by `replacement` (same length) if given.
    fn release(&mut self, replacement: Option<&[u8]>) {
        let Some(mut h) = self.held.take() else { return };
        if let Some(mut r) = replacement {
            for &(a, b) in &h.payload {
                let (now, rest) = r.split_at(b - a);
                h.bytes[a..b].copy_from_slice(now);
                r = rest;
            }
            debug_assert!(r.is_empty());
        }
        self.inline = false;
        if self.output.is_empty() {
            self.output = h.bytes;
        } else {
            self.output.extend_from_slice(&h.bytes);
        }
    }
}

// ===== frame layer =====

#[derive(Debug)]
enum FrameState {
    /// Forwarding the client preface; `matched` octets seen so far.
    Preface { matched: usize },
    /// Reading a frame header.
    Head(HeadReader),
    /// Payload octets that need no inspection.
    Skip { remaining: usize },
    /// Pad length and priority (HEADERS) or promised stream (PUSH_PROMISE) before a fragment.
    Prefix { head: FrameHead, buf: [u8; 6], n: usize, need: usize },
    /// Header block fragment octets, then `padding` octets.
    Fragment { remaining: usize, padding: usize, end_headers: bool },
    /// Gave up interpreting (the server ends the connection here); everything is forwarded.
    Bypass,
}

/// A header block `h2` is collecting (its `Partial`).
#[derive(Debug, Clone, Copy)]
struct Block {
    stream: u32,
    continuations: usize,
}

/// The I/O-free core.
#[derive(Debug)]
struct Filter {
    limits: H2Limits,
    frame: FrameState,
    block: Option<Block>,
    hpack: HpackStream,
    sink: Sink,
    rewrites: u64,
}

impl Filter {
    fn new(limits: H2Limits) -> Self {
        Filter {
            limits,
            frame: FrameState::Preface { matched: 0 },
            block: None,
            hpack: HpackStream::new(limits),
            sink: Sink::default(),
            rewrites: 0,
        }
    }

    /// Processes freshly read octets (in place in the caller's buffer). Returns how many of
    /// them, from the start, stay where they are; the rest went to `held` or `output`.
    fn consume(&mut self, mut data: &[u8]) -> usize {
        self.sink.inline = self.sink.output.is_empty() && self.sink.held.is_none();
        self.sink.inline_len = 0;
        while !data.is_empty() {
            let n = self.step(data);
            data = &data[n..];
        }
        let kept = self.sink.inline_len;
        self.sink.inline = false;
        self.sink.inline_len = 0;
        kept
    }

    /// At end of input: release everything held back, unchanged.
    fn finish(&mut self) {
        self.sink.release(None);
    }

    fn bypass(&mut self, reason: &'static str) {
        tracing::debug!(reason, "authority fix: forwarding the rest of the connection as is");
        self.sink.release(None);
        self.frame = FrameState::Bypass;
    }

    /// Handles a prefix of `data` (at least one octet); returns its length.
    fn step(&mut self, data: &[u8]) -> usize {
        match &mut self.frame {
            FrameState::Bypass => {
                self.sink.emit(data);
                data.len()
            }
            FrameState::Preface { matched } => {
                let n = (PREFACE.len() - *matched).min(data.len());
                if data[..n] != PREFACE[*matched..*matched + n] {
                    // Not HTTP/2 with prior knowledge: nothing here for us to fix.
                    self.bypass("no HTTP/2 connection preface");
                    return 0;
                }
                *matched += n;
                if *matched == PREFACE.len() {
                    self.frame = FrameState::Head(HeadReader::default());
                }
                self.sink.emit(&data[..n]);
                n
            }
            FrameState::Skip { remaining } => {
                let n = (*remaining).min(data.len());
                *remaining -= n;
                if *remaining == 0 {
                    self.frame = FrameState::Head(HeadReader::default());
                }
                self.sink.emit(&data[..n]);
                n
            }
            FrameState::Head(head) => {
                let before = head.payload_len();
                let take = head.fill(data);
                let (len, complete) = (head.payload_len(), head.head());
                self.sink.emit(&data[..take]);
                // h2 checks the length as soon as it has the first three octets.
                if before.is_none() && len.is_some_and(|len| len > self.limits.max_frame_size) {
                    self.bypass("frame larger than SETTINGS_MAX_FRAME_SIZE");
                    return take;
                }
                if let Some(head) = complete {
                    self.start_frame(head);
                }
                take
            }
            FrameState::Prefix { head, buf, n, need } => {
                let take = (*need - *n).min(data.len());
                buf[*n..*n + take].copy_from_slice(&data[..take]);
                *n += take;
                let (head, buf, done) = (*head, *buf, *n == *need);
                self.sink.emit(&data[..take]);
                if done {
                    self.start_fragment(head, &buf);
                }
                take
            }
            FrameState::Fragment { remaining, padding, end_headers } => {
                if *remaining == 0 {
                    let (padding, end_headers) = (*padding, *end_headers);
                    self.end_fragment(padding, end_headers);
                    return 0;
                }
                let n = (*remaining).min(data.len());
                *remaining -= n;
                if let Err(reason) = self.hpack.feed(&data[..n], &mut self.sink, &mut self.rewrites) {
                    // The offending octets were emitted (or are held) in order; h2 stops here.
                    self.bypass(reason);
                    return n;
                }
                if let FrameState::Fragment { remaining: 0, padding, end_headers } = self.frame {
                    self.end_fragment(padding, end_headers);
                }
                n
            }
        }
    }

    fn next_frame(&mut self) {
        self.frame = FrameState::Head(HeadReader::default());
    }

    fn skip(&mut self, len: usize) {
        if len == 0 {
            self.next_frame();
        } else {
            self.frame = FrameState::Skip { remaining: len };
        }
    }

    /// Decides what a frame is to us once its header is complete, with h2's checks in h2's
    /// order (`FramedRead::decode_frame`, `Headers::load`, `PushPromise::load`).
    fn start_frame(&mut self, head: FrameHead) {
        if let Some(block) = &mut self.block {
            if head.kind != TYPE_CONTINUATION {
                // h2 either ends the connection here (its block is still open) or had already
                // dropped the block as malformed at its last frame; in the latter case it goes
                // on, with the table as of the last complete representation, and so do we.
                self.block = None;
                self.hpack.drop_partial();
                self.sink.release(None);
            } else {
                if head.stream != block.stream {
                    return self.bypass("CONTINUATION for another stream");
                }
                let end = head.flags & FLAG_END_HEADERS != 0;
                if !end {
                    block.continuations += 1;
                    if block.continuations > self.limits.max_continuations() {
                        return self.bypass("too many CONTINUATION frames");
                    }
                }
                self.frame = FrameState::Fragment { remaining: head.len, padding: 0, end_headers: end };
                return self.maybe_empty_fragment();
            }
        }
        match head.kind {
            TYPE_CONTINUATION => self.bypass("CONTINUATION without a header block"),
            TYPE_HEADERS | TYPE_PUSH_PROMISE => {
                if head.stream == 0 {
                    return self.bypass("header block on stream 0");
                }
                let padded = usize::from(head.flags & FLAG_PADDED != 0);
                if padded == 1 && head.len == 0 {
                    return self.bypass("PADDED frame without a pad length");
                }
                let fields = match head.kind {
                    TYPE_HEADERS if head.flags & FLAG_PRIORITY != 0 => 5,
                    TYPE_HEADERS => 0,
                    _ => 4,
                };
                // h2 wants 5 octets after the pad length in a PUSH_PROMISE, not 4.
                let minimum = if head.kind == TYPE_PUSH_PROMISE { 5 } else { fields };
                if head.len - padded < minimum {
                    return self.bypass("header block frame too short");
                }
                let need = padded + fields;
                if need == 0 {
                    self.start_fragment(head, &[0; 6]);
                } else {
                    self.frame = FrameState::Prefix { head, buf: [0; 6], n: 0, need };
                }
            }
            _ => self.skip(head.len),
        }
    }

    fn start_fragment(&mut self, head: FrameHead, prefix: &[u8; 6]) {
        let padded = head.flags & FLAG_PADDED != 0;
        let pad = if padded { usize::from(prefix[0]) } else { 0 };
        let fields = &prefix[usize::from(padded)..];
        let need = usize::from(padded)
            + if head.kind == TYPE_PUSH_PROMISE {
                4
            } else if head.flags & FLAG_PRIORITY != 0 {
                5
            } else {
                0
            };
        if head.kind == TYPE_HEADERS && head.flags & FLAG_PRIORITY != 0 {
            let dependency = u32::from_be_bytes([fields[0], fields[1], fields[2], fields[3]]) & 0x7fff_ffff;
            if dependency == head.stream {
                // h2 resets the stream without decoding the block or opening a partial one.
                return self.skip(head.len - need);
            }
        }
        let rest = head.len - need;
        if pad > rest {
            return self.bypass("padding longer than the frame");
        }
        let end = head.flags & FLAG_END_HEADERS != 0;
        if !end {
            self.block = Some(Block { stream: head.stream, continuations: 0 });
        }
        self.frame = FrameState::Fragment { remaining: rest - pad, padding: pad, end_headers: end };
        self.maybe_empty_fragment();
    }

    fn maybe_empty_fragment(&mut self) {
        if let FrameState::Fragment { remaining: 0, padding, end_headers } = self.frame {
            self.end_fragment(padding, end_headers);
        }
    }

    fn end_fragment(&mut self, padding: usize, end_headers: bool) {
        if end_headers {
            self.block = None;
            if !self.hpack.at_boundary() {
                // h2 runs out of input mid-representation with END_HEADERS: connection error.
                return self.bypass("header block ends inside a representation");
            }
        }
        self.skip(padding);
    }
}

// ===== HPACK, one octet at a time =====

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

const AUTHORITY: &[u8] = b":authority";

/// What the mirror keeps of a dynamic table entry: whether its name is `:authority`, and the
/// name's length (a literal that indexes the name needs it for the new entry's size).
#[derive(Debug, Clone, Copy)]
struct NameOnly {
    authority: bool,
    name_len: usize,
}

/// A mirror of h2's HPACK decoder state: the dynamic table's names and sizes, and where in a
/// representation the input is. Deliberately no stricter than h2: anything h2 rejects ends the
/// connection, so only the structure and the table have to match.
#[derive(Debug)]
struct HpackStream {
    limits: H2Limits,
    table: Table<NameOnly>,
    rep: Rep,
    lit: Literal,
}

impl HpackStream {
    fn new(limits: H2Limits) -> Self {
        HpackStream { limits, table: Table::new(limits.header_table_size), rep: Rep::Start, lit: Literal::default() }
    }

    fn at_boundary(&self) -> bool {
        matches!(self.rep, Rep::Start)
    }

    /// Forgets an incomplete representation (h2 dropped the block holding it).
    fn drop_partial(&mut self) {
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
    fn feed(&mut self, mut data: &[u8], sink: &mut Sink, rewrites: &mut u64) -> Result<(), &'static str> {
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
                    if lit.huffman {
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
        let decoded_len =
            if lit.huffman { lit.huff.finish().map_err(|_| "invalid Huffman string")? } else { lit.encoded_len };
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
                        placeholder = %clip(&hpack::placeholder_text(lit.huffman, replacement)),
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
    match hpack::placeholder_payload(huffman, encoded_len, value.len()) {
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
#[cfg(test)]
mod tests {
    use super::hpack::{encode_int, huffman_encode};
    use super::*;
    use crate::frame::{write_frame, HEADER_LEN};
    use tokio::io::AsyncReadExt;

    const BAD: &[u8] = br"\\.\pipe\csi-proxy-disk-v1";

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write_frame(kind, flags, stream, payload, &mut out);
        out
    }

    /// HPACK literal with incremental indexing, name = static index `name_index`.
    fn literal(name_index: usize, value: &[u8], huffman: bool) -> Vec<u8> {
        let mut b = Vec::new();
        encode_int(name_index, 6, 0x40, &mut b);
        if huffman {
            let coded = huffman_encode(value);
            encode_int(coded.len(), 7, 0x80, &mut b);
            b.extend_from_slice(&coded);
        } else {
            encode_int(value.len(), 7, 0, &mut b);
            b.extend_from_slice(value);
        }
        b
    }

    /// Reader that hands out at most one byte per call and returns Pending every other call.
    struct Trickle {
        data: Vec<u8>,
        pos: usize,
        pend: bool,
    }

    impl AsyncRead for Trickle {
        fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            self.pend = !self.pend;
            if self.pend {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if self.pos < self.data.len() {
                let b = self.data[self.pos];
                buf.put_slice(&[b]);
                self.pos += 1;
            }
            Poll::Ready(Ok(()))
        }
    }

    async fn run_bulk(input: &[u8]) -> (Vec<u8>, u64, bool) {
        let mut fix = AuthorityFix::new(input);
        let mut out = Vec::new();
        fix.read_to_end(&mut out).await.unwrap();
        (out, fix.rewrites(), fix.is_bypassed())
    }

    async fn run_trickle(input: &[u8]) -> (Vec<u8>, u64, bool) {
        let mut fix = AuthorityFix::new(Trickle { data: input.to_vec(), pos: 0, pend: false });
        let mut out = Vec::new();
        let mut one = [0u8; 1];
        loop {
            let n = fix.read(&mut one).await.unwrap();
            if n == 0 {
                break;
            }
            out.push(one[0]);
        }
        (out, fix.rewrites(), fix.is_bypassed())
    }

    /// Splits an output byte stream into (type, flags, stream, payload) frames.
    fn frames(bytes: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
        assert_eq!(&bytes[..24], PREFACE);
        let mut it = crate::frame::frames(&bytes[24..]);
        let out = it.by_ref().map(|(h, payload)| (h.kind, h.flags, h.stream, payload.to_vec())).collect();
        assert!(it.rest().is_empty(), "a partial frame at the end");
        out
    }

    /// A connection with padding, priority, a value split over CONTINUATION frames, a large
    /// DATA frame and a second request that references the first `:authority` by index.
    fn sample_connection() -> Vec<u8> {
        let mut block = vec![0x83, 0x86]; // :method POST, :scheme http
        block.extend(literal(1, BAD, true));
        block.extend(literal(4, b"/v1.Disk/GetDiskStats", true));
        let (a, b) = block.split_at(7);
        let mut headers_payload = vec![3u8]; // pad length
        headers_payload.extend([0x80, 0, 0, 0, 15]); // exclusive dep on 0, weight 15
        headers_payload.extend(a);
        headers_payload.extend([0, 0, 0]); // padding
        let mut input = PREFACE.to_vec();
        input.extend(frame(0x4, 0, 0, &[])); // SETTINGS
        input.extend(frame(TYPE_HEADERS, FLAG_PADDED | FLAG_PRIORITY, 1, &headers_payload));
        input.extend(frame(TYPE_CONTINUATION, 0, 1, &b[..3]));
        input.extend(frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, &b[3..]));
        input.extend(frame(0x0, 0, 1, &vec![0xab; 16_000])); // DATA, larger than a read
        input.extend(frame(0x0, 0x1, 1, b"tail"));
        // Stream 3: :method POST, :scheme http, then dynamic indices 63 (:authority) and 62.
        input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS | 0x1, 3, &[0x83, 0x86, 0xbf, 0xbe]));
        input.extend(frame(0x8, 0, 0, &[0, 0, 1, 0])); // WINDOW_UPDATE
        input
    }

    /// Decodes the header blocks of `bytes` (one per stream, in order) as the server would.
    fn decoded_blocks(bytes: &[u8]) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut d = HeaderDecoder::new(DEFAULT_HEADER_TABLE_SIZE);
        let mut blocks = Vec::new();
        let mut pending = Vec::new();
        for (kind, flags, _, payload) in frames(bytes) {
            let fragment = match kind {
                TYPE_HEADERS => {
                    let mut p = &payload[..];
                    let mut pad = 0;
                    if flags & FLAG_PADDED != 0 {
                        pad = usize::from(p[0]);
                        p = &p[1..];
                    }
                    if flags & FLAG_PRIORITY != 0 {
                        p = &p[5..];
                    }
                    p[..p.len() - pad].to_vec()
                }
                TYPE_CONTINUATION => payload,
                _ => continue,
            };
            pending.extend(fragment);
            if flags & FLAG_END_HEADERS != 0 {
                let fields = d.decode(&pending).unwrap();
                blocks.push(fields.into_iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect());
                pending.clear();
            }
        }
        blocks
    }

    #[test]
    fn adapter_has_the_traits_tonic_needs() {
        fn check<T: AsyncRead + AsyncWrite + Send + Unpin + 'static>() {}
        check::<AuthorityFix<tokio::io::DuplexStream>>();
        #[cfg(unix)]
        check::<AuthorityFix<tokio::net::UnixStream>>();
    }

    #[tokio::test]
    async fn rewrites_in_place_and_keeps_every_frame() {
        let input = sample_connection();
        let (out, rewrites, bypassed) = run_bulk(&input).await;
        assert_eq!((rewrites, bypassed), (1, false));
        // Same frames, same sizes, same flags, padding and priority; only value octets differ.
        assert_eq!(out.len(), input.len());
        let (fi, fo) = (frames(&input), frames(&out));
        assert_eq!(fi.len(), fo.len());
        for (a, b) in fi.iter().zip(&fo) {
            assert_eq!((a.0, a.1, a.2, a.3.len()), (b.0, b.1, b.2, b.3.len()));
        }
        let changed: Vec<usize> = (0..out.len()).filter(|&i| out[i] != input[i]).collect();
        assert!(!changed.is_empty() && changed.len() <= huffman_encode(BAD).len());
        // The server decodes a valid authority of the original length, on both streams.
        let blocks = decoded_blocks(&out);
        assert_eq!(blocks.len(), 2);
        for block in &blocks {
            let authority = &block.iter().find(|(n, _)| n == b":authority").unwrap().1;
            assert_eq!(authority.len(), BAD.len());
            assert!(http::uri::Authority::try_from(&authority[..]).is_ok());
            assert!(block.iter().any(|(n, v)| n == b":path" && v == b"/v1.Disk/GetDiskStats"));
        }
    }

    #[tokio::test]
    async fn one_byte_at_a_time_matches_bulk() {
        let input = sample_connection();
        let bulk = run_bulk(&input).await;
        let trickle = run_trickle(&input).await;
        assert_eq!(bulk, trickle);
    }

    #[tokio::test]
    async fn a_value_split_over_frames_is_held_only_until_complete() {
        // Plain literal so the payload is easy to cut: 2 octets in HEADERS, the rest later.
        let block = literal(1, BAD, false);
        let mut input = PREFACE.to_vec();
        input.extend(frame(TYPE_HEADERS, 0, 1, &block[..4]));
        let held_from = input.len() - 2;
        input.extend(frame(TYPE_CONTINUATION, 0, 1, &block[4..10]));
        input.extend(frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, &block[10..]));
        let (client, server) = tokio::io::duplex(1 << 16);
        let mut fix = AuthorityFix::new(server);
        let (mut r, mut w) = (fix, client);
        use tokio::io::AsyncWriteExt;
        w.write_all(&input[..input.len() - 1]).await.unwrap();
        let mut out = vec![0u8; input.len()];
        let n = r.read(&mut out).await.unwrap();
        // Everything before the value's payload came out at once; the rest waits.
        assert_eq!(n, held_from);
        assert_eq!(r.buffered(), input.len() - 1 - held_from);
        w.write_all(&input[input.len() - 1..]).await.unwrap();
        drop(w);
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).await.unwrap();
        assert_eq!(r.rewrites(), 1);
        assert_eq!(r.buffered(), 0);
        fix = r;
        let _ = fix;
        let mut all = out[..n].to_vec();
        all.extend(rest);
        assert_eq!(all.len(), input.len());
        assert_eq!(decoded_blocks(&all)[0][0].1, vec![b'x'; BAD.len()]);
    }

    #[tokio::test]
    async fn long_value_is_rewritten_in_place() {
        // '%' has a 6-bit Huffman code: 20,000 of them fit one 15,000-octet frame.
        let value = vec![b'%'; 20_000];
        let block = literal(1, &value, true);
        assert!(block.len() <= H2Limits::SERVER.max_frame_size);
        let mut input = PREFACE.to_vec();
        input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS | 0x1, 1, &block));
        let (out, rewrites, _) = run_bulk(&input).await;
        assert_eq!(rewrites, 1);
        assert_eq!(out.len(), input.len());
        let authority = &decoded_blocks(&out)[0][0].1;
        assert_eq!(authority.len(), value.len());
        assert!(http::uri::Authority::try_from(&authority[..]).is_ok());
        assert_eq!(run_trickle(&input).await.0, out);
    }

    #[tokio::test]
    async fn valid_authority_is_untouched() {
        let mut input = PREFACE.to_vec();
        let mut block = vec![0x82, 0x86, 0x84];
        block.extend(literal(1, b"localhost", true));
        let mut padded = vec![2u8];
        padded.extend(&block);
        padded.extend([0, 0]);
        input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS | FLAG_PADDED, 1, &padded));
        let (out, rewrites, bypassed) = run_bulk(&input).await;
        assert_eq!(out, input);
        assert_eq!((rewrites, bypassed), (0, false));
    }

    /// Where h2 ends the connection, the adapter hands on the original bytes.
    #[tokio::test]
    async fn input_h2_refuses_is_forwarded_unchanged() {
        let mut cases = Vec::new();
        // Invalid HPACK index 0, then a bad authority h2 never gets to.
        let mut c = PREFACE.to_vec();
        c.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &[0x80]));
        c.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &literal(1, BAD, false)));
        cases.push(c);
        // Padding longer than the payload.
        let mut c = PREFACE.to_vec();
        c.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS | FLAG_PADDED, 1, &[9, 0x82]));
        c.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &literal(1, BAD, false)));
        cases.push(c);
        // A non-UTF-8 :authority (h2: connection error), Huffman-coded and plain.
        for huffman in [true, false] {
            let mut c = PREFACE.to_vec();
            c.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &literal(1, b"\xff\\pipe", huffman)));
            cases.push(c);
        }
        // A frame over SETTINGS_MAX_FRAME_SIZE (h2: FRAME_SIZE_ERROR), even with a bad authority.
        let mut c = PREFACE.to_vec();
        let mut big = literal(1, BAD, false);
        big.extend(literal(4, &vec![b'p'; 20_000], false));
        c.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &big));
        cases.push(c);
        // CONTINUATION without a header block.
        let mut c = PREFACE.to_vec();
        c.extend(frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, &literal(1, BAD, false)));
        cases.push(c);
        // Not HTTP/2 at all.
        cases.push(b"GET / HTTP/1.1\r\nHost: \\\\.\\pipe\\x\r\n\r\n".to_vec());
        // Truncated in the middle of a value.
        let mut c = PREFACE.to_vec();
        c.extend(&frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &literal(1, BAD, false))[..20]);
        cases.push(c);
        for (i, input) in cases.iter().enumerate() {
            let (out, rewrites, _) = run_bulk(input).await;
            assert_eq!(&out, input, "case {i}");
            assert_eq!(rewrites, 0, "case {i}");
            if input.len() < 1000 {
                assert_eq!(run_trickle(input).await.0, out, "case {i}");
            }
        }
    }

    /// Where h2 goes on after a stream-level problem, the adapter goes on rewriting.
    #[tokio::test]
    async fn rewriting_continues_wherever_h2_continues() {
        // A size update at the start of a CONTINUATION: h2 decodes each frame's fragment as a
        // fresh call, so it accepts it.
        let mut c = PREFACE.to_vec();
        c.extend(frame(TYPE_HEADERS, 0, 1, &[0x83, 0x86]));
        let mut rest = vec![0x3f, 0xe1, 0x1f]; // size update to 4096
        rest.extend(literal(1, BAD, true));
        c.extend(frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, &rest));
        c.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &literal(1, BAD, true)));
        let (_, rewrites, bypassed) = run_bulk(&c).await;
        assert_eq!((rewrites, bypassed), (2, false));

        // A stream depending on itself: h2 resets it without decoding its block.
        let mut c = PREFACE.to_vec();
        let mut payload = vec![0, 0, 0, 1, 15];
        payload.extend(literal(1, BAD, false));
        c.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS | FLAG_PRIORITY, 1, &payload));
        // Index 62 would be that block's entry had it been decoded; h2 has no such entry.
        c.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &literal(1, BAD, false)));
        let (out, rewrites, bypassed) = run_bulk(&c).await;
        assert_eq!((rewrites, bypassed), (1, false));
        assert_eq!(out[..24 + 9 + payload.len()], c[..24 + 9 + payload.len()], "the reset block is left alone");

        // A block h2 drops as malformed, then a frame that is not a CONTINUATION.
        let mut c = PREFACE.to_vec();
        let mut first = vec![0x83, 0x86, 0x40];
        first.extend([10]);
        first.extend(b"connection");
        first.extend([5]);
        first.extend(b"close");
        c.extend(frame(TYPE_HEADERS, 0, 1, &first));
        c.extend(frame(0x6, 0, 0, &[0; 8]));
        c.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &literal(1, BAD, false)));
        let (_, rewrites, bypassed) = run_bulk(&c).await;
        assert_eq!((rewrites, bypassed), (1, false));
    }

    /// HEADERS whose fragment ends inside a candidate value, then a flood of empty
    /// CONTINUATION frames: the adapter holds no more than the value and six frame headers,
    /// and hands the flood on for h2 to end the connection (ENHANCE_YOUR_CALM).
    #[tokio::test]
    async fn continuation_flood_is_bounded_and_passed_on() {
        let block = literal(1, BAD, false);
        let mut input = PREFACE.to_vec();
        input.extend(frame(TYPE_HEADERS, 0, 1, &block[..5]));
        for _ in 0..10_000 {
            input.extend(frame(TYPE_CONTINUATION, 0, 1, &[]));
        }
        let mut fix = AuthorityFix::new(Trickle { data: input.clone(), pos: 0, pend: false });
        let mut out = Vec::new();
        let mut chunk = [0u8; 64];
        let mut most = 0;
        loop {
            let n = fix.read(&mut chunk).await.unwrap();
            most = most.max(fix.buffered());
            if n == 0 {
                break;
            }
            out.extend_from_slice(&chunk[..n]);
        }
        assert_eq!(out, input);
        assert!(fix.is_bypassed());
        let bound = 3 + (H2Limits::SERVER.max_continuations() + 1) * HEADER_LEN;
        assert!(most <= bound, "held {most} octets, bound {bound}");
    }

    #[tokio::test]
    async fn arbitrary_input_never_panics() {
        let base = sample_connection();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..300 {
            // Mutate a few bytes after the preface so the frame parser sees odd input.
            let mut input = base[..base.len().min(300)].to_vec();
            for _ in 0..(next() % 6) {
                let i = 24 + (next() as usize) % (input.len() - 24);
                input[i] = next() as u8;
            }
            let cut = 24 + (next() as usize) % (input.len() - 23);
            input.truncate(cut);
            let (out, rewrites, _) = run_bulk(&input).await;
            assert_eq!(out.len(), input.len(), "{:02x?}", &input[24..]);
            if rewrites == 0 {
                assert_eq!(out, input);
            }
            assert_eq!(run_trickle(&input).await.0, out);
        }
    }
}
