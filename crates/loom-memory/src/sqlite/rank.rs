//! BM25 ranking in SQLite: FTS5 finds the items holding the query's terms, Loom scores them
//! ([`crate::bm25`]) from the searched agent's own statistics ([`super::terms`]).
//!
//! FTS5's `bm25()` weighs terms over the whole table, every agent's items together, so an
//! agent's ranking would move with what other agents store; and it measures length and stems
//! differently from PostgreSQL. So the index (over [`crate::text::stems`], which both backends
//! rank on) only finds the matches, and each is scored here: a term's weight from the agent's
//! document frequencies, its frequency from the item's terms (kept as the index's content), the
//! item's length from its content words against the agent's average. The query is ranked on
//! its rarest terms and, when even the rarest is frequent, on its newest matches only
//! ([`bm25::SCORED_MATCHES`]), so the work is bounded whatever the terms.

use std::collections::HashMap;

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, ToSql};

use crate::bm25;
use crate::error::{backend, Result};
use crate::item::ItemId;

use super::terms;

/// The FTS5 expression for `terms`: any of them, each a quoted string (so that no user text is
/// read as query syntax).
pub(crate) fn match_expression(terms: &[&str]) -> String {
    terms
        .iter()
        .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// The best `candidates` items for the query's `terms` that pass `filters` (SQL over `i`, with
/// `args`), by BM25 over `agent`'s statistics (every agent's when `None`), best first.
pub(crate) fn bm25(
    conn: &Connection,
    terms: &[String],
    agent: Option<&str>,
    filters: &str,
    args: &[(&'static str, Value)],
    candidates: usize,
) -> Result<Vec<(ItemId, f64)>> {
    let stems = bm25::query_stems(terms);
    let (items, words) = terms::totals(conn, agent)?;
    let frequencies = stems
        .iter()
        .map(|s| terms::frequency(conn, agent, s))
        .collect::<Result<Vec<i64>>>()?;
    let (kept, newest) = bm25::choose(&frequencies, items);
    if kept.is_empty() {
        return Ok(Vec::new());
    }
    let ranked: Vec<&str> = kept.iter().map(|&(i, _)| stems[i].as_str()).collect();
    let expression = Value::Text(match_expression(&ranked));
    fn with<'a>(
        args: &'a [(&'static str, Value)],
        extra: &[(&'static str, &'a Value)],
    ) -> Vec<(&'static str, &'a dyn ToSql)> {
        args.iter()
            .map(|(n, v)| (*n, v as &dyn ToSql))
            .chain(extra.iter().map(|(n, v)| (*n, *v as &dyn ToSql)))
            .collect()
    }
    // Even the rarest term is frequent: only the agent's newest matches are ranked (for such a
    // term recency is the better tie-break anyway), then filtered.
    let floor = if newest {
        let sql = format!(
            "SELECT memory_fts.rowid FROM memory_fts CROSS JOIN memory_items i ON i.id = memory_fts.rowid
             WHERE memory_fts MATCH ?1 AND (?2 IS NULL OR i.agent = ?2)
             ORDER BY memory_fts.rowid DESC LIMIT 1 OFFSET {}",
            bm25::SCORED_MATCHES
        );
        conn.prepare_cached(&sql)
            .and_then(|mut st| {
                st.query_row(rusqlite::params![expression, agent], |r| r.get(0))
                    .optional()
            })
            .map_err(backend("finding a frequent term's newest matches"))?
            .unwrap_or(0)
    } else {
        0_i64
    };
    // CROSS JOIN: the matches drive the join. Left to choose, SQLite walks the agent's items
    // (by the index on agent) and queries FTS5 again for each.
    let sql = format!(
        "SELECT i.id, memory_fts.terms, i.words
         FROM memory_fts CROSS JOIN memory_items i ON i.id = memory_fts.rowid
         WHERE memory_fts MATCH :query AND memory_fts.rowid > :floor{filters}"
    );
    let floor = Value::Integer(floor);
    let position: HashMap<&str, usize> = ranked.iter().enumerate().map(|(k, t)| (*t, k)).collect();
    let avg = words as f64 / items.max(1) as f64;
    let mut scored: Vec<(ItemId, f64)> = Vec::new();
    let mut st = conn
        .prepare_cached(&sql)
        .map_err(backend("searching memory"))?;
    let mut rows = st
        .query(with(args, &[(":query", &expression), (":floor", &floor)]).as_slice())
        .map_err(backend("searching memory"))?;
    let mut tf = vec![0_u32; ranked.len()];
    while let Some(row) = rows.next().map_err(backend("searching memory"))? {
        let read = (|| -> rusqlite::Result<(ItemId, String, i64)> {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })();
        let (id, held, len) = read.map_err(backend("searching memory"))?;
        tf.iter_mut().for_each(|n| *n = 0);
        for term in held.split(' ') {
            if let Some(&k) = position.get(term) {
                tf[k] += 1;
            }
        }
        let score: f64 = kept
            .iter()
            .zip(&tf)
            .filter(|(_, &n)| n > 0)
            .map(|(&(_, weight), &n)| bm25::term_score(weight, f64::from(n), len as f64, avg))
            .sum();
        scored.push((id, score));
    }
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(candidates);
    Ok(scored)
}
