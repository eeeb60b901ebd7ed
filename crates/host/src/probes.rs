//! Bounded probes of something that may not answer (an SMB share, a network mount): the work runs
//! on a thread of its own, the caller waits at most a time limit, and while a probe of a key is
//! still running (a caller gave up on it) later callers wait for that one instead of starting
//! another, so one silent key holds at most one thread.
//!
//! Not a turn-taking lock ([`csi_proxy_sync::KeyedLock`] is that): callers of a busy key join the
//! probe under way and share its one outcome, rather than each running their own after it.

use csi_proxy_sync::LockExt;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What a probe gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probed<T> {
    Answered(T),
    /// No answer within the limit; the probe goes on in the background.
    Silent,
    /// The probe's thread could not be started.
    NotStarted(String),
}

pub struct Probes<K, T> {
    /// The probes still running, one per key at most.
    running: Arc<Mutex<HashMap<K, Arc<Probe<T>>>>>,
    limit: Duration,
    /// Names the probes' threads.
    name: &'static str,
}

/// One probe; its outcome shared by every caller waiting for it.
struct Probe<T> {
    outcome: Mutex<Option<T>>,
    done: Condvar,
}

impl<K, T> Probes<K, T>
where
    K: Hash + Eq + Clone + Send + 'static,
    T: Clone + Send + 'static,
{
    pub fn new(name: &'static str, limit: Duration) -> Self {
        Probes { running: Arc::default(), limit, name }
    }

    pub fn limit(&self) -> Duration {
        self.limit
    }

    pub fn set_limit(&mut self, limit: Duration) {
        self.limit = limit;
    }

    /// Probes started and not finished yet.
    pub fn running(&self) -> usize {
        self.running.lock_ignoring_poison().len()
    }

    /// Runs `work` for `key` on a thread of its own, or joins the probe of `key` still running,
    /// and waits at most the limit for its outcome.
    pub fn probe(&self, key: &K, work: impl FnOnce() -> T + Send + 'static) -> Probed<T> {
        let probe = {
            let mut running = self.running.lock_ignoring_poison();
            match running.get(key) {
                Some(p) => p.clone(),
                None => {
                    let p = Arc::new(Probe { outcome: Mutex::new(None), done: Condvar::new() });
                    let (mine, running_map, at) = (p.clone(), self.running.clone(), key.clone());
                    let spawned = std::thread::Builder::new().name(self.name.into()).spawn(move || {
                        let outcome = work();
                        let mut running = running_map.lock_ignoring_poison();
                        if running.get(&at).is_some_and(|p| Arc::ptr_eq(p, &mine)) {
                            running.remove(&at);
                        }
                        drop(running);
                        *mine.outcome.lock_ignoring_poison() = Some(outcome);
                        mine.done.notify_all();
                    });
                    if let Err(e) = spawned {
                        return Probed::NotStarted(e.to_string());
                    }
                    // Still under the lock the probe needs to unlist itself, so it can't finish
                    // before it is listed (and stay listed, finished, for ever).
                    running.insert(key.clone(), p.clone());
                    p
                }
            }
        };
        let deadline = Instant::now() + self.limit;
        let mut outcome = probe.outcome.lock_ignoring_poison();
        loop {
            if let Some(o) = outcome.as_ref() {
                return Probed::Answered(o.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Probed::Silent;
            }
            outcome = probe.done.wait_timeout(outcome, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}
