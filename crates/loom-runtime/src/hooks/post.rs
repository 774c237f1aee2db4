//! Post-hooks: after the assistant message, for persistence, memory write-back, triggering the
//! summary worker, guardrail reports.
//!
//! They receive shared references only and return side records, so the turn they look at cannot
//! be undone or edited by them. A failing or panicking post-hook is reported and the others still
//! run: the turn has already happened.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use loom_core::render::Receipt;
use loom_core::{Event, SessionId};
use serde::{Deserialize, Serialize};

use super::{panic_message, HookOutcome, HookStage, HookStatus};
use crate::error::BoxError;

/// What post-hooks see: the log including the assistant message, read-only.
#[derive(Debug, Clone, Copy)]
pub struct PostTurn<'a> {
    /// The session.
    pub session: Option<&'a SessionId>,
    /// The log up to and including the assistant message.
    pub events: &'a [Event],
    /// The assistant message that closed the turn.
    pub assistant: &'a Event,
    /// The receipt of the render the model answered, when the caller has it.
    pub receipt: Option<&'a Receipt>,
}

/// A record a post-hook asks the caller to keep (a memory item, a guardrail finding, a request
/// for a summary). Durable or not is the caller's decision; it is never an edit of the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideRecord {
    /// The hook that produced it (set by the runner, whatever the hook wrote).
    pub hook: String,
    /// What kind of record (`memory`, `guardrail`, ...).
    pub kind: String,
    /// Its content.
    pub body: serde_json::Value,
}

impl SideRecord {
    /// A record of `kind` with `body`; the runner fills in the hook's name.
    pub fn new(kind: impl Into<String>, body: serde_json::Value) -> Self {
        Self {
            hook: String::new(),
            kind: kind.into(),
            body,
        }
    }
}

/// A hook that runs after the assistant message.
pub trait PostHook: Send + Sync {
    /// Its name.
    fn name(&self) -> &str;
    /// Runs the hook.
    fn run(&self, turn: &PostTurn<'_>) -> Result<Vec<SideRecord>, BoxError>;
}

/// Side records and outcomes of the post-hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct PostRun {
    /// Records, in hook order.
    pub records: Vec<SideRecord>,
    /// One outcome per post-hook, in declaration order.
    pub outcomes: Vec<HookOutcome>,
}

pub(super) fn run(hooks: &[Arc<dyn PostHook>], turn: &PostTurn<'_>) -> PostRun {
    let mut records = Vec::new();
    let mut outcomes = Vec::new();
    for hook in hooks {
        let name = hook.name().to_owned();
        let status = match catch_unwind(AssertUnwindSafe(|| hook.run(turn))) {
            Ok(Ok(recs)) => {
                records.extend(recs.into_iter().map(|r| SideRecord {
                    hook: name.clone(),
                    ..r
                }));
                HookStatus::Ran { tokens: 0 }
            }
            Ok(Err(e)) => HookStatus::Failed {
                error: e.to_string(),
            },
            Err(payload) => HookStatus::Panicked {
                message: panic_message(payload.as_ref()),
            },
        };
        outcomes.push(HookOutcome {
            hook: name,
            stage: HookStage::Post,
            status,
        });
    }
    PostRun { records, outcomes }
}
