//! Where something was last seen, as a hint that saves a lookup: the server remembers the disk it
//! last locked for a volume (Windows), the Linux backend the disk whose partition table last
//! listed a GUID. A hint is never an answer: its user confirms it (under the lock it leads to)
//! and looks up again when it is wrong, so losing hints costs only lookups.

use crate::LockExt;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;

/// At most `cap` hints, kept in one map. A new key that finds the map full clears it first: the
/// memory stays bounded whatever names callers send, and the next lookups rebuild it.
pub struct LastSeen<K, V> {
    map: Mutex<HashMap<K, V>>,
    cap: usize,
}

impl<K: Eq + Hash, V: Clone> LastSeen<K, V> {
    pub fn new(cap: usize) -> Self {
        LastSeen { map: Mutex::new(HashMap::new()), cap: cap.max(1) }
    }

    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.map.lock_ignoring_poison().get(key).cloned()
    }

    pub fn set(&self, key: K, value: V) {
        self.update(key, |_| value);
    }

    /// Sets `key` to what `f` makes of its present hint, in one step.
    pub fn update(&self, key: K, f: impl FnOnce(Option<&V>) -> V) {
        let mut map = self.map.lock_ignoring_poison();
        let value = f(map.get(&key));
        if map.len() >= self.cap && !map.contains_key(&key) {
            map.clear();
        }
        map.insert(key, value);
    }

    pub fn forget<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.map.lock_ignoring_poison().remove(key);
    }

    /// How many hints are kept (for tests and diagnostics).
    pub fn len(&self) -> usize {
        self.map.lock_ignoring_poison().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_are_kept_updated_and_bounded() {
        let seen: LastSeen<String, u32> = LastSeen::new(2);
        seen.set("a".into(), 1);
        seen.update("a".into(), |old| old.copied().unwrap_or(0) + 10);
        assert_eq!(seen.get("a"), Some(11));
        seen.set("b".into(), 2);
        seen.set("b".into(), 3);
        assert_eq!(seen.len(), 2, "a key already kept does not clear the map");
        seen.set("c".into(), 4);
        assert_eq!((seen.len(), seen.get("a"), seen.get("c")), (1, None, Some(4)), "a new key past the cap clears it");
        seen.forget("c");
        assert!(seen.is_empty());
    }
}
