//! Full-text search under a token budget: BM25 over the items, smoothed by neighbouring turns,
//! then packed greedily.
//!
//! Why neighbours: in a conversation the turn that holds an answer is often not the one that
//! shares the question's words ("What did you do on Sunday?" — "Went hiking with the kids!").
//! So an item's score is its own BM25 plus a fraction of the BM25 of the items just before and
//! after it in the same session; an item that matches nothing can still be returned for the
//! match beside it.
//!
//! With an embedder, the BM25 ranking and the ranking by vector similarity to the query are
//! fused by reciprocal rank (each item scores `1 / (k + rank)` in each list it is in) before the
//! smoothing: the two scores are on unrelated scales, and ranks need no calibration. The same
//! filters apply to both lists.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, ToSql};

use crate::error::{backend, MemoryError, Result};
use crate::hybrid::{fuse, QueryVector};
use crate::item::{Hit, ItemId, Provenance, Search, Source, Tier};
use crate::text;

use super::rank;
use super::read::{corrupt, sources};
use super::vectors;

/// Candidates read per requested hit: some of the best may not fit the budget and are skipped,
/// so the search reads further than the limit before it packs.
const CANDIDATES_PER_HIT: usize = 4;

/// The fewest candidates read, for small limits.
const MIN_CANDIDATES: usize = 64;
/// The most candidates read, whatever the limit (a limit of 2^64 - 1 is a client's "no limit",
/// not a number of rows SQL can be asked for).
const MAX_CANDIDATES: usize = 100_000;

/// The share of a neighbour's own score an item gains for standing next to it.
const NEIGHBOUR_WEIGHT: f64 = 0.5;

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

/// Runs `sql` with the filter arguments plus `extra`, collecting one value per row.
pub(super) fn query_ids<T: rusqlite::types::FromSql>(
    conn: &Connection,
    sql: &str,
    args: &[(&'static str, Value)],
    extra: &[(&'static str, Value)],
    action: &'static str,
) -> Result<Vec<(ItemId, T)>> {
    let all: Vec<(&str, &dyn ToSql)> = args
        .iter()
        .chain(extra)
        .map(|(n, v)| (*n, v as &dyn ToSql))
        .collect();
    conn.prepare_cached(sql)
        .and_then(|mut st| {
            st.query_map(all.as_slice(), |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect()
        })
        .map_err(backend(action))
}

/// `list` (best first) with neighbour smoothing: each of its best `limit` items lends a share
/// of its score to the nearest item on either side of it in each session it came from (items
/// that pass the same filters); weaker matches would lend too little to change the hits.
/// Returned best first. The lenders' provenance is kept in `provenance` for the hits.
fn smoothed(
    conn: &Connection,
    list: &[(ItemId, f64)],
    limit: usize,
    filters: &str,
    args: &[(&'static str, Value)],
    provenance: &mut HashMap<ItemId, Vec<Provenance>>,
) -> Result<Vec<(ItemId, f64)>> {
    // Both sides in one statement: the nearest single-event item before `:from` and after
    // `:to` in session `:s`.
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
    let own: BTreeMap<ItemId, f64> = list.iter().copied().collect();
    let mut score = own.clone();
    for &(id, _) in list.iter().take(limit) {
        let lent = own.get(&id).copied().unwrap_or(0.0) * NEIGHBOUR_WEIGHT;
        let mut near = BTreeSet::new();
        let mine = match provenance.get(&id) {
            Some(p) => p.clone(),
            None => sources(conn, id)?,
        };
        for p in &mine {
            let seq = |n: u64| Value::Integer(i64::try_from(n).unwrap_or(i64::MAX));
            let extra = [
                (":s", Value::Text(p.session.as_str().to_owned())),
                (":from", seq(p.from_seq)),
                (":to", seq(p.to_seq)),
            ];
            for (n, _) in query_ids::<i64>(conn, &sides, args, &extra, "reading neighbours")? {
                near.insert(n);
            }
        }
        provenance.insert(id, mine);
        near.remove(&id);
        for n in near {
            *score.entry(n).or_insert(0.0) += lent;
        }
    }
    let mut ranked: Vec<(ItemId, f64)> = score.into_iter().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(ranked)
}

/// Items matching `search`, best first, as many as fit its budget and limit.
///
/// Packing is greedy by score: an item that does not fit in what is left of the budget is
/// skipped, never cut, and a smaller one after it may still fit. The invariant the caller
/// relies on: the hits' `tokens` sum to at most `search.budget`.
pub(crate) fn search(
    conn: &Connection,
    search: &Search,
    query: Option<&QueryVector<'_>>,
) -> Result<Vec<Hit>> {
    if let (Some(from), Some(to)) = (search.filters.from_ms, search.filters.to_ms) {
        if from > to {
            return Err(MemoryError::InvalidInput {
                field: "from/to",
                reason: format!("the time range starts ({from}) after it ends ({to})"),
            });
        }
    }
    let terms = text::query_terms(&search.query);
    if (terms.is_empty() && query.is_none()) || search.limit == 0 || search.budget == 0 {
        return Ok(Vec::new());
    }
    let (filters, args) = filter_sql(search);
    let candidates = search
        .limit
        .saturating_mul(CANDIDATES_PER_HIT)
        .clamp(MIN_CANDIDATES, MAX_CANDIDATES);
    let bm25 = if terms.is_empty() {
        Vec::new()
    } else {
        rank::bm25(conn, &terms, &filters, &args, candidates)?
    };
    let mut provenance: HashMap<ItemId, Vec<Provenance>> = HashMap::new();
    let mut smooth = |list: &[(ItemId, f64)]| {
        smoothed(conn, list, search.limit, &filters, &args, &mut provenance)
    };
    let ranked: Vec<(ItemId, f64)> = match query {
        None => smooth(&bm25)?,
        Some(q) => {
            let near = vectors::nearest(conn, q.model, &q.vector, &filters, &args, candidates)?;
            smooth(&fuse(&[&bm25, &near]))?
        }
    };

    let mut left = search.budget;
    let mut hits = Vec::new();
    let mut row = conn
        .prepare_cached("SELECT text, tokens, tier FROM memory_items WHERE id = ?1")
        .map_err(backend("reading a hit"))?;
    for (id, score) in ranked {
        if hits.len() >= search.limit || left == 0 {
            break;
        }
        let Some((text, tokens, tier)) = row
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
        let tokens = u64::try_from(tokens).map_err(|_| corrupt(id, format!("tokens {tokens}")))?;
        if tokens > left {
            continue;
        }
        left -= tokens;
        let tier: Tier = tier
            .parse()
            .map_err(|_| corrupt(id, format!("tier `{tier}`")))?;
        let known = provenance.remove(&id);
        let sources = match known {
            Some(p) => p,
            None => sources(conn, id)?,
        }
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
            score,
            tier,
            sources,
        });
    }
    Ok(hits)
}
