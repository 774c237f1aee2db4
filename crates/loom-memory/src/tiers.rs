//! The tiers as a reader sees them: L1 read from the session's recent log, L2–L4 from the
//! stored items, and the default view of a session (its L2 and L3 with L4 across sessions).
//!
//! L1 is not stored: it is the last [`L1_WINDOW`] events of the session, derived the same way
//! as L4 items and ranked by the query's words, so the freshest turns are findable before (or
//! without) indexing.

use std::collections::BTreeSet;

use loom_core::{AgentId, SessionId};
use loom_store::Store;

use crate::derive::derive;
use crate::error::{MemoryError, Result};
use crate::item::{Filters, Hit, Search, Source, Tier};
use crate::{text, Memory};

/// How many of a session's latest events L1 holds.
pub const L1_WINDOW: u64 = 50;

/// A search by tier: what `loom memory search`, the agents' `memory:search` tool, the HTTP API
/// and the knowledge hook ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recall {
    /// Free text (for L1, an empty query returns the most recent events).
    pub query: String,
    /// Whose memory.
    pub agent: AgentId,
    /// The session L1–L3 are read from (the current one). With no tier, L4 is still searched
    /// across every session of the agent.
    pub session: Option<SessionId>,
    /// One tier only, or `None` for the default view: the session's L2 and L3 plus L4 (every
    /// stored tier when there is no session).
    pub tier: Option<Tier>,
    /// The most tokens the hits may hold together.
    pub budget: u64,
    /// The most hits.
    pub limit: usize,
    /// Whether superseded items are returned too.
    pub history: bool,
    /// Only stored items valid from this time on (UTC milliseconds, inclusive). L1, the
    /// session's latest events, is a window of its own and ignores the range.
    pub from_ms: Option<i64>,
    /// Only stored items that became valid at or before this time (UTC milliseconds).
    pub to_ms: Option<i64>,
}

/// Runs `recall` over `memory` (and `store`, which L1 reads). The hits are best first and their
/// tokens sum to at most the budget.
pub fn recall(memory: &dyn Memory, store: Option<&dyn Store>, r: &Recall) -> Result<Vec<Hit>> {
    let need_session = |tier: Tier| {
        r.session.clone().ok_or_else(|| MemoryError::InvalidInput {
            field: "session",
            reason: format!("{tier} is a session's memory: name the session"),
        })
    };
    let search = |tier: Option<Tier>, session: Option<SessionId>| Search {
        query: r.query.clone(),
        filters: Filters {
            agent: Some(r.agent.clone()),
            session,
            tier,
            from_ms: r.from_ms,
            to_ms: r.to_ms,
        },
        budget: r.budget,
        limit: r.limit,
        history: r.history,
    };
    match (r.tier, &r.session) {
        (Some(Tier::L1), _) => {
            let session = need_session(Tier::L1)?;
            let store = store.ok_or(MemoryError::InvalidInput {
                field: "tier",
                reason: "L1 is read from the log, which this caller does not have".into(),
            })?;
            recent(
                memory, store, &r.agent, &session, &r.query, r.budget, r.limit,
            )
        }
        (Some(Tier::L2), _) => {
            memory.search(&search(Some(Tier::L2), Some(need_session(Tier::L2)?)))
        }
        (Some(tier), session) => memory.search(&search(Some(tier), session.clone())),
        (None, None) => memory.search(&search(None, None)),
        (None, Some(session)) => {
            let mut all = memory.search(&search(Some(Tier::L2), Some(session.clone())))?;
            all.extend(memory.search(&search(Some(Tier::L3), Some(session.clone())))?);
            all.extend(memory.search(&search(Some(Tier::L4), None))?);
            Ok(pack(all, r.budget, r.limit))
        }
    }
}

/// The best of `hits` (any order, possibly repeated) that fit `budget` and `limit`, best first.
fn pack(mut hits: Vec<Hit>, budget: u64, limit: usize) -> Vec<Hit> {
    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
    let mut seen = BTreeSet::new();
    let mut left = budget;
    let mut out = Vec::new();
    for h in hits {
        if out.len() >= limit || left == 0 {
            break;
        }
        if h.tokens > left || !seen.insert(h.id) {
            continue;
        }
        left -= h.tokens;
        out.push(h);
    }
    out
}

/// L1: the latest [`L1_WINDOW`] events of `session` (when it is `agent`'s), ranked by how many
/// of the query's words they hold, the most recent first among equals; an empty query ranks by
/// recency alone. Hits carry id 0: they are the log itself, not stored items.
pub fn recent(
    memory: &dyn Memory,
    store: &dyn Store,
    agent: &AgentId,
    session: &SessionId,
    query: &str,
    budget: u64,
    limit: usize,
) -> Result<Vec<Hit>> {
    let log = |source| MemoryError::Log {
        session: session.clone(),
        source: Box::new(source),
    };
    let Some(info) = store.session(session).map_err(log)? else {
        return Err(MemoryError::SessionNotFound(session.clone()));
    };
    // Another agent's session is not this agent's memory: nothing, not an error (ids are not
    // probed this way).
    if info.agent != *agent || info.event_count == 0 {
        return Ok(Vec::new());
    }
    let from = info.event_count.saturating_sub(L1_WINDOW) + 1;
    let events = store.read(session, from..=info.event_count).map_err(log)?;
    let steps: Vec<_> = store
        .steps(session)
        .map_err(log)?
        .into_iter()
        .filter(|s| s.result_seq >= from)
        .collect();
    let items = derive(agent, session, &events, &steps, &[]);
    let terms = text::query_terms(query);
    let mut scored: Vec<(f64, u64, String)> = items
        .into_iter()
        .filter_map(|item| {
            let seq = item.source.from_seq;
            if terms.is_empty() {
                return Some((0.0, seq, item.text));
            }
            let words: BTreeSet<String> = text::words(&item.text).collect();
            let matched = terms
                .iter()
                .filter(|t| words.iter().any(|w| same_word(w, t)))
                .count();
            (matched > 0).then(|| (matched as f64 / terms.len() as f64, seq, item.text))
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
    let mut left = budget;
    let mut hits = Vec::new();
    for (score, seq, text) in scored {
        if hits.len() >= limit || left == 0 {
            break;
        }
        let tokens = memory.count_tokens(&text);
        if tokens > left {
            continue;
        }
        left -= tokens;
        hits.push(Hit {
            id: 0,
            text,
            tokens,
            score,
            tier: Tier::L1,
            sources: vec![Source {
                session: session.clone(),
                seq,
                to_seq: None,
            }],
        });
    }
    Ok(hits)
}

/// Whether word `w` matches query term `t`: equal, or both at least `STEM` letters long and
/// sharing their first `STEM` letters, a crude stem ("deployment" finds "deployed").
fn same_word(w: &str, t: &str) -> bool {
    const STEM: usize = 5;
    if w == t {
        return true;
    }
    let prefix = |s: &str| s.chars().take(STEM).collect::<String>();
    w.chars().count() >= STEM && t.chars().count() >= STEM && prefix(w) == prefix(t)
}
