//! A memory search, written once for every backend: the signals rank, their rankings are
//! fused, neighbouring turns are smoothed in, and the best hits are packed under the budget.
//!
//! A backend brings two things: [`Retriever`]s, one per signal (full text, vectors, and any
//! future one), each ranking the items that pass the search's filters by its own score; and
//! [`SearchRows`], the rows a search reads after ranking (an item's neighbours, its text and
//! size, its provenance). Everything between — how many candidates each signal reads, how the
//! rankings combine, how much a neighbour lends, how the budget is filled — is here, so both
//! backends return the same hits for the same items.
//!
//! Why neighbours: in a conversation the turn that holds an answer is often not the one that
//! shares the question's words ("What did you do on Sunday?" — "Went hiking with the kids!").
//! So an item's score is its own plus a share of the score of the items just before and after
//! it in the same session; an item that matches nothing can still be returned for the match
//! beside it.

use std::collections::BTreeMap;

use crate::error::{MemoryError, Result};
use crate::hybrid::{fuse, QueryVector, Scale, Weighed};
use crate::item::{Hit, ItemId, Provenance, Search, Source, Tier};

/// Candidates read per requested hit: some of the best may not fit the budget and are skipped,
/// so a signal reads further than the limit before the search packs.
const CANDIDATES_PER_HIT: usize = 4;
/// The fewest candidates read, for small limits.
const MIN_CANDIDATES: usize = 64;
/// The most candidates read, whatever the limit (a limit of 2^64 - 1 is a client's "no limit",
/// not a number of rows SQL can be asked for).
const MAX_CANDIDATES: usize = 100_000;
/// The share of a neighbour's own score an item gains for standing next to it.
const NEIGHBOUR_WEIGHT: f64 = 0.5;
/// The vector signal's weight against full text's 1 when they are fused: chosen on the
/// developers' four LoCoMo conversations (docs/memory.md, "Search": 0.25, 0.5, 0.75 and 1 were
/// measured; 0.5 was best or within 0.005 of the best at every budget), so that the best
/// similar item is worth half the best exact match.
const VECTOR_WEIGHT: f64 = 0.5;

/// A ranking: item ids with the signal's score, best first.
pub(crate) type Ranking = Vec<(ItemId, f64)>;

/// What a signal's scores are worth in a fusion: its weight and scale. Written once per signal,
/// whatever the backend.
pub(crate) trait Signal {
    /// The weight and scale of this signal's scores for `search`.
    fn weighing(&self, search: &Search) -> (f64, Scale);
}

/// One signal's ranking of the items that pass a search's filters, in backend `B`.
pub(crate) trait Retriever<B: ?Sized>: Signal {
    /// The best `candidates` items for `search` by this signal, best first, higher scores
    /// better; empty when the signal has nothing to rank on (a query without words).
    fn rank(&self, backend: &mut B, search: &Search, candidates: usize) -> Result<Ranking>;
}

/// The full-text signal: BM25 over the query's words ([`crate::text::query_terms`]).
#[derive(Debug)]
pub(crate) struct FullText {
    pub(crate) terms: Vec<String>,
}

impl FullText {
    /// The signal for `search`'s query.
    pub(crate) fn of(search: &Search) -> Self {
        Self {
            terms: crate::text::query_terms(&search.query),
        }
    }
}

impl Signal for FullText {
    fn weighing(&self, _: &Search) -> (f64, Scale) {
        (1.0, Scale::OfBest)
    }
}

/// The vector signal: cosine similarity to the query's vector, among the vectors of the model
/// that made it.
#[derive(Debug)]
pub(crate) struct Nearest<'q>(pub(crate) &'q QueryVector<'q>);

impl Signal for Nearest<'_> {
    fn weighing(&self, search: &Search) -> (f64, Scale) {
        (VECTOR_WEIGHT, Scale::AboveNth(search.limit))
    }
}

/// An item's row as a hit shows it.
#[derive(Debug, Clone)]
pub(crate) struct HitRow {
    pub(crate) text: String,
    pub(crate) tokens: u64,
    pub(crate) tier: Tier,
}

impl HitRow {
    /// A row as stored, its token count and tier checked.
    pub(crate) fn read(id: ItemId, text: String, tokens: i64, tier: &str) -> Result<Self> {
        let corrupt = |reason: String| MemoryError::Corrupt {
            record: format!("item {id}"),
            reason,
        };
        Ok(Self {
            text,
            tokens: u64::try_from(tokens).map_err(|_| corrupt(format!("tokens {tokens}")))?,
            tier: tier
                .parse()
                .map_err(|_| corrupt(format!("tier `{tier}`")))?,
        })
    }
}

/// What a search reads from a backend once the signals have ranked.
pub(crate) trait SearchRows {
    /// For each of `ids`, the nearest single-event item before and after each of its sources
    /// in that source's session, among the items that pass `search`'s filters: `(id, neighbour)`
    /// pairs, each once, never an item with itself.
    fn neighbours(&mut self, search: &Search, ids: &[ItemId]) -> Result<Vec<(ItemId, ItemId)>>;

    /// The rows of those of `ids` that exist.
    fn rows(&mut self, ids: &[ItemId]) -> Result<BTreeMap<ItemId, HitRow>>;

    /// The provenance of each of `ids`, oldest first.
    fn provenance(&mut self, ids: &[ItemId]) -> Result<BTreeMap<ItemId, Vec<Provenance>>>;
}

/// Items matching `search`, best first, as many as fit its budget and limit: each retriever
/// ranks, several rankings are fused by their weighed scores ([`fuse`]), neighbours are smoothed in, and the best are
/// packed greedily — an item that does not fit in what is left of the budget is skipped, never
/// cut, and a smaller one after it may still fit. The hits' tokens sum to at most the budget.
pub(crate) fn run<B: SearchRows + ?Sized>(
    backend: &mut B,
    search: &Search,
    retrievers: &[&dyn Retriever<B>],
) -> Result<Vec<Hit>> {
    if let (Some(from), Some(to)) = (search.filters.from_ms, search.filters.to_ms) {
        if from > to {
            return Err(MemoryError::InvalidInput {
                field: "from/to",
                reason: format!("the time range starts ({from}) after it ends ({to})"),
            });
        }
    }
    if search.limit == 0 || search.budget == 0 || retrievers.is_empty() {
        return Ok(Vec::new());
    }
    let candidates = search
        .limit
        .saturating_mul(CANDIDATES_PER_HIT)
        .clamp(MIN_CANDIDATES, MAX_CANDIDATES);
    let mut rankings = Vec::with_capacity(retrievers.len());
    for r in retrievers {
        rankings.push((r.rank(backend, search, candidates)?, r.weighing(search)));
    }
    let list = match rankings.as_slice() {
        [(one, _)] => one.clone(),
        many => {
            let weighed: Vec<Weighed<'_>> = many
                .iter()
                .map(|(ranking, (weight, scale))| Weighed {
                    ranking,
                    weight: *weight,
                    scale: *scale,
                })
                .collect();
            fuse(&weighed)
        }
    };
    if list.is_empty() {
        return Ok(Vec::new());
    }
    let ranked = smoothed(backend, search, &list)?;
    pack(backend, search, ranked)
}

/// `list` (best first) with neighbour smoothing: each of its best `search.limit` items lends
/// [`NEIGHBOUR_WEIGHT`] of its score to its neighbours ([`SearchRows::neighbours`]); weaker
/// matches would lend too little to change the hits. Returned best first (ties by id).
fn smoothed<B: SearchRows + ?Sized>(
    backend: &mut B,
    search: &Search,
    list: &[(ItemId, f64)],
) -> Result<Ranking> {
    let own: BTreeMap<ItemId, f64> = list.iter().copied().collect();
    let best: Vec<ItemId> = list.iter().take(search.limit).map(|m| m.0).collect();
    let mut score = own.clone();
    for (id, near) in backend.neighbours(search, &best)? {
        let lent = own.get(&id).copied().unwrap_or(0.0) * NEIGHBOUR_WEIGHT;
        *score.entry(near).or_insert(0.0) += lent;
    }
    let mut ranked: Ranking = score.into_iter().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(ranked)
}

/// Best first, greedy under the budget and the limit. Rows are read in growing chunks: most
/// searches fill up within the first, and a search whose best items are too large reads on.
fn pack<B: SearchRows + ?Sized>(
    backend: &mut B,
    search: &Search,
    ranked: Ranking,
) -> Result<Vec<Hit>> {
    let mut left = search.budget;
    let mut picked: Vec<(ItemId, HitRow, f64)> = Vec::new();
    let mut chunk = search.limit.saturating_mul(2).clamp(MIN_CANDIDATES, 4_096);
    let mut rest = ranked.as_slice();
    'read: while !rest.is_empty() && picked.len() < search.limit && left > 0 {
        let (now, later) = rest.split_at(chunk.min(rest.len()));
        rest = later;
        chunk = chunk.saturating_mul(2);
        let ids: Vec<ItemId> = now.iter().map(|r| r.0).collect();
        let mut rows = backend.rows(&ids)?;
        for &(id, score) in now {
            if picked.len() >= search.limit || left == 0 {
                break 'read;
            }
            let Some(row) = rows.remove(&id) else {
                continue;
            };
            if row.tokens > left {
                continue;
            }
            left -= row.tokens;
            picked.push((id, row, score));
        }
    }
    let ids: Vec<ItemId> = picked.iter().map(|p| p.0).collect();
    let mut sources = backend.provenance(&ids)?;
    Ok(picked
        .into_iter()
        .map(|(id, row, score)| Hit {
            id,
            text: row.text,
            tokens: row.tokens,
            score,
            tier: row.tier,
            sources: sources
                .remove(&id)
                .unwrap_or_default()
                .into_iter()
                .map(|p| Source {
                    session: p.session,
                    seq: p.from_seq,
                    to_seq: (p.to_seq != p.from_seq).then_some(p.to_seq),
                })
                .collect(),
        })
        .collect())
}
