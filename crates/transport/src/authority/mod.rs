//! Rewrites `:authority` values that stock `h2` would reject, on the raw client→server bytes.
//!
//! Clients that dial a named pipe or a unix socket put the endpoint itself into `:authority`:
//! grpc-go sends the pipe path (`\\.\pipe\csi-proxy-disk-v1`, or percent-encoded in current
//! releases), and other stacks send percent-encoded socket paths. `h2`'s server parses the value
//! with `http::uri::Authority` and resets the stream with PROTOCOL_ERROR when that fails
//! (hyperium/h2#442). The value carries no meaning for csi-proxy, so [`AuthorityFix`] sits
//! between the connection and the HTTP/2 server and replaces such values with a placeholder
//! before `h2` ever sees them.
//!
//! The adapter follows the HTTP/2 frame layer just far enough to collect header blocks
//! (HEADERS + CONTINUATION), and HPACK just far enough to know each field's name and to keep a
//! copy of the decoder's dynamic table. Everything else is forwarded as it arrives.
//!
//! The same HPACK code also backs [`HeaderDecoder`], a plain header block decoder for tests
//! that read the server's raw frames.

mod hpack;

use bytes::{Buf, BufMut, BytesMut};
use pin_project_lite::pin_project;
use std::fmt;
use std::io;
use std::mem;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use self::hpack::BlockRewriter;
pub use self::hpack::{HeaderDecoder, HpackError};

/// SETTINGS_HEADER_TABLE_SIZE the server is assumed to advertise unless told otherwise: the
/// protocol default, which is what the tonic/hyper server uses.
pub const DEFAULT_HEADER_TABLE_SIZE: usize = 4096;

const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER_LEN: usize = 9;

const TYPE_HEADERS: u8 = 0x1;
const TYPE_PUSH_PROMISE: u8 = 0x5;
const TYPE_CONTINUATION: u8 = 0x9;

const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;
const PRIORITY_LEN: usize = 5;

/// Largest frame payload re-emitted: the default SETTINGS_MAX_FRAME_SIZE, which the server
/// advertises, so the server accepts any frame we produce.
const MAX_FRAME_SIZE: usize = 16_384;

/// Header blocks larger than this are not buffered; the adapter steps aside instead.
const MAX_HEADER_BLOCK: usize = 1 << 20;

/// Bytes requested from the inner reader per read into the adapter's own buffer.
const READ_CHUNK: usize = 8 * 1024;

pin_project! {
    /// Wraps a server-side byte stream carrying HTTP/2 with prior knowledge (h2c), replacing
    /// every `:authority` value that `http::uri::Authority` rejects with `x` repeated to the
    /// same length, so that `h2` accepts the request.
    ///
    /// Writes pass through untouched. If the input stops looking like well-formed HTTP/2 (wrong
    /// preface, malformed frames or HPACK, oversized header blocks), the adapter forwards the
    /// original bytes unchanged from then on and leaves the error to the HTTP/2 server.
    pub struct AuthorityFix<IO> {
        #[pin]
        io: IO,
        filter: Filter,
        eof: bool,
    }
}

impl<IO> AuthorityFix<IO> {
    /// Wraps `io`, assuming the server advertises the default header table size (4096).
    pub fn new(io: IO) -> Self {
        Self::with_header_table_size(io, DEFAULT_HEADER_TABLE_SIZE)
    }

    /// Wraps `io` for a server that advertises `SETTINGS_HEADER_TABLE_SIZE = header_table_size`
    /// (the HPACK table copy must use the same limit as the server's decoder).
    pub fn with_header_table_size(io: IO, header_table_size: usize) -> Self {
        AuthorityFix { io, filter: Filter::new(header_table_size), eof: false }
    }

    /// Number of `:authority` values replaced so far on this connection.
    pub fn rewrites(&self) -> u64 {
        self.filter.rewrites
    }

    /// Whether the adapter has stopped interpreting the stream and only forwards bytes.
    pub fn is_bypassed(&self) -> bool {
        matches!(self.filter.state, State::Bypass)
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
            if !filter.output.is_empty() {
                let n = filter.output.len().min(buf.remaining());
                buf.put_slice(&filter.output[..n]);
                filter.output.advance(n);
                return Poll::Ready(Ok(()));
            }
            if filter.step() {
                continue;
            }
            if *this.eof {
                // Whatever is still held (a partial frame or header block) goes out as it came,
                // so the server sees the same truncated input it would have seen without us.
                filter.finish_input();
                if filter.output.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            if let Some(limit) = filter.direct_read_limit() {
                // Bulk payload needing no inspection: read straight into the caller's buffer.
                let dst = buf.initialize_unfilled_to(limit.min(buf.remaining()));
                let mut direct = ReadBuf::new(dst);
                ready!(this.io.as_mut().poll_read(cx, &mut direct))?;
                let n = direct.filled().len();
                if n == 0 {
                    *this.eof = true;
                    continue;
                }
                buf.advance(n);
                filter.consumed_directly(n);
                return Poll::Ready(Ok(()));
            }
            let old = filter.input.len();
            filter.input.resize(old + READ_CHUNK, 0);
            let mut rb = ReadBuf::new(&mut filter.input[old..]);
            let res = this.io.as_mut().poll_read(cx, &mut rb);
            let n = rb.filled().len();
            filter.input.truncate(old + n);
            match res {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    if n == 0 {
                        *this.eof = true;
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

// ===== frame-level filter (no I/O) =====

#[derive(Debug, Clone, Copy)]
struct FrameHead {
    len: usize,
    kind: u8,
    flags: u8,
    stream: u32,
}

impl FrameHead {
    /// Parses the 9-octet frame header at the start of `b` (caller checks the length).
    fn parse(b: &[u8]) -> FrameHead {
        FrameHead {
            len: (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2]),
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }

    fn write(len: usize, kind: u8, flags: u8, stream: u32, out: &mut BytesMut) {
        debug_assert!(len <= MAX_FRAME_SIZE);
        let len = len as u32;
        out.put_slice(&len.to_be_bytes()[1..]);
        out.put_u8(kind);
        out.put_u8(flags);
        out.put_u32(stream);
    }
}

/// A header block being collected across HEADERS and CONTINUATION frames.
#[derive(Debug)]
struct PendingBlock {
    stream: u32,
    /// Flags of the HEADERS frame.
    flags: u8,
    priority: Option<[u8; PRIORITY_LEN]>,
    /// The frames exactly as received, for forwarding when nothing changes.
    raw: BytesMut,
    /// Concatenated header block fragments (padding removed).
    fragment: BytesMut,
}

#[derive(Debug)]
enum State {
    /// Forwarding the client preface; `matched` octets seen so far.
    Preface { matched: usize },
    /// Expecting a frame header.
    FrameHead,
    /// Forwarding the rest of a non-HEADERS frame payload.
    Payload { remaining: usize },
    /// Inside a header block, expecting a CONTINUATION.
    Continuation(PendingBlock),
    /// Gave up interpreting; every byte is forwarded as is.
    Bypass,
}

/// The I/O-free core: bytes in through `input`, possibly rewritten bytes out through `output`.
#[derive(Debug)]
struct Filter {
    state: State,
    input: BytesMut,
    output: BytesMut,
    hpack: BlockRewriter,
    rewrites: u64,
}

/// Splits a HEADERS payload into its priority fields and header block fragment, dropping
/// padding. `None` if the padding or priority fields do not fit (h2 rejects those frames).
fn split_headers_payload(flags: u8, payload: &[u8]) -> Option<(Option<[u8; PRIORITY_LEN]>, &[u8])> {
    let mut rest = payload;
    if flags & FLAG_PADDED != 0 {
        let (&pad, after) = rest.split_first()?;
        rest = after.get(..after.len().checked_sub(usize::from(pad))?)?;
    }
    let mut priority = None;
    if flags & FLAG_PRIORITY != 0 {
        let fields = rest.get(..PRIORITY_LEN)?;
        priority = Some(<[u8; PRIORITY_LEN]>::try_from(fields).ok()?);
        rest = &rest[PRIORITY_LEN..];
    }
    Some((priority, rest))
}

impl Filter {
    fn new(header_table_size: usize) -> Self {
        Filter {
            state: State::Preface { matched: 0 },
            input: BytesMut::new(),
            output: BytesMut::new(),
            hpack: BlockRewriter::new(header_table_size),
            rewrites: 0,
        }
    }

    /// Moves the first `n` input bytes to the output unchanged.
    fn forward(&mut self, n: usize) {
        if self.output.is_empty() && n == self.input.len() {
            mem::swap(&mut self.output, &mut self.input);
        } else {
            self.output.extend_from_slice(&self.input[..n]);
            self.input.advance(n);
        }
    }

    fn give_up(reason: &str) -> State {
        tracing::debug!(reason, "authority fix: forwarding the rest of the connection as is");
        State::Bypass
    }

    /// Processes buffered input as far as possible without more bytes. Returns whether any
    /// progress was made (input consumed or state changed).
    fn step(&mut self) -> bool {
        let state = mem::replace(&mut self.state, State::Bypass);
        let (next, progressed) = match state {
            State::Bypass => {
                let n = self.input.len();
                self.forward(n);
                (State::Bypass, n > 0)
            }
            State::Preface { matched } => {
                let n = (PREFACE.len() - matched).min(self.input.len());
                if n == 0 {
                    (State::Preface { matched }, false)
                } else if self.input[..n] != PREFACE[matched..matched + n] {
                    // Not HTTP/2 with prior knowledge: nothing here for us to fix.
                    (Self::give_up("no HTTP/2 connection preface"), true)
                } else {
                    self.forward(n);
                    let matched = matched + n;
                    if matched == PREFACE.len() {
                        (State::FrameHead, true)
                    } else {
                        (State::Preface { matched }, true)
                    }
                }
            }
            State::Payload { remaining } => {
                let n = remaining.min(self.input.len());
                self.forward(n);
                let next = if n == remaining { State::FrameHead } else { State::Payload { remaining: remaining - n } };
                (next, n > 0)
            }
            State::FrameHead => {
                if self.input.len() < FRAME_HEADER_LEN {
                    (State::FrameHead, false)
                } else {
                    let head = FrameHead::parse(&self.input);
                    match head.kind {
                        TYPE_HEADERS => self.start_block(head),
                        // Both carry HPACK we would have to track; the server treats either as
                        // a connection error from a client anyway.
                        TYPE_CONTINUATION | TYPE_PUSH_PROMISE => {
                            (Self::give_up("CONTINUATION or PUSH_PROMISE out of place"), true)
                        }
                        _ => {
                            self.forward(FRAME_HEADER_LEN);
                            let next =
                                if head.len == 0 { State::FrameHead } else { State::Payload { remaining: head.len } };
                            (next, true)
                        }
                    }
                }
            }
            State::Continuation(block) => self.continue_block(block),
        };
        self.state = next;
        progressed
    }

    fn start_block(&mut self, head: FrameHead) -> (State, bool) {
        if head.len > MAX_HEADER_BLOCK {
            return (Self::give_up("HEADERS frame too large to buffer"), true);
        }
        let total = FRAME_HEADER_LEN + head.len;
        if self.input.len() < total {
            self.input.reserve(total - self.input.len());
            return (State::FrameHead, false);
        }
        let frame = self.input.split_to(total);
        let Some((priority, fragment)) =
            split_headers_payload(head.flags, &frame[FRAME_HEADER_LEN..]).map(|(p, f)| (p, BytesMut::from(f)))
        else {
            self.output.extend_from_slice(&frame);
            return (Self::give_up("malformed HEADERS padding or priority"), true);
        };
        if let Some(p) = &priority {
            let dependency = u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff;
            if dependency == head.stream {
                // h2 resets such a stream without decoding its header block, so its table
                // would miss this block's entries; ours must not diverge, so step aside.
                self.output.extend_from_slice(&frame);
                return (Self::give_up("HEADERS depends on its own stream"), true);
            }
        }
        let block = PendingBlock { stream: head.stream, flags: head.flags, priority, raw: frame, fragment };
        if head.flags & FLAG_END_HEADERS != 0 {
            (self.complete_block(block), true)
        } else {
            (State::Continuation(block), true)
        }
    }

    fn continue_block(&mut self, mut block: PendingBlock) -> (State, bool) {
        if self.input.len() < FRAME_HEADER_LEN {
            return (State::Continuation(block), false);
        }
        let head = FrameHead::parse(&self.input);
        if head.kind != TYPE_CONTINUATION || head.stream != block.stream {
            // A protocol error the server will report; hand it the original bytes.
            self.output.extend_from_slice(&block.raw);
            return (Self::give_up("header block interrupted"), true);
        }
        if block.fragment.len() + head.len > MAX_HEADER_BLOCK {
            self.output.extend_from_slice(&block.raw);
            return (Self::give_up("header block too large to buffer"), true);
        }
        let total = FRAME_HEADER_LEN + head.len;
        if self.input.len() < total {
            self.input.reserve(total - self.input.len());
            return (State::Continuation(block), false);
        }
        let frame = self.input.split_to(total);
        block.fragment.extend_from_slice(&frame[FRAME_HEADER_LEN..]);
        block.raw.extend_from_slice(&frame);
        if head.flags & FLAG_END_HEADERS != 0 {
            (self.complete_block(block), true)
        } else {
            (State::Continuation(block), true)
        }
    }

    fn complete_block(&mut self, block: PendingBlock) -> State {
        match self.hpack.rewrite(&block.fragment) {
            Ok(None) => {
                self.output.extend_from_slice(&block.raw);
                State::FrameHead
            }
            Ok(Some(rewritten)) => {
                for original in &rewritten.originals {
                    self.rewrites += 1;
                    tracing::debug!(
                        stream = block.stream,
                        original = %String::from_utf8_lossy(original),
                        "replaced an :authority that h2 would reject with a same-length placeholder"
                    );
                }
                self.emit_block(&block, &rewritten.block);
                State::FrameHead
            }
            Err(e) => {
                // Our table copy may now differ from the server's, so no later block can be
                // trusted either; the server will reject this one itself.
                self.output.extend_from_slice(&block.raw);
                tracing::debug!(stream = block.stream, error = %e, "unparseable header block");
                Self::give_up("unparseable header block")
            }
        }
    }

    /// Frames `fragment` as HEADERS (+ CONTINUATION) for `block`'s stream. Padding is dropped
    /// (it has no meaning beyond the hop) and END_HEADERS goes on the last frame.
    fn emit_block(&mut self, block: &PendingBlock, fragment: &[u8]) {
        let prio_len = if block.priority.is_some() { PRIORITY_LEN } else { 0 };
        let (first, rest) = fragment.split_at(fragment.len().min(MAX_FRAME_SIZE - prio_len));
        let mut flags = block.flags & !(FLAG_PADDED | FLAG_END_HEADERS);
        if rest.is_empty() {
            flags |= FLAG_END_HEADERS;
        }
        let out = &mut self.output;
        FrameHead::write(prio_len + first.len(), TYPE_HEADERS, flags, block.stream, out);
        if let Some(priority) = &block.priority {
            out.put_slice(priority);
        }
        out.put_slice(first);
        let mut chunks = rest.chunks(MAX_FRAME_SIZE).peekable();
        while let Some(chunk) = chunks.next() {
            let flags = if chunks.peek().is_none() { FLAG_END_HEADERS } else { 0 };
            FrameHead::write(chunk.len(), TYPE_CONTINUATION, flags, block.stream, out);
            out.put_slice(chunk);
        }
    }

    /// At end of input: release everything held back, unchanged.
    fn finish_input(&mut self) {
        if let State::Continuation(block) = &self.state {
            self.output.extend_from_slice(&block.raw);
            self.state = State::Bypass;
        }
        let n = self.input.len();
        self.forward(n);
    }

    /// How many bytes may be read directly into the caller's buffer, bypassing `input`: only
    /// when nothing is buffered and the next bytes need no inspection. Small payloads go
    /// through `input` so one read can pick up several frames.
    fn direct_read_limit(&self) -> Option<usize> {
        if !self.input.is_empty() || !self.output.is_empty() {
            return None;
        }
        match self.state {
            State::Bypass => Some(usize::MAX),
            State::Payload { remaining } if remaining >= READ_CHUNK => Some(remaining),
            _ => None,
        }
    }

    fn consumed_directly(&mut self, n: usize) {
        if let State::Payload { remaining } = &mut self.state {
            *remaining -= n;
            if *remaining == 0 {
                self.state = State::FrameHead;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::hpack::{encode_int, huffman_encode, BlockRewriter};
    use super::*;
    use tokio::io::AsyncReadExt;

    const BAD: &[u8] = br"\\.\pipe\csi-proxy-disk-v1";

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        let len = payload.len() as u32;
        out.put_slice(&len.to_be_bytes()[1..]);
        out.put_u8(kind);
        out.put_u8(flags);
        out.put_u32(stream);
        out.put_slice(payload);
        out.to_vec()
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
        let mut rest = &bytes[24..];
        let mut out = Vec::new();
        while !rest.is_empty() {
            let h = FrameHead::parse(rest);
            let end = FRAME_HEADER_LEN + h.len;
            out.push((h.kind, h.flags, h.stream, rest[FRAME_HEADER_LEN..end].to_vec()));
            rest = &rest[end..];
        }
        out
    }

    /// A connection with padding, priority, CONTINUATION, a large DATA frame and a second
    /// request that references the first `:authority` by index.
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
        input.extend(frame(0x0, 0, 1, &vec![0xab; 40_000])); // DATA, larger than a read
        input.extend(frame(0x0, 0x1, 1, b"tail"));
        // Stream 3: :method POST, :scheme http, then dynamic indices 63 (:authority) and 62.
        input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS | 0x1, 3, &[0x83, 0x86, 0xbf, 0xbe]));
        input.extend(frame(0x8, 0, 0, &[0, 0, 1, 0])); // WINDOW_UPDATE
        input
    }

    #[test]
    fn adapter_has_the_traits_tonic_needs() {
        fn check<T: AsyncRead + AsyncWrite + Send + Unpin + 'static>() {}
        check::<AuthorityFix<tokio::io::DuplexStream>>();
        #[cfg(unix)]
        check::<AuthorityFix<tokio::net::UnixStream>>();
    }

    #[tokio::test]
    async fn rewrites_across_continuations_and_keeps_other_frames() {
        let input = sample_connection();
        let (out, rewrites, bypassed) = run_bulk(&input).await;
        assert_eq!(rewrites, 1);
        assert!(!bypassed);
        let f = frames(&out);
        let kinds: Vec<(u8, u32)> = f.iter().map(|(k, _, s, _)| (*k, *s)).collect();
        assert_eq!(kinds, vec![(4, 0), (1, 1), (0, 1), (0, 1), (1, 3), (8, 0)]);

        // One HEADERS frame: padding gone, priority kept, END_HEADERS set.
        let (_, flags, _, payload) = &f[1];
        assert_eq!(*flags, FLAG_PRIORITY | FLAG_END_HEADERS);
        assert_eq!(&payload[..5], &[0x80, 0, 0, 0, 15]);
        let mut expected = vec![0x83, 0x86, 0x41, BAD.len() as u8];
        expected.extend(std::iter::repeat_n(b'x', BAD.len()));
        expected.extend(literal(4, b"/v1.Disk/GetDiskStats", true));
        assert_eq!(&payload[5..], &expected[..]);

        // The rewritten block is consistent for a fresh decoder, and the rest is untouched.
        let mut check = BlockRewriter::new(4096);
        assert!(check.rewrite(&payload[5..]).unwrap().is_none());
        assert!(check.rewrite(&f[4].3).unwrap().is_none());
        assert_eq!(f[2].3, vec![0xab; 40_000]);
        assert_eq!(f[4].3, vec![0x83, 0x86, 0xbf, 0xbe]);
    }

    #[tokio::test]
    async fn one_byte_at_a_time_matches_bulk() {
        let input = sample_connection();
        let bulk = run_bulk(&input).await;
        let trickle = run_trickle(&input).await;
        assert_eq!(bulk, trickle);
    }

    #[tokio::test]
    async fn long_rewrite_is_split_into_continuations() {
        // '%' has a 6-bit Huffman code, so the plain placeholder outgrows one frame.
        let value = vec![b'%'; 20_000];
        let block = literal(1, &value, true);
        assert!(block.len() < MAX_FRAME_SIZE);
        let mut input = PREFACE.to_vec();
        input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS | 0x1, 1, &block));
        let (out, rewrites, _) = run_bulk(&input).await;
        assert_eq!(rewrites, 1);
        let f = frames(&out);
        assert_eq!(f.len(), 2);
        assert_eq!((f[0].0, f[0].1), (TYPE_HEADERS, 0x1));
        assert_eq!(f[0].3.len(), MAX_FRAME_SIZE);
        assert_eq!((f[1].0, f[1].1, f[1].2), (TYPE_CONTINUATION, FLAG_END_HEADERS, 1));
        let joined = [f[0].3.clone(), f[1].3.clone()].concat();
        let mut expected = vec![0x41];
        encode_int(value.len(), 7, 0, &mut expected);
        expected.extend(vec![b'x'; value.len()]);
        assert_eq!(joined, expected);
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

    #[tokio::test]
    async fn malformed_input_is_forwarded_unchanged() {
        let mut cases = Vec::new();
        // Invalid HPACK index 0.
        let mut c = PREFACE.to_vec();
        c.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &[0x80]));
        c.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &literal(1, BAD, false)));
        cases.push(c);
        // Padding longer than the payload.
        let mut c = PREFACE.to_vec();
        c.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS | FLAG_PADDED, 1, &[9, 0x82]));
        cases.push(c);
        // Header block interrupted by a DATA frame.
        let mut c = PREFACE.to_vec();
        c.extend(frame(TYPE_HEADERS, 0, 1, &literal(1, BAD, false)));
        c.extend(frame(0x0, 0, 1, b"data"));
        cases.push(c);
        // A stream depending on itself: h2 skips the block's HPACK, so the adapter steps aside.
        let mut c = PREFACE.to_vec();
        let mut payload = vec![0, 0, 0, 1, 15];
        payload.extend(literal(1, BAD, false));
        c.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS | FLAG_PRIORITY, 1, &payload));
        c.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &literal(1, BAD, false)));
        cases.push(c);
        // Not HTTP/2 at all.
        cases.push(b"GET / HTTP/1.1\r\nHost: \\\\.\\pipe\\x\r\n\r\n".to_vec());
        // Truncated in the middle of a header block.
        let mut c = PREFACE.to_vec();
        c.extend(frame(TYPE_HEADERS, 0, 1, &literal(1, BAD, false)));
        c.extend(&frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, &[0x82, 0x84])[..10]);
        cases.push(c);
        // A header block bigger than the buffering cap.
        let mut c = PREFACE.to_vec();
        c.extend(frame(TYPE_HEADERS, 0, 1, &literal(1, BAD, false)));
        for _ in 0..70 {
            c.extend(frame(TYPE_CONTINUATION, 0, 1, &[0x82; MAX_FRAME_SIZE]));
        }
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
            // Without a rewrite, every byte must come out exactly as it went in.
            if rewrites == 0 {
                assert_eq!(out, input);
            }
        }
    }
}
