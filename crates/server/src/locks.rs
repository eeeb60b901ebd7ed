//! Serialisation of mutating calls, shared by every backend: calls that change one disk (or a
//! volume on it) run one at a time; different disks run in parallel. A rescan takes each disk in
//! turn, like any other call on that disk, never all of them at once: a whole-host lock would
//! make a rescan queued behind one hung disk hold off every other disk.
//!
//! Kubernetes retries, and several pods may stage volumes on one node at once; without this, two
//! FormatVolume calls, or a PartitionDisk racing a MountVolume on the same disk, would interleave
//! host work.
//!
//! Waiting is asynchronous: a call queued behind a disk holds no thread, and a call that is
//! cancelled (the client went away, its deadline passed) leaves the queue as soon as its future is
//! dropped. So a disk whose host work hangs stalls the calls queued on that disk and nothing else.

use csi_proxy_host::{Error, Result};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::Semaphore;

/// What a mutating call is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    Disk(u32),
    /// A volume on a backend that cannot place volumes on disks: serialised on its ID alone.
    Volume(String),
}

/// What an operation holds while its host work runs (see [`crate::call::Op::serial`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Serial {
    /// Nothing: read-only calls, and calls whose host work serialises itself.
    None,
    Disk(u32),
    /// The disk the volume is on (looked up by the caller), or the volume alone where volumes
    /// have no disk.
    Volume(String),
    /// A rescan: nothing while its host-wide part runs, then every disk the host names
    /// (`DiskHost::disks_to_refresh`) in turn, each under its own key, for its refresh.
    EachDisk,
}

#[derive(Default)]
pub struct Locks(Arc<State>);

#[derive(Default)]
struct State {
    /// One queue per key that is held or waited for; a key nobody holds or waits for has no
    /// entry, so the map is as large as the calls in flight, whatever keys clients send.
    keys: Mutex<HashMap<Key, Arc<Semaphore>>>,
}

/// A place in one key's queue; leaves it (and drops the queue once empty) on drop.
struct Ticket {
    state: Arc<State>,
    key: Key,
    queue: Option<Arc<Semaphore>>,
    /// This ticket owns the key's one permit.
    holds: bool,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut keys = self.state.keys.lock().unwrap_or_else(PoisonError::into_inner);
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

/// Held for the duration of one call's host work; owns what it holds, so it can move to the
/// thread that does the work.
pub struct Guard {
    _ticket: Ticket,
}

impl Locks {
    /// Exclusive access to `key`, FIFO among its waiters.
    pub async fn lock(&self, key: Key) -> Guard {
        let queue = {
            let mut keys = self.0.keys.lock().unwrap_or_else(PoisonError::into_inner);
            keys.entry(key.clone()).or_insert_with(|| Arc::new(Semaphore::new(1))).clone()
        };
        let mut ticket = Ticket { state: self.0.clone(), key, queue: Some(queue.clone()), holds: false };
        // FIFO; a dropped future leaves the queue (and passes on a permit it was just handed).
        // The semaphore is never closed.
        if let Ok(permit) = queue.acquire().await {
            permit.forget();
            ticket.holds = true;
        }
        drop(queue);
        Guard { _ticket: ticket }
    }

    /// The lock for work on a volume: its disk's (`disk_of` looks it up), so that volume calls
    /// also wait for a PartitionDisk or SetDiskState of the same disk. The volume is looked up
    /// again once the lock is held: a volume that moved meanwhile (a disk detached and another
    /// attached) is looked up and locked anew.
    pub async fn lock_volume<F, Fut>(&self, volume_id: &str, disk_of: F) -> Result<Guard>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<u32>>,
    {
        let key_of = || async {
            match disk_of().await {
                Ok(disk) => Ok(Key::Disk(disk)),
                // A backend that can't place volumes on disks, or a volume that is on none
                // (Windows volumes without disk extents), serialises on the volume alone; the call
                // itself then says what it can do with such a volume.
                Err(Error::Unimplemented { .. } | Error::FailedPrecondition(_)) => {
                    Ok(Key::Volume(volume_id.to_string()))
                }
                Err(e) => Err(e),
            }
        };
        let mut key = key_of().await?;
        for _ in 0..3 {
            let guard = self.lock(key.clone()).await;
            let now = key_of().await?;
            if now == key {
                return Ok(guard);
            }
            key = now;
        }
        Err(Error::unavailable(format!("volume {volume_id} keeps moving between disks; retry the call")))
    }

    /// Keys held or waited for right now (for tests and diagnostics).
    pub fn held(&self) -> Vec<Key> {
        self.0.keys.lock().unwrap_or_else(PoisonError::into_inner).keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap()
    }

    /// Runs `n` tasks that each take `key(i)` and record how many ran inside at once.
    fn max_inside(n: usize, key: impl Fn(usize) -> Key) -> usize {
        let locks = Arc::new(Locks::default());
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
    fn one_disk_is_serialised() {
        assert_eq!(max_inside(6, |_| Key::Disk(7)), 1);
    }

    #[test]
    fn different_disks_run_together() {
        assert_eq!(max_inside(6, |i| Key::Disk(i as u32)), 6);
    }

    /// A waiter that is dropped leaves the queue at once: the next one gets the key when the
    /// holder lets go, and an abandoned key leaves nothing behind.
    #[test]
    fn cancelled_waiters_leave_the_queue() {
        rt().block_on(async {
            let locks = Locks::default();
            let held = locks.lock(Key::Disk(3)).await;
            for _ in 0..1000 {
                let waiting = tokio::time::timeout(Duration::from_micros(1), locks.lock(Key::Disk(3))).await;
                assert!(waiting.is_err(), "the disk is held");
            }
            let w = tokio::time::timeout(Duration::from_millis(1), locks.lock(Key::Volume("v".into()))).await;
            drop(w.expect("a free key is granted at once"));
            assert_eq!(locks.held(), vec![Key::Disk(3)], "cancelled waiters and released keys leave no entry");
            let queue = locks.0.keys.lock().unwrap()[&Key::Disk(3)].clone();
            assert_eq!(Arc::strong_count(&queue), 3, "the map's, the holder's and this one: no waiter's");
            drop(queue);
            drop(held);
            assert!(locks.held().is_empty());
            let again = tokio::time::timeout(Duration::from_millis(100), locks.lock(Key::Disk(3))).await;
            assert!(again.is_ok(), "the key is free again");
        });
    }

    /// The permit handed to a waiter that is dropped before it runs goes to the next waiter.
    #[test]
    fn a_permit_handed_to_a_cancelled_waiter_is_passed_on() {
        rt().block_on(async {
            let locks = Arc::new(Locks::default());
            let held = locks.lock(Key::Disk(1)).await;
            let l = locks.clone();
            let first = tokio::spawn(async move { l.lock(Key::Disk(1)).await });
            let l = locks.clone();
            let second = tokio::spawn(async move {
                let _g = l.lock(Key::Disk(1)).await;
            });
            tokio::task::yield_now().await;
            drop(held); // hands the permit to `first`, which is aborted before it runs
            first.abort();
            tokio::time::timeout(Duration::from_secs(5), second).await.expect("second got the disk").unwrap();
            assert!(locks.held().is_empty());
        });
    }

    #[test]
    fn a_volume_that_moves_is_locked_on_its_new_disk() {
        rt().block_on(async {
            let locks = Locks::default();
            let n = AtomicUsize::new(0);
            let moving = || async { Ok(if n.fetch_add(1, Ordering::SeqCst) == 0 { 1 } else { 2 }) };
            let g = locks.lock_volume("v", moving).await.unwrap();
            assert_eq!(locks.held(), vec![Key::Disk(2)]);
            drop(g);
            let gone = || async { Err(Error::not_found("volume gone")) };
            assert!(matches!(locks.lock_volume("gone", gone).await, Err(Error::NotFound(_))));
            let diskless = || async { Err(Error::FailedPrecondition("no extents".into())) };
            let g = locks.lock_volume("w", diskless).await.unwrap();
            assert_eq!(locks.held(), vec![Key::Volume("w".into())]);
            drop(g);
            let always_moving = || async { Ok(n.fetch_add(1, Ordering::SeqCst) as u32) };
            assert!(matches!(locks.lock_volume("v", always_moving).await, Err(Error::Unavailable(_))));
            assert!(locks.held().is_empty());
        });
    }
}
