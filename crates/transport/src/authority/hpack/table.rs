//! The HPACK index space (RFC 7541 §2.3): the static table (Appendix A) and the dynamic table.

use super::HpackError;
use std::collections::VecDeque;

/// The static table, entries 1..=61 (RFC 7541 Appendix A): name and value.
const STATIC_TABLE: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// Per-entry overhead the RFC adds to name and value lengths (§4.1).
const ENTRY_OVERHEAD: usize = 32;

/// What an index refers to: a static entry (name, value) or a dynamic one.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Entry<'a, E> {
    Static(&'static str, &'static str),
    Dynamic(&'a E),
}

/// The HPACK index space (§2.3): the static table, then a dynamic table whose entries are
/// whatever its user keeps of them (`E`: the [`HeaderDecoder`](super::HeaderDecoder) keeps names
/// and values, the `:authority` adapter only what it needs to recognise an `:authority` name).
/// Insertion, eviction and size updates follow §4 exactly, as `h2`'s decoder does, so a table fed
/// the same representations holds the same entries as the server's.
#[derive(Debug)]
pub(crate) struct Table<E> {
    /// Newest entry first, so HPACK index 62 is `entries[0]`; each with its size (§4.1).
    entries: VecDeque<(E, usize)>,
    size: usize,
    max_size: usize,
}

impl<E> Table<E> {
    pub(crate) fn new(max_size: usize) -> Self {
        Table { entries: VecDeque::new(), size: 0, max_size }
    }

    #[cfg(test)]
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// The dynamic entries, newest first.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> impl Iterator<Item = &E> {
        self.entries.iter().map(|(e, _)| e)
    }

    fn evict_to(&mut self, limit: usize) {
        while self.size > limit {
            match self.entries.pop_back() {
                Some((_, s)) => self.size -= s,
                None => break,
            }
        }
    }

    /// Adds an entry whose name and value have these decoded lengths (§4.4).
    pub(crate) fn insert(&mut self, entry: E, name_len: usize, value_len: usize) {
        let len = name_len + value_len + ENTRY_OVERHEAD;
        if len > self.max_size {
            // An entry bigger than the whole table empties it and is not stored.
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max_size - len);
        self.size += len;
        self.entries.push_front((entry, len));
    }

    /// A dynamic table size update (§6.3): evicts down to the new size.
    pub(crate) fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    /// The entry at a 1-based HPACK index (static entries first).
    pub(crate) fn get(&self, index: usize) -> Result<Entry<'_, E>, HpackError> {
        match index {
            0 => Err(HpackError::BadIndex(0)),
            1..=STATIC_ENTRIES => {
                let (name, value) = STATIC_TABLE[index - 1];
                Ok(Entry::Static(name, value))
            }
            _ => self
                .entries
                .get(index - STATIC_ENTRIES - 1)
                .map(|(e, _)| Entry::Dynamic(e))
                .ok_or(HpackError::BadIndex(index)),
        }
    }
}

/// Number of entries in the static table.
const STATIC_ENTRIES: usize = STATIC_TABLE.len();

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn name_at(t: &Table<(Bytes, Bytes)>, index: usize) -> Result<Vec<u8>, HpackError> {
        Ok(match t.get(index)? {
            Entry::Static(name, _) => name.as_bytes().to_vec(),
            Entry::Dynamic((name, _)) => name.to_vec(),
        })
    }

    #[test]
    fn dynamic_table_eviction() {
        let mut t = Table::new(100);
        let insert = |t: &mut Table<(Bytes, Bytes)>, n: &'static [u8], v: Bytes| {
            let (nl, vl) = (n.len(), v.len());
            t.insert((Bytes::from_static(n), v), nl, vl);
        };
        insert(&mut t, b"a", Bytes::from_static(b"1234567")); // 40
        insert(&mut t, b"bb", Bytes::from_static(b"123456")); // 40
        assert_eq!(t.size(), 80);
        // 40 more does not fit: the oldest entry goes.
        insert(&mut t, b"ccc", Bytes::from_static(b"12345")); // 40
        assert_eq!(t.size(), 80);
        let names: Vec<_> = t.entries().map(|(n, _)| n.to_vec()).collect();
        assert_eq!(names, vec![b"ccc".to_vec(), b"bb".to_vec()]);
        assert_eq!(&name_at(&t, 62).unwrap()[..], b"ccc");
        assert_eq!(&name_at(&t, 63).unwrap()[..], b"bb");
        assert_eq!(name_at(&t, 64), Err(HpackError::BadIndex(64)));
        // Shrinking evicts from the old end.
        t.set_max_size(50);
        assert_eq!(t.size(), 40);
        // An entry larger than the table empties it.
        insert(&mut t, b"x", Bytes::from(vec![b'y'; 40]));
        assert_eq!(t.size(), 0);
        assert_eq!(t.entries().count(), 0);
        assert_eq!(&name_at(&t, 1).unwrap()[..], b":authority");
        assert_eq!(&name_at(&t, 61).unwrap()[..], b"www-authenticate");
    }
}
