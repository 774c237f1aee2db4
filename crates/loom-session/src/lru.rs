//! A cache of shared, separately locked values, the least recently used dropped first past a
//! bound on their number and one on their estimated bytes: the server's live sessions
//! ([`crate::live::LiveSessions`]) and its inspector's session digests.
//!
//! The cache itself is not locked: its owner keeps it behind one mutex, held only to look a value
//! up or to account for it, never while a value is locked for work.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex};

/// Values by key, with when each was last used and its size when last measured.
#[derive(Debug)]
pub struct Lru<K, V> {
    map: HashMap<K, (Arc<Mutex<V>>, u64, usize)>,
    /// Keys by when they were last used.
    order: BTreeMap<u64, K>,
    tick: u64,
    /// The sum of the sizes in `map`.
    bytes: usize,
}

impl<K, V> Default for Lru<K, V> {
    fn default() -> Self {
        Self {
            map: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
            bytes: 0,
        }
    }
}

impl<K: Eq + Hash + Clone, V> Lru<K, V> {
    /// The value at `key`, now the most recently used.
    pub fn touch(&mut self, key: &K) -> Option<Arc<Mutex<V>>> {
        self.tick += 1;
        let tick = self.tick;
        let (value, old) = self
            .map
            .get_mut(key)
            .map(|(value, used, _)| (Arc::clone(value), std::mem::replace(used, tick)))?;
        self.order.remove(&old);
        self.order.insert(tick, key.clone());
        Some(value)
    }

    /// The value at `key`, its place in the order untouched.
    pub fn peek(&self, key: &K) -> Option<&Arc<Mutex<V>>> {
        self.map.get(key).map(|(value, _, _)| value)
    }

    /// Puts `value` at `key` as the most recently used, `bytes` large, in place of what was there.
    pub fn insert(&mut self, key: K, value: Arc<Mutex<V>>, bytes: usize) {
        self.remove(&key);
        self.tick += 1;
        self.order.insert(self.tick, key.clone());
        self.map.insert(key, (value, self.tick, bytes));
        self.bytes += bytes;
    }

    /// Records the value at `key` as `bytes` large.
    pub fn measured(&mut self, key: &K, bytes: usize) {
        if let Some((_, _, size)) = self.map.get_mut(key) {
            self.bytes = self.bytes - *size + bytes;
            *size = bytes;
        }
    }

    /// Drops the least recently used values until at most `capacity` remain holding at most
    /// `byte_limit` bytes. The value just used goes last, and never when it is alone (even over
    /// the bytes).
    pub fn evict(&mut self, capacity: usize, byte_limit: usize) {
        while self.map.len() > 1 && (self.map.len() > capacity || self.bytes > byte_limit) {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.remove(&oldest);
        }
    }

    /// Drops the value at `key`, if there is one.
    pub fn remove(&mut self, key: &K) {
        if let Some((_, used, size)) = self.map.remove(key) {
            self.bytes -= size;
            self.order.remove(&used);
        }
    }

    /// How many values are held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether a value is held at `key`.
    pub fn contains_key(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    /// The values' sizes as last measured, together.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_go_first_and_the_last_used_stays_even_alone_over_the_bytes() {
        let mut lru: Lru<&str, u32> = Lru::default();
        for (k, n) in [("a", 10), ("b", 20), ("c", 30)] {
            lru.insert(k, Arc::new(Mutex::new(0)), n);
        }
        assert_eq!(lru.bytes(), 60);
        assert!(lru.touch(&"a").is_some());
        lru.evict(2, usize::MAX);
        assert!(!lru.contains_key(&"b") && lru.contains_key(&"a") && lru.contains_key(&"c"));
        lru.measured(&"a", 100);
        assert_eq!(lru.bytes(), 130);
        lru.evict(usize::MAX, 50);
        // "c" was used before "a": it goes; "a" stays alone, over the bound.
        assert_eq!(lru.len(), 1);
        assert!(lru.contains_key(&"a"));
        lru.insert("a", Arc::new(Mutex::new(1)), 5);
        assert_eq!((lru.len(), lru.bytes()), (1, 5));
        lru.remove(&"a");
        assert!(lru.is_empty() && lru.bytes() == 0);
    }
}
