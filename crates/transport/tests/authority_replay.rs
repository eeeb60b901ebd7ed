//! Replays what a real grpc-go client sends on a csi-proxy pipe into a real `h2` server, with
//! and without [`AuthorityFix`] in between. See `shared/fixtures/grpc-go/README.md`.

use bytes::Bytes;
use csi_proxy_transport::authority::AuthorityFix;
use csi_proxy_transport::frame::{self, PREFACE};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/fixtures/grpc-go/");
const RST_STREAM: u8 = frame::TYPE_RST_STREAM;
const GOAWAY: u8 = frame::TYPE_GOAWAY;
const PROTOCOL_ERROR: u32 = 0x1;

/// The `:authority` values the captured clients sent (see the fixture README).
const PERCENT_ENCODED: &str = "%5C%5C.%5C%5Cpipe%5C%5Ccsi-proxy-disk-v1";
const RAW: &str = r"\\.\\pipe\\csi-proxy-disk-v1";

/// Splits `bytes` into whole frames: (type, flags, stream, frame bytes); a trailing partial
/// frame is left out.
fn split_frames(bytes: &[u8]) -> Vec<(u8, u8, u32, &[u8])> {
    let mut at = 0;
    frame::frames(bytes)
        .map(|(h, payload)| {
            let whole = &bytes[at..at + frame::HEADER_LEN + payload.len()];
            at += whole.len();
            (h.kind, h.flags, h.stream, whole)
        })
        .collect()
}

/// The capture minus the RST_STREAM and GOAWAY frames the client sent only because the capturing
/// server never answered.
fn replay(name: &str) -> Vec<u8> {
    let path = format!("{FIXTURES}{name}");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("reading fixture {path}: {e}"));
    assert_eq!(&bytes[..24], PREFACE);
    let frames = split_frames(&bytes[24..]);
    let total: usize = frames.iter().map(|f| f.3.len()).sum();
    assert_eq!(24 + total, bytes.len(), "fixture ends in a partial frame");
    let mut out = PREFACE.to_vec();
    for (kind, _, _, frame) in frames {
        if kind != RST_STREAM && kind != GOAWAY {
            out.extend_from_slice(frame);
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// The server sent response HEADERS on the stream.
    Answered,
    /// The server reset the stream with this error code.
    Reset(u32),
}

#[derive(Debug)]
struct Seen {
    stream: u32,
    authority: Option<String>,
    path: String,
    body: Vec<u8>,
}

/// A minimal gRPC-ish h2 server: answers every request with a trailers-only response
/// (`grpc-status: 0`) once its body has been read, and records what it saw.
async fn serve<IO>(io: IO, seen: Arc<Mutex<Vec<Seen>>>)
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let Ok(mut conn) = h2::server::handshake(io).await else {
        return;
    };
    while let Some(Ok((req, mut respond))) = conn.accept().await {
        let seen = seen.clone();
        // Handlers run on their own tasks: the connection only makes progress while `accept`
        // is being polled.
        tokio::spawn(async move {
            let stream = respond.stream_id().as_u32();
            let authority = req.uri().authority().map(|a| a.as_str().to_owned());
            let path = req.uri().path().to_owned();
            let mut body = req.into_body();
            let mut data = Vec::new();
            while let Some(chunk) = body.data().await {
                let Ok(chunk) = chunk else { return };
                let _ = body.flow_control().release_capacity(chunk.len());
                data.extend_from_slice(&chunk);
            }
            seen.lock().unwrap().push(Seen { stream, authority, path, body: data });
            let response = http::Response::builder()
                .status(200)
                .header("content-type", "application/grpc")
                .header("grpc-status", "0")
                .body(())
                .unwrap();
            let _ = respond.send_response(response, true);
        });
    }
}

/// Sends `input` to a fresh h2 server (through the adapter if `fix`), and returns the outcome
/// the client observed for streams 1 and 3 plus what the server's handlers saw.
/// `pipe_capacity` 1 makes every read on the server side return a single byte.
async fn exchange(input: Vec<u8>, fix: bool, pipe_capacity: usize) -> (BTreeMap<u32, Outcome>, Vec<Seen>) {
    let (client, server_io) = tokio::io::duplex(pipe_capacity);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let server = {
        let seen = seen.clone();
        tokio::spawn(async move {
            if fix {
                serve(AuthorityFix::new(server_io), seen).await
            } else {
                serve(server_io, seen).await
            }
        })
    };
    let (mut rx, mut tx) = tokio::io::split(client);
    let writer = tokio::spawn(async move {
        tx.write_all(&input).await.unwrap();
        tx
    });

    let outcomes = tokio::time::timeout(Duration::from_secs(20), async {
        let mut outcomes = BTreeMap::new();
        let mut buf = Vec::new();
        let mut consumed = 0;
        let mut chunk = [0u8; 4096];
        while !(outcomes.contains_key(&1) && outcomes.contains_key(&3)) {
            let n = rx.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            for (kind, _, stream, frame) in split_frames(&buf[consumed..]) {
                consumed += frame.len();
                match kind {
                    0x1 => {
                        outcomes.entry(stream).or_insert(Outcome::Answered);
                    }
                    RST_STREAM => {
                        let code = u32::from_be_bytes([frame[9], frame[10], frame[11], frame[12]]);
                        outcomes.entry(stream).or_insert(Outcome::Reset(code));
                    }
                    _ => {}
                }
            }
        }
        outcomes
    })
    .await
    .expect("server did not settle streams 1 and 3 in time");

    // Closing the client ends the server's accept loop.
    let tx = writer.await.unwrap();
    drop((rx, tx));
    tokio::time::timeout(Duration::from_secs(20), server).await.expect("server did not shut down").unwrap();
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    (outcomes, seen)
}

fn expect_answered(outcomes: &BTreeMap<u32, Outcome>, mut seen: Vec<Seen>, original: &str) {
    assert_eq!(outcomes.get(&1), Some(&Outcome::Answered), "{outcomes:?}");
    assert_eq!(outcomes.get(&3), Some(&Outcome::Answered), "{outcomes:?}");
    seen.sort_by_key(|s| s.stream);
    assert_eq!(seen.len(), 2, "{seen:?}");
    for (s, (stream, disk)) in seen.iter().zip([(1, 7u8), (3, 8u8)]) {
        assert_eq!(s.stream, stream);
        // Stream 1 carried the literal, stream 3 an indexed reference to it: both now resolve
        // to the same valid placeholder of the original's length.
        assert_eq!(s.authority.as_ref().map(String::len), Some(original.len()));
        assert_eq!(s.authority, seen[0].authority);
        assert_eq!(s.path, "/v1.Disk/GetDiskStats");
        // gRPC message: uncompressed, length 2, field 1 (disk_number) varint.
        assert_eq!(s.body, vec![0, 0, 0, 0, 2, 0x08, disk]);
    }
}

fn expect_rejected(outcomes: &BTreeMap<u32, Outcome>, seen: Vec<Seen>) {
    assert_eq!(outcomes.get(&1), Some(&Outcome::Reset(PROTOCOL_ERROR)), "{outcomes:?}");
    assert_eq!(outcomes.get(&3), Some(&Outcome::Reset(PROTOCOL_ERROR)), "{outcomes:?}");
    assert!(seen.is_empty(), "{seen:?}");
}

#[tokio::test]
async fn percent_encoded_pipe_authority_is_accepted_with_fix() {
    let (outcomes, seen) = exchange(replay("pipe-authority-percent-encoded.bin"), true, 1 << 16).await;
    expect_answered(&outcomes, seen, PERCENT_ENCODED);
}

#[tokio::test]
async fn raw_pipe_authority_is_accepted_with_fix() {
    let (outcomes, seen) = exchange(replay("pipe-authority-raw.bin"), true, 1 << 16).await;
    expect_answered(&outcomes, seen, RAW);
}

#[tokio::test]
async fn pipe_authorities_are_rejected_without_fix() {
    for name in ["pipe-authority-percent-encoded.bin", "pipe-authority-raw.bin"] {
        let (outcomes, seen) = exchange(replay(name), false, 1 << 16).await;
        expect_rejected(&outcomes, seen);
    }
}

#[tokio::test]
async fn replay_one_byte_per_read_is_accepted_with_fix() {
    for (name, original) in [("pipe-authority-percent-encoded.bin", PERCENT_ENCODED), ("pipe-authority-raw.bin", RAW)] {
        let (outcomes, seen) = exchange(replay(name), true, 1).await;
        expect_answered(&outcomes, seen, original);
    }
}

#[tokio::test]
async fn replay_bytes_change_only_in_the_authority_literal() {
    for (name, original) in [("pipe-authority-percent-encoded.bin", PERCENT_ENCODED), ("pipe-authority-raw.bin", RAW)] {
        let input = replay(name);
        let mut fix = AuthorityFix::new(&input[..]);
        let mut out = Vec::new();
        fix.read_to_end(&mut out).await.unwrap();
        assert_eq!(fix.rewrites(), 1);
        assert!(!fix.is_bypassed());
        let before = split_frames(&input[24..]);
        let after = split_frames(&out[24..]);
        assert_eq!(before.len(), after.len());
        for (b, a) in before.iter().zip(&after) {
            if b.0 == 0x1 && b.2 == 1 {
                // The first HEADERS keeps its size and layout; only the value octets differ.
                assert_eq!((a.0, a.1, a.2, a.3.len()), (b.0, b.1, b.2, b.3.len()));
                assert_ne!(a.3, b.3, "{original}");
            } else {
                assert_eq!(a, b);
            }
        }
    }
}

/// An h2 client with a valid authority and many varied headers (plenty of Huffman-coded
/// strings, dynamic-table references and CONTINUATION frames): the adapter must hand the bytes
/// on exactly as they were written.
#[tokio::test]
async fn valid_authority_is_untouched_byte_for_byte() {
    let (client_io, mut wire) = tokio::io::duplex(1 << 20);
    let (mut send, conn) = h2::client::handshake(client_io).await.unwrap();
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    // An empty server SETTINGS frame, so the client has what it waits for.
    wire.write_all(&frame::EMPTY_SETTINGS).await.unwrap();

    let header_bytes: Vec<u8> = (0x20u8..=0x7e).chain(0x80..=0xff).collect();
    let requests = 3;
    // Keep the response futures and send streams alive: dropping them resets the stream.
    let mut in_flight = Vec::new();
    for i in 0..requests {
        send = send.ready().await.unwrap();
        let mut req = http::Request::builder()
            .method("POST")
            .uri("http://localhost:50051/v1.Disk/GetDiskStats")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("x-request", i.to_string());
        // Each byte value inside a run of short-code letters, so the encoder picks Huffman.
        for &b in &header_bytes {
            let mut v = vec![b'a'; 64];
            v.push(b);
            v.extend([b'e'; 64]);
            req = req.header(format!("x-byte-{b:02x}"), http::HeaderValue::from_bytes(&v).unwrap());
        }
        let (resp, mut stream) = send.send_request(req.body(()).unwrap(), false).unwrap();
        stream.send_data(Bytes::from_static(&[0, 0, 0, 0, 2, 0x08, 7]), true).unwrap();
        in_flight.push((resp, stream));
    }

    // Collect what the client wrote until every request body has ended.
    let mut captured = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        let mut chunk = [0u8; 8192];
        loop {
            let n = wire.read(&mut chunk).await.unwrap();
            assert!(n > 0, "client closed early");
            captured.extend_from_slice(&chunk[..n]);
            if captured.len() < 24 {
                continue;
            }
            let ended = split_frames(&captured[24..])
                .iter()
                .filter(|(kind, flags, _, _)| *kind == 0x0 && flags & 0x1 != 0)
                .count();
            if ended == requests {
                break;
            }
        }
    })
    .await
    .expect("client did not send its requests");
    driver.abort();

    let frames = split_frames(&captured[24..]);
    assert!(frames.iter().any(|f| f.0 == 0x9), "expected the big header blocks to need CONTINUATION frames");

    let mut fix = AuthorityFix::new(&captured[..]);
    let mut out = Vec::new();
    fix.read_to_end(&mut out).await.unwrap();
    assert_eq!(fix.rewrites(), 0);
    assert!(!fix.is_bypassed(), "adapter failed to follow valid HPACK");
    assert!(out == captured, "bytes changed");
}
