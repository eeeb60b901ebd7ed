//! The request body every service gets ([`CallBody`]), which notes how long the service has been
//! waiting for it, and the response body the transport sends ([`Answer`]): the service's, or an
//! empty gRPC answer when the transport ends a call itself.
//!
//! A call whose HEADERS arrived but whose body does not used to count as in flight forever, so
//! neither the idle nor the progress timeout closed its connection, and 256 such connections held
//! an endpoint. Now a call whose service has waited for its request body for `-progress-timeout`
//! in all (unary requests), or without a frame for that long (a streaming request: reflection), is
//! answered CANCELLED and its stream reset: its connection has no call in flight again, so the idle
//! timeout and eviction apply to it.
//!
//! A unary request's end is held back from the service until the transport lets it through
//! ([`BodyWait::open`], once the call has its permit, see [`crate::calls`]): the service, which
//! reads a unary request to its end before it runs the call, starts no work before that.

use bytes::Bytes;
use csi_proxy_sync::LockExt;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

pin_project_lite::pin_project! {
    /// A request body as it arrives (hyper's), and how long the service has waited for it.
    pub struct CallBody {
        #[pin]
        inner: Incoming,
        wait: Arc<BodyWait>,
        // The last poll's result, held until the gate opens (gated bodies only).
        held: Option<Option<Result<Frame<Bytes>, hyper::Error>>>,
    }
}

impl std::fmt::Debug for CallBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallBody").finish_non_exhaustive()
    }
}

impl CallBody {
    /// A body for `inner`; a `gated` one holds back its end until [`BodyWait::open`].
    pub(crate) fn new(inner: Incoming, gated: bool) -> (Self, Arc<BodyWait>) {
        let wait = Arc::new(BodyWait { gated, ..BodyWait::default() });
        (CallBody { inner, wait: wait.clone(), held: None }, wait)
    }
}

impl Body for CallBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let mut this = self.project();
        if this.held.is_none() {
            let r = match this.inner.as_mut().poll_frame(cx) {
                Poll::Pending => {
                    this.wait.waiting();
                    return Poll::Pending;
                }
                Poll::Ready(r) => r,
            };
            let ended = !matches!(r, Some(Ok(_))) || this.inner.is_end_stream();
            this.wait.arrived(ended);
            // An error goes through at once: the service fails the call without running it.
            if !ended || !this.wait.gated || matches!(r, Some(Err(_))) {
                return Poll::Ready(r);
            }
            *this.held = Some(r);
        }
        if this.wait.let_through(cx) {
            Poll::Ready(this.held.take().expect("held above"))
        } else {
            Poll::Pending
        }
    }

    fn is_end_stream(&self) -> bool {
        // Never "ended" while the end is held back, or a service could skip polling to it.
        self.held.is_none() && !self.wait.shut() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// How long a service has waited for a request body, and the gate that holds back its end.
#[derive(Debug, Default)]
pub(crate) struct BodyWait {
    state: Mutex<WaitState>,
    started: Notify,
    /// Whether the body's end is held back until [`BodyWait::open`].
    gated: bool,
    gate: Mutex<Gate>,
    ended: Notify,
}

#[derive(Debug, Default)]
struct Gate {
    open: bool,
    waker: Option<std::task::Waker>,
}

#[derive(Debug, Default)]
struct WaitState {
    /// Since when the service has been waiting (its last poll found no frame).
    since: Option<Instant>,
    /// Time waited before `since`.
    waited: Duration,
    ended: bool,
}

impl BodyWait {
    fn waiting(&self) {
        let mut s = self.state.lock_ignoring_poison();
        if s.since.is_none() && !s.ended {
            s.since = Some(Instant::now());
            drop(s);
            self.started.notify_waiters();
        }
    }

    fn arrived(&self, ended: bool) {
        let mut s = self.state.lock_ignoring_poison();
        if let Some(t) = s.since.take() {
            s.waited += t.elapsed();
        }
        s.ended |= ended;
        drop(s);
        if ended {
            self.ended.notify_waiters();
        }
    }

    /// Completes once the whole request has arrived (its end is then held back if gated).
    pub(crate) async fn request_arrived(&self) {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.state.lock_ignoring_poison().ended {
                return;
            }
            ended.await;
        }
    }

    /// Lets the held-back end of the request through to the service.
    pub(crate) fn open(&self) {
        let mut g = self.gate.lock_ignoring_poison();
        g.open = true;
        if let Some(w) = g.waker.take() {
            w.wake();
        }
    }

    /// Whether the end may go through now; if not, `cx` is woken when it may.
    fn let_through(&self, cx: &mut Context<'_>) -> bool {
        let mut g = self.gate.lock_ignoring_poison();
        if !g.open {
            g.waker = Some(cx.waker().clone());
        }
        g.open
    }

    /// A gated body whose gate is still shut.
    fn shut(&self) -> bool {
        self.gated && !self.gate.lock_ignoring_poison().open
    }

    /// Completes once the service has waited `limit` for the body: in all if `cumulative`, else
    /// without a frame arriving. Never completes once the body has ended.
    pub(crate) async fn stalled(&self, limit: Duration, cumulative: bool) {
        loop {
            let started = self.started.notified();
            tokio::pin!(started);
            started.as_mut().enable();
            let left = {
                let s = self.state.lock_ignoring_poison();
                match s.since {
                    Some(t) if !s.ended => {
                        let before = if cumulative { s.waited } else { Duration::ZERO };
                        Some(limit.saturating_sub(before + t.elapsed()))
                    }
                    _ => None,
                }
            };
            match left {
                Some(d) if d.is_zero() => return,
                Some(d) => tokio::select! {
                    _ = tokio::time::sleep(d) => {}
                    _ = started => {}
                },
                None => started.await,
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// What a call answers: the service's body, or nothing (a trailers-only gRPC answer the
    /// transport makes itself).
    #[project = AnswerProj]
    pub enum Answer<B> {
        Service { #[pin] body: B },
        Empty,
    }
}

impl<B> Body for Answer<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project() {
            AnswerProj::Service { body } => body.poll_frame(cx).map(|f| f.map(|r| r.map_err(Into::into))),
            AnswerProj::Empty => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Answer::Service { body } => body.is_end_stream(),
            Answer::Empty => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Answer::Service { body } => body.size_hint(),
            Answer::Empty => SizeHint::with_exact(0),
        }
    }
}

/// A trailers-only gRPC answer with `code` and `message` (ASCII, so nothing needs escaping).
pub(crate) fn grpc_status<B>(code: u16, message: &'static str) -> http::Response<Answer<B>> {
    let mut r = http::Response::new(Answer::Empty);
    let h = r.headers_mut();
    h.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
    h.insert("grpc-status", http::HeaderValue::from(code));
    h.insert("grpc-message", http::HeaderValue::from_static(message));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn waiting_is_summed_for_unary_requests_and_not_for_streams() {
        let w = BodyWait::default();
        let limit = Duration::from_secs(10);
        // Not waiting: never stalled.
        assert!(tokio::time::timeout(limit * 3, w.stalled(limit, true)).await.is_err());
        w.waiting();
        tokio::time::advance(Duration::from_secs(6)).await;
        w.arrived(false);
        w.waiting();
        let start = Instant::now();
        tokio::time::timeout(limit, w.stalled(limit, true)).await.expect("stalled after 10 s in all");
        assert_eq!(start.elapsed(), Duration::from_secs(4));
        // A stream: only the wait since the last frame counts.
        let start = Instant::now();
        w.stalled(limit, false).await;
        assert_eq!(start.elapsed(), Duration::from_secs(6));
        w.arrived(true);
        w.waiting();
        assert!(tokio::time::timeout(limit * 3, w.stalled(limit, true)).await.is_err(), "ended");
    }
}
