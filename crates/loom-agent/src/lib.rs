//! `loom run`: an agent runtime on Loom's engine.
//!
//! A run appends its goal to a session's log, and then, turn after turn: renders the request
//! (budget-fitted, cache-stable, with a receipt — the same engine as `loom serve`), calls the
//! model ([`Model`]: a provider, or a script), appends the assistant's turn, runs its tool calls
//! through the hierarchical action space ([`tools`]: Level 1 tools, Level 2 shell commands under
//! an exec policy in a sandbox, Level 3 scripts), and appends their results, which the engine
//! reduces at ingest and offloads with references. It stops when the model answers without a
//! call, when a call waits for the user's approval, or at a limit; the log is the whole state,
//! so [`Runner::resume`] continues any stopped run.
//!
//! Agents are isolated (seed 001 §3): `agent:spawn` starts a child with its goal only, in its
//! own session and workspace; the parent's log records the spawn and the child's result, and
//! nothing else of either crosses to the other except direct messages (`agent:send_message`).

mod agent;
pub mod approval;
pub mod config;
mod error;
mod knowledge;
pub mod model;
pub mod names;
pub mod tools;

pub use agent::{
    Agent, ChildActions, Env, Limits, Observer, Prices, Progress, Quiet, Report, RunSpec, Runner,
    Stop, Totals, DEFAULT_SYSTEM,
};
pub use approval::{approve, Answer};
pub use config::{Config, KnowledgeConfig, MemoryConfig};
pub use error::{AgentError, Result};
pub use knowledge::MemoryKnowledge;
pub use model::{Model, Scripted};
pub use tools::{Actions, Approval, Gate, Outcome, ToolDef, UserTool};

/// Now, in UTC milliseconds.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
