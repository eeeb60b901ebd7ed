//! Calls that take turns per key: at most one at a time for a key (an SMB share root, an iSCSI
//! target or portal), any number at once for different keys. Only the keys in use are kept, so
//! the set stays as small as the calls in progress, whatever keys clients send.

use std::collections::HashSet;
use std::sync::{Condvar, Mutex, MutexGuard};

#[derive(Default)]
pub struct Turns {
    busy: Mutex<HashSet<String>>,
    freed: Condvar,
}

/// One call's turn on a key; the next call on it goes when this is dropped.
pub struct Turn<'a> {
    turns: &'a Turns,
    key: String,
}

impl Turns {
    /// Waits until no other call holds `key`, then holds it.
    pub fn take(&self, key: &str) -> Turn<'_> {
        let mut busy = self.busy();
        while busy.contains(key) {
            busy = self.freed.wait(busy).unwrap_or_else(|p| p.into_inner());
        }
        busy.insert(key.to_owned());
        Turn { turns: self, key: key.to_owned() }
    }

    /// The set holds only names: a panic while it was locked leaves nothing to repair.
    fn busy(&self) -> MutexGuard<'_, HashSet<String>> {
        self.busy.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.turns.busy().remove(&self.key);
        self.turns.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn one_turn_per_key_and_keys_do_not_wait_for_each_other() {
        let turns = Turns::default();
        let a = turns.take("a");
        // Another key goes at once, while "a" is held.
        drop(turns.take("b"));
        std::thread::scope(|s| {
            let (tx, rx) = mpsc::channel();
            let turns = &turns;
            s.spawn(move || {
                let _a = turns.take("a");
                tx.send(()).unwrap();
            });
            assert!(rx.recv_timeout(Duration::from_millis(100)).is_err(), "a second turn on a held key");
            drop(a);
            rx.recv_timeout(Duration::from_secs(5)).expect("the waiting call goes once the key is free");
        });
        assert!(turns.busy().is_empty(), "keys no call holds are not kept");
    }
}
