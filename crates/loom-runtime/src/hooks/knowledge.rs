//! The knowledge hook of `loom run` and the server: a knowledge base queried with the current
//! task, whose best snippets are injected at the request's tail under the injection reserve.
//!
//! It runs as an ordered pre-hook so that it sees what earlier hooks injected and fills only
//! what is left of the reserve: snippets are taken best first, each measured exactly as the
//! render will send it, and one that does not fit is skipped (never cut). Each snippet is its
//! own injection labelled `knowledge:SOURCE`, so the receipt lists what was injected, from where,
//! and its tokens.

use std::sync::Arc;

use loom_core::render::{Format, TokenMeter};

use super::{Draft, Flow, InjectionBudget, PreHook, TurnView};
use crate::error::BoxError;
use crate::task::{rank, KnowledgeBase, KnowledgeQuery};

/// Injects a knowledge base's best snippets for the turn's task within the injection reserve.
#[derive(Clone)]
pub struct KnowledgeInjector {
    kb: Arc<dyn KnowledgeBase>,
    limit: usize,
    format: Format,
    meter: Arc<dyn TokenMeter + Send + Sync>,
    reserve: u64,
}

impl std::fmt::Debug for KnowledgeInjector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KnowledgeInjector")
            .field("kb", &self.kb.name())
            .field("limit", &self.limit)
            .field("reserve", &self.reserve)
            .finish_non_exhaustive()
    }
}

impl KnowledgeInjector {
    /// At most `limit` snippets of `kb` per turn, measured in `format` with `meter` (the
    /// render's own), within `reserve` tokens together with whatever earlier hooks injected.
    pub fn new(
        kb: Arc<dyn KnowledgeBase>,
        limit: usize,
        format: Format,
        meter: Arc<dyn TokenMeter + Send + Sync>,
        reserve: u64,
    ) -> Self {
        Self {
            kb,
            limit,
            format,
            meter,
            reserve,
        }
    }
}

impl PreHook for KnowledgeInjector {
    fn name(&self) -> &str {
        "knowledge"
    }

    fn run(&self, turn: &TurnView, draft: &mut Draft) -> Result<Flow, BoxError> {
        let Some(task) = turn
            .user_message
            .as_deref()
            .filter(|t| !t.trim().is_empty())
        else {
            return Ok(Flow::Continue);
        };
        let budget = InjectionBudget {
            format: self.format,
            meter: self.meter.as_ref(),
            reserve: self.reserve,
        };
        let mut used = budget.total(draft.items());
        let snippets = rank(self.kb.query_for(&KnowledgeQuery {
            text: task,
            agent: turn.agent.as_ref(),
            session: turn.session.as_ref(),
            limit: self.limit,
        })?);
        for snippet in snippets.iter().take(self.limit) {
            let text = snippet.injected_text();
            let tokens = budget.tokens(&text);
            if used + tokens > self.reserve {
                continue;
            }
            used += tokens;
            draft.push_labelled(&snippet.source, text);
        }
        Ok(Flow::Continue)
    }
}
