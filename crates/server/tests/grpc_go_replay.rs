#![cfg(unix)]
//! Replays what real grpc-go clients sent when dialling a csi-proxy pipe (see
//! `shared/fixtures/grpc-go/README.md`) against the full daemon stack over a real unix socket:
//! transport (with its `:authority` fix), tonic, the v1 Disk service and the in-memory host.
//!
//! Each capture holds two unary `/v1.Disk/GetDiskStats` calls on one connection (disk 7, then
//! disk 8). Stream 1 carries an `:authority` that `http::uri::Authority` rejects as a literal,
//! stream 3 refers to it through the HPACK dynamic table. Both must be answered.

mod common;
use common::*;
use csi_proxy_wire::{v1, Group};
use prost::Message;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/fixtures/grpc-go/"
);
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;

const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// One HTTP/2 frame: type, flags, stream id and payload (without the 9-byte header).
#[derive(Debug, Clone)]
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

impl Frame {
    fn encode(&self, out: &mut Vec<u8>) {
        let len = self.payload.len() as u32;
        out.extend_from_slice(&len.to_be_bytes()[1..]);
        out.push(self.kind);
        out.push(self.flags);
        out.extend_from_slice(&self.stream.to_be_bytes());
        out.extend_from_slice(&self.payload);
    }
}

/// Takes the whole frames off the front of `buf`, leaving a trailing partial frame in place.
fn take_frames(buf: &mut Vec<u8>) -> Vec<Frame> {
    let mut frames = Vec::new();
    let mut pos = 0;
    while buf.len() - pos >= 9 {
        let h = &buf[pos..pos + 9];
        let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
        if buf.len() - pos < 9 + len {
            break;
        }
        frames.push(Frame {
            kind: h[3],
            flags: h[4],
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
            payload: buf[pos + 9..pos + 9 + len].to_vec(),
        });
        pos += 9 + len;
    }
    buf.drain(..pos);
    frames
}

/// The capture minus the RST_STREAM and GOAWAY frames the client sent only because the
/// capturing server never answered.
fn replay_bytes(name: &str) -> Vec<u8> {
    let path = format!("{FIXTURES}{name}");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("reading fixture {path}: {e}"));
    assert_eq!(&bytes[..24], PREFACE, "{name}: connection preface");
    let mut rest = bytes[24..].to_vec();
    let frames = take_frames(&mut rest);
    assert!(rest.is_empty(), "{name} ends in a partial frame");
    let kinds: Vec<u8> = frames.iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds,
        [0x4, 0x4, HEADERS, DATA, RST_STREAM, HEADERS, DATA, RST_STREAM, GOAWAY],
        "{name}: frame sequence"
    );
    let mut out = PREFACE.to_vec();
    for f in frames
        .iter()
        .filter(|f| f.kind != RST_STREAM && f.kind != GOAWAY)
    {
        f.encode(&mut out);
    }
    out
}

// ===== a small HPACK decoder (RFC 7541), enough for whatever h2's encoder sends =====

/// Code length in bits of each symbol of the HPACK Huffman code (RFC 7541 Appendix B), indexed
/// by symbol (0..=255, then 256 = EOS). The code is canonical, so the lengths determine it.
const CODE_LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, // 0x00
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, // 0x10
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, // 0x20
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, // 0x30
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, // 0x40
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, // 0x50
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, // 0x60
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, // 0x70
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

fn huffman_decode(input: &[u8]) -> Vec<u8> {
    // (length, code) -> symbol, from the canonical assignment: codes of one length are
    // consecutive in symbol order, and each length starts at (last code of previous + 1) << 1.
    let mut codes = BTreeMap::new();
    let mut code = 0u32;
    for len in 1..=30u8 {
        for (sym, _) in CODE_LENGTHS.iter().enumerate().filter(|(_, l)| **l == len) {
            codes.insert((len, code), sym as u16);
            code += 1;
        }
        code <<= 1;
    }
    let mut out = Vec::new();
    let (mut code, mut len) = (0u32, 0u8);
    for &byte in input {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            len += 1;
            assert!(len <= 30, "bad Huffman code in {input:02x?}");
            if let Some(&sym) = codes.get(&(len, code)) {
                assert_ne!(sym, 256, "EOS inside a Huffman string");
                out.push(sym as u8);
                (code, len) = (0, 0);
            }
        }
    }
    assert!(
        len <= 7 && code == (1 << len) - 1,
        "bad Huffman padding in {input:02x?}"
    );
    out
}

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

type Header = (String, String);

/// The client side's view of the server's HPACK encoder state.
struct Decoder {
    /// Newest first: HPACK index 62 is `table[0]`.
    table: VecDeque<Header>,
    size: usize,
    max_size: usize,
}

impl Decoder {
    fn new() -> Self {
        // The captured client's SETTINGS frame is empty, so the default 4096 applies.
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max_size: 4096,
        }
    }

    fn int(buf: &[u8], pos: &mut usize, prefix_bits: u8) -> usize {
        let mask = (1usize << prefix_bits) - 1;
        let mut value = usize::from(buf[*pos]) & mask;
        *pos += 1;
        if value < mask {
            return value;
        }
        let mut shift = 0;
        loop {
            let b = buf[*pos];
            *pos += 1;
            value += usize::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                return value;
            }
        }
    }

    fn string(buf: &[u8], pos: &mut usize) -> String {
        let huffman = buf[*pos] & 0x80 != 0;
        let len = Self::int(buf, pos, 7);
        let raw = &buf[*pos..*pos + len];
        *pos += len;
        let bytes = if huffman {
            huffman_decode(raw)
        } else {
            raw.to_vec()
        };
        String::from_utf8(bytes).expect("header strings are UTF-8 here")
    }

    fn entry(&self, index: usize) -> Header {
        assert!(index > 0, "HPACK index 0");
        if index <= STATIC_TABLE.len() {
            let (n, v) = STATIC_TABLE[index - 1];
            return (n.to_owned(), v.to_owned());
        }
        self.table
            .get(index - STATIC_TABLE.len() - 1)
            .cloned()
            .unwrap_or_else(|| panic!("HPACK index {index} out of range"))
    }

    fn evict(&mut self) {
        while self.size > self.max_size {
            let (n, v) = self.table.pop_back().expect("size accounting");
            self.size -= n.len() + v.len() + 32;
        }
    }

    fn insert(&mut self, h: Header) {
        self.size += h.0.len() + h.1.len() + 32;
        self.table.push_front(h);
        self.evict();
    }

    /// Decodes one complete header block.
    fn decode(&mut self, block: &[u8]) -> Vec<Header> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < block.len() {
            let first = block[pos];
            if first & 0x80 != 0 {
                let index = Self::int(block, &mut pos, 7);
                out.push(self.entry(index));
            } else if first & 0xe0 == 0x20 {
                self.max_size = Self::int(block, &mut pos, 5);
                assert!(
                    self.max_size <= 4096,
                    "table size update above SETTINGS_HEADER_TABLE_SIZE"
                );
                self.evict();
            } else {
                let indexing = first & 0xc0 == 0x40;
                let name_index = Self::int(block, &mut pos, if indexing { 6 } else { 4 });
                let name = if name_index == 0 {
                    Self::string(block, &mut pos)
                } else {
                    self.entry(name_index).0
                };
                let value = Self::string(block, &mut pos);
                if indexing {
                    self.insert((name.clone(), value.clone()));
                }
                out.push((name, value));
            }
        }
        out
    }
}

// ===== the replay =====

/// What the server sent on one stream.
#[derive(Debug, Default)]
struct StreamSeen {
    /// Decoded header blocks, in order (response headers, then trailers).
    header_blocks: Vec<Vec<Header>>,
    /// DATA payloads (padding removed), in order.
    data: Vec<Vec<u8>>,
    /// The stream's last frame carried END_STREAM; `Some(true)` if that frame was HEADERS.
    ended_by_headers: Option<bool>,
    rst: Option<u32>,
}

#[derive(Debug, Default)]
struct Seen {
    streams: BTreeMap<u32, StreamSeen>,
    /// Error codes of GOAWAY frames the server sent.
    goaways: Vec<u32>,
    /// Streams reset by the server: (stream, error code).
    resets: Vec<(u32, u32)>,
    eof: bool,
}

impl Seen {
    fn settled(&self, stream: u32) -> bool {
        self.streams
            .get(&stream)
            .is_some_and(|s| s.ended_by_headers.is_some() || s.rst.is_some())
    }
}

fn strip_padding(flags: u8, payload: &[u8]) -> &[u8] {
    if flags & PADDED == 0 {
        return payload;
    }
    let pad = usize::from(payload[0]);
    &payload[1..payload.len() - pad]
}

/// Replays `name` into the v1 Disk socket of a fresh daemon and collects what it answers.
async fn exchange(name: &str) -> Seen {
    let s = TestServer::start().await;
    // Disk 7 exists (a copy of disk 0: 1 GiB), disk 8 does not.
    s.host.with(|st| {
        let d = st.disks[&0].clone();
        st.disks.insert(7, d);
    });

    let input = replay_bytes(name);
    let sock = tokio::net::UnixStream::connect(s.socket(Group::Disk, "v1"))
        .await
        .expect("connect");
    let (mut rx, mut tx) = sock.into_split();
    // Write on its own task so a server that answers before reading everything can't deadlock us.
    let writer = tokio::spawn(async move {
        tx.write_all(&input).await.expect("writing the capture");
        tx.flush().await.unwrap();
        tx // keep the write half open until the reader is done
    });

    let mut seen = Seen::default();
    let mut hpack = Decoder::new();
    // A header block split over HEADERS + CONTINUATION: (stream, flags of HEADERS, fragment).
    let mut pending: Option<(u32, u8, Vec<u8>)> = None;
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while !(seen.settled(1) && seen.settled(3)) {
            let n = rx.read(&mut chunk).await.expect("reading from the server");
            if n == 0 {
                seen.eof = true;
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            for f in take_frames(&mut buf) {
                match f.kind {
                    HEADERS | CONTINUATION => {
                        let (stream, flags, mut block) = match (f.kind, pending.take()) {
                            (HEADERS, None) => {
                                let mut p = strip_padding(f.flags, &f.payload);
                                if f.flags & PRIORITY != 0 {
                                    p = &p[5..];
                                }
                                (f.stream, f.flags, p.to_vec())
                            }
                            (CONTINUATION, Some(p)) if p.0 == f.stream => p,
                            (kind, p) => panic!(
                                "unexpected frame type {kind} on stream {} (pending block {p:?})",
                                f.stream
                            ),
                        };
                        if f.kind == CONTINUATION {
                            block.extend_from_slice(&f.payload);
                        }
                        if f.flags & END_HEADERS == 0 {
                            pending = Some((stream, flags, block));
                            continue;
                        }
                        let headers = hpack.decode(&block);
                        let st = seen.streams.entry(stream).or_default();
                        st.header_blocks.push(headers);
                        if flags & END_STREAM != 0 {
                            st.ended_by_headers = Some(true);
                        }
                    }
                    DATA => {
                        let st = seen.streams.entry(f.stream).or_default();
                        st.data.push(strip_padding(f.flags, &f.payload).to_vec());
                        if f.flags & END_STREAM != 0 {
                            st.ended_by_headers = Some(false);
                        }
                    }
                    RST_STREAM => {
                        let code = u32::from_be_bytes(f.payload[..4].try_into().unwrap());
                        seen.resets.push((f.stream, code));
                        seen.streams.entry(f.stream).or_default().rst = Some(code);
                    }
                    GOAWAY => {
                        let code = u32::from_be_bytes(f.payload[4..8].try_into().unwrap());
                        seen.goaways.push(code);
                    }
                    _ => {}
                }
            }
        }
    })
    .await;
    if read.is_err() {
        panic!("{name}: the server did not end streams 1 and 3 within 10 s; saw {seen:#?}");
    }
    drop((rx, writer.await.unwrap()));
    s.stop().await;
    seen
}

fn header<'a>(block: &'a [Header], name: &str) -> Option<&'a str> {
    block
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Percent-decodes a `grpc-message` value.
fn grpc_message(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Some(x) = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(x);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

fn check(name: &str, seen: &Seen) {
    assert!(
        seen.resets.is_empty(),
        "{name}: server reset streams {:?}; saw {seen:#?}",
        seen.resets
    );
    assert!(
        seen.goaways.iter().all(|&c| c == 0),
        "{name}: server sent GOAWAY with error {:?}",
        seen.goaways
    );

    // Stream 1: GetDiskStats(7) succeeds: headers, one gRPC message, trailers with status 0.
    let s1 = &seen.streams[&1];
    assert_eq!(
        s1.ended_by_headers,
        Some(true),
        "{name}: stream 1 must end with trailers: {s1:#?}"
    );
    assert_eq!(
        s1.header_blocks.len(),
        2,
        "{name}: stream 1 headers + trailers: {s1:#?}"
    );
    let (head, trailers) = (&s1.header_blocks[0], &s1.header_blocks[1]);
    assert_eq!(header(head, ":status"), Some("200"), "{name}: {head:?}");
    assert!(
        header(head, "content-type").is_some_and(|v| v.starts_with("application/grpc")),
        "{name}: {head:?}"
    );
    assert_eq!(
        header(trailers, "grpc-status"),
        Some("0"),
        "{name}: stream 1 trailers {trailers:?}"
    );
    let body: Vec<u8> = s1.data.concat();
    assert!(body.len() >= 5, "{name}: stream 1 body {body:02x?}");
    assert_eq!(body[0], 0, "{name}: response must not be compressed");
    let len = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
    assert_eq!(
        body.len(),
        5 + len,
        "{name}: exactly one gRPC message: {body:02x?}"
    );
    let resp = v1::GetDiskStatsResponse::decode(&body[5..]).expect("decoding GetDiskStatsResponse");
    assert_eq!(resp.total_bytes, 1 << 30, "{name}: {resp:?}");

    // Stream 3 (its `:authority` an indexed reference to stream 1's literal): GetDiskStats(8)
    // fails with NotFound as a trailers-only response.
    let s3 = &seen.streams[&3];
    assert_eq!(
        s3.ended_by_headers,
        Some(true),
        "{name}: stream 3 must end with trailers: {s3:#?}"
    );
    assert!(
        s3.data.iter().all(|d| d.is_empty()),
        "{name}: stream 3 carries no message: {s3:#?}"
    );
    assert_eq!(
        s3.header_blocks.len(),
        1,
        "{name}: stream 3 is a trailers-only response: {s3:#?}"
    );
    let only = &s3.header_blocks[0];
    assert_eq!(
        header(only, "grpc-status"),
        Some("5"),
        "{name}: stream 3 trailers {only:?}"
    );
    let msg = grpc_message(header(only, "grpc-message").unwrap_or_default());
    assert!(
        msg.contains("disk 8"),
        "{name}: grpc-message {msg:?} should mention disk 8"
    );
    assert_eq!(header(only, ":status"), Some("200"), "{name}: {s3:#?}");
}

#[tokio::test]
async fn percent_encoded_authority_answers_both_calls() {
    let name = "pipe-authority-percent-encoded.bin";
    check(name, &exchange(name).await);
}

#[tokio::test]
async fn raw_pipe_authority_answers_both_calls() {
    let name = "pipe-authority-raw.bin";
    check(name, &exchange(name).await);
}
