//! Records derived from the log: summaries, model-call receipts and the provider's usage, tool-call
//! states, steps.

use loom_core::{AgentId, Seq, SessionId};
use serde::{Deserialize, Serialize};

/// A session to create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewSession {
    /// Its id.
    pub id: SessionId,
    /// The agent whose log it is.
    pub agent: AgentId,
    /// The session that spawned it, if any.
    pub parent: Option<SessionId>,
    /// Creation time, UTC milliseconds.
    pub created_ms: i64,
}

/// A summary to store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewSummary {
    /// The session summarised.
    pub session: SessionId,
    /// First seq covered.
    pub from_seq: Seq,
    /// Last seq covered (`>= from_seq`, and no later than the log's last seq).
    pub to_seq: Seq,
    /// The summary text.
    pub content: String,
    /// What produced it (`deterministic`, a model name, ...).
    pub producer: String,
    /// When it was made, UTC milliseconds.
    pub created_ms: i64,
}

/// A stored summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// 1-based, increasing per session.
    pub version: u32,
    /// What was stored.
    #[serde(flatten)]
    pub summary: NewSummary,
}

/// A receipt to record: what one model call was sent and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewModelCall {
    /// The session rendered.
    pub session: SessionId,
    /// Last seq of the log the request was rendered from.
    pub at_seq: Seq,
    /// When it was rendered, UTC milliseconds.
    pub created_ms: i64,
    /// The receipt itself (its shape belongs to the render pipeline).
    pub receipt: serde_json::Value,
}

/// A stored receipt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCall {
    /// 1-based, increasing per session.
    pub id: u64,
    /// What was stored.
    #[serde(flatten)]
    pub call: NewModelCall,
    /// What the provider said the call used, once the caller reports it (see
    /// [`Store::report_usage`](crate::Store::report_usage)). Receipts written before usage was
    /// recorded have none, so it defaults to `None` and is left out of the JSON when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// The token usage a provider reported for one model call.
///
/// The receipt holds Loom's estimate of what it sent; this is the provider's own count, reported
/// by the caller after the call returns, so that estimates can be checked against what was
/// billed. Two reports for the same call are the same report when their token figures match;
/// `reported_ms` only records when the first one arrived, so a retried report is not a conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input (prompt) tokens, cached ones included.
    pub input_tokens: u64,
    /// How many of the input tokens the provider served from its prompt cache (never more than
    /// `input_tokens`), when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
    /// Output (completion) tokens, when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// When the usage was reported, UTC milliseconds.
    pub reported_ms: i64,
}

impl Usage {
    /// Whether `other` reports the same token figures (the time of the report aside).
    pub fn same_figures(&self, other: &Usage) -> bool {
        (
            self.input_tokens,
            self.cached_input_tokens,
            self.output_tokens,
        ) == (
            other.input_tokens,
            other.cached_input_tokens,
            other.output_tokens,
        )
    }
}

/// Where a tool call stands, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// No result yet.
    Pending,
    /// Answered by a successful result.
    Resolved,
    /// Answered by an error result.
    Errored,
    /// Given up on; a later result is refused.
    Expired,
}

/// A tool call and its state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    /// Call id.
    pub call_id: String,
    /// Tool called.
    pub tool_name: String,
    /// Seq of the assistant event that made the call.
    pub call_seq: Seq,
    /// Status.
    pub status: CallStatus,
    /// Seq of the result, when there is one.
    pub result_seq: Option<Seq>,
}

/// A reduced step as stored. Its body is the step's own JSON (see `loom-core`'s step model).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// `step_001`, ...
    pub id: String,
    /// The call the step reduces.
    pub call_id: String,
    /// Seq of the tool result.
    pub result_seq: Seq,
    /// The step.
    pub body: serde_json::Value,
}
