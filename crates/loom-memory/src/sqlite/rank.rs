//! BM25 ranking over the FTS5 index that scores a bounded number of items.
//!
//! FTS5 computes `bm25()` for every item an OR-query matches and joins each to its row for the
//! filters, so a query with a few frequent terms costs a score for tens of thousands of items
//! while only the best hundred or so are read. A frequent term adds little to any item's score
//! (its inverse document frequency is low), so the query is ranked on its rarest terms, as many
//! as have at most [`SCORED_MATCHES`] matches together (the rarest always, whatever its count);
//! the more frequent ones are left out. This is Lucene's cutoff frequency made relative to the
//! query, and when even the rarest term is frequent only its newest matches are ranked: the
//! work is bounded whatever the terms, and a query whose terms are all rare — every
//! query on a memory of a few thousand items — is ranked exactly as one FTS5 query over all of
//! them would rank it.
//!
//! Tried and dropped: adding the frequent terms' part to the candidates only (MaxScore's
//! idea) with `rowid IN (…)` on FTS5. FTS5 recomputes `bm25()`'s inverse document frequencies,
//! by walking each term's whole match list, for every rowid looked up, which made the p99 five
//! times worse.

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension};

use crate::error::{backend, Result};
use crate::item::ItemId;

use super::read::query_ids;

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
        .and_then(|mut st| st.query_row([match_expression(&[term.to_owned()])], |r| r.get(0)))
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
    let mut total = 0usize;
    let rarest = counted.first().map_or(0, |c| c.0);
    for (n, _, term) in counted {
        total = total.saturating_add(n);
        if rare.is_empty() || total <= SCORED_MATCHES {
            rare.push(term);
        }
    }
    let expression = match_expression(&rare);
    // Even the rarest term is frequent: only its newest matches are ranked, so that the work
    // stays bounded (for such a term recency is the better tie-break anyway).
    let floor: i64 = if rarest > SCORED_MATCHES {
        let offset = i64::try_from(SCORED_MATCHES).unwrap_or(i64::MAX);
        conn.prepare_cached(
            "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ?1
             ORDER BY rowid DESC LIMIT 1 OFFSET ?2",
        )
        .and_then(|mut st| {
            st.query_row(rusqlite::params![expression, offset], |r| r.get(0))
                .optional()
        })
        .map_err(backend("finding a frequent term's newest matches"))?
        .unwrap_or(0)
    } else {
        0
    };
    // FTS5's bm25() is lower for better matches; scores here are higher-better.
    let sql = format!(
        "SELECT i.id, bm25(memory_fts) AS rank
         FROM memory_fts JOIN memory_items i ON i.id = memory_fts.rowid
         WHERE memory_fts MATCH :query AND memory_fts.rowid > :floor{filters}
         ORDER BY rank, i.id LIMIT {candidates}"
    );
    let query = [
        (":query", Value::Text(expression)),
        (":floor", Value::Integer(floor)),
    ];
    let ranked: Vec<(ItemId, f64)> =
        query_ids::<f64>(conn, &sql, args, &query, "searching memory")?
            .into_iter()
            .map(|(id, rank)| (id, -rank))
            .collect();
    Ok(ranked)
}
