//! Loom's runtime: what runs around the pure render pipeline of `loom-core`.
//!
//! - [`hooks`]: per-turn injection hooks (ordered, parallel append-only under timeouts, post) and
//!   [`render_turn`], which runs them and then renders exactly once.
//! - [`summary`]: the [`Summarizer`] trait, the [`DeterministicSummarizer`], the
//!   [`HttpSummarizer`] (OpenAI-compatible and Anthropic), bounded turn-aligned chunks and the
//!   checks a summary passes before it is stored.
//! - [`worker`]: the background [`SummaryWorker`] that keeps a session's summary up to date
//!   between turns without ever blocking a render.
//! - [`task`]: the [`TaskContextManager`] of seed 002 on the same formats, meters and injections.

mod error;
pub mod hooks;
pub mod summary;
pub mod task;
pub mod worker;

pub use error::{BoxError, Result, RuntimeError};
pub use hooks::{
    render_turn, run_turn, AppendHook, Decision, Draft, Flow, Halt, HookOutcome, HookStage,
    HookStatus, Hooks, InjectionBudget, KnowledgeInjector, ParallelGroup, PostHook, PostRun,
    PostTurn, PreHook, PreRun, SideRecord, TurnRender, TurnView, Turned,
};
pub use summary::{
    check_summary, conversation_prefix, summary_views, DeterministicSummarizer, HttpSummarizer,
    Rejection, Summarizer, SummaryRequest, DEFAULT_SECTIONS,
};
pub use task::{ContextConfig, TaskContext, TaskContextManager, TaskItem};
pub use worker::{
    catch_up, summarize_next, ChunkOutcome, Idle, Job, RenderSetup, SummaryWorker, WorkerConfig,
    WorkerReport,
};
