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
//! `placeholder::placeholder_payload`). No frame changes size, so `h2` applies its own limits
//! (frame size, CONTINUATION count, header-list size) to exactly the frames the client sent.
//!
//! To know which octets those are, the adapter follows the frame layer and HPACK as `h2`'s
//! decoder does, representation by representation, as bytes arrive. Of the dynamic table it
//! keeps only whether each entry's name is `:authority`, and the sizes. Bytes are handed on as soon as they are read,
//! except from the first payload octet of a candidate `:authority` value to its last: those are
//! held back (with any frame headers and padding in between) until the value can be judged.
//! `h2` cannot use an incomplete representation either, and buffers at least as much for it.
//! Wherever `h2` would end the connection (oversized frame, misplaced or excess CONTINUATION,
//! undecodable HPACK, …) the adapter releases what it holds and forwards everything after it
//! untouched, so `h2` sees the same bytes and reaches the same verdict.
//!
//! The same HPACK code also backs [`HeaderDecoder`], a plain header block decoder for tests
//! that read the server's raw frames.
//!
//! The pieces: [`AuthorityFix`] here (the byte-stream adapter: reads, hands octets on);
//! `follower` (the frame layer, and the I/O-free core that drives the rest); `mirror` (HPACK as
//! `h2` decodes it, and the verdict on each `:authority` value); `sink` (where each octet goes:
//! in place, held back, or queued); `placeholder` (same-length replacements); `hpack` (integers,
//! Huffman code, the table, [`HeaderDecoder`]). Frame headers and the preface come from
//! [`crate::frame`].

mod follower;
mod hpack;
mod mirror;
mod placeholder;
mod sink;
#[cfg(test)]
mod tests;

use pin_project_lite::pin_project;
use std::fmt;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use self::follower::FrameFollower;
pub use self::hpack::{HeaderDecoder, HpackError};

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
        follower: FrameFollower,
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
        AuthorityFix { io, follower: FrameFollower::new(limits), eof: false }
    }

    /// Number of `:authority` values replaced so far on this connection.
    pub fn rewrites(&self) -> u64 {
        self.follower.rewrites()
    }

    /// Whether the adapter has stopped interpreting the stream and only forwards bytes.
    pub fn is_bypassed(&self) -> bool {
        self.follower.is_bypassed()
    }

    /// Input octets the adapter holds right now: read from the connection but not yet handed
    /// on (a candidate `:authority` value and the framing around it, plus output not yet
    /// taken by the reader).
    pub fn buffered(&self) -> usize {
        self.follower.sink.held_len() + self.follower.sink.output.len()
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
            .field("rewrites", &self.follower.rewrites())
            .field("bypassed", &self.is_bypassed())
            .finish_non_exhaustive()
    }
}

impl<IO: AsyncRead> AsyncRead for AuthorityFix<IO> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let mut this = self.project();
        let follower = this.follower;
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if !follower.sink.output.is_empty() {
                let n = follower.sink.output.len().min(buf.remaining());
                buf.put_slice(&follower.sink.output.split_to(n));
                return Poll::Ready(Ok(()));
            }
            if *this.eof {
                // Whatever is still held goes out as it came: the server sees the same
                // truncated input it would have seen without us.
                follower.finish();
                if follower.sink.output.is_empty() {
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
                    let kept = follower.consume(&buf.filled()[start..end]);
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

/// Encoders, and a placeholder check, for building test and fuzz input.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod test_support {
    pub use super::hpack::encode_int;
    pub use super::hpack::huffman::huffman_encode;

    /// Whether a Huffman `:authority` of these lengths can be replaced in place.
    pub fn placeholder_exists(encoded_len: usize, decoded_len: usize) -> bool {
        super::placeholder::placeholder_payload(true, encoded_len, decoded_len).is_some()
    }
}
