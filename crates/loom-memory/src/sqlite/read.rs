//! Reading memory: one item with its provenance, and full-text search under a token budget.

use rusqlite::types::Value;
use rusqlite::{params_from_iter, Connection, OptionalExtension};

use loom_core::{AgentId, SessionId};

use crate::error::{backend, MemoryError, Result};
use crate::item::{Hit, Item, ItemId, ItemKind, Provenance, Search, Source, Tier};
use crate::text;

/// Candidates read per requested hit: some of the best may not fit the budget and are skipped,
/// so the search reads further than the limit before it packs.
const CANDIDATES_PER_HIT: usize = 4;

/// The fewest candidates read, for small limits.
const MIN_CANDIDATES: usize = 64;

fn corrupt(id: ItemId, reason: String) -> MemoryError {
    MemoryError::Corrupt {
        record: format!("item {id}"),
        reason,
    }
}

/// The provenance of item `id`, oldest first.
pub(crate) fn sources(conn: &Connection, id: ItemId) -> Result<Vec<Provenance>> {
    let rows: Vec<(String, i64, i64, i64)> = conn
        .prepare_cached(
            "SELECT session, from_seq, to_seq, ts_ms FROM memory_sources WHERE item = ?1
             ORDER BY ts_ms, session, from_seq",
        )
        .and_then(|mut st| {
            st.query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect()
        })
        .map_err(backend("reading a memory item's provenance"))?;
    rows.into_iter()
        .map(|(session, from, to, ts_ms)| {
            let session = SessionId::new(session).map_err(|e| corrupt(id, e.to_string()))?;
            let seq = |n: i64| u64::try_from(n).map_err(|_| corrupt(id, format!("seq {n}")));
            Ok(Provenance {
                session,
                from_seq: seq(from)?,
                to_seq: seq(to)?,
                ts_ms,
            })
        })
        .collect()
}

/// Item `id` with its provenance; [`MemoryError::ItemNotFound`] when there is none.
pub(crate) fn load_item(conn: &Connection, id: ItemId) -> Result<Item> {
    type Row = (
        String,
        String,
        String,
        String,
        i64,
        String,
        i64,
        Option<i64>,
        Option<i64>,
    );
    let row: Option<Row> = conn
        .prepare_cached(
            "SELECT agent, tier, kind, text, tokens, hash, valid_from, valid_to, superseded_by
             FROM memory_items WHERE id = ?1",
        )
        .and_then(|mut st| {
            st.query_row([id], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                ))
            })
            .optional()
        })
        .map_err(backend("reading a memory item"))?;
    let (agent, tier, kind, text, tokens, hash, valid_from, valid_to, superseded_by) =
        row.ok_or(MemoryError::ItemNotFound(id))?;
    Ok(Item {
        id,
        agent: AgentId::new(agent).map_err(|e| corrupt(id, e.to_string()))?,
        tier: tier
            .parse()
            .map_err(|_| corrupt(id, format!("tier `{tier}`")))?,
        kind: ItemKind::parse(&kind).ok_or_else(|| corrupt(id, format!("kind `{kind}`")))?,
        text,
        tokens: u64::try_from(tokens).map_err(|_| corrupt(id, format!("tokens {tokens}")))?,
        hash,
        valid_from,
        valid_to,
        superseded_by,
        sources: sources(conn, id)?,
    })
}

/// The FTS5 expression for `terms`: any of them, each a quoted string (so that no user text is
/// read as query syntax).
fn match_expression(terms: &[String]) -> String {
    terms
        .iter()
        .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// Items matching `search`, best first by BM25, as many as fit its budget and limit.
///
/// Packing is greedy by score: an item that does not fit in what is left of the budget is
/// skipped, never cut, and a smaller one after it may still fit. The invariant the caller
/// relies on: the hits' `tokens` sum to at most `search.budget`.
pub(crate) fn search(conn: &Connection, search: &Search) -> Result<Vec<Hit>> {
    if let (Some(from), Some(to)) = (search.filters.from_ms, search.filters.to_ms) {
        if from > to {
            return Err(MemoryError::InvalidInput {
                field: "from/to",
                reason: format!("the time range starts ({from}) after it ends ({to})"),
            });
        }
    }
    let terms = text::query_terms(&search.query);
    if terms.is_empty() || search.limit == 0 || search.budget == 0 {
        return Ok(Vec::new());
    }
    let mut sql = String::from(
        "SELECT i.id, i.text, i.tokens, i.tier, bm25(memory_fts) AS rank
         FROM memory_fts JOIN memory_items i ON i.id = memory_fts.rowid
         WHERE memory_fts MATCH ?1 AND i.tokens <= ?2",
    );
    let budget = i64::try_from(search.budget).unwrap_or(i64::MAX);
    let mut args = vec![
        Value::Text(match_expression(&terms)),
        Value::Integer(budget),
    ];
    let mut push = |clause: &str, value: Value, args: &mut Vec<Value>| {
        args.push(value);
        sql.push_str(&clause.replace('?', &format!("?{}", args.len())));
    };
    let f = &search.filters;
    if let Some(agent) = &f.agent {
        push(
            " AND i.agent = ?",
            Value::Text(agent.as_str().to_owned()),
            &mut args,
        );
    }
    if let Some(tier) = f.tier {
        push(
            " AND i.tier = ?",
            Value::Text(tier.as_str().to_owned()),
            &mut args,
        );
    }
    if let Some(from) = f.from_ms {
        push(" AND i.valid_from >= ?", Value::Integer(from), &mut args);
    }
    if let Some(to) = f.to_ms {
        push(" AND i.valid_from <= ?", Value::Integer(to), &mut args);
    }
    if let Some(session) = &f.session {
        push(
            " AND EXISTS (SELECT 1 FROM memory_sources s WHERE s.item = i.id AND s.session = ?)",
            Value::Text(session.as_str().to_owned()),
            &mut args,
        );
    }
    if !search.history {
        sql.push_str(" AND i.superseded_by IS NULL");
    }
    let candidates = search
        .limit
        .saturating_mul(CANDIDATES_PER_HIT)
        .max(MIN_CANDIDATES);
    sql.push_str(&format!(" ORDER BY rank, i.id LIMIT {candidates}"));

    let rows: Vec<(ItemId, String, i64, String, f64)> = conn
        .prepare_cached(&sql)
        .and_then(|mut st| {
            st.query_map(params_from_iter(args), |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })?
            .collect()
        })
        .map_err(backend("searching memory"))?;

    let mut left = search.budget;
    let mut hits = Vec::new();
    for (id, text, tokens, tier, rank) in rows {
        if hits.len() >= search.limit || left == 0 {
            break;
        }
        let tokens = u64::try_from(tokens).map_err(|_| corrupt(id, format!("tokens {tokens}")))?;
        if tokens > left {
            continue;
        }
        left -= tokens;
        let tier: Tier = tier
            .parse()
            .map_err(|_| corrupt(id, format!("tier `{tier}`")))?;
        let sources = sources(conn, id)?
            .into_iter()
            .map(|p| Source {
                session: p.session,
                seq: p.from_seq,
                to_seq: (p.to_seq != p.from_seq).then_some(p.to_seq),
            })
            .collect();
        hits.push(Hit {
            id,
            text,
            tokens,
            // FTS5's bm25() is lower for better matches; the contract's score is higher-better.
            score: -rank,
            tier,
            sources,
        });
    }
    Ok(hits)
}
