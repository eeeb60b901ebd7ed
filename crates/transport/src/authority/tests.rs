//! The adapter end to end: in-memory connections through [`AuthorityFix`], read in bulk and
//! one octet at a time.

use super::hpack::{encode_int, huffman_encode};
use super::*;
use crate::frame::{
    write_frame, FLAG_END_HEADERS, FLAG_PADDED, FLAG_PRIORITY, HEADER_LEN, PREFACE, TYPE_CONTINUATION, TYPE_HEADERS,
};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

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
