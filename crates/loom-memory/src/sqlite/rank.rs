//! BM25 ranking over the FTS5 index that scores as few items as it can.
//!
//! FTS5 computes `bm25()` for every item an OR-query matches and joins each to its row for the
//! filters, so a query with a few frequent terms costs a score for tens of thousands of items
//! while only the best hundred or so are read. BM25 is a sum over the query's terms, and a
//! frequent term adds little to any item (its inverse document frequency is low), so the
//! ranking is done in two steps, as MaxScore does: the rarest terms, whose matches add up to at
//! most [`SCORED_MATCHES`] items, pick and rank the candidates; the frequent terms then add
//! their part to those candidates only (one indexed look-up each), never enumerating their own
//! matches. An item that matches only frequent terms is not a candidate: with the rare terms'
//! weight ahead of it, it could not have ranked among the best.
//!
//! A query whose terms are all rare (every query on a memory of a few thousand items) is
//! ranked in one step, exactly as a single FTS5 query would rank it.

use std::collections::HashMap;

use rusqlite::types::Value;
use rusqlite::Connection;

use crate::error::{backend, Result};
use crate::item::ItemId;

use super::search::query_ids;

/// The most matches the candidate-picking terms may have together (when the rarest term alone
/// has more, it is used alone). Scoring a match costs FTS5 a few microseconds, so this bounds
/// the ranking's cost whatever the query.
const SCORED_MATCHES: usize = 2_000;

/// The FTS5 expression for `terms`: any of them, each a quoted string (so that no user text is
/// read as query syntax).
pub(crate) fn match_expression(terms: &[String]) -> String {
    terms
        .iter()
        .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// How many items `term` matches, counted up to `cap` (the count stops there).
fn matches_up_to(conn: &Connection, term: &str, cap: usize) -> Result<usize> {
    let sql = format!(
        "SELECT count(*) FROM (SELECT 1 FROM memory_fts WHERE memory_fts MATCH ?1 LIMIT {cap})"
    );
    let n: i64 = conn
        .prepare_cached(&sql)
        .and_then(|mut st| {
            st.query_row([match_expression(&[term.to_owned()])], |r| r.get(0))
        })
        .map_err(backend("counting a term's matches"))?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// The best `candidates` items for `terms` that pass `filters` (SQL over `i`, with `args`), by
/// BM25, best first, with higher-is-better scores.
pub(crate) fn bm25(
    conn: &Connection,
    terms: &[String],
    filters: &str,
    args: &[(&'static str, Value)],
    candidates: usize,
) -> Result<Vec<(ItemId, f64)>> {
    // Rarest first (ties in query order), and split where the matches add up past the bound.
    let mut counted = Vec::with_capacity(terms.len());
    for (i, t) in terms.iter().enumerate() {
        counted.push((matches_up_to(conn, t, SCORED_MATCHES + 1)?, i, t.clone()));
    }
    counted.sort();
    let mut rare = Vec::new();
    let mut common = Vec::new();
    let mut total = 0usize;
    for (n, _, term) in counted {
        total = total.saturating_add(n);
        if rare.is_empty() || total <= SCORED_MATCHES {
            rare.push(term);
        } else {
            common.push(term);
        }
    }
    // FTS5's bm25() is lower for better matches; scores here are higher-better.
    let sql = format!(
        "SELECT i.id, bm25(memory_fts) AS rank
         FROM memory_fts JOIN memory_items i ON i.id = memory_fts.rowid
         WHERE memory_fts MATCH :query{filters}
         ORDER BY rank, i.id LIMIT {candidates}"
    );
    let query = [(":query", Value::Text(match_expression(&rare)))];
    let mut ranked: Vec<(ItemId, f64)> =
        query_ids::<f64>(conn, &sql, args, &query, "searching memory")?
            .into_iter()
            .map(|(id, rank)| (id, -rank))
            .collect();
    if common.is_empty() || ranked.is_empty() {
        return Ok(ranked);
    }
    // The frequent terms' part of each candidate's score: bm25() of an OR of them is the sum
    // of each term's part, with the same inverse document frequencies as in the whole query.
    let ids = serde_json::to_string(&ranked.iter().map(|(id, _)| *id).collect::<Vec<_>>())
        .unwrap_or_else(|_| "[]".into());
    let extra: HashMap<ItemId, f64> = conn
        .prepare_cached(
            "SELECT rowid, bm25(memory_fts) FROM memory_fts
             WHERE memory_fts MATCH ?1 AND rowid IN (SELECT value FROM json_each(?2))",
        )
        .and_then(|mut st| {
            st.query_map(rusqlite::params![match_expression(&common), ids], |r| {
                Ok((r.get::<_, ItemId>(0)?, r.get::<_, f64>(1)?))
            })?
            .collect()
        })
        .map_err(backend("scoring frequent terms"))?;
    for (id, score) in &mut ranked {
        if let Some(rank) = extra.get(id) {
            *score -= rank;
        }
    }
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(ranked)
}
