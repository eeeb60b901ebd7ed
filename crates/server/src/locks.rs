//! Serialisation of mutating calls, shared by every backend: calls that change one disk (or a
//! volume on it) run one at a time; different disks run in parallel; a rescan, which touches
//! every disk, waits for all of them and holds them off while it runs.
//!
//! Kubernetes retries, and several pods may stage volumes on one node at once; without this, two
//! FormatVolume calls, or a PartitionDisk racing a MountVolume on the same disk, would interleave
//! host work.

use csi_proxy_host::{Error, Hosts, Result};
use std::collections::HashSet;
use std::sync::{Condvar, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// What a mutating call is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    Disk(u32),
    /// A volume on a backend that cannot place volumes on disks: serialised on its ID alone.
    Volume(String),
}

#[derive(Default)]
pub struct Locks {
    /// Read side: one disk's work; write side: a rescan.
    all: RwLock<()>,
    /// Keys held right now; waiters sleep on `released`.
    held: Mutex<HashSet<Key>>,
    released: Condvar,
}

/// Held for the duration of one call's host work.
pub struct Guard<'a> {
    locks: &'a Locks,
    key: Option<Key>,
    _all: AllGuard<'a>,
}

enum AllGuard<'a> {
    Shared(#[allow(dead_code)] RwLockReadGuard<'a, ()>),
    Exclusive(#[allow(dead_code)] RwLockWriteGuard<'a, ()>),
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.locks.held.lock().unwrap_or_else(PoisonError::into_inner).remove(&key);
            self.locks.released.notify_all();
        }
    }
}

impl Locks {
    /// Exclusive access to `key` (and shared access to the whole host).
    pub fn lock(&self, key: Key) -> Guard<'_> {
        let all = AllGuard::Shared(self.all.read().unwrap_or_else(PoisonError::into_inner));
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        while held.contains(&key) {
            held = self.released.wait(held).unwrap_or_else(PoisonError::into_inner);
        }
        held.insert(key.clone());
        Guard { locks: self, key: Some(key), _all: all }
    }

    /// Exclusive access to every disk, for calls that touch them all (Rescan).
    pub fn lock_all(&self) -> Guard<'_> {
        let all = AllGuard::Exclusive(self.all.write().unwrap_or_else(PoisonError::into_inner));
        Guard { locks: self, key: None, _all: all }
    }

    /// The lock for work on a volume: its disk's, so that volume calls also wait for a
    /// PartitionDisk or SetDiskState of the same disk. The volume is looked up again once the
    /// lock is held: a volume that moved meanwhile (a disk detached and another attached) is
    /// looked up and locked anew.
    pub fn lock_volume(&self, hosts: &Hosts, volume_id: &str) -> Result<Guard<'_>> {
        let disk_of = || match hosts.volume.disk_number_of_volume(volume_id) {
            Ok(disk) => Ok(Key::Disk(disk)),
            // A backend that can't place volumes on disks, or a volume that is on none (Windows
            // volumes without disk extents), serialises on the volume alone; the call itself
            // then says what it can do with such a volume.
            Err(Error::Unimplemented { .. } | Error::FailedPrecondition(_)) => Ok(Key::Volume(volume_id.to_string())),
            Err(e) => Err(e),
        };
        let mut key = disk_of()?;
        for _ in 0..3 {
            let guard = self.lock(key.clone());
            let now = disk_of()?;
            if now == key {
                return Ok(guard);
            }
            key = now;
        }
        Err(Error::unavailable(format!("volume {volume_id} keeps moving between disks; retry the call")))
    }

    /// Keys held right now (for tests and diagnostics).
    pub fn held(&self) -> Vec<Key> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner).iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// Runs `n` threads that each take `key(i)` and record how many ran inside at once.
    fn max_inside(n: usize, key: impl Fn(usize) -> Key + Send + Sync + 'static) -> usize {
        let locks = Arc::new(Locks::default());
        let (inside, max) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let key = Arc::new(key);
        let threads: Vec<_> = (0..n)
            .map(|i| {
                let (locks, inside, max, key) = (locks.clone(), inside.clone(), max.clone(), key.clone());
                std::thread::spawn(move || {
                    let _g = locks.lock(key(i));
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(20));
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert!(locks.held().is_empty(), "every key released");
        max.load(Ordering::SeqCst)
    }

    #[test]
    fn one_disk_is_serialised() {
        assert_eq!(max_inside(6, |_| Key::Disk(7)), 1);
    }

    #[test]
    fn different_disks_run_together() {
        assert!(max_inside(6, |i| Key::Disk(i as u32)) > 1);
    }

    #[test]
    fn lock_all_excludes_every_disk() {
        let locks = Arc::new(Locks::default());
        let all = locks.lock_all();
        let l = locks.clone();
        let t = std::thread::spawn(move || {
            let _g = l.lock(Key::Disk(1));
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!t.is_finished(), "a disk lock waits for the rescan");
        drop(all);
        t.join().unwrap();
    }

    /// Answers disk 1 on the first lookup and disk 2 afterwards: a volume that moved.
    struct Moving(AtomicUsize);

    impl csi_proxy_host::VolumeHost for Moving {
        fn disk_number_of_volume(&self, id: &str) -> Result<u32> {
            match id {
                "gone" => Err(Error::not_found("volume gone")),
                _ => Ok(if self.0.fetch_add(1, Ordering::SeqCst) == 0 { 1 } else { 2 }),
            }
        }
        fn list_volumes_on_disk(&self, _: u32, _: u32) -> Result<Vec<String>> {
            unreachable!()
        }
        fn mount_volume(&self, _: &str, _: &str) -> Result<()> {
            unreachable!()
        }
        fn unmount_volume(&self, _: &str, _: &str) -> Result<()> {
            unreachable!()
        }
        fn is_volume_formatted(&self, _: &str) -> Result<bool> {
            unreachable!()
        }
        fn format_volume(&self, _: &str) -> Result<()> {
            unreachable!()
        }
        fn resize_volume(&self, _: &str, _: u64) -> Result<()> {
            unreachable!()
        }
        fn volume_stats(&self, _: &str) -> Result<csi_proxy_host::types::VolumeStats> {
            unreachable!()
        }
        fn volume_at_path(&self, _: &str) -> Result<String> {
            unreachable!()
        }
        fn closest_volume_to_path(&self, _: &str) -> Result<String> {
            unreachable!()
        }
        fn flush_volume(&self, _: &str) -> Result<()> {
            unreachable!()
        }
    }

    #[test]
    fn a_volume_that_moves_is_locked_on_its_new_disk() {
        let mut hosts = Hosts::from_one(Arc::new(csi_proxy_host::memory::MemoryHost::sample()));
        hosts.volume = Arc::new(Moving(AtomicUsize::new(0)));
        let locks = Locks::default();
        let g = locks.lock_volume(&hosts, "v").unwrap();
        assert_eq!(locks.held(), vec![Key::Disk(2)]);
        drop(g);
        assert!(matches!(locks.lock_volume(&hosts, "gone"), Err(Error::NotFound(_))));
        assert!(locks.held().is_empty());
    }
}
