//! The one call at a time whose host work runs on the async worker that serves it, saving the two
//! thread hand-offs of the pool (to a pool thread and back), which cost more than a stat. Only
//! quick calls that hold no lock, and only on a runtime of two workers or more: host work that
//! hangs here holds one worker (the others, and the pool, serve on), and only one, since every
//! other call meanwhile uses the pool.
//!
//! While other calls are in flight, a worker busy with host work is not reading, writing or
//! handing out theirs: then only host work that has lately been cheaper than a hand-off
//! ([`QUICK_ENOUGH`], a running average of what the inline calls took) runs here. Under Wine,
//! where a stat is several round trips to the wineserver, that keeps busy servers on the pool.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Host work at most this long (on average) runs inline even while other calls are in flight.
const QUICK_ENOUGH: Duration = Duration::from_micros(20);

/// A server's inline slot and the count of its calls in flight (one per [`crate::Context`]).
#[derive(Default)]
pub(crate) struct Inline {
    busy: AtomicBool,
    /// Running average of the inline calls' host work, in ns (written only by the slot's holder).
    cost_ns: AtomicU64,
    /// Calls between their request and their answer.
    in_flight: AtomicUsize,
}

/// The slot, held while one call's host work runs inline.
pub(crate) struct InlineSlot<'a> {
    inline: &'a Inline,
    started: Instant,
}

/// Counts a call in flight until dropped (also when the call is cancelled).
pub(crate) struct Flying<'a>(&'a Inline);

impl Inline {
    pub(crate) fn flying(&self) -> Flying<'_> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        Flying(self)
    }

    /// The slot, if a quick call may run inline now.
    pub(crate) fn take(&self) -> Option<InlineSlot<'_>> {
        let workers = tokio::runtime::Handle::try_current().map_or(0, |h| h.metrics().num_workers());
        if workers < 2 {
            return None;
        }
        let alone = self.in_flight.load(Ordering::Relaxed) <= 1;
        if !alone && self.cost_ns.load(Ordering::Relaxed) > QUICK_ENOUGH.as_nanos() as u64 {
            return None;
        }
        self.busy.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).ok()?;
        Some(InlineSlot { inline: self, started: Instant::now() })
    }
}

impl Drop for InlineSlot<'_> {
    fn drop(&mut self) {
        let took = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let average = self.inline.cost_ns.load(Ordering::Relaxed);
        // Each new sample counts for an eighth: the average follows the last few dozen calls.
        let average = average - average / 8 + took / 8;
        self.inline.cost_ns.store(average, Ordering::Relaxed);
        self.inline.busy.store(false, Ordering::Release);
    }
}

impl Drop for Flying<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}
