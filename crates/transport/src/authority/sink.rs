//! Where the adapter's input octets go: left in place in the reader's buffer, held back while
//! a candidate `:authority` value is incomplete, or queued for the next read.

use bytes::BytesMut;

/// Octets held back while a candidate `:authority` value is incomplete.
#[derive(Debug, Default)]
pub(super) struct Held {
    bytes: BytesMut,
    /// Where the value's payload octets lie in `bytes` (frame headers may sit in between).
    payload: Vec<(usize, usize)>,
}

/// Every input octet is emitted exactly once, in order: into the caller's buffer where it was
/// read (`inline`), into `held`, or into `output` once anything has been diverted.
#[derive(Debug, Default)]
pub(super) struct Sink {
    /// While true, emitted octets are still exactly the ones in place in the read buffer.
    inline: bool,
    inline_len: usize,
    pub(super) output: BytesMut,
    held: Option<Held>,
}

impl Sink {
    /// Starts handling freshly read octets: while nothing is held or queued, emitted octets
    /// stay where they were read.
    pub(super) fn start_inline(&mut self) {
        self.inline = self.output.is_empty() && self.held.is_none();
        self.inline_len = 0;
    }

    /// Ends it: how many of those octets, from the start, stayed in place.
    pub(super) fn end_inline(&mut self) -> usize {
        let kept = self.inline_len;
        self.inline = false;
        self.inline_len = 0;
        kept
    }

    pub(super) fn emit(&mut self, b: &[u8]) {
        if let Some(h) = &mut self.held {
            h.bytes.extend_from_slice(b);
        } else if self.inline {
            self.inline_len += b.len();
        } else {
            self.output.extend_from_slice(b);
        }
    }

    pub(super) fn emit_payload(&mut self, b: &[u8]) {
        let Some(h) = &mut self.held else { return self.emit(b) };
        let at = h.bytes.len();
        match h.payload.last_mut() {
            Some((_, end)) if *end == at => *end += b.len(),
            _ => h.payload.push((at, at + b.len())),
        }
        h.bytes.extend_from_slice(b);
    }

    pub(super) fn hold(&mut self) {
        self.inline = false;
        self.held.get_or_insert_with(Held::default);
    }

    pub(super) fn held_len(&self) -> usize {
        self.held.as_ref().map_or(0, |h| h.bytes.len())
    }

    /// The held value's payload octets, joined.
    pub(super) fn held_payload(&self) -> Vec<u8> {
        let Some(h) = &self.held else { return Vec::new() };
        h.payload.iter().flat_map(|&(a, b)| h.bytes[a..b].iter().copied()).collect()
    }

    /// Hands on what is held, with the payload replaced by `replacement` (same length) if given.
    pub(super) fn release(&mut self, replacement: Option<&[u8]>) {
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
