//! The frame follower: the adapter's I/O-free core. It reads the client's bytes as `h2`'s
//! server does (the preface, then frame headers, header block fragments with their padding and
//! priority fields, the CONTINUATION rules), hands header block octets to the HPACK mirror and
//! every octet to the sink, and gives up (forwarding the rest untouched) where the input is not
//! HTTP/2 with prior knowledge or where `h2` would end the connection.

use super::mirror::HpackMirror;
use super::sink::Sink;
use super::H2Limits;
use crate::frame::{
    FrameHead, HeadReader, FLAG_END_HEADERS, FLAG_PADDED, FLAG_PRIORITY, PREFACE, TYPE_CONTINUATION, TYPE_HEADERS,
    TYPE_PUSH_PROMISE,
};

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

/// Follows one connection's client→server bytes (see the module documentation).
#[derive(Debug)]
pub(super) struct FrameFollower {
    limits: H2Limits,
    frame: FrameState,
    block: Option<Block>,
    hpack: HpackMirror,
    pub(super) sink: Sink,
    rewrites: u64,
}

impl FrameFollower {
    pub(super) fn new(limits: H2Limits) -> Self {
        FrameFollower {
            limits,
            frame: FrameState::Preface { matched: 0 },
            block: None,
            hpack: HpackMirror::new(limits),
            sink: Sink::default(),
            rewrites: 0,
        }
    }

    /// Number of `:authority` values replaced so far.
    pub(super) fn rewrites(&self) -> u64 {
        self.rewrites
    }

    /// Whether it has stopped interpreting the stream and only forwards octets.
    pub(super) fn is_bypassed(&self) -> bool {
        matches!(self.frame, FrameState::Bypass)
    }

    /// Processes freshly read octets (in place in the caller's buffer). Returns how many of
    /// them, from the start, stay where they are; the rest went to `held` or `output`.
    pub(super) fn consume(&mut self, mut data: &[u8]) -> usize {
        self.sink.start_inline();
        while !data.is_empty() {
            let n = self.step(data);
            data = &data[n..];
        }
        self.sink.end_inline()
    }

    /// At end of input: release everything held back, unchanged.
    pub(super) fn finish(&mut self) {
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
