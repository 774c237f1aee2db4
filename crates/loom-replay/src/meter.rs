//! The render pipeline's token meter over an exact OpenAI encoding.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use loom_core::render::TokenMeter;
use loom_tokens::Encoding;

/// Counts with an exact BPE encoding, as ordinary text.
#[derive(Debug, Clone, Copy)]
pub struct EncodingMeter(pub Encoding);

impl TokenMeter for EncodingMeter {
    fn count(&self, text: &str) -> u64 {
        self.0.count(text) as u64
    }

    fn name(&self) -> &str {
        self.0.name()
    }
}

/// A meter that counts each distinct text once: replay renders Loom's request and the full
/// history for every call, both meter the same messages, and the trajectories of one source
/// repeat their system prompt.
///
/// Texts are keyed by their length and a 64-bit hash, so a repeat costs a hash of the text
/// instead of a tokenization. Short texts are cached too: measured on the shared traces, the
/// lookup costs a small fraction of counting even a one-word text (the tokenizer's pre-split
/// and vocabulary lookups dominate a short count).
pub struct CachedMeter<'a> {
    inner: &'a dyn TokenMeter,
    cache: RefCell<HashMap<(usize, u64), u64, BuildHasherDefault<KeyHasher>>>,
}

impl std::fmt::Debug for CachedMeter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CachedMeter({})", self.inner.name())
    }
}

impl<'a> CachedMeter<'a> {
    /// A cache in front of `inner`.
    pub fn new(inner: &'a dyn TokenMeter) -> Self {
        Self {
            inner,
            cache: RefCell::new(HashMap::default()),
        }
    }
}

fn text_hash(text: &str) -> u64 {
    // FNV-1a over 8-byte words: fast, and collisions also need equal lengths to matter.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for chunk in text.as_bytes().chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        h = (h ^ u64::from_le_bytes(word)).wrapping_mul(0x0100_0000_01b3);
        h ^= h >> 29;
    }
    h
}

/// Hashes a cache key: the key already holds a hash of the text, so mixing in the length is
/// enough (SipHash over it again cost more than the lookup itself).
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(29) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl TokenMeter for CachedMeter<'_> {
    fn count(&self, text: &str) -> u64 {
        if text.is_empty() {
            return self.inner.count(text);
        }
        let key = (text.len(), text_hash(text));
        if let Some(&n) = self.cache.borrow().get(&key) {
            return n;
        }
        let n = self.inner.count(text);
        self.cache.borrow_mut().insert(key, n);
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

    #[test]
    fn cached_counts_equal_direct_counts() {
        let cached = CachedMeter::new(&ApproxMeter);
        for text in [
            "short",
            &"word ".repeat(100),
            &"other text ".repeat(40),
            &"word ".repeat(100),
        ] {
            assert_eq!(cached.count(text), ApproxMeter.count(text));
        }
        assert_eq!(cached.cache.borrow().len(), 3);
    }
}
