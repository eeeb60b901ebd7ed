//! Fair call permits: how many calls each principal may have in flight.
//!
//! A call takes a permit only once its request has arrived whole (the transport's request body
//! holds back its end until then, see [`crate::body`]), so a call whose HEADERS came but whose
//! body does not holds nothing. At most `limit` calls are in flight over all endpoints. While
//! permits are free, a principal below its fair share (`limit` divided among the principals with
//! calls in flight or waiting, [`crate::admission::fair_share`]) takes one at once; one at or
//! above its share is refused at once when none is free ([`Refusal::CallerShare`]). A principal
//! below its share that finds none free waits, counted as present, so the others' shares shrink
//! and a freed permit goes to it and not back to the holder above its share; it waits at most
//! the given time ([`Refusal::NoneFreed`]). No call in flight is ever ended to make room.

use crate::admission::{fair_share, CallerKey};
use csi_proxy_sync::LockExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// The permits of one [`crate::serve`] or [`crate::serve_apis`].
#[derive(Debug)]
pub(crate) struct Calls {
    limit: usize,
    state: Mutex<State>,
    freed: Notify,
}

#[derive(Debug, Default)]
struct State {
    total: usize,
    /// Calls in flight per principal (no zero entries).
    held: HashMap<CallerKey, usize>,
    /// Calls waiting for a permit per principal (no zero entries).
    waiting: HashMap<CallerKey, usize>,
}

impl State {
    fn principals(&self, key: &CallerKey) -> usize {
        let others = self.held.keys().chain(self.waiting.keys().filter(|k| !self.held.contains_key(*k)));
        let n = others.count();
        n + usize::from(!self.held.contains_key(key) && !self.waiting.contains_key(key))
    }

    fn bump(map: &mut HashMap<CallerKey, usize>, key: &CallerKey, up: bool) {
        if up {
            *map.entry(key.clone()).or_default() += 1;
        } else if let Some(n) = map.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                map.remove(key);
            }
        }
    }
}

/// Why a call got no permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// None was free and the caller holds its fair share.
    CallerShare,
    /// None was freed within the wait.
    NoneFreed,
}

impl Refusal {
    /// The metric's reason label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::CallerShare => "too_many_calls",
            Refusal::NoneFreed => "no_call_slot",
        }
    }

    /// The gRPC message (ASCII).
    pub fn message(self) -> &'static str {
        match self {
            Refusal::CallerShare => {
                "too many calls in flight from this caller (its fair share of the daemon's); try again"
            }
            Refusal::NoneFreed => "too many calls in flight: none ended within the progress timeout; try again",
        }
    }
}

/// A call's permit; dropping it frees it.
#[derive(Debug)]
pub(crate) struct Permit {
    calls: Arc<Calls>,
    key: CallerKey,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut s = self.calls.state.lock_ignoring_poison();
        s.total -= 1;
        State::bump(&mut s.held, &self.key, false);
        drop(s);
        self.calls.freed.notify_waiters();
    }
}

enum Try {
    Took(Permit),
    Refused,
    Wait,
}

impl Calls {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Calls { limit: limit.max(1), state: Mutex::default(), freed: Notify::new() })
    }

    fn try_take(self: &Arc<Self>, key: &CallerKey, waiting: bool) -> Try {
        let mut s = self.state.lock_ignoring_poison();
        let mine = s.held.get(key).copied().unwrap_or(0);
        let fair = fair_share(self.limit, s.principals(key));
        if s.total < self.limit && mine < fair {
            s.total += 1;
            State::bump(&mut s.held, key, true);
            if waiting {
                State::bump(&mut s.waiting, key, false);
            }
            return Try::Took(Permit { calls: self.clone(), key: key.clone() });
        }
        if mine >= fair {
            if waiting {
                State::bump(&mut s.waiting, key, false);
            }
            return Try::Refused;
        }
        if !waiting {
            State::bump(&mut s.waiting, key, true);
        }
        Try::Wait
    }

    /// A permit for a call of `key`, waiting at most `wait` for one to be freed.
    pub async fn take(self: &Arc<Self>, key: &CallerKey, wait: Duration) -> Result<Permit, Refusal> {
        let mut waiting = Waiting { calls: self, key, on: false };
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match self.try_take(key, waiting.on) {
                Try::Took(p) => {
                    waiting.on = false;
                    return Ok(p);
                }
                Try::Refused => {
                    waiting.on = false;
                    return Err(Refusal::CallerShare);
                }
                Try::Wait => waiting.on = true,
            }
            tokio::select! {
                _ = freed => {}
                _ = tokio::time::sleep_until(deadline) => return Err(Refusal::NoneFreed),
            }
        }
    }

    #[cfg(test)]
    fn in_flight(&self, key: &CallerKey) -> usize {
        self.state.lock_ignoring_poison().held.get(key).copied().unwrap_or(0)
    }
}

/// Counts a waiting call as present until it takes a permit, is refused or is dropped (its
/// client left).
struct Waiting<'a> {
    calls: &'a Arc<Calls>,
    key: &'a CallerKey,
    on: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.on {
            let mut s = self.calls.state.lock_ignoring_poison();
            State::bump(&mut s.waiting, self.key, false);
            drop(s);
            // The others' shares grew back.
            self.calls.freed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn a_lone_caller_takes_every_permit_and_then_is_refused() {
        let c = Calls::new(8);
        let a = CallerKey::Uid(1);
        let held: Vec<_> = futures(&c, &a, 8).await;
        assert_eq!(c.take(&a, WAIT).await.unwrap_err(), Refusal::CallerShare);
        drop(held);
        c.take(&a, WAIT).await.unwrap();
    }

    /// 1, 2, 3 and 10 callers holding every permit between them: a newcomer is never refused; it
    /// waits for the first permit freed, which no caller above its share can take back.
    #[tokio::test(start_paused = true)]
    async fn the_kth_caller_is_never_locked_out_by_the_others() {
        for attackers in [1usize, 2, 3, 10] {
            let c = Calls::new(60);
            let mut held = Vec::new();
            for i in 0..attackers {
                let key = CallerKey::Uid(1000 + i as u32);
                // Each takes what it can: the first all that is free, later ones their share.
                while let Ok(Ok(p)) = tokio::time::timeout(Duration::from_millis(1), c.take(&key, Duration::ZERO)).await
                {
                    held.push(p);
                }
            }
            assert_eq!(held.len(), 60, "{attackers} attackers");
            let victim = CallerKey::Uid(0);
            let c2 = c.clone();
            let waiter = tokio::spawn(async move { c2.take(&victim, WAIT).await });
            tokio::task::yield_now().await;
            // While the victim waits, the attackers' retries are refused: their shares shrank.
            let first = CallerKey::Uid(1000);
            let p = held.iter().position(|p| p.key == first).unwrap();
            drop(held.remove(p));
            assert_eq!(c.take(&first, WAIT).await.unwrap_err(), Refusal::CallerShare, "{attackers} attackers");
            let got = waiter.await.unwrap().expect("the victim's permit");
            assert_eq!((&got.key, c.in_flight(&got.key)), (&CallerKey::Uid(0), 1), "{attackers} attackers");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_call_gives_up_after_its_wait_and_leaves_nothing() {
        let c = Calls::new(2);
        let hog = CallerKey::Uid(1);
        let _held = futures(&c, &hog, 2).await;
        let victim = CallerKey::Uid(2);
        assert_eq!(c.take(&victim, WAIT).await.unwrap_err(), Refusal::NoneFreed);
        // The victim no longer counts as present: the hog's share is all again, but none is free.
        assert!(c.state.lock_ignoring_poison().waiting.is_empty());
    }

    async fn futures(c: &Arc<Calls>, key: &CallerKey, n: usize) -> Vec<Permit> {
        let mut v = Vec::new();
        for _ in 0..n {
            v.push(c.take(key, Duration::ZERO).await.unwrap());
        }
        v
    }
}
