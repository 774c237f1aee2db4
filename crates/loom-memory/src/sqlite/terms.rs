//! The full-text index's rows and the statistics BM25 ranks with ([`crate::bm25`]), kept in
//! step with the items: an item's terms ([`text::stems`]) go into `memory_fts` and count in its
//! agent's document frequencies (`memory_terms`) and totals (`memory_stats`) when it is
//! written, and come out of all three when it is removed.

use std::collections::BTreeSet;

use rusqlite::{params, Connection, OptionalExtension};

use crate::error::{backend, Result};
use crate::item::ItemId;
use crate::text;

/// Indexes item `id` of `agent`, whose text is `text` and which has `words` content words.
pub(crate) fn index(
    tx: &Connection,
    id: ItemId,
    agent: &str,
    text: &str,
    words: usize,
) -> Result<()> {
    let stems = text::stems(text);
    tx.prepare_cached("INSERT INTO memory_fts (rowid, terms) VALUES (?1, ?2)")
        .and_then(|mut st| st.execute(params![id, stems.join(" ")]))
        .map_err(backend("indexing a memory item's text"))?;
    let distinct: BTreeSet<&str> = stems.iter().map(String::as_str).collect();
    count(tx, agent, &distinct, 1, words)
}

/// Takes item `id` out of the index and its agent's statistics (before the item's row goes).
pub(crate) fn unindex(tx: &Connection, id: ItemId) -> Result<()> {
    let row: Option<(String, i64, Option<String>)> = tx
        .prepare_cached(
            "SELECT i.agent, i.words, (SELECT f.terms FROM memory_fts f WHERE f.rowid = i.id)
             FROM memory_items i WHERE i.id = ?1",
        )
        .and_then(|mut st| {
            st.query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()
        })
        .map_err(backend("reading an item's terms"))?;
    let Some((agent, words, Some(terms))) = row else {
        return Ok(());
    };
    let distinct: BTreeSet<&str> = terms.split(' ').filter(|t| !t.is_empty()).collect();
    count(
        tx,
        &agent,
        &distinct,
        -1,
        usize::try_from(words).unwrap_or(0),
    )?;
    tx.prepare_cached("DELETE FROM memory_fts WHERE rowid = ?1")
        .and_then(|mut st| st.execute([id]))
        .map_err(backend("removing an item's text index"))?;
    Ok(())
}

/// Adds (`by` = 1) or takes away (`by` = -1) one item holding `terms`, of `words` content words,
/// to `agent`'s statistics.
fn count(
    tx: &Connection,
    agent: &str,
    terms: &BTreeSet<&str>,
    by: i64,
    words: usize,
) -> Result<()> {
    let mut st = tx
        .prepare_cached(
            "INSERT INTO memory_terms (agent, term, df) VALUES (?1, ?2, max(?3, 0))
             ON CONFLICT (agent, term) DO UPDATE SET df = max(df + ?3, 0)",
        )
        .map_err(backend("counting an item's terms"))?;
    for term in terms {
        st.execute(params![agent, term, by])
            .map_err(backend("counting an item's terms"))?;
    }
    let words = i64::try_from(words).unwrap_or(i64::MAX);
    tx.prepare_cached(
        "INSERT INTO memory_stats (agent, items, words) VALUES (?1, max(?2, 0), max(?3, 0))
         ON CONFLICT (agent) DO UPDATE
         SET items = max(items + ?2, 0), words = max(words + ?3, 0)",
    )
    .and_then(|mut st| st.execute(params![agent, by, by.saturating_mul(words)]))
    .map_err(backend("counting an agent's memory"))?;
    Ok(())
}

/// Indexes the items a database already holds (the migration to Loom's own terms).
pub(crate) fn fill(tx: &Connection) -> Result<()> {
    let items: Vec<(ItemId, String, String, i64)> = tx
        .prepare("SELECT id, agent, text, words FROM memory_items ORDER BY id")
        .and_then(|mut st| {
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect()
        })
        .map_err(backend("reading the items to index"))?;
    for (id, agent, text, words) in items {
        index(tx, id, &agent, &text, usize::try_from(words).unwrap_or(0))?;
    }
    Ok(())
}

/// `agent`'s items and their content words (every agent's when `None`).
pub(crate) fn totals(conn: &Connection, agent: Option<&str>) -> Result<(i64, i64)> {
    conn.prepare_cached(
        "SELECT coalesce(sum(items), 0), coalesce(sum(words), 0) FROM memory_stats
         WHERE ?1 IS NULL OR agent = ?1",
    )
    .and_then(|mut st| st.query_row([agent], |r| Ok((r.get(0)?, r.get(1)?))))
    .map_err(backend("reading an agent's memory totals"))
}

/// How many of `agent`'s items hold `term` (every agent's when `None`).
pub(crate) fn frequency(conn: &Connection, agent: Option<&str>, term: &str) -> Result<i64> {
    let sql = if agent.is_some() {
        "SELECT coalesce(sum(df), 0) FROM memory_terms WHERE agent = ?1 AND term = ?2"
    } else {
        "SELECT coalesce(sum(df), 0) FROM memory_terms WHERE ?1 IS NULL AND term = ?2"
    };
    conn.prepare_cached(sql)
        .and_then(|mut st| st.query_row(params![agent, term], |r| r.get(0)))
        .map_err(backend("reading a term's document frequency"))
}
