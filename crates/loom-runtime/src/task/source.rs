//! Where a task context comes from: L1 memory, the event bus, a knowledge base.

use std::sync::{Arc, Mutex, PoisonError};

use loom_core::render::Injection;
use loom_core::{AgentId, SessionId};
use serde::{Deserialize, Serialize};

use super::item::{action, TaskItem};
use crate::error::BoxError;
use crate::hooks::{AppendHook, TurnView};

/// What a source is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceQuery<'a> {
    /// The agent the context is for.
    pub agent: &'a str,
    /// The current task's session, if it has one.
    pub session: Option<&'a str>,
    /// The clock, UTC milliseconds.
    pub now_ms: i64,
}

/// A source of task records (L1 memory, the event bus). The manager filters by session and
/// target itself, so a source may return more than applies.
pub trait ContextSource: Send + Sync {
    /// Its name, for errors.
    fn name(&self) -> &str;
    /// The records it holds for `query`.
    fn collect(&self, query: &SourceQuery<'_>) -> Result<Vec<TaskItem>, BoxError>;
}

/// L1 memory held in process: the most recent task records.
#[derive(Debug, Default)]
pub struct MemorySource {
    items: Mutex<Vec<TaskItem>>,
}

impl MemorySource {
    /// A memory holding `items`.
    pub fn new(items: Vec<TaskItem>) -> Self {
        Self {
            items: Mutex::new(items),
        }
    }

    /// Adds a record.
    pub fn push(&self, item: TaskItem) {
        self.items
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(item);
    }
}

impl ContextSource for MemorySource {
    fn name(&self) -> &str {
        "l1_memory"
    }

    fn collect(&self, _query: &SourceQuery<'_>) -> Result<Vec<TaskItem>, BoxError> {
        Ok(self
            .items
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone())
    }
}

/// An in-process event bus: agents publish task records (thinking, tool calls and results,
/// direct messages); contexts read them.
#[derive(Debug, Default)]
pub struct EventBus {
    events: Mutex<Vec<TaskItem>>,
}

impl EventBus {
    /// An empty bus.
    pub fn new() -> Self {
        Self::default()
    }

    /// Publishes a record.
    pub fn publish(&self, item: TaskItem) {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(item);
    }

    /// Direct messages for `target` (agent or node id) that have not expired at `now_ms`.
    pub fn query_by_target(&self, target: &str, now_ms: i64) -> Vec<TaskItem> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|t| t.action == action::MESSAGE)
            .filter(|t| {
                t.target_agent.as_deref() == Some(target)
                    || t.str_param("target_node_id") == Some(target)
            })
            .filter(|t| !super::direct::expired(t, now_ms).unwrap_or(false))
            .cloned()
            .collect()
    }
}

impl ContextSource for EventBus {
    fn name(&self) -> &str {
        "event_bus"
    }

    fn collect(&self, _query: &SourceQuery<'_>) -> Result<Vec<TaskItem>, BoxError> {
        Ok(self
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone())
    }
}

/// A piece of external knowledge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snippet {
    /// Where it comes from (document, URL, record id).
    pub source: String,
    /// The text.
    pub text: String,
    /// Relevance, higher first.
    pub score: f64,
}

impl Snippet {
    /// The text injected for it.
    pub fn injected_text(&self) -> String {
        format!("[knowledge: {}]\n{}", self.source, self.text)
    }
}

/// What a knowledge base is asked for one turn: the task's text, and whose turn it is, so that a
/// knowledge base holding per-agent memory answers from that agent's only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnowledgeQuery<'a> {
    /// The current task's text.
    pub text: &'a str,
    /// The agent whose turn it is, when known.
    pub agent: Option<&'a AgentId>,
    /// The turn's session, when known (its own events are already in the request).
    pub session: Option<&'a SessionId>,
    /// The most snippets wanted.
    pub limit: usize,
}

/// A knowledge base queried with the current task's text.
pub trait KnowledgeBase: Send + Sync {
    /// Its name, for errors.
    fn name(&self) -> &str;
    /// At most `limit` snippets relevant to `query`.
    fn query(&self, query: &str, limit: usize) -> Result<Vec<Snippet>, BoxError>;
    /// At most `q.limit` snippets relevant to `q.text` for `q.agent`'s turn. Knowledge bases
    /// that know nothing of agents answer as [`Self::query`] does.
    fn query_for(&self, q: &KnowledgeQuery<'_>) -> Result<Vec<Snippet>, BoxError> {
        self.query(q.text, q.limit)
    }
}

/// Snippets in the order they are offered: score descending (a NaN score last), then source.
pub fn rank(mut snippets: Vec<Snippet>) -> Vec<Snippet> {
    snippets.sort_by(|a, b| {
        let key = |s: &Snippet| {
            if s.score.is_nan() {
                f64::NEG_INFINITY
            } else {
                s.score
            }
        };
        key(b)
            .total_cmp(&key(a))
            .then_with(|| a.source.cmp(&b.source))
    });
    snippets
}

/// A knowledge base as a parallel pre-hook of the render pipeline: its snippets for the latest
/// user message are injected at the tail, under the injection reserve (DESIGN.md, Memory).
#[derive(Clone)]
pub struct KnowledgeHook {
    kb: Arc<dyn KnowledgeBase>,
    limit: usize,
}

impl std::fmt::Debug for KnowledgeHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KnowledgeHook")
            .field("kb", &self.kb.name())
            .field("limit", &self.limit)
            .finish()
    }
}

impl KnowledgeHook {
    /// A hook injecting at most `limit` snippets of `kb`.
    pub fn new(kb: Arc<dyn KnowledgeBase>, limit: usize) -> Self {
        Self { kb, limit }
    }
}

impl AppendHook for KnowledgeHook {
    fn name(&self) -> &str {
        self.kb.name()
    }

    fn run(&self, turn: &TurnView, _so_far: &[Injection]) -> Result<Vec<String>, BoxError> {
        let Some(query) = turn.user_message.as_deref() else {
            return Ok(Vec::new());
        };
        let snippets = rank(self.kb.query(query, self.limit)?);
        Ok(snippets
            .iter()
            .take(self.limit)
            .map(Snippet::injected_text)
            .collect())
    }
}
