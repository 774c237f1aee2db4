//! Loom's data model and its pure logic.
//!
//! Everything here is plain data and synchronous functions: no I/O, no async, no clocks. Storage,
//! token counting and the CLI build on these types; the log's truth lives in [`Event`]s, and every
//! other record is derived from them.

mod api;
mod compact;
mod error;
mod event;
mod ledger;
mod reduce;
pub mod render;
mod stats;
mod step;
pub mod time;

pub use api::Api;
pub use compact::{
    auto_tune, auto_tune_config, build_react_prompt, build_react_prompt_stable, compact,
    compact_for_spawn, format_for_prompt, format_full_step, should_compact, CompactBlock,
    CompactedHistory, CompactionConfig, CompactionPoint, CompactionState, LongTask, Omitted,
    Preset, ReactPrompt, ReactStep, SpawnContext, StableCompactor, StableHistory, StableOptions,
    StepTokens, Trigger, TriggerReason,
};
pub use error::{LogError, Result};
pub use event::{
    conversation, joined_text, AgentId, BlobInfo, BlobRef, ContentPart, Event, EventBody,
    EventKind, MessageContent, NativeReasoning, NewEvent, Said, Seq, SessionId, SessionInfo,
    ToolCall, ToolOutput, DEFAULT_PRIORITY,
};
pub use ledger::{CallState, Ledger};
pub use reduce::{
    step_id, Arrived, Ingest, ReduceConfig, Reduction, ResultInput, StepContext, Templates,
    Thresholds, ToolKinds,
};
pub use stats::{ContentStats, ContentType, StatsBuilder};
pub use step::{Category, CompactStep, Step, ToolKind};
