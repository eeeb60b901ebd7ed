//! Synchronisation shared by every layer of csi-proxy:
//!
//! - [`KeyedLock`]: calls on one key take turns, calls on different keys run together (the
//!   server's per-disk locks, the host's per-share and per-portal turns). Asynchronous for async
//!   callers, with [`KeyedLock::lock_blocking`] for work that runs on a thread of its own.
//! - [`LastSeen`]: a bounded memory of where something was last seen, as a hint that saves a
//!   lookup (the disk a volume is on).
//! - [`LockExt::lock_ignoring_poison`]: a mutex lock that goes on after a panic of a holder.

mod keyed;
mod last_seen;

pub use keyed::{block_on, KeyGuard, KeyedLock};
pub use last_seen::LastSeen;

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locking a [`Mutex`] whatever a previous holder did.
pub trait LockExt<T: ?Sized> {
    /// The guard, also when a holder panicked. For state that every holder changes in steps that
    /// each leave it whole (a map entry added or removed, a counter, a queue), so a panic
    /// elsewhere leaves nothing to repair, and failing every later call would only spread it.
    fn lock_ignoring_poison(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> LockExt<T> for Mutex<T> {
    fn lock_ignoring_poison(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_mutex_still_locks() {
        let m = Mutex::new(1);
        let _ = std::panic::catch_unwind(|| {
            let _g = m.lock().unwrap();
            panic!("holder panics");
        });
        assert!(m.is_poisoned());
        *m.lock_ignoring_poison() += 1;
        assert_eq!(*m.lock_ignoring_poison(), 2);
    }
}
