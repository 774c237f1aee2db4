//! `loom replay`: real agent traces through Loom and its baselines, measured.
//!
//! For every assistant message m_k of a trajectory, Loom's log holds m_1..m_(k-1) and Loom renders
//! the request for call k exactly as a live agent would have received it. Beside it, in the same
//! run: the full history, and LangChain's best-practice sliding window. Each request is measured
//! for input tokens, budget, orphaned calls, what a prompt cache would reuse, cost, evidence
//! recall (did the request still hold the identifiers the agent went on to use) and
//! recoverability of every reference.

mod evidence;
mod meter;
mod metrics;
mod parallel;
mod report;
mod run;
mod window;

pub use evidence::{identifiers, Seen};
pub use meter::{CachedMeter, EncodingMeter};
pub use metrics::{summaries, summarize, StrategyStats, Summary, FORMULA_CACHED};
pub use parallel::{replay_parallel, EmitFn, Job, ParallelError};
pub use report::write_report;
pub use run::{CallRecord, ReplayError, ReplayOptions, Replayer, Sent, TraceRun};
pub use window::trim_last;
