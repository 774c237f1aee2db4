//! Token counts kept with a live session: a render meters the same texts call after call (a
//! result under each form it takes, a turn's message, the compact block's lines), and the cost
//! memo only knows the pieces by their place in the log. Counting a text once per session, by
//! its bytes, is what keeps a render's tokenizing proportional to what is new.

use std::cell::RefCell;
use std::collections::HashMap;

use loom_core::render::TokenMeter;

/// Texts shorter than this are counted again each time: the BPE is cheaper than a lookup.
const SHORTEST_KEPT: usize = 64;

/// What one kept count costs in memory (its key, its value and the map's overhead), for the live
/// sessions' memory estimate.
pub const ENTRY_BYTES: usize = 48;

/// Token counts by text, for one meter (a model's tokenizer): emptied when a render meters with
/// another.
#[derive(Debug, Default)]
pub struct Counts {
    meter: String,
    /// By the text's length and its 64-bit hash: a collision needs both to be equal.
    map: RefCell<HashMap<(usize, u64), u64>>,
}

impl Counts {
    /// A meter that counts through `inner`, each distinct text once while this cache lives.
    pub fn meter<'a>(&'a mut self, inner: &'a dyn TokenMeter) -> Cached<'a> {
        if self.meter != inner.name() {
            self.meter = inner.name().to_owned();
            self.map.get_mut().clear();
        }
        Cached {
            inner,
            counts: self,
        }
    }

    /// How many texts are kept (for the memory estimate).
    pub fn len(&self) -> usize {
        self.map.borrow().len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// [`Counts`] in front of a meter.
pub struct Cached<'a> {
    inner: &'a dyn TokenMeter,
    counts: &'a Counts,
}

impl std::fmt::Debug for Cached<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cached({})", self.inner.name())
    }
}

impl TokenMeter for Cached<'_> {
    fn count(&self, text: &str) -> u64 {
        if text.len() < SHORTEST_KEPT {
            return self.inner.count(text);
        }
        let key = (text.len(), xxhash_rust::xxh3::xxh3_64(text.as_bytes()));
        if let Some(&n) = self.counts.map.borrow().get(&key) {
            return n;
        }
        let n = self.inner.count(text);
        self.counts.map.borrow_mut().insert(key, n);
        n
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loom_core::render::ApproxMeter;
    use std::cell::Cell;

    /// Counts how often it is asked.
    struct Asked<'a>(&'a str, Cell<u32>);

    impl TokenMeter for Asked<'_> {
        fn count(&self, text: &str) -> u64 {
            self.1.set(self.1.get() + 1);
            ApproxMeter.count(text)
        }
        fn name(&self) -> &str {
            self.0
        }
    }

    #[test]
    fn a_text_is_counted_once_per_meter() {
        let long = "the parser rejects a unary minus after a parenthesis ".repeat(4);
        let mut counts = Counts::default();
        let a = Asked("a", Cell::new(0));
        let first = counts.meter(&a).count(&long);
        assert_eq!(counts.meter(&a).count(&long), first);
        assert_eq!(a.1.get(), 1, "the second count came from the cache");
        counts.meter(&a).count("short");
        counts.meter(&a).count("short");
        assert_eq!(a.1.get(), 3, "short texts are counted each time");
        // Another meter starts over: its counts are not the first one's.
        let b = Asked("b", Cell::new(0));
        counts.meter(&b).count(&long);
        assert_eq!(b.1.get(), 1);
        assert_eq!(counts.len(), 1);
    }
}
