//! The deduplication and supersession rules every backend applies on write, kept apart from
//! SQL so that the SQLite and PostgreSQL backends decide the same way.

use std::collections::BTreeSet;

use crate::item::{ItemId, ItemKind};

/// Whether a source seen again is recognised by its text as well as its seqs: many facts come
/// from the same lines, while a derived item is the one item of its kind for its lines.
pub(crate) fn known_by_text(kind: ItemKind) -> bool {
    kind == ItemKind::Fact
}

/// Two items whose content-word sets are at least this similar (Jaccard) are one memory.
pub(crate) const NEAR_DUPLICATE: f64 = 0.9;

/// Items with fewer content words are only merged when exactly equal: in a short text one word
/// is the whole meaning ("deploy to staging" vs "deploy to prod").
pub(crate) const NEAR_MIN_WORDS: usize = 8;

/// Locality-sensitive keys of a word set (MinHash in bands): each band is the words that
/// minimise a few seeded hashes. Two sets share a band's key with a probability of about their
/// Jaccard similarity to the power of the band's width, so sets at the threshold almost always
/// share one of the bands, while unrelated sets almost never do — and, unlike single words, a
/// tuple of words is rare even when each is common, so candidate lists stay short. The hash is FNV-1a, fixed
/// here because the keys are stored.
pub(crate) fn sketch(words: &BTreeSet<String>) -> Vec<String> {
    fn fnv(seed: u64, word: &str) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325_u64 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        for b in word.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    }
    let min_word = |seed: u64| words.iter().min_by_key(|w| (fnv(seed, w), w.as_str()));
    (0..SKETCH_BANDS)
        .map(|band| {
            let mut key = format!("{band}");
            for seed in band * BAND_WIDTH..(band + 1) * BAND_WIDTH {
                key.push('\u{1f}');
                key.push_str(min_word(seed).map_or("", String::as_str));
            }
            key
        })
        .collect()
}

/// Bands in a sketch: more find more near duplicates and cost more lookups.
const SKETCH_BANDS: u64 = 5;

/// Words per band: wider bands make fewer chance candidates and miss more true ones.
const BAND_WIDTH: u64 = 3;

/// A current item with the same subject as a new statement: its id, its value and when it
/// became true.
pub(crate) struct Stated {
    pub(crate) id: ItemId,
    pub(crate) value: String,
    pub(crate) valid_from: i64,
}

/// One supersession to record: item `item` is superseded by `by` from time `at` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mark {
    pub(crate) item: ItemId,
    pub(crate) by: ItemId,
    pub(crate) at: i64,
}

/// What a new item `id`, stating `value` at `ts`, does to `others` (the agent's current items
/// with the same subject, oldest first): every one with another value is superseded by the new
/// item when it is older than it; but when one of them is newer than the new item, the new item
/// is itself superseded by the newest such one (an old source indexed late never overrides what
/// was said after it) and nothing else changes.
pub(crate) fn supersession(others: &[Stated], id: ItemId, value: &str, ts: i64) -> Vec<Mark> {
    let differ = |o: &&Stated| o.id != id && o.value != value;
    if let Some(newest) = others.iter().filter(differ).rfind(|o| o.valid_from > ts) {
        return vec![Mark {
            item: id,
            by: newest.id,
            at: newest.valid_from,
        }];
    }
    others
        .iter()
        .filter(differ)
        .map(|o| Mark {
            item: o.id,
            by: id,
            at: ts,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stated(id: ItemId, value: &str, valid_from: i64) -> Stated {
        Stated {
            id,
            value: value.into(),
            valid_from,
        }
    }

    #[test]
    fn a_newer_value_supersedes_older_ones_and_an_equal_value_is_left() {
        let others = [stated(1, "red", 10), stated(2, "blue", 20)];
        let marks = supersession(&others, 3, "blue", 30);
        assert_eq!(
            marks,
            [Mark {
                item: 1,
                by: 3,
                at: 30
            }]
        );
    }

    #[test]
    fn an_older_statement_indexed_late_is_superseded_by_the_newest() {
        let others = [stated(1, "red", 10), stated(2, "green", 40)];
        let marks = supersession(&others, 3, "blue", 30);
        assert_eq!(
            marks,
            [Mark {
                item: 3,
                by: 2,
                at: 40
            }]
        );
    }
}
