#![cfg(unix)]
//! Replays what real grpc-go clients sent when dialling a csi-proxy pipe (see
//! `shared/fixtures/grpc-go/README.md`) against the full daemon stack over a real unix socket:
//! transport (with its `:authority` fix), tonic, the v1 Disk service and the in-memory host.
//!
//! Each capture holds two unary `/v1.Disk/GetDiskStats` calls on one connection (disk 7, then
//! disk 8). Stream 1 carries an `:authority` that `http::uri::Authority` rejects as a literal,
//! stream 3 refers to it through the HPACK dynamic table. Both must be answered.

use csi_proxy_stack_tests::TestServer;
use csi_proxy_transport::authority::{HeaderDecoder, DEFAULT_HEADER_TABLE_SIZE};
use csi_proxy_transport::frame::{
    self, FLAG_END_HEADERS as END_HEADERS, FLAG_END_STREAM as END_STREAM, FLAG_PADDED as PADDED,
    FLAG_PRIORITY as PRIORITY, PREFACE, TYPE_CONTINUATION as CONTINUATION, TYPE_DATA as DATA, TYPE_GOAWAY as GOAWAY,
    TYPE_HEADERS as HEADERS, TYPE_RST_STREAM as RST_STREAM,
};
use csi_proxy_wire::{v1, Group};
use prost::Message;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/fixtures/grpc-go/");

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
        frame::write_frame(self.kind, self.flags, self.stream, &self.payload, out);
    }
}

/// Takes the whole frames off the front of `buf`, leaving a trailing partial frame in place.
fn take_frames(buf: &mut Vec<u8>) -> Vec<Frame> {
    let mut whole = frame::frames(buf);
    let frames: Vec<Frame> = whole
        .by_ref()
        .map(|(h, payload)| Frame { kind: h.kind, flags: h.flags, stream: h.stream, payload: payload.to_vec() })
        .collect();
    let used = buf.len() - whole.rest().len();
    buf.drain(..used);
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
    for f in frames.iter().filter(|f| f.kind != RST_STREAM && f.kind != GOAWAY) {
        f.encode(&mut out);
    }
    out
}

// ===== response headers =====

type Header = (String, String);

/// Decodes one complete header block from the server with the transport crate's HPACK decoder.
fn decode_headers(hpack: &mut HeaderDecoder, block: &[u8]) -> Vec<Header> {
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).expect("header strings are UTF-8 here");
    hpack
        .decode(block)
        .unwrap_or_else(|e| panic!("HPACK error {e} in header block {block:02x?}"))
        .iter()
        .map(|(n, v)| (text(n), text(v)))
        .collect()
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
        self.streams.get(&stream).is_some_and(|s| s.ended_by_headers.is_some() || s.rst.is_some())
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
    let sock = tokio::net::UnixStream::connect(s.socket(Group::Disk, "v1")).await.expect("connect");
    let (mut rx, mut tx) = sock.into_split();
    // Write on its own task so a server that answers before reading everything can't deadlock us.
    let writer = tokio::spawn(async move {
        tx.write_all(&input).await.expect("writing the capture");
        tx.flush().await.unwrap();
        tx // keep the write half open until the reader is done
    });

    let mut seen = Seen::default();
    // The captured client's SETTINGS frame is empty, so the default 4096 applies.
    let mut hpack = HeaderDecoder::new(DEFAULT_HEADER_TABLE_SIZE);
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
                            (kind, p) => {
                                panic!("unexpected frame type {kind} on stream {} (pending block {p:?})", f.stream)
                            }
                        };
                        if f.kind == CONTINUATION {
                            block.extend_from_slice(&f.payload);
                        }
                        if f.flags & END_HEADERS == 0 {
                            pending = Some((stream, flags, block));
                            continue;
                        }
                        let headers = decode_headers(&mut hpack, &block);
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
    block.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// Percent-decodes a `grpc-message` value.
fn grpc_message(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Some(x) = std::str::from_utf8(&b[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()) {
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
    assert!(seen.resets.is_empty(), "{name}: server reset streams {:?}; saw {seen:#?}", seen.resets);
    assert!(seen.goaways.iter().all(|&c| c == 0), "{name}: server sent GOAWAY with error {:?}", seen.goaways);

    // Stream 1: GetDiskStats(7) succeeds: headers, one gRPC message, trailers with status 0.
    let s1 = &seen.streams[&1];
    assert_eq!(s1.ended_by_headers, Some(true), "{name}: stream 1 must end with trailers: {s1:#?}");
    assert_eq!(s1.header_blocks.len(), 2, "{name}: stream 1 headers + trailers: {s1:#?}");
    let (head, trailers) = (&s1.header_blocks[0], &s1.header_blocks[1]);
    assert_eq!(header(head, ":status"), Some("200"), "{name}: {head:?}");
    assert!(header(head, "content-type").is_some_and(|v| v.starts_with("application/grpc")), "{name}: {head:?}");
    assert_eq!(header(trailers, "grpc-status"), Some("0"), "{name}: stream 1 trailers {trailers:?}");
    let body: Vec<u8> = s1.data.concat();
    assert!(body.len() >= 5, "{name}: stream 1 body {body:02x?}");
    assert_eq!(body[0], 0, "{name}: response must not be compressed");
    let len = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
    assert_eq!(body.len(), 5 + len, "{name}: exactly one gRPC message: {body:02x?}");
    let resp = v1::GetDiskStatsResponse::decode(&body[5..]).expect("decoding GetDiskStatsResponse");
    assert_eq!(resp.total_bytes, 1 << 30, "{name}: {resp:?}");

    // Stream 3 (its `:authority` an indexed reference to stream 1's literal): GetDiskStats(8)
    // fails with NotFound as a trailers-only response.
    let s3 = &seen.streams[&3];
    assert_eq!(s3.ended_by_headers, Some(true), "{name}: stream 3 must end with trailers: {s3:#?}");
    assert!(s3.data.iter().all(|d| d.is_empty()), "{name}: stream 3 carries no message: {s3:#?}");
    assert_eq!(s3.header_blocks.len(), 1, "{name}: stream 3 is a trailers-only response: {s3:#?}");
    let only = &s3.header_blocks[0];
    assert_eq!(header(only, "grpc-status"), Some("5"), "{name}: stream 3 trailers {only:?}");
    let msg = grpc_message(header(only, "grpc-message").unwrap_or_default());
    assert!(msg.contains("disk 8"), "{name}: grpc-message {msg:?} should mention disk 8");
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
