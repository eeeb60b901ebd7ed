//! Retries that join: a mutating call identical to one in flight does not run again.
//!
//! A kubelet whose NodeStage timed out while a long FormatVolume ran sends the same calls again
//! (azuredisk-csi-driver#2690: a format of over 2 minutes, then the retry failed with "access
//! path already in use"). Here a mutating call with the same caller, API, method and request
//! bytes as one in flight waits for that one and gets its result; the host work runs once.
//!
//! The first call runs as any call does. Its host work, once begun, publishes its result itself
//! when it ends, so the calls waiting for it get it even when the first call's client has left
//! (the work ran to its end before too, on its thread). If the first call's client leaves before
//! its host work began (it was still waiting for its disk), nothing has run: the calls waiting for
//! it are told so, and one of them runs the work itself.
//!
//! Bounds: at most [`MAX_WAITERS`] calls wait for one; the table holds only calls in flight,
//! each keyed by its own request, which it already holds.

use csi_proxy_sync::LockExt;
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// Calls that may wait for one identical call in flight, besides it.
pub const MAX_WAITERS: usize = 64;

/// What makes two calls the same: who asked, which method, the request's bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    /// The caller's principal as the transport saw it at connect (uid, SID or process).
    pub principal: String,
    pub service: &'static str,
    pub method: &'static str,
    pub request: Vec<u8>,
}

/// Mutating calls in flight, by [`Key`].
#[derive(Default)]
pub struct Joins {
    table: Mutex<HashMap<Arc<Key>, Arc<Flight>>>,
}

/// One call in flight and the calls waiting for its result.
#[derive(Default)]
struct Flight {
    state: Mutex<State>,
    done: Notify,
}

#[derive(Default)]
struct State {
    /// The calls waiting for the result, besides the first.
    waiting: usize,
    /// The host work has begun: from then on it publishes a result.
    begun: bool,
    /// The first call's client left before its host work began: no result will come.
    abandoned: bool,
    result: Option<Arc<dyn Any + Send + Sync>>,
}

/// How a call entered [`Joins`].
pub enum Entered {
    /// First of its kind: it runs the work and publishes the result ([`Interest::publish`]).
    First(Interest),
    /// An identical call is in flight: wait for its result ([`Interest::result`]).
    Joined(Interest),
    /// [`MAX_WAITERS`] calls wait already.
    Full,
}

impl Joins {
    /// Enters a call with `key`.
    pub fn enter(self: &Arc<Self>, key: Key) -> Entered {
        let mut table = self.table.lock_ignoring_poison();
        if let Some((key, flight)) = table.get_key_value(&key) {
            let mut state = flight.state.lock_ignoring_poison();
            if state.waiting >= MAX_WAITERS {
                return Entered::Full;
            }
            state.waiting += 1;
            drop(state);
            return Entered::Joined(Interest {
                joins: self.clone(),
                key: key.clone(),
                flight: flight.clone(),
                first: false,
            });
        }
        let (key, flight) = (Arc::new(key), Arc::new(Flight::default()));
        table.insert(key.clone(), flight.clone());
        Entered::First(Interest { joins: self.clone(), key, flight, first: true })
    }

    /// Calls in flight that others may join (for tests and diagnostics).
    pub fn in_flight(&self) -> usize {
        self.table.lock_ignoring_poison().len()
    }

    fn forget(&self, key: &Arc<Key>, flight: &Arc<Flight>) {
        let mut table = self.table.lock_ignoring_poison();
        if table.get(key).is_some_and(|f| Arc::ptr_eq(f, flight)) {
            table.remove(key);
        }
    }
}

/// A call's place in a [`Flight`]: the first call's, or one waiting for its result.
pub struct Interest {
    joins: Arc<Joins>,
    key: Arc<Key>,
    flight: Arc<Flight>,
    first: bool,
}

impl Interest {
    /// What the host work's thread holds: it says when the work begins and publishes its result.
    pub fn publisher(&self) -> Publisher {
        Publisher { joins: self.joins.clone(), key: self.key.clone(), flight: self.flight.clone() }
    }

    /// Publishes the result (a second publication is ignored).
    pub fn publish<T: Send + Sync + 'static>(&self, result: T) {
        self.publisher().publish(result)
    }

    /// The result of the call this one joined; `None` if that call's client left before any
    /// host work began (nothing ran: this call should run it).
    pub async fn result<T: Clone + Send + Sync + 'static>(&self) -> Option<T> {
        loop {
            let done = self.flight.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            {
                let state = self.flight.state.lock_ignoring_poison();
                if let Some(r) = &state.result {
                    return Some(r.downcast_ref::<T>().expect("one result type per method").clone());
                }
                if state.abandoned {
                    return None;
                }
            }
            done.await;
        }
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        let mut state = self.flight.state.lock_ignoring_poison();
        if !self.first {
            state.waiting -= 1;
            return;
        }
        if state.begun || state.result.is_some() {
            return; // the work publishes its result
        }
        state.abandoned = true;
        drop(state);
        self.joins.forget(&self.key, &self.flight);
        self.flight.done.notify_waiters();
    }
}

/// The host work's hold on its [`Flight`].
pub struct Publisher {
    joins: Arc<Joins>,
    key: Arc<Key>,
    flight: Arc<Flight>,
}

impl Publisher {
    /// The host work, about to start: false if the first call's client left and nothing may
    /// run for it any more.
    pub fn begin(&self) -> bool {
        let mut state = self.flight.state.lock_ignoring_poison();
        if state.abandoned {
            return false;
        }
        state.begun = true;
        true
    }

    /// Publishes the result (a second publication is ignored) and lets the next identical call
    /// run anew: the host has changed since.
    pub fn publish<T: Send + Sync + 'static>(&self, result: T) {
        self.joins.forget(&self.key, &self.flight);
        let mut state = self.flight.state.lock_ignoring_poison();
        if state.result.is_none() {
            state.result = Some(Arc::new(result));
        }
        drop(state);
        self.flight.done.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(request: &[u8]) -> Key {
        Key { principal: "uid 0".into(), service: "v1.Volume", method: "FormatVolume", request: request.to_vec() }
    }

    #[tokio::test]
    async fn identical_calls_join_and_different_ones_do_not() {
        let j = Arc::new(Joins::default());
        let Entered::First(first) = j.enter(key(b"a")) else { panic!() };
        let Entered::Joined(second) = j.enter(key(b"a")) else { panic!() };
        let Entered::First(_other) = j.enter(key(b"b")) else { panic!("another request joined") };
        let Entered::First(_other_caller) = j.enter(Key { principal: "uid 1".into(), ..key(b"a") }) else {
            panic!("another caller joined")
        };
        first.publish::<u32>(7);
        first.publish::<u32>(8);
        assert_eq!(second.result::<u32>().await, Some(7));
        // Published: the next identical call runs anew.
        assert!(matches!(j.enter(key(b"a")), Entered::First(_)));
    }

    #[tokio::test]
    async fn waiters_are_bounded() {
        let j = Arc::new(Joins::default());
        let _first = j.enter(key(b"a"));
        let waiting: Vec<_> = (0..MAX_WAITERS).map(|_| j.enter(key(b"a"))).collect();
        assert!(waiting.iter().all(|e| matches!(e, Entered::Joined(_))));
        assert!(matches!(j.enter(key(b"a")), Entered::Full));
        drop(waiting);
        assert!(matches!(j.enter(key(b"a")), Entered::Joined(_)), "the places are given back");
    }

    /// The first call's client leaving before its work began tells the others to run it; after
    /// it began, the work's result still reaches them, and nothing starts once abandoned.
    #[tokio::test]
    async fn a_first_call_that_leaves_hands_over_only_before_its_work_begins() {
        let j = Arc::new(Joins::default());
        let Entered::First(first) = j.enter(key(b"a")) else { panic!() };
        let Entered::Joined(second) = j.enter(key(b"a")) else { panic!() };
        let publisher = first.publisher();
        drop(first);
        assert_eq!(second.result::<u32>().await, None);
        assert!(!publisher.begin(), "work began after its call was abandoned");
        let Entered::First(again) = j.enter(key(b"a")) else { panic!("the abandoned call is still in the table") };

        let Entered::Joined(third) = j.enter(key(b"a")) else { panic!() };
        let publisher = again.publisher();
        assert!(publisher.begin());
        drop(again);
        publisher.publish::<u32>(9);
        assert_eq!(third.result::<u32>().await, Some(9));
    }
}
