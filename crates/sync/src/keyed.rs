//! One keyed lock for every layer that takes turns: at most one holder per key, FIFO among the
//! key's waiters, any number of holders of different keys at once.
//!
//! - Waiting is asynchronous: a waiter holds no thread, and one that is cancelled (its future
//!   dropped) leaves the queue at once, passing on a turn it was just handed. So a key whose
//!   holder hangs stalls the waiters of that key and nothing else.
//! - Only keys held or waited for have an entry: the map is as large as the callers in flight,
//!   whatever keys clients send.
//! - [`KeyedLock::lock_blocking`] is the same lock for callers on a thread of their own (host
//!   work on a pool thread); it waits on that thread, which nothing cancels.

use crate::LockExt;
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use tokio::sync::Semaphore;

/// Calls on one key of type `K` take turns. Clones share the same keys.
pub struct KeyedLock<K> {
    keys: Arc<Mutex<HashMap<K, Arc<Semaphore>>>>,
}

impl<K> Default for KeyedLock<K> {
    fn default() -> Self {
        KeyedLock { keys: Arc::default() }
    }
}

impl<K> Clone for KeyedLock<K> {
    fn clone(&self) -> Self {
        KeyedLock { keys: self.keys.clone() }
    }
}

/// One holder's turn on a key, or a waiter's place in its queue; the next waiter goes when this
/// is dropped. Owns what it holds, so it can move to the thread that does the work.
pub struct KeyGuard<K: Hash + Eq> {
    keys: Arc<Mutex<HashMap<K, Arc<Semaphore>>>>,
    key: K,
    queue: Option<Arc<Semaphore>>,
    /// This guard owns the key's one permit.
    holds: bool,
}

impl<K: Hash + Eq> KeyGuard<K> {
    /// The key held.
    pub fn key(&self) -> &K {
        &self.key
    }
}

impl<K: Hash + Eq> Drop for KeyGuard<K> {
    fn drop(&mut self) {
        let mut keys = self.keys.lock_ignoring_poison();
        if let Some(queue) = self.queue.take() {
            if self.holds {
                queue.add_permits(1);
            }
            drop(queue);
        }
        // Every clone of a queue is made and dropped under the map's lock, so the count is exact.
        if keys.get(&self.key).is_some_and(|q| Arc::strong_count(q) == 1) {
            keys.remove(&self.key);
        }
    }
}

impl<K: Hash + Eq + Clone> KeyedLock<K> {
    /// Exclusive access to `key`, FIFO among its waiters. Dropping the future leaves the queue.
    pub async fn lock(&self, key: K) -> KeyGuard<K> {
        let queue = {
            let mut keys = self.keys.lock_ignoring_poison();
            keys.entry(key.clone()).or_insert_with(|| Arc::new(Semaphore::new(1))).clone()
        };
        let mut guard = KeyGuard { keys: self.keys.clone(), key, queue: Some(queue.clone()), holds: false };
        // FIFO; a dropped future drops `guard`, which leaves the queue (and passes on a permit it
        // was just handed). The semaphore is never closed.
        if let Ok(permit) = queue.acquire().await {
            permit.forget();
            guard.holds = true;
        }
        drop(queue);
        guard
    }

    /// [`KeyedLock::lock`] for a caller that is not async: waits on this thread.
    pub fn lock_blocking(&self, key: K) -> KeyGuard<K> {
        block_on(self.lock(key))
    }

    /// Keys held or waited for right now (for tests and diagnostics).
    pub fn held(&self) -> Vec<K> {
        self.keys.lock_ignoring_poison().keys().cloned().collect()
    }
}

/// Wakes the thread that waits in [`block_on`].
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `future` on this thread, parked between wake-ups: the blocking adapter for futures
/// that need no runtime, only a waker (the keyed lock's).
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        // A wake-up between the poll and here leaves the token set: park returns at once.
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap()
    }

    /// Runs `n` tasks that each take `key(i)` and record how many ran inside at once.
    fn max_inside(n: usize, key: impl Fn(usize) -> u32) -> usize {
        let locks = KeyedLock::default();
        let (inside, max) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        rt().block_on(async {
            let tasks: Vec<_> = (0..n)
                .map(|i| {
                    let (locks, inside, max, key) = (locks.clone(), inside.clone(), max.clone(), key(i));
                    tokio::spawn(async move {
                        let _g = locks.lock(key).await;
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        max.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        assert!(locks.held().is_empty(), "every key released");
        max.load(Ordering::SeqCst)
    }

    #[test]
    fn one_key_is_serialised() {
        assert_eq!(max_inside(6, |_| 7), 1);
    }

    #[test]
    fn different_keys_run_together() {
        assert_eq!(max_inside(6, |i| i as u32), 6);
    }

    /// A waiter that is dropped leaves the queue at once: the next one gets the key when the
    /// holder lets go, and an abandoned key leaves nothing behind.
    #[test]
    fn cancelled_waiters_leave_the_queue() {
        rt().block_on(async {
            let locks = KeyedLock::default();
            let held = locks.lock("disk 3").await;
            for _ in 0..1000 {
                let waiting = tokio::time::timeout(Duration::from_micros(1), locks.lock("disk 3")).await;
                assert!(waiting.is_err(), "the key is held");
            }
            let w = tokio::time::timeout(Duration::from_millis(1), locks.lock("volume v")).await;
            drop(w.expect("a free key is granted at once"));
            assert_eq!(locks.held(), vec!["disk 3"], "cancelled waiters and released keys leave no entry");
            let queue = locks.keys.lock().unwrap()["disk 3"].clone();
            assert_eq!(Arc::strong_count(&queue), 3, "the map's, the holder's and this one: no waiter's");
            drop(queue);
            drop(held);
            assert!(locks.held().is_empty());
            let again = tokio::time::timeout(Duration::from_millis(100), locks.lock("disk 3")).await;
            assert!(again.is_ok(), "the key is free again");
        });
    }

    /// The permit handed to a waiter that is dropped before it runs goes to the next waiter.
    #[test]
    fn a_permit_handed_to_a_cancelled_waiter_is_passed_on() {
        rt().block_on(async {
            let locks = KeyedLock::default();
            let held = locks.lock(1).await;
            let l = locks.clone();
            let first = tokio::spawn(async move { l.lock(1).await });
            let l = locks.clone();
            let second = tokio::spawn(async move {
                let _g = l.lock(1).await;
            });
            tokio::task::yield_now().await;
            drop(held); // hands the permit to `first`, which is aborted before it runs
            first.abort();
            tokio::time::timeout(Duration::from_secs(5), second).await.expect("second got the key").unwrap();
            assert!(locks.held().is_empty());
        });
    }

    /// The blocking adapter: one turn per key, other keys go at once, and a blocked thread goes
    /// once the key is free, whether its holder was blocking or async.
    #[test]
    fn blocking_turns_one_per_key_and_keys_do_not_wait_for_each_other() {
        let turns = KeyedLock::<String>::default();
        let a = turns.lock_blocking("a".into());
        drop(turns.lock_blocking("b".into()));
        std::thread::scope(|s| {
            let (tx, rx) = mpsc::channel();
            let turns = &turns;
            s.spawn(move || {
                let _a = turns.lock_blocking("a".into());
                tx.send(()).unwrap();
            });
            assert!(rx.recv_timeout(Duration::from_millis(100)).is_err(), "a second turn on a held key");
            drop(a);
            rx.recv_timeout(Duration::from_secs(5)).expect("the waiting call goes once the key is free");
        });
        assert!(turns.held().is_empty(), "keys no call holds are not kept");
        let held = rt().block_on(turns.lock("c".into()));
        std::thread::scope(|s| {
            let (tx, rx) = mpsc::channel();
            let turns = &turns;
            s.spawn(move || {
                let _c = turns.lock_blocking("c".into());
                tx.send(()).unwrap();
            });
            assert!(rx.recv_timeout(Duration::from_millis(100)).is_err(), "held by an async caller");
            drop(held);
            rx.recv_timeout(Duration::from_secs(5)).expect("goes once the async holder lets go");
        });
        assert!(turns.held().is_empty());
    }
}
