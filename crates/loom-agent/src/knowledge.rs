//! A [`KnowledgeBase`] over Loom's own memory: the agent's long-term items (L4) and the
//! knowledge base's chunks, queried with the current task. The runtime's knowledge hook reads
//! any knowledge source; this one joins it to `loom-memory` here, in the front end that has
//! both, so that neither crate depends on the other.
//!
//! Memory is per agent: every query is answered from the memory of the agent whose turn it is
//! (never another's), and items whose every source is the current session are left out, since
//! that session's events are in the request already. The two rankings (BM25 over different
//! tables) are put on one scale by dividing each by its best score, then merged.

use std::sync::Arc;

use loom_core::AgentId;
use loom_memory::{Filters, Memory, Search, Tier};

use loom_runtime::task::{KnowledgeBase, KnowledgeQuery, Snippet};
use loom_runtime::BoxError;

/// Long-term memory and the knowledge base as one knowledge source.
#[derive(Debug, Clone)]
pub struct MemoryKnowledge {
    memory: Arc<dyn Memory>,
    agent: AgentId,
    scope: String,
    budget: u64,
    use_memory: bool,
    use_kb: bool,
}

impl MemoryKnowledge {
    /// Knowledge from `memory`: L4 items of the agent whose turn it is (`agent` when the turn
    /// does not say), and the knowledge base of `scope` (`""` for the local user's); each
    /// search returns at most `budget` tokens.
    pub fn new(memory: Arc<dyn Memory>, agent: AgentId, scope: &str, budget: u64) -> Self {
        Self {
            memory,
            agent,
            scope: scope.to_owned(),
            budget,
            use_memory: true,
            use_kb: true,
        }
    }

    /// Chooses the sources: long-term memory, the knowledge base, or both (the default).
    pub fn sources(mut self, memory: bool, kb: bool) -> Self {
        self.use_memory = memory;
        self.use_kb = kb;
        self
    }
}

/// Scores divided by the best of them, so two rankings share a scale.
fn normalized(mut snippets: Vec<Snippet>) -> Vec<Snippet> {
    let best = snippets.iter().map(|s| s.score).fold(0.0_f64, f64::max);
    if best > 0.0 {
        for s in &mut snippets {
            s.score /= best;
        }
    }
    snippets
}

impl KnowledgeBase for MemoryKnowledge {
    fn name(&self) -> &str {
        "knowledge"
    }

    fn query(&self, query: &str, limit: usize) -> Result<Vec<Snippet>, BoxError> {
        self.query_for(&KnowledgeQuery {
            text: query,
            agent: None,
            session: None,
            limit,
        })
    }

    fn query_for(&self, q: &KnowledgeQuery<'_>) -> Result<Vec<Snippet>, BoxError> {
        let agent = q.agent.unwrap_or(&self.agent);
        let mut out = Vec::new();
        if self.use_memory {
            let hits = self.memory.search(&Search {
                query: q.text.to_owned(),
                filters: Filters {
                    agent: Some(agent.clone()),
                    tier: Some(Tier::L4),
                    ..Filters::default()
                },
                budget: self.budget,
                limit: q.limit,
                history: false,
            })?;
            let mem: Vec<Snippet> = hits
                .into_iter()
                .filter(|h| {
                    q.session
                        .is_none_or(|current| h.sources.iter().any(|s| s.session != *current))
                })
                .map(|h| {
                    let from = h
                        .sources
                        .iter()
                        .find(|s| q.session.is_none_or(|c| s.session != *c))
                        .or(h.sources.first())
                        .map_or_else(String::new, |s| format!("{}#{}", s.session, s.seq));
                    Snippet {
                        source: format!("memory:{from}"),
                        text: h.text,
                        score: h.score,
                    }
                })
                .collect();
            out.extend(normalized(mem));
        }
        if self.use_kb {
            let hits = self
                .memory
                .kb_search(&self.scope, q.text, self.budget, q.limit)?;
            let kb: Vec<Snippet> = hits
                .into_iter()
                .map(|h| Snippet {
                    source: format!("kb:{}:{}-{}", h.path, h.from_line, h.to_line),
                    text: h.text,
                    score: h.score,
                })
                .collect();
            out.extend(normalized(kb));
        }
        Ok(out)
    }
}
