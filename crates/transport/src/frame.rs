//! The HTTP/2 frame layer as far as this crate reads it (RFC 9113 §3.4, §4.1): the client
//! connection preface and the 9-octet frame header (24-bit payload length, type, flags,
//! 31-bit stream identifier). The connection timeouts in [`crate::conn`], the `:authority`
//! adapter, the fuzz harness and the tests that speak HTTP/2 by hand read and write raw frames
//! with this module rather than with copies of their own.

/// The client connection preface, sent before the first frame.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Octets of a frame header.
pub const HEADER_LEN: usize = 9;

/// Frame types (RFC 9113 §6).
pub const TYPE_DATA: u8 = 0x0;
pub const TYPE_HEADERS: u8 = 0x1;
pub const TYPE_RST_STREAM: u8 = 0x3;
pub const TYPE_SETTINGS: u8 = 0x4;
pub const TYPE_PUSH_PROMISE: u8 = 0x5;
pub const TYPE_PING: u8 = 0x6;
pub const TYPE_GOAWAY: u8 = 0x7;
pub const TYPE_CONTINUATION: u8 = 0x9;

/// Frame flags (RFC 9113 §6).
pub const FLAG_END_STREAM: u8 = 0x1;
pub const FLAG_END_HEADERS: u8 = 0x4;
pub const FLAG_PADDED: u8 = 0x8;
pub const FLAG_PRIORITY: u8 = 0x20;

/// A frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHead {
    /// Payload length (24 bits).
    pub len: usize,
    pub kind: u8,
    pub flags: u8,
    /// Stream identifier, the reserved bit cleared.
    pub stream: u32,
}

/// The payload length in the first three octets of a frame header.
pub fn payload_len(b: &[u8; 3]) -> usize {
    (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2])
}

impl FrameHead {
    pub fn parse(b: &[u8; HEADER_LEN]) -> FrameHead {
        FrameHead {
            len: payload_len(&[b[0], b[1], b[2]]),
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }

    /// The header of the frame at the start of `bytes`, if all nine octets are there.
    pub fn peek(bytes: &[u8]) -> Option<FrameHead> {
        bytes.first_chunk::<HEADER_LEN>().map(FrameHead::parse)
    }

    /// The nine octets of this header. `len` must fit 24 bits.
    pub const fn encode(&self) -> [u8; HEADER_LEN] {
        debug_assert!(self.len < 1 << 24, "frame payload over 24 bits");
        let len = (self.len as u32).to_be_bytes();
        let stream = self.stream.to_be_bytes();
        [len[1], len[2], len[3], self.kind, self.flags, stream[0], stream[1], stream[2], stream[3]]
    }
}

/// A SETTINGS frame with no parameters (header only), as a client's first frame often is.
pub const EMPTY_SETTINGS: [u8; HEADER_LEN] = FrameHead { len: 0, kind: TYPE_SETTINGS, flags: 0, stream: 0 }.encode();

/// Appends a whole frame (header and `payload`) to `out`.
pub fn write_frame(kind: u8, flags: u8, stream: u32, payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&FrameHead { len: payload.len(), kind, flags, stream }.encode());
    out.extend_from_slice(payload);
}

/// The whole frames at the start of `bytes` (which begin at a frame boundary, after the
/// preface), each as its header and its payload; a trailing partial frame is not yielded and
/// [`Frames::rest`] returns it.
pub fn frames(bytes: &[u8]) -> Frames<'_> {
    Frames { rest: bytes }
}

/// Iterator returned by [`frames`].
#[derive(Debug, Clone)]
pub struct Frames<'a> {
    rest: &'a [u8],
}

impl<'a> Frames<'a> {
    /// What is left: empty, or a partial frame.
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = (FrameHead, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let head = FrameHead::peek(self.rest)?;
        let payload = self.rest.get(HEADER_LEN..HEADER_LEN + head.len)?;
        self.rest = &self.rest[HEADER_LEN + head.len..];
        Some((head, payload))
    }
}

/// A frame header arriving in pieces.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HeadReader {
    buf: [u8; HEADER_LEN],
    n: usize,
}

impl HeadReader {
    /// Takes octets of the header from the front of `data`; returns how many it took.
    pub(crate) fn fill(&mut self, data: &[u8]) -> usize {
        let take = (HEADER_LEN - self.n).min(data.len());
        self.buf[self.n..self.n + take].copy_from_slice(&data[..take]);
        self.n += take;
        take
    }

    /// Octets of the header received so far.
    pub(crate) fn received(&self) -> usize {
        self.n
    }

    /// The payload length, once its three octets are in.
    pub(crate) fn payload_len(&self) -> Option<usize> {
        (self.n >= 3).then(|| payload_len(&[self.buf[0], self.buf[1], self.buf[2]]))
    }

    /// The header, once complete.
    pub(crate) fn head(&self) -> Option<FrameHead> {
        (self.n == HEADER_LEN).then(|| FrameHead::parse(&self.buf))
    }
}

/// Follows frame boundaries in a client's byte stream: the preface (counted, not checked),
/// then frame headers and payloads (only their lengths; nothing is validated).
#[derive(Debug)]
pub(crate) struct Boundaries {
    /// Octets of the preface still to come; then frames.
    preface_left: usize,
    head: HeadReader,
    payload_left: usize,
    /// Frames seen in full.
    complete: u64,
}

impl Default for Boundaries {
    fn default() -> Self {
        Boundaries { preface_left: PREFACE.len(), head: HeadReader::default(), payload_left: 0, complete: 0 }
    }
}

impl Boundaries {
    /// Frames seen in full so far.
    pub(crate) fn complete(&self) -> u64 {
        self.complete
    }

    /// Whether the stream stopped inside the preface (after its first octet) or a frame.
    pub(crate) fn mid_frame(&self) -> bool {
        self.preface_left > 0 && self.preface_left < PREFACE.len() || self.head.received() > 0 || self.payload_left > 0
    }

    pub(crate) fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.preface_left > 0 {
                let n = self.preface_left.min(data.len());
                self.preface_left -= n;
                data = &data[n..];
            } else if self.payload_left > 0 {
                let n = self.payload_left.min(data.len());
                self.payload_left -= n;
                data = &data[n..];
                if self.payload_left == 0 {
                    self.complete += 1;
                }
            } else {
                let n = self.head.fill(data);
                data = &data[n..];
                if let Some(head) = self.head.head() {
                    self.head = HeadReader::default();
                    self.payload_left = head.len;
                    if self.payload_left == 0 {
                        self.complete += 1;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_round_trips_and_the_reserved_bit_is_dropped() {
        let head = FrameHead { len: 0x01_02_03, kind: TYPE_HEADERS, flags: FLAG_END_HEADERS, stream: 0x7fff_fffe };
        let b = head.encode();
        assert_eq!(b, [1, 2, 3, 1, 4, 0x7f, 0xff, 0xff, 0xfe]);
        assert_eq!(FrameHead::parse(&b), head);
        assert_eq!(EMPTY_SETTINGS, [0, 0, 0, 4, 0, 0, 0, 0, 0]);
        let mut reserved = b;
        reserved[5] |= 0x80;
        assert_eq!(FrameHead::parse(&reserved), head);
    }

    #[test]
    fn frames_stops_before_a_partial_frame() {
        let mut bytes = Vec::new();
        write_frame(TYPE_SETTINGS, 0, 0, &[], &mut bytes);
        write_frame(TYPE_DATA, FLAG_END_STREAM, 1, b"abc", &mut bytes);
        write_frame(TYPE_DATA, 0, 3, b"defg", &mut bytes);
        bytes.truncate(bytes.len() - 1);
        let mut it = frames(&bytes);
        let got: Vec<_> = it.by_ref().map(|(h, p)| (h.kind, h.flags, h.stream, p.to_vec())).collect();
        assert_eq!(got, vec![(TYPE_SETTINGS, 0, 0, vec![]), (TYPE_DATA, FLAG_END_STREAM, 1, b"abc".to_vec())]);
        assert_eq!(it.rest().len(), HEADER_LEN + 3);
    }

    #[test]
    fn a_header_in_pieces() {
        let b = FrameHead { len: 300, kind: TYPE_DATA, flags: 0, stream: 5 }.encode();
        let mut r = HeadReader::default();
        assert_eq!(r.fill(&b[..2]), 2);
        assert_eq!((r.payload_len(), r.head()), (None, None));
        // The length is known from the third octet on (h2 checks it there).
        assert_eq!(r.fill(&b[2..3]), 1);
        assert_eq!((r.payload_len(), r.head()), (Some(300), None));
        assert_eq!(r.fill(&[&b[3..], &[0xaa][..]].concat()), 6);
        assert_eq!(r.head(), Some(FrameHead { len: 300, kind: TYPE_DATA, flags: 0, stream: 5 }));
    }

    #[test]
    fn boundaries_count_frames_across_any_split() {
        let mut bytes = PREFACE.to_vec();
        write_frame(TYPE_SETTINGS, 0, 0, &[], &mut bytes);
        write_frame(TYPE_DATA, 0, 1, &[7; 20], &mut bytes);
        for split in 0..bytes.len() {
            let mut b = Boundaries::default();
            b.feed(&bytes[..split]);
            let expected_mid = split > 0 && split != PREFACE.len() + HEADER_LEN && split != PREFACE.len();
            assert_eq!(b.mid_frame(), expected_mid, "split {split}");
            b.feed(&bytes[split..]);
            assert_eq!((b.complete(), b.mid_frame()), (2, false), "split {split}");
        }
    }
}
