//! What hybrid search shares across backends: the query's vector (embedded once per question)
//! and the fusion of the full-text and vector rankings by reciprocal rank.
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

/// Reciprocal-rank fusion's constant: how much a first place outweighs a tenth (the usual
/// value from Cormack et al., not tuned here).
const RRF_K: f64 = 60.0;

/// Fuses rankings (best first) by reciprocal rank: each item scores the sum over the lists of
/// `1 / (RRF_K + rank)`, rank counted from 1. Returned best first (ties by id).
///
/// Why ranks and not scores: BM25 and cosine similarity are on unrelated scales, and ranks
/// need no calibration.
pub(crate) fn fuse(lists: &[&[(ItemId, f64)]]) -> Vec<(ItemId, f64)> {
    let mut fused: BTreeMap<ItemId, f64> = BTreeMap::new();
    for list in lists {
        for (rank, (id, _)) in list.iter().enumerate() {
            *fused.entry(*id).or_insert(0.0) += 1.0 / (RRF_K + rank as f64 + 1.0);
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

    #[test]
    fn an_item_in_both_lists_outranks_a_first_place_in_one() {
        let bm25 = [(1, 9.0), (2, 5.0)];
        let near = [(3, 0.9), (2, 0.8)];
        let fused = fuse(&[&bm25, &near]);
        let ids: Vec<ItemId> = fused.iter().map(|f| f.0).collect();
        assert_eq!(ids, [2, 1, 3]);
    }
}
