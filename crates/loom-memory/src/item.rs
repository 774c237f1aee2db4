//! The memory model: items, their provenance, tiers, and what a search asks for and returns.
//!
//! Plain serde types with no I/O, so every front end (the CLI, later the server and the Python
//! package) shares them.

use std::fmt;
use std::str::FromStr;

use loom_core::{AgentId, Seq, SessionId};
use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};

/// The id of a stored item (1-based, assigned by the backend, never reused while the item lives).
pub type ItemId = i64;

/// The memory tiers of DESIGN.md ("Memory").
///
/// L1 is the recent log itself and L2 the notes saved during a session; the log indexer writes
/// L3 (session summaries) and L4 (long-term items). Every tier is searchable on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Tier {
    /// Recent events of the session.
    L1,
    /// Session working memory: facts and notes saved during the session.
    L2,
    /// Session summaries.
    L3,
    /// Long-term memory, across sessions of one agent.
    L4,
}

impl Tier {
    /// The name used in storage, JSON and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::L1 => "L1",
            Self::L2 => "L2",
            Self::L3 => "L3",
            Self::L4 => "L4",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Tier {
    type Err = MemoryError;

    /// Accepts `L1`..`L4`, in either case.
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_uppercase().as_str() {
            "L1" => Ok(Self::L1),
            "L2" => Ok(Self::L2),
            "L3" => Ok(Self::L3),
            "L4" => Ok(Self::L4),
            _ => Err(MemoryError::InvalidInput {
                field: "tier",
                reason: format!("`{s}` is not a tier; expected L1, L2, L3 or L4"),
            }),
        }
    }
}

/// What part of the log an item was derived from; kept so that a reader can tell a user's
/// statement from the assistant's, and so that re-indexing can tell item kinds apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    /// A user turn's text.
    User,
    /// An assistant turn's visible text (never its tool calls or reasoning).
    Assistant,
    /// A reduced tool result: its step's one-line observation.
    Observation,
    /// A session summary.
    Summary,
    /// A note saved into L2 during a session.
    Note,
    /// A fact distilled from a window of the log by the optional LLM extractor.
    Fact,
}

impl ItemKind {
    /// The name used in storage.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Observation => "observation",
            Self::Summary => "summary",
            Self::Note => "note",
            Self::Fact => "fact",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        [
            Self::User,
            Self::Assistant,
            Self::Observation,
            Self::Summary,
            Self::Note,
            Self::Fact,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// Where an item came from: a seq range of one session's log.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Provenance {
    /// The session whose log holds the events.
    pub session: SessionId,
    /// First seq.
    pub from_seq: Seq,
    /// Last seq (`>= from_seq`; equal for a single event).
    pub to_seq: Seq,
    /// When the source happened (the event's timestamp), UTC milliseconds.
    pub ts_ms: i64,
}

/// An item to write, as derived from the log (see [`derive`](crate::derive)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewItem {
    /// The agent whose memory it is.
    pub agent: AgentId,
    /// Its tier.
    pub tier: Tier,
    /// What it was derived from.
    pub kind: ItemKind,
    /// The text, as the log holds it.
    pub text: String,
    /// Where it came from; its timestamp is the item's time.
    pub source: Provenance,
}

/// A stored item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// Its id.
    pub id: ItemId,
    /// The agent whose memory it is.
    pub agent: AgentId,
    /// Its tier.
    pub tier: Tier,
    /// What it was first derived from.
    pub kind: ItemKind,
    /// The text.
    pub text: String,
    /// Exact token count of `text` with the memory's tokenizer.
    pub tokens: u64,
    /// SHA-256 (hex) of the normalized text: equal for exact duplicates.
    pub hash: String,
    /// When it became true: its first source's time, UTC milliseconds.
    pub valid_from: i64,
    /// When a newer item superseded it, if one did.
    pub valid_to: Option<i64>,
    /// The item that superseded it.
    pub superseded_by: Option<ItemId>,
    /// Every source, oldest first; an item written twice has two.
    pub sources: Vec<Provenance>,
}

/// What a write did with one derived item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome", content = "item")]
pub enum Written {
    /// A new item.
    Created(ItemId),
    /// An exact duplicate of this item (same normalized text, same agent): a provenance added.
    Duplicate(ItemId),
    /// A near duplicate of this item: a provenance added.
    NearDuplicate(ItemId),
    /// This source was already recorded on this item (re-indexing is idempotent).
    Known(ItemId),
}

impl Written {
    /// The item written to.
    pub fn item(self) -> ItemId {
        match self {
            Self::Created(id) | Self::Duplicate(id) | Self::NearDuplicate(id) | Self::Known(id) => {
                id
            }
        }
    }
}

/// Which items a search may return. Every filter is optional; `agent` is required by the CLI
/// because memory is per agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filters {
    /// Only this agent's items.
    pub agent: Option<AgentId>,
    /// Only items with a source in this session.
    pub session: Option<SessionId>,
    /// Only this tier.
    pub tier: Option<Tier>,
    /// Only items valid from this time on (UTC milliseconds, inclusive).
    pub from_ms: Option<i64>,
    /// Only items valid from before this time (UTC milliseconds, inclusive).
    pub to_ms: Option<i64>,
}

/// A search: the query, its filters and how much it may return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Search {
    /// Free text.
    pub query: String,
    /// Which items qualify.
    pub filters: Filters,
    /// The most tokens the hits may hold together.
    pub budget: u64,
    /// The most hits.
    pub limit: usize,
    /// Whether superseded items are returned too.
    pub history: bool,
}

impl Search {
    /// A search of `query` under `budget` tokens, with no filters, the limit the budget sets
    /// ([`limit_for`]) and no history.
    pub fn new(query: impl Into<String>, budget: u64) -> Self {
        Self {
            query: query.into(),
            filters: Filters::default(),
            budget,
            limit: limit_for(budget),
            history: false,
        }
    }
}

/// The fewest tokens a hit is taken to hold when the budget sets the limit: a short turn
/// (`"Ann: Sure!"` is 5), so that a budget filled with short items is still filled.
pub const MIN_HIT_TOKENS: u64 = 8;

/// The most hits a search returns when its caller sets no limit.
const MAX_DEFAULT_LIMIT: usize = 1_000;

/// The hit limit when the caller sets none: the budget decides how much comes back, so the
/// limit is as many hits as the budget holds at [`MIN_HIT_TOKENS`] each (at least 1, at most
/// 1,000). A 2,000-token search of conversation turns returns about 2,000 tokens, not the 50
/// turns a fixed limit would stop at.
pub fn limit_for(budget: u64) -> usize {
    usize::try_from(budget / MIN_HIT_TOKENS)
        .unwrap_or(usize::MAX)
        .clamp(1, MAX_DEFAULT_LIMIT)
}

/// The knowledge base's snippets returned when the caller sets no limit (a chunk is a section
/// of a file, far larger than a turn: the budget is what stops it).
pub const DEFAULT_LIMIT: usize = 50;

/// One source of a hit, as the search contract prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// The session.
    pub session: SessionId,
    /// The (first) seq.
    pub seq: Seq,
    /// The last seq, only when the source is a range (a summary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_seq: Option<Seq>,
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    /// The item, for `forget` and history; not part of the printed search contract.
    #[serde(skip)]
    pub id: ItemId,
    /// The item's text.
    pub text: String,
    /// Its exact token count.
    pub tokens: u64,
    /// Relevance, higher is better: BM25 with neighbours' shares, or, with an embedder, the
    /// fusion of the BM25 and similarity scores (each on its own scale) with neighbours' shares.
    pub score: f64,
    /// Its tier.
    pub tier: Tier,
    /// Where it came from, oldest first.
    pub sources: Vec<Source>,
}

/// What [`forget`](crate::Memory::forget) removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forgotten {
    /// The item as it was.
    pub item: Item,
    /// Items it had superseded, which are current again (their `valid_to` cleared).
    pub restored: Vec<ItemId>,
}
