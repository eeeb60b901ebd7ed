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

use csi_proxy_host::error::MOVED_TRIES;
use csi_proxy_host::{Error, Result};
use csi_proxy_sync::{KeyGuard, KeyedLock, LastSeen};
use std::future::Future;

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
    /// Nothing: the call changes nothing on the host (its method is read-only, see
    /// `csi_proxy_wire::is_read_only`).
    ReadOnly,
    /// Nothing from the server, though the call changes the host: its host work takes its own
    /// turns (SMB per share root, iSCSI per portal and target) or is one OS call the OS
    /// serialises (a mkdir, a link, a service start).
    OwnTurns,
    Disk(u32),
    /// The disk the volume is on (looked up by the caller), or the volume alone where volumes
    /// have no disk.
    Volume(String),
    /// A rescan: nothing while its host-wide part runs, then every disk the host names
    /// (`DiskHost::disks_to_refresh`) in turn, each under its own key, for its refresh.
    EachDisk,
}

/// The server's keyed lock (see [`csi_proxy_sync::KeyedLock`]: FIFO per key, cancellable,
/// only keys in use kept), and the key each volume was last found under.
pub struct Locks(KeyedLock<Key>, LastSeen<String, Key>);

/// At most this many volumes' last keys are kept ([`Locks::lock_volume`]); past it the memory is
/// dropped and rebuilt (a volume not remembered costs one more lookup, nothing else).
const REMEMBERED: usize = 1024;

impl Default for Locks {
    fn default() -> Self {
        Locks(KeyedLock::default(), LastSeen::new(REMEMBERED))
    }
}

/// Held for the duration of one call's host work; owns what it holds, so it can move to the
/// thread that does the work.
pub struct Guard {
    _held: KeyGuard<Key>,
}

impl Locks {
    /// Exclusive access to `key`, FIFO among its waiters.
    pub async fn lock(&self, key: Key) -> Guard {
        Guard { _held: self.0.lock(key).await }
    }

    /// The lock for work on a volume: its disk's (`disk_of` looks it up), so that volume calls
    /// also wait for a PartitionDisk or SetDiskState of the same disk. The volume is looked up
    /// again once the lock is held: a volume that moved meanwhile (a disk detached and another
    /// attached) is looked up and locked anew, [`MOVED_TRIES`] times at most. The key a volume
    /// was last found under, under its lock, is locked first without a lookup before: a volume
    /// an earlier call found (IsVolumeFormatted, FormatVolume before MountVolume) is looked up
    /// once, under the lock. Not where the host does that itself under a lock of its own
    /// (`host_follows`, `VolumeHost::finds_volumes_under_own_lock`): then the disk is looked up
    /// once, here, before the lock.
    pub async fn lock_volume<F, Fut>(&self, volume_id: &str, host_follows: bool, disk_of: F) -> Result<Guard>
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
        if host_follows {
            return Ok(self.lock(key_of().await?).await);
        }
        let mut key = match self.1.get(volume_id) {
            Some(key) => key,
            None => key_of().await?,
        };
        for _ in 0..MOVED_TRIES {
            let guard = self.lock(key.clone()).await;
            let now = key_of().await.inspect_err(|_| self.1.forget(volume_id))?;
            if now == key {
                self.1.set(volume_id.to_string(), key);
                return Ok(guard);
            }
            key = now;
        }
        self.1.forget(volume_id);
        Err(Error::volume_moved(volume_id))
    }

    /// Keys held or waited for right now (for tests and diagnostics).
    pub fn held(&self) -> Vec<Key> {
        self.0.held()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap()
    }

    #[test]
    fn a_volume_that_moves_is_locked_on_its_new_disk() {
        rt().block_on(async {
            let locks = Locks::default();
            let n = AtomicUsize::new(0);
            let moving = || async { Ok(if n.fetch_add(1, Ordering::SeqCst) == 0 { 1 } else { 2 }) };
            let g = locks.lock_volume("v", false, moving).await.unwrap();
            assert_eq!(locks.held(), vec![Key::Disk(2)]);
            drop(g);
            let gone = || async { Err(Error::not_found("volume gone")) };
            assert!(matches!(locks.lock_volume("gone", false, gone).await, Err(Error::NotFound(_))));
            let diskless = || async { Err(Error::FailedPrecondition("no extents".into())) };
            let g = locks.lock_volume("w", false, diskless).await.unwrap();
            assert_eq!(locks.held(), vec![Key::Volume("w".into())]);
            drop(g);
            let always_moving = || async { Ok(n.fetch_add(1, Ordering::SeqCst) as u32) };
            assert!(matches!(locks.lock_volume("v", false, always_moving).await, Err(Error::Aborted(_))));
            assert!(locks.held().is_empty());
        });
    }

    /// A volume found under its lock before is locked at once and looked up once, under the
    /// lock; one that moved since is followed to its new disk, and one that went is forgotten.
    #[test]
    fn a_volume_found_before_is_looked_up_once() {
        rt().block_on(async {
            let locks = Locks::default();
            let asked = AtomicUsize::new(0);
            let disk = AtomicUsize::new(3);
            let lookup = || async {
                asked.fetch_add(1, Ordering::SeqCst);
                match disk.load(Ordering::SeqCst) {
                    0 => Err(Error::not_found("volume gone")),
                    d => Ok(d as u32),
                }
            };
            let asked_for = |_held: &Guard| (asked.swap(0, Ordering::SeqCst), locks.held());
            let g = locks.lock_volume("v", false, lookup).await.unwrap();
            assert_eq!(asked_for(&g), (2, vec![Key::Disk(3)]), "not seen yet: before and under the lock");
            drop(g);
            let g = locks.lock_volume("v", false, lookup).await.unwrap();
            assert_eq!(asked_for(&g), (1, vec![Key::Disk(3)]), "seen: under the lock only");
            drop(g);
            disk.store(4, Ordering::SeqCst);
            let g = locks.lock_volume("v", false, lookup).await.unwrap();
            assert_eq!(asked_for(&g), (2, vec![Key::Disk(4)]), "moved: followed");
            drop(g);
            disk.store(0, Ordering::SeqCst);
            assert!(matches!(locks.lock_volume("v", false, lookup).await, Err(Error::NotFound(_))));
            assert!(locks.1.is_empty(), "a volume gone is forgotten");
        });
    }

    /// A host that finds the volume again under its own lock (Linux) gets one lookup per call:
    /// the disk found is locked, and the volume is not looked up again here.
    #[test]
    fn a_host_that_follows_volumes_itself_is_asked_once() {
        rt().block_on(async {
            let locks = Locks::default();
            let asked = AtomicUsize::new(0);
            let moving = || async { Ok(asked.fetch_add(1, Ordering::SeqCst) as u32 + 5) };
            let g = locks.lock_volume("v", true, moving).await.unwrap();
            assert_eq!((asked.load(Ordering::SeqCst), locks.held()), (1, vec![Key::Disk(5)]));
            drop(g);
            let diskless = || async { Err(Error::FailedPrecondition("no extents".into())) };
            let g = locks.lock_volume("w", true, diskless).await.unwrap();
            assert_eq!(locks.held(), vec![Key::Volume("w".into())]);
            drop(g);
        });
    }
}
