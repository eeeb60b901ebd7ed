//! Per-connection timeouts.
//!
//! Upstream's Go client opens one connection per client only to check that the pipe exists and
//! never uses or closes it. Such a connection costs one task here and never delays anyone, but it
//! must not live forever: a connection that has not sent a byte within the handshake timeout is
//! closed. A connection that goes quiet later is closed after the idle timeout, but never while
//! one of its calls is still being handled (a format or resize may take minutes with no bytes
//! moving).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Timeouts applied to every accepted connection; zero disables a timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnPolicy {
    /// Time allowed between accept and the first byte from the client.
    pub handshake_timeout: Duration,
    /// Time allowed without any traffic while no call is in flight.
    pub idle_timeout: Duration,
}

/// Stands in for "never": far enough to never fire, near enough not to overflow `Instant`.
const NEVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

fn effective(d: Duration) -> Duration {
    if d.is_zero() {
        NEVER
    } else {
        d
    }
}

impl Default for ConnPolicy {
    fn default() -> Self {
        ConnPolicy { handshake_timeout: Duration::from_secs(10), idle_timeout: Duration::from_secs(300) }
    }
}

/// Number of calls a connection is currently handling; shared with the request path.
#[derive(Debug, Clone, Default)]
pub struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    /// Marks one call as in flight until the returned guard is dropped.
    pub fn enter(&self) -> InFlightGuard {
        self.0.fetch_add(1, Ordering::AcqRel);
        InFlightGuard(self.0.clone())
    }

    pub fn count(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

pub struct InFlightGuard(Arc<AtomicUsize>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Wraps a connection and ends it (as end-of-file on the read side) when a timeout of its
/// [`ConnPolicy`] expires.
pub struct IdleGuard<IO> {
    io: IO,
    policy: ConnPolicy,
    in_flight: InFlight,
    seen_bytes: bool,
    expired: bool,
    // Boxed so that the guard stays Unpin, as hyper wants its IO.
    deadline: Pin<Box<Sleep>>,
}

impl<IO> IdleGuard<IO> {
    pub fn new(io: IO, policy: ConnPolicy, in_flight: InFlight) -> Self {
        IdleGuard {
            io,
            policy,
            in_flight,
            seen_bytes: false,
            expired: false,
            deadline: Box::pin(tokio::time::sleep(effective(policy.handshake_timeout))),
        }
    }

    fn touch(&mut self) {
        self.seen_bytes = true;
        self.deadline.as_mut().reset(Instant::now() + effective(self.policy.idle_timeout));
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for IdleGuard<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.expired {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        if let Poll::Ready(r) = Pin::new(&mut this.io).poll_read(cx, buf) {
            if buf.filled().len() > before {
                this.touch();
            }
            return Poll::Ready(r);
        }
        if this.deadline.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        if this.seen_bytes && this.in_flight.count() > 0 {
            // Busy, not idle: look again after another idle period.
            this.deadline.as_mut().reset(Instant::now() + effective(this.policy.idle_timeout));
            let _ = this.deadline.as_mut().poll(cx);
            return Poll::Pending;
        }
        tracing::debug!(handshake = !this.seen_bytes, "closing a connection that stayed silent past its timeout");
        this.expired = true;
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for IdleGuard<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.io).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) && this.seen_bytes {
            this.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) && this.seen_bytes {
            this.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const POLICY: ConnPolicy =
        ConnPolicy { handshake_timeout: Duration::from_secs(10), idle_timeout: Duration::from_secs(60) };

    #[tokio::test(start_paused = true)]
    async fn silent_connection_ends_after_handshake_timeout() {
        let (_client, server) = tokio::io::duplex(64);
        let mut g = IdleGuard::new(server, POLICY, InFlight::default());
        let start = Instant::now();
        let mut b = [0u8; 8];
        assert_eq!(g.read(&mut b).await.unwrap(), 0);
        assert_eq!(start.elapsed(), POLICY.handshake_timeout);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_connection_ends_but_not_while_a_call_is_in_flight() {
        let (mut client, server) = tokio::io::duplex(64);
        let in_flight = InFlight::default();
        let mut g = IdleGuard::new(server, POLICY, in_flight.clone());
        client.write_all(b"x").await.unwrap();
        let mut b = [0u8; 8];
        assert_eq!(g.read(&mut b).await.unwrap(), 1);

        let call = in_flight.enter();
        let start = Instant::now();
        let read = tokio::spawn(async move {
            let n = g.read(&mut b).await.unwrap();
            (n, Instant::now())
        });
        tokio::time::sleep(POLICY.idle_timeout * 3).await;
        assert!(!read.is_finished(), "closed while a call was in flight");
        drop(call);
        let (n, at) = read.await.unwrap();
        assert_eq!(n, 0);
        assert!(at - start >= POLICY.idle_timeout * 3);
        assert!(at - start <= POLICY.idle_timeout * 5);
    }

    #[tokio::test(start_paused = true)]
    async fn zero_disables_the_timeouts() {
        let (_client, server) = tokio::io::duplex(64);
        let policy = ConnPolicy { handshake_timeout: Duration::ZERO, idle_timeout: Duration::ZERO };
        let mut g = IdleGuard::new(server, policy, InFlight::default());
        let mut b = [0u8; 8];
        let r = tokio::time::timeout(Duration::from_secs(10 * 365 * 24 * 3600), g.read(&mut b)).await;
        assert!(r.is_err(), "a disabled timeout closed the connection");
    }

    #[tokio::test(start_paused = true)]
    async fn traffic_postpones_the_idle_timeout() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut g = IdleGuard::new(server, POLICY, InFlight::default());
        let reader = tokio::spawn(async move {
            let mut total = 0;
            let mut b = [0u8; 8];
            loop {
                let n = g.read(&mut b).await.unwrap();
                if n == 0 {
                    return (total, Instant::now());
                }
                total += n;
            }
        });
        let start = Instant::now();
        for _ in 0..5 {
            client.write_all(b"y").await.unwrap();
            tokio::time::sleep(POLICY.idle_timeout / 2).await;
        }
        let (total, at) = reader.await.unwrap();
        assert_eq!(total, 5);
        assert!(at - start >= POLICY.idle_timeout * 2, "closed too early");
    }
}
