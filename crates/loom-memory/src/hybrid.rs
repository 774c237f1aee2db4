//! What hybrid search shares across backends: the query's vector (embedded once per question)
//! and the fusion of the full-text and vector rankings by their scores.
//!
//! The backends differ in how they rank (FTS5 or a `tsvector`, a scan in Rust or in SQL); from
//! two ranked lists on, the arithmetic is the same, so it lives here and both call it.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use crate::embed::Embedder;
use crate::error::Result;
use crate::item::{ItemId, NewItem, Search, Written};

/// The query's vector, made by the memory's embedder, and that embedder's model id (only
/// vectors of the same model are compared).
#[derive(Debug)]
pub(crate) struct QueryVector<'a> {
    pub(crate) model: &'a str,
    pub(crate) vector: Vec<f32>,
}

/// The last query embedded and its vector: the same question asked again (under another
/// budget, or by a retry) is not embedded twice.
#[derive(Debug, Default)]
pub(crate) struct QueryCache(Mutex<Option<(String, Vec<f32>)>>);

impl QueryCache {
    /// The vector of `search`'s query by `embedder`, from the cache when it was the last one
    /// asked; `None` when the search cannot return anything (an empty query, limit or budget),
    /// so nothing is embedded for it.
    pub(crate) fn vector<'e>(
        &self,
        embedder: &'e dyn Embedder,
        search: &Search,
    ) -> Result<Option<QueryVector<'e>>> {
        if search.query.trim().is_empty() || search.limit == 0 || search.budget == 0 {
            return Ok(None);
        }
        let cached = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .filter(|(q, _)| *q == search.query)
            .map(|(_, v)| v.clone());
        let vector = match cached {
            Some(v) => Some(v),
            None => {
                let v = embedder.embed(&[search.query.as_str()])?.pop();
                if let Some(v) = &v {
                    *self.0.lock().unwrap_or_else(PoisonError::into_inner) =
                        Some((search.query.clone(), v.clone()));
                }
                v
            }
        };
        Ok(vector.map(|vector| QueryVector {
            model: embedder.model_id(),
            vector,
        }))
    }
}

/// How a signal's scores are put on one scale before a fusion adds them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scale {
    /// Divided by the best score: the best match is 1, a match half as strong 0.5. For BM25,
    /// whose scores only compare items for one query, and which only items sharing a word with
    /// the query have.
    OfBest,
    /// How far above the first score past the `n` best, as a share of the best's margin above
    /// it: 0 from the `n + 1`-th down (above 0, when no more than `n` items are scored). For
    /// similarity, which every item has: a vector match counts only as far as it stands out from
    /// the nearest items a search of `n` hits would not return anyway (`n`, the search's limit).
    AboveNth(usize),
}

/// A signal's ranking (best first, higher scores better) with its weight and scale.
#[derive(Debug)]
pub(crate) struct Weighed<'a> {
    pub(crate) ranking: &'a [(ItemId, f64)],
    pub(crate) weight: f64,
    pub(crate) scale: Scale,
}

/// Fuses rankings by their scores: each item scores the sum over the rankings of the signal's
/// weight times its score on the signal's [`Scale`] (0 where a ranking does not have it).
/// Returned best first (ties by id).
///
/// Why scores and not ranks (reciprocal-rank fusion, which Loom used before): rank fusion
/// counts a loosely similar turn at the top of the vector ranking as much as an exact
/// name-and-event match at the top of BM25's, and measured on LoCoMo it made recall worse than
/// BM25 alone at every budget (docs/memory.md, "Search").
pub(crate) fn fuse(rankings: &[Weighed<'_>]) -> Vec<(ItemId, f64)> {
    let mut fused: BTreeMap<ItemId, f64> = BTreeMap::new();
    for r in rankings {
        let Some(&(_, best)) = r.ranking.first() else {
            continue;
        };
        let (floor, span) = match r.scale {
            Scale::OfBest => (0.0, best),
            Scale::AboveNth(n) => {
                // No more than `n` items scored: all of them are among the `n` nearest, and the
                // floor is no similarity at all (or the lowest score, when that is below it).
                let nth = match r.ranking.get(n) {
                    Some(&(_, past)) => past,
                    None => r.ranking.last().map_or(0.0, |l| l.1.min(0.0)),
                };
                (nth, best - nth)
            }
        };
        if span.is_nan() || span <= 0.0 {
            // Every score alike (or none usable): the signal tells the items nothing apart.
            continue;
        }
        for &(id, score) in r.ranking {
            let scaled = ((score - floor) / span).clamp(0.0, 1.0);
            if scaled > 0.0 {
                *fused.entry(id).or_insert(0.0) += r.weight * scaled;
            }
        }
    }
    let mut out: Vec<(ItemId, f64)> = fused.into_iter().collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out
}

/// The vectors of the items a write created (`written` answers `items` one for one), embedded in
/// one call; empty when it created none. Both backends store them after their write transaction,
/// so that a slow remote embedder never holds the database.
pub(crate) fn embed_created(
    embedder: &dyn Embedder,
    written: &[Written],
    items: &[NewItem],
) -> Result<Vec<(ItemId, Vec<f32>)>> {
    let created: Vec<(ItemId, &str)> = written
        .iter()
        .zip(items)
        .filter_map(|(w, item)| match w {
            Written::Created(id) => Some((*id, item.text.as_str())),
            _ => None,
        })
        .collect();
    if created.is_empty() {
        return Ok(Vec::new());
    }
    let texts: Vec<&str> = created.iter().map(|(_, t)| *t).collect();
    let vectors = embedder.embed(&texts)?;
    Ok(created.iter().map(|(id, _)| *id).zip(vectors).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weighed(ranking: &[(ItemId, f64)], weight: f64, scale: Scale) -> Weighed<'_> {
        Weighed {
            ranking,
            weight,
            scale,
        }
    }

    #[test]
    fn an_item_in_both_lists_outranks_a_first_place_in_one() {
        let bm25 = [(1, 9.0), (2, 8.0)];
        let near = [(3, 0.9), (2, 0.8), (4, 0.1)];
        let fused = fuse(&[
            weighed(&bm25, 1.0, Scale::OfBest),
            weighed(&near, 0.5, Scale::AboveNth(3)),
        ]);
        let ids: Vec<ItemId> = fused.iter().map(|f| f.0).collect();
        assert_eq!(ids, [2, 1, 3, 4]);
    }

    #[test]
    fn a_strong_exact_match_stays_above_any_similar_item() {
        // The vector ranking's best is worth at most its weight (0.5); BM25's best is 1.
        let bm25 = [(1, 12.0), (2, 1.0)];
        let near = [(3, 0.95), (4, 0.9), (5, 0.2), (1, 0.1)];
        let fused = fuse(&[
            weighed(&bm25, 1.0, Scale::OfBest),
            weighed(&near, 0.5, Scale::AboveNth(2)),
        ]);
        assert_eq!(fused[0], (1, 1.0));
        assert_eq!(fused[1], (3, 0.5));
        // Past the n best, similarity adds nothing: item 5 and 1's vector score are out.
        assert!(fused.iter().all(|f| f.0 != 5), "{fused:?}");
    }

    #[test]
    fn a_signal_whose_scores_are_all_alike_adds_nothing() {
        let bm25 = [(1, 2.0), (2, 1.0)];
        let flat = [(2, 0.5), (1, 0.5)];
        let fused = fuse(&[
            weighed(&bm25, 1.0, Scale::OfBest),
            weighed(&flat, 0.5, Scale::AboveNth(0)),
        ]);
        assert_eq!(fused, [(1, 1.0), (2, 0.5)]);
        assert!(fuse(&[weighed(&[], 1.0, Scale::OfBest)]).is_empty());
        // Fewer items than n: each counts from no similarity up.
        let few = [(7, 0.8), (8, 0.4)];
        assert_eq!(
            fuse(&[weighed(&few, 0.5, Scale::AboveNth(10))]),
            [(7, 0.5), (8, 0.25)]
        );
    }
}
