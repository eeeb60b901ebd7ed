//! Per-connection limits: timeouts and the in-flight count they respect.
//!
//! - **Handshake**: the HTTP/2 preface and the client's first frame must arrive within the
//!   handshake timeout of accept. Upstream's Go client opens one connection per client only to
//!   check that the pipe exists and never uses it; such a connection is dropped then.
//! - **Progress**: once a frame has started arriving, the rest must follow within the progress
//!   timeout (a client trickling a byte every few seconds is dropped), and a write the client
//!   does not take (it stopped reading) may wait at most that long.
//! - **Idle**: a connection with no call in flight for the idle timeout is closed gracefully by
//!   the server loop (HTTP/2 GOAWAY, then calls that raced it finish), not here.
//!
//! Handshake and progress failures surface as `TimedOut` errors from [`Watched`], which ends
//! the HTTP/2 connection at once: those peers are broken or hostile.

use csi_proxy_sync::LockExt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::frame::Boundaries;

/// Timeouts applied to every accepted connection; zero disables a timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnPolicy {
    /// Time allowed between accept and the end of the client's HTTP/2 preface and first frame.
    pub handshake_timeout: Duration,
    /// Time allowed with no call in flight before the connection is closed gracefully.
    pub idle_timeout: Duration,
}

impl Default for ConnPolicy {
    fn default() -> Self {
        ConnPolicy { handshake_timeout: Duration::from_secs(10), idle_timeout: Duration::from_secs(300) }
    }
}

/// Stands in for "never": far enough to never fire, near enough not to overflow `Instant`.
const NEVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

pub(crate) fn effective(d: Duration) -> Duration {
    if d.is_zero() {
        NEVER
    } else {
        d
    }
}

/// Calls a connection is currently handling, and when the last one ended; shared with the
/// request path.
#[derive(Debug, Clone)]
pub struct InFlight(Arc<InFlightInner>);

#[derive(Debug)]
struct InFlightInner {
    count: AtomicUsize,
    last_end: Mutex<Instant>,
}

impl Default for InFlight {
    fn default() -> Self {
        InFlight(Arc::new(InFlightInner { count: AtomicUsize::new(0), last_end: Mutex::new(Instant::now()) }))
    }
}

impl InFlight {
    /// Marks one call as in flight until the returned guard is dropped.
    pub fn enter(&self) -> InFlightGuard {
        self.0.count.fetch_add(1, Ordering::AcqRel);
        InFlightGuard(self.0.clone())
    }

    pub fn count(&self) -> usize {
        self.0.count.load(Ordering::Acquire)
    }

    /// When the connection became idle (no call in flight): `None` while a call is in flight.
    pub fn idle_since(&self) -> Option<Instant> {
        let last = *self.0.last_end.lock_ignoring_poison();
        (self.count() == 0).then_some(last)
    }
}

pub struct InFlightGuard(Arc<InFlightInner>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        *self.0.last_end.lock_ignoring_poison() = Instant::now();
        self.0.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Timeouts a [`Watched`] connection enforces; zero disables one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Watch {
    pub handshake: Duration,
    pub progress: Duration,
}

/// Wraps a connection and fails its reads or writes with `TimedOut` when the client misses
/// the handshake or stops making progress (see the module documentation).
pub struct Watched<IO> {
    io: IO,
    watch: Watch,
    frames: Boundaries,
    /// Until the handshake is done: its deadline; then the deadline of the frame arriving.
    read_deadline: Option<Pin<Box<Sleep>>>,
    handshake_done: bool,
    /// Told when the handshake is done (the admission table evicts those that never finish it).
    handshake_flag: Option<Arc<std::sync::atomic::AtomicBool>>,
    write_deadline: Option<Pin<Box<Sleep>>>,
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_string())
}

impl<IO> Watched<IO> {
    pub(crate) fn new(io: IO, watch: Watch) -> Self {
        Watched {
            io,
            watch,
            frames: Boundaries::default(),
            read_deadline: Some(Box::pin(tokio::time::sleep(effective(watch.handshake)))),
            handshake_done: false,
            handshake_flag: None,
            write_deadline: None,
        }
    }

    /// Sets `flag` once the handshake is done.
    pub(crate) fn with_handshake_flag(mut self, flag: Arc<std::sync::atomic::AtomicBool>) -> Self {
        self.handshake_flag = Some(flag);
        self
    }

    /// Polls `deadline` (set to `after` from now if unset); true once it has passed.
    fn expired(deadline: &mut Option<Pin<Box<Sleep>>>, after: Duration, cx: &mut Context<'_>) -> bool {
        let d = deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep(effective(after))));
        d.as_mut().poll(cx).is_ready()
    }

    fn wrote(&mut self, r: &Poll<io::Result<usize>>, cx: &mut Context<'_>) -> Option<io::Error> {
        match r {
            Poll::Ready(Ok(n)) if *n > 0 => self.write_deadline = None,
            Poll::Pending if Self::expired(&mut self.write_deadline, self.watch.progress, cx) => {
                tracing::debug!(
                    timeout_ms = self.watch.progress.as_secs_f64() * 1000.0,
                    "closing a connection whose client takes no data"
                );
                return Some(timed_out("the client took no data within the progress timeout"));
            }
            _ => {}
        }
        None
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(r) => {
                this.frames.feed(&buf.filled()[before..]);
                if !this.handshake_done && this.frames.complete() > 0 {
                    this.handshake_done = true;
                    this.read_deadline = None;
                    if let Some(flag) = &this.handshake_flag {
                        flag.store(true, Ordering::Release);
                    }
                }
                if this.handshake_done && !this.frames.mid_frame() {
                    this.read_deadline = None;
                }
                Poll::Ready(r)
            }
            Poll::Pending => {
                if this.handshake_done && !this.frames.mid_frame() {
                    return Poll::Pending; // between frames: the idle timeout's business
                }
                let after = this.watch.progress;
                if Self::expired(&mut this.read_deadline, after, cx) {
                    let what = if this.handshake_done {
                        "the client did not finish a frame within the progress timeout"
                    } else {
                        "the client did not complete the HTTP/2 handshake in time"
                    };
                    tracing::debug!(reason = what, "closing a connection");
                    return Poll::Ready(Err(timed_out(what)));
                }
                Poll::Pending
            }
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, data);
        match self.wrote(&r, cx) {
            Some(e) => Poll::Ready(Err(e)),
            None => r,
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        match self.wrote(&r, cx) {
            Some(e) => Poll::Ready(Err(e)),
            None => r,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        let progress = self.watch.progress;
        if r.is_pending() && Self::expired(&mut self.write_deadline, progress, cx) {
            return Poll::Ready(Err(timed_out("the client took no data within the progress timeout")));
        }
        if r.is_ready() {
            self.write_deadline = None;
        }
        r
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_shutdown(cx);
        let progress = self.watch.progress;
        if r.is_pending() && Self::expired(&mut self.write_deadline, progress, cx) {
            return Poll::Ready(Err(timed_out("the client took no data within the progress timeout")));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const WATCH: Watch = Watch { handshake: Duration::from_secs(10), progress: Duration::from_secs(5) };
    use crate::frame::{write_frame, EMPTY_SETTINGS, PREFACE, TYPE_PING};

    async fn read_all(g: &mut Watched<tokio::io::DuplexStream>) -> io::Result<usize> {
        let mut b = [0u8; 64];
        let mut total = 0;
        loop {
            match g.read(&mut b).await? {
                0 => return Ok(total),
                n => total += n,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn silent_connection_fails_at_the_handshake_timeout() {
        let (_client, server) = tokio::io::duplex(64);
        let mut g = Watched::new(server, WATCH);
        let start = Instant::now();
        let e = read_all(&mut g).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(start.elapsed(), WATCH.handshake);
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickled_preface_fails_at_the_handshake_timeout() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut g = Watched::new(server, WATCH);
        let start = Instant::now();
        let reader = tokio::spawn(async move { (read_all(&mut g).await, Instant::now()) });
        for &b in PREFACE {
            if client.write_all(&[b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let (r, at) = reader.await.unwrap();
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert_eq!(at - start, WATCH.handshake);
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickled_frame_fails_at_the_progress_timeout_and_idle_gaps_do_not() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut g = Watched::new(server, WATCH);
        client.write_all(PREFACE).await.unwrap();
        client.write_all(&EMPTY_SETTINGS).await.unwrap();
        let reader = tokio::spawn(async move { (read_all(&mut g).await, Instant::now()) });
        // Whole frames far apart are fine: waiting between frames is not this timeout's job.
        for _ in 0..3 {
            tokio::time::sleep(WATCH.progress * 3).await;
            client.write_all(&EMPTY_SETTINGS).await.unwrap();
        }
        assert!(!reader.is_finished());
        // A frame that starts and then trickles is not.
        let start = Instant::now();
        let mut ping = Vec::new();
        write_frame(TYPE_PING, 0, 0, &[1, 2, 3, 4, 5, 6, 7, 8], &mut ping);
        for &b in &ping {
            if client.write_all(&[b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let (r, at) = reader.await.unwrap();
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert!(at - start <= WATCH.progress, "{:?}", at - start);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_does_not_read_fails_writes_at_the_progress_timeout() {
        let (_client, server) = tokio::io::duplex(16);
        let mut g = Watched::new(server, WATCH);
        let start = Instant::now();
        let e = g.write_all(&[7u8; 1000]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(start.elapsed(), WATCH.progress);
    }

    #[tokio::test(start_paused = true)]
    async fn zero_disables_the_timeouts() {
        let (mut client, server) = tokio::io::duplex(16);
        let mut g = Watched::new(server, Watch { handshake: Duration::ZERO, progress: Duration::ZERO });
        client.write_all(&PREFACE[..3]).await.unwrap();
        let mut b = [0u8; 8];
        assert_eq!(g.read(&mut b).await.unwrap(), 3);
        let long = Duration::from_secs(10 * 365 * 24 * 3600);
        assert!(tokio::time::timeout(long, g.read(&mut b)).await.is_err());
        assert!(tokio::time::timeout(long, g.write_all(&[0; 100])).await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn in_flight_tracks_when_the_last_call_ended() {
        let f = InFlight::default();
        let g = f.enter();
        assert_eq!(f.idle_since(), None);
        tokio::time::sleep(Duration::from_secs(3)).await;
        drop(g);
        assert_eq!(f.idle_since(), Some(Instant::now()));
    }
}
