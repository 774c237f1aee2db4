//! Search in SQLite: the backend half of [`crate::search`] — BM25 over the agent's statistics
//! ([`super::rank`]) and the exact vector scan ([`super::vectors`]) as its retrievers, and the
//! rows a search reads after ranking, all under the same filters.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension};

use crate::error::{backend, Result};
use crate::hybrid::QueryVector;
use crate::item::{Hit, ItemId, Provenance, Search};
use crate::search::{self as pipeline, FullText, HitRow, Nearest, Ranking, Retriever, SearchRows};

use super::rank;
use super::read::{query_ids, sources};
use super::vectors;

/// The filters as SQL over `i` (memory_items), with named parameters.
fn filter_sql(search: &Search) -> (String, Vec<(&'static str, Value)>) {
    let f = &search.filters;
    let mut sql = String::new();
    let mut args = Vec::new();
    if let Some(agent) = &f.agent {
        sql.push_str(" AND i.agent = :agent");
        args.push((":agent", Value::Text(agent.as_str().to_owned())));
    }
    if let Some(tier) = f.tier {
        sql.push_str(" AND i.tier = :tier");
        args.push((":tier", Value::Text(tier.as_str().to_owned())));
    }
    if let Some(from) = f.from_ms {
        sql.push_str(" AND i.valid_from >= :from_ms");
        args.push((":from_ms", Value::Integer(from)));
    }
    if let Some(to) = f.to_ms {
        sql.push_str(" AND i.valid_from <= :to_ms");
        args.push((":to_ms", Value::Integer(to)));
    }
    if let Some(session) = &f.session {
        sql.push_str(
            " AND EXISTS (SELECT 1 FROM memory_sources fs WHERE fs.item = i.id \
             AND fs.session = :session)",
        );
        args.push((":session", Value::Text(session.as_str().to_owned())));
    }
    if !search.history {
        sql.push_str(" AND i.superseded_by IS NULL");
    }
    // Expired L2 notes are never returned (they are purged at the next save).
    sql.push_str(
        " AND NOT EXISTS (SELECT 1 FROM memory_expiry x WHERE x.item = i.id \
         AND x.expires_ms <= :now_ms)",
    );
    args.push((":now_ms", Value::Integer(crate::notes::wall_clock_ms())));
    let budget = i64::try_from(search.budget).unwrap_or(i64::MAX);
    sql.push_str(" AND i.tokens <= :budget");
    args.push((":budget", Value::Integer(budget)));
    (sql, args)
}

/// A search's reads in SQLite, under its filters (SQL over `i`, memory_items, with named
/// parameters).
pub(crate) struct SqliteSearch<'c> {
    conn: &'c Connection,
    /// The memory's vectors in RAM.
    vectors: &'c vectors::Vectors,
    filters: String,
    args: Vec<(&'static str, Value)>,
    /// The provenance read for the neighbours, kept for the hits (the best items are both).
    sources: HashMap<ItemId, Vec<Provenance>>,
}

impl Retriever<SqliteSearch<'_>> for FullText {
    fn rank(&self, b: &mut SqliteSearch<'_>, s: &Search, candidates: usize) -> Result<Ranking> {
        if self.terms.is_empty() {
            return Ok(Vec::new());
        }
        let agent = s.filters.agent.as_ref().map(|a| a.as_str());
        rank::bm25(b.conn, &self.terms, agent, &b.filters, &b.args, candidates)
    }
}

impl Retriever<SqliteSearch<'_>> for Nearest<'_> {
    fn rank(&self, b: &mut SqliteSearch<'_>, s: &Search, candidates: usize) -> Result<Ranking> {
        let agent = s.filters.agent.as_ref().map(|a| a.as_str());
        vectors::nearest(
            b.conn, b.vectors, self.0, agent, &b.filters, &b.args, candidates,
        )
    }
}

impl SearchRows for SqliteSearch<'_> {
    fn neighbours(&mut self, _: &Search, ids: &[ItemId]) -> Result<Vec<(ItemId, ItemId)>> {
        // Both sides in one statement: the nearest single-event item before `:from` and after
        // `:to` in session `:s`.
        let filters = &self.filters;
        let sides = format!(
            "SELECT * FROM (SELECT s.item, s.from_seq FROM memory_sources s
               JOIN memory_items i ON i.id = s.item
               WHERE s.session = :s AND s.from_seq < :from AND s.from_seq = s.to_seq{filters}
               ORDER BY s.from_seq DESC LIMIT 1)
             UNION ALL
             SELECT * FROM (SELECT s.item, s.from_seq FROM memory_sources s
               JOIN memory_items i ON i.id = s.item
               WHERE s.session = :s AND s.from_seq > :to AND s.from_seq = s.to_seq{filters}
               ORDER BY s.from_seq LIMIT 1)"
        );
        let mut pairs = Vec::new();
        for &id in ids {
            let mut near = BTreeSet::new();
            let mine = sources(self.conn, id)?;
            for p in &mine {
                let seq = |n: u64| Value::Integer(i64::try_from(n).unwrap_or(i64::MAX));
                let extra = [
                    (":s", Value::Text(p.session.as_str().to_owned())),
                    (":from", seq(p.from_seq)),
                    (":to", seq(p.to_seq)),
                ];
                let found =
                    query_ids::<i64>(self.conn, &sides, &self.args, &extra, "reading neighbours")?;
                near.extend(found.into_iter().map(|(n, _)| n));
            }
            self.sources.insert(id, mine);
            near.remove(&id);
            pairs.extend(near.into_iter().map(|n| (id, n)));
        }
        Ok(pairs)
    }

    fn rows(&mut self, ids: &[ItemId]) -> Result<BTreeMap<ItemId, HitRow>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT text, tokens, tier FROM memory_items WHERE id = ?1")
            .map_err(backend("reading a hit"))?;
        let mut out = BTreeMap::new();
        for &id in ids {
            let Some((text, tokens, tier)) = st
                .query_row([id], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, String>(2)?,
                    ))
                })
                .optional()
                .map_err(backend("reading a hit"))?
            else {
                continue;
            };
            out.insert(id, HitRow::read(id, text, tokens, &tier)?);
        }
        Ok(out)
    }

    fn provenance(&mut self, ids: &[ItemId]) -> Result<BTreeMap<ItemId, Vec<Provenance>>> {
        ids.iter()
            .map(|&id| match self.sources.remove(&id) {
                Some(known) => Ok((id, known)),
                None => Ok((id, sources(self.conn, id)?)),
            })
            .collect()
    }
}

/// Items matching `search`, best first, as many as fit its budget and limit ([`pipeline::run`]),
/// ranked by BM25 and, with the query's vector, by similarity to it too.
pub(crate) fn search(
    conn: &Connection,
    vectors: &vectors::Vectors,
    search: &Search,
    query: Option<&QueryVector<'_>>,
) -> Result<Vec<Hit>> {
    let (filters, args) = filter_sql(search);
    let mut rows = SqliteSearch {
        conn,
        vectors,
        filters,
        args,
        sources: HashMap::new(),
    };
    let text = FullText::of(search);
    let near = query.map(Nearest);
    let mut retrievers: Vec<&dyn Retriever<SqliteSearch<'_>>> = vec![&text];
    if let Some(near) = &near {
        retrievers.push(near);
    }
    pipeline::run(&mut rows, search, &retrievers)
}
