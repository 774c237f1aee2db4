//! Search in PostgreSQL: BM25 over the items' English full-text vectors, smoothed by
//! neighbouring turns and packed under the budget, as the SQLite backend does.
//!
//! PostgreSQL ranks without inverse document frequency (`ts_rank`), which lets a common word
//! outweigh a rare one; so the score here is BM25 — each term's IDF from the agent's document
//! frequencies kept on write (`memory_terms`), its
//! frequency from the positions the item's vector keeps, the item's length from its content
//! words against the agent's average (kept in `memory_stats`) — computed in one statement per
//! search. With an embedder, the ranking by similarity to the query's vector
//! ([`super::vectors::nearest`]) is fused with it by their scores, as in SQLite
//! ([`crate::hybrid::fuse`]). The pipeline around the two rankings is [`crate::search`]'s, as
//! for SQLite; this is the backend half: the retrievers and the rows read after ranking.

use std::collections::BTreeMap;

use loom_core::{AgentId, SessionId};
use postgres::Transaction;

use crate::bm25::{self, B, K1, SCORED_MATCHES};
use crate::error::{postgres as backend, MemoryError, Result};
use crate::hybrid::QueryVector;
use crate::item::{Hit, Item, ItemId, ItemKind, Provenance, Search};
use crate::search::{self as pipeline, FullText, HitRow, Nearest, Ranking, Retriever, SearchRows};

use super::filters::{filter_sql, refs, Param};
use super::vectors;

/// A term as a `tsquery` text: quoted, so that nothing in it is read as query syntax (terms
/// are runs of letters and digits, so they hold no quote).
pub(super) fn lexeme(term: &str) -> String {
    format!("'{}'", term.replace('\'', "''"))
}

/// The query's terms for [`bm25_sql`], from parameters `$1` (the terms as [`lexeme`]s) and `$2`
/// (their weights), as one row `a`: `q`, the `tsquery` matching any of them, and `lx` and `w`,
/// their lexemes under text search configuration `config` and each lexeme's weight (the sum of
/// its terms' weights, for terms that stem alike).
///
/// Memory's items are indexed under their terms ([`crate::text::stems`], stemmed by Loom, as in
/// SQLite), so memory searches with the `simple` configuration and stemmed terms; the knowledge
/// base's chunks, with `english`.
pub(super) fn terms_cte(config: &str) -> String {
    format!(
        "t AS (SELECT v.lexeme, sum(u.w) AS w
                    FROM unnest($1::text[], $2::float8[]) AS u(q, w),
                         LATERAL unnest(to_tsvector('{config}', u.q)) AS v
                    GROUP BY v.lexeme),
              a AS (SELECT (SELECT to_tsquery('{config}', string_agg(q, ' | '))
                            FROM unnest($1::text[]) AS q) AS q,
                           coalesce((SELECT array_agg(lexeme ORDER BY lexeme) FROM t), '{{}}') AS lx,
                           coalesce((SELECT array_agg(w ORDER BY lexeme) FROM t), '{{}}') AS w)"
    )
}

/// The BM25 score of the row `row` (its `tsv` and `words` columns) for the terms of [`terms_cte`],
/// with `avg` the SQL of the average length: each term's frequency read from the positions
/// the vector keeps, saturated at the row's length.
///
/// The row's vector is first cut down to the query's lexemes (marked with weight A, then
/// filtered on it; every lexeme of a generated vector has positions, which carry the weight),
/// so that only those are unnested: unnesting the whole vector and joining it to the terms cost
/// several times more per row, and a search scores up to [`SCORED_MATCHES`] rows.
pub(super) fn bm25_sql(row: &str, avg: &str) -> String {
    format!(
        "(SELECT coalesce(sum(a.w[array_position(a.lx, d.lexeme)] * f.tf * {k1p1}
                              / (f.tf + {K1} * (1 - {B} + {B} * {row}.words / {avg}))), 0)
          FROM unnest(ts_filter(setweight({row}.tsv, 'A', a.lx), '{{a}}')) AS d,
          LATERAL (SELECT coalesce(array_length(d.positions, 1), 1)::float8 AS tf) AS f)",
        k1p1 = K1 + 1.0,
    )
}

/// The terms worth ranking on, each with its weight (BM25's IDF), in the query's order, and
/// whether only the newest [`SCORED_MATCHES`] matches are ranked.
///
/// As in the SQLite backend's ranking (`sqlite/rank.rs`): a frequent term adds little to any
/// item's score, and scoring its thousands of matches (each item's vector unnested in SQL) was
/// most of a search's time; so the query is ranked on its rarest terms, as many as have at most
/// [`SCORED_MATCHES`] matches together (the rarest always), and when even the rarest has more,
/// on its newest matches only. The counts are the document frequencies kept on write
/// (`memory_terms`), of the agent's items when the search names one: an agent's ranking does
/// not move with what other agents store.
fn weights(
    tx: &mut Transaction<'_>,
    terms: &[String],
    agent: Option<&str>,
    total: i64,
) -> Result<(Vec<(String, f64)>, bool)> {
    let lexemes: Vec<String> = terms.iter().map(|t| lexeme(t)).collect();
    // Each term's document frequency among the agent's items (everyone's without an agent),
    // from the counts kept on write (the terms are stems, each its own lexeme).
    let counts = tx
        .query(
            "SELECT t.n, coalesce((
                 SELECT min(d.df) FROM unnest(to_tsvector('simple', t.q)) AS l,
                 LATERAL (SELECT coalesce(sum(m.df), 0)::bigint AS df FROM memory_terms m
                          WHERE m.lexeme = l.lexeme AND ($2::text IS NULL OR m.agent = $2)) AS d
             ), 0)::bigint
             FROM unnest($1::text[]) WITH ORDINALITY AS t(q, n) ORDER BY t.n",
            &[&terms, &agent],
        )
        .map_err(backend("reading a term's document frequency"))?;
    let mut frequencies = vec![0_i64; lexemes.len()];
    for r in &counts {
        let n: i64 = r.get(0);
        if let Some(df) = usize::try_from(n - 1)
            .ok()
            .and_then(|i| frequencies.get_mut(i))
        {
            *df = r.get(1);
        }
    }
    let (kept, newest) = bm25::choose(&frequencies, total);
    let weights = kept
        .into_iter()
        .filter_map(|(i, weight)| Some((lexemes.get(i)?.clone(), weight)))
        .collect();
    Ok((weights, newest))
}

/// A search's reads in PostgreSQL, in one transaction.
pub(super) struct PgSearch<'t, 'c> {
    tx: &'t mut Transaction<'c>,
    pgvector: bool,
}

impl Retriever<PgSearch<'_, '_>> for FullText {
    fn rank(
        &self,
        b: &mut PgSearch<'_, '_>,
        search: &Search,
        candidates: usize,
    ) -> Result<Ranking> {
        if self.terms.is_empty() {
            return Ok(Vec::new());
        }
        bm25(b.tx, search, &self.terms, candidates)
    }
}

impl Retriever<PgSearch<'_, '_>> for Nearest<'_> {
    fn rank(
        &self,
        b: &mut PgSearch<'_, '_>,
        search: &Search,
        candidates: usize,
    ) -> Result<Ranking> {
        let q = self.0;
        vectors::nearest(b.tx, search, q.model, &q.vector, candidates, b.pgvector)
    }
}

/// Items matching `search`, best first, as many as fit its budget and limit ([`pipeline::run`]),
/// ranked by BM25 and, with the query's vector, by similarity to it too.
pub(super) fn search(
    tx: &mut Transaction<'_>,
    search: &Search,
    query: Option<&QueryVector<'_>>,
    pgvector: bool,
) -> Result<Vec<Hit>> {
    // A search's statements run for milliseconds, but a plan PostgreSQL overestimates (as it
    // does before its statistics catch up with a large write) gets compiled by JIT first, which
    // took over half a second.
    tx.batch_execute("SET LOCAL jit = off")
        .map_err(backend("setting up a search"))?;
    let mut rows = PgSearch { tx, pgvector };
    let text = FullText::of(search);
    let near = query.map(Nearest);
    let mut retrievers: Vec<&dyn Retriever<PgSearch<'_, '_>>> = vec![&text];
    if let Some(near) = &near {
        retrievers.push(near);
    }
    pipeline::run(&mut rows, search, &retrievers)
}

/// The best `candidates` items for `terms` that pass `search`'s filters, by BM25, best first.
fn bm25(
    tx: &mut Transaction<'_>,
    search: &Search,
    terms: &[String],
    candidates: usize,
) -> Result<Vec<(ItemId, f64)>> {
    // The agent's (or everyone's) item count, for the IDF, and average length, in one trip.
    let (total, avg_words): (i64, f64) = match &search.filters.agent {
        Some(agent) => tx
            .query_opt(
                "SELECT items, words::float8 / greatest(items, 1) FROM memory_stats
                 WHERE agent = $1",
                &[&agent.as_str()],
            )
            .map_err(backend("reading an agent's memory size"))?
            .map_or((0, 1.0), |r| (r.get(0), r.get(1))),
        None => tx
            .query_one(
                "SELECT coalesce(sum(items), 0)::bigint,
                        coalesce(sum(words)::float8 / greatest(sum(items), 1), 1)
                 FROM memory_stats",
                &[],
            )
            .map(|r| (r.get(0), r.get(1)))
            .map_err(backend("reading the memory size"))?,
    };
    let avg_words = avg_words.max(1.0);
    let agent = search.filters.agent.as_ref().map(AgentId::as_str);
    let stems = bm25::query_stems(terms);
    let (weights, newest) = weights(tx, &stems, agent, total)?;
    if weights.is_empty() {
        return Ok(Vec::new());
    }

    let (lexemes, idf): (Vec<String>, Vec<f64>) = weights.into_iter().unzip();
    let mut params: Vec<Param> = vec![Box::new(lexemes), Box::new(idf), Box::new(avg_words)];
    if newest {
        params.push(Box::new(agent.map(str::to_owned)));
    }
    let filters = filter_sql(search, &mut params);
    // A term with more matches than are scored is ranked on its newest matches, picked in the
    // same statement (a statement of its own to find the oldest of them read every match
    // twice).
    let matches = if newest {
        format!(
            "(SELECT * FROM memory_items m
              WHERE m.tsv @@ (SELECT q FROM a) AND ($4::text IS NULL OR m.agent = $4)
              ORDER BY m.id DESC LIMIT {SCORED_MATCHES}) i, a WHERE TRUE"
        )
    } else {
        "memory_items i, a WHERE i.tsv @@ a.q".to_owned()
    };
    let sql = format!(
        "WITH {terms}
         SELECT i.id, {score} AS score
         FROM {matches}{filters}
         ORDER BY score DESC, i.id LIMIT {candidates}",
        terms = terms_cte("simple"),
        score = bm25_sql("i", "$3::float8"),
    );
    let matched: Vec<(ItemId, f64)> = tx
        .query(&sql, &refs(&params))
        .map_err(backend("searching memory"))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    Ok(matched)
}

impl SearchRows for PgSearch<'_, '_> {
    /// All in one statement: for each source of each of `ids`, the nearest single-event item
    /// before and after it in its session that passes the filters.
    fn neighbours(&mut self, search: &Search, ids: &[ItemId]) -> Result<Vec<(ItemId, ItemId)>> {
        let mut params: Vec<Param> = vec![Box::new(ids.to_vec())];
        let filters = filter_sql(search, &mut params);
        // A single event is `from_seq >= to_seq` (the schema keeps `from_seq <= to_seq`), not
        // `from_seq = to_seq`: PostgreSQL guesses that an equality of two columns keeps one row
        // in two hundred, so it expected one neighbour candidate, read and joined the session's
        // every source to sort them (a hundred milliseconds per search at 20,000 items); an
        // inequality it guesses keeps a third, and it walks the index from `p` and stops at the
        // first that passes.
        let side = |cmp: &str, order: &str, edge: &str| {
            format!(
                "(SELECT s.item FROM memory_sources s JOIN memory_items i ON i.id = s.item
                  WHERE s.session = p.session AND s.from_seq {cmp} p.{edge}
                    AND s.from_seq >= s.to_seq{filters}
                  ORDER BY s.from_seq {order} LIMIT 1)"
            )
        };
        // The nearest neighbour is the first passing row of an index walk from `p`; but when
        // its statistics are behind (after a large write) PostgreSQL expects a handful of rows
        // per session and reads them all through a bitmap to sort them. Without bitmap scans it
        // walks the index.
        self.tx
            .batch_execute("SET LOCAL enable_bitmapscan = off")
            .map_err(backend("reading neighbours"))?;
        let sql = format!(
            "SELECT DISTINCT m.id, nb.item FROM unnest($1::bigint[]) AS m(id)
             JOIN memory_sources p ON p.item = m.id
             CROSS JOIN LATERAL ({} UNION ALL {}) AS nb(item)
             WHERE nb.item <> m.id",
            side("<", "DESC", "from_seq"),
            side(">", "ASC", "to_seq"),
        );
        let pairs = self
            .tx
            .query(&sql, &refs(&params))
            .map_err(backend("reading neighbours"))?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        // The lookups by id that follow take an array of ids, which PostgreSQL reads through a
        // bitmap: without one it scanned the whole provenance table (7 ms at 100,000 items).
        self.tx
            .batch_execute("SET LOCAL enable_bitmapscan = on")
            .map_err(backend("reading neighbours"))?;
        Ok(pairs)
    }

    fn rows(&mut self, ids: &[ItemId]) -> Result<BTreeMap<ItemId, HitRow>> {
        let rows = self
            .tx
            .query(
                "SELECT id, text, tokens, tier FROM memory_items WHERE id = ANY($1)",
                &[&ids],
            )
            .map_err(backend("reading a hit"))?;
        let mut out = BTreeMap::new();
        for r in rows {
            let (id, text, tokens, tier): (ItemId, String, i64, String) =
                (r.get(0), r.get(1), r.get(2), r.get(3));
            out.insert(id, HitRow::read(id, text, tokens, &tier)?);
        }
        Ok(out)
    }

    fn provenance(&mut self, ids: &[ItemId]) -> Result<BTreeMap<ItemId, Vec<Provenance>>> {
        provenance(self.tx, ids)
    }
}

fn corrupt(id: ItemId, reason: String) -> MemoryError {
    MemoryError::Corrupt {
        record: format!("item {id}"),
        reason,
    }
}

/// The provenance of each of `ids`, oldest first.
fn provenance(
    tx: &mut Transaction<'_>,
    ids: &[ItemId],
) -> Result<BTreeMap<ItemId, Vec<Provenance>>> {
    let mut out: BTreeMap<ItemId, Vec<Provenance>> = BTreeMap::new();
    let rows = tx
        .query(
            "SELECT item, session, from_seq, to_seq, ts_ms FROM memory_sources
             WHERE item = ANY($1) ORDER BY item, ts_ms, session, from_seq",
            &[&ids],
        )
        .map_err(backend("reading a memory item's provenance"))?;
    for r in rows {
        let id: ItemId = r.get(0);
        let session: String = r.get(1);
        let session = SessionId::new(session).map_err(|e| corrupt(id, e.to_string()))?;
        let seq = |n: i64| u64::try_from(n).map_err(|_| corrupt(id, format!("seq {n}")));
        out.entry(id).or_default().push(Provenance {
            session,
            from_seq: seq(r.get(2))?,
            to_seq: seq(r.get(3))?,
            ts_ms: r.get(4),
        });
    }
    Ok(out)
}

/// Item `id` with its provenance; [`MemoryError::ItemNotFound`] when there is none.
pub(super) fn load_item(tx: &mut Transaction<'_>, id: ItemId) -> Result<Item> {
    let row = tx
        .query_opt(
            "SELECT agent, tier, kind, text, tokens, hash, valid_from, valid_to, superseded_by
             FROM memory_items WHERE id = $1",
            &[&id],
        )
        .map_err(backend("reading a memory item"))?
        .ok_or(MemoryError::ItemNotFound(id))?;
    let (agent, tier, kind): (String, String, String) = (row.get(0), row.get(1), row.get(2));
    let tokens: i64 = row.get(4);
    Ok(Item {
        id,
        agent: AgentId::new(agent).map_err(|e| corrupt(id, e.to_string()))?,
        tier: tier
            .parse()
            .map_err(|_| corrupt(id, format!("tier `{tier}`")))?,
        kind: ItemKind::parse(&kind).ok_or_else(|| corrupt(id, format!("kind `{kind}`")))?,
        text: row.get(3),
        tokens: u64::try_from(tokens).map_err(|_| corrupt(id, format!("tokens {tokens}")))?,
        hash: row.get(5),
        valid_from: row.get(6),
        valid_to: row.get(7),
        superseded_by: row.get(8),
        sources: provenance(tx, &[id])?.remove(&id).unwrap_or_default(),
    })
}
