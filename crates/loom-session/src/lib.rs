//! One session engine under every front end.
//!
//! A session's live state ([`live::Live`]: the log as read, its projection, steps, ledger,
//! summaries, newest receipt, cost memo, and the memo of the last client body), the bounded cache
//! of live sessions ([`live::LiveSessions`]), the per-model token counts ([`counts`]) and the
//! [`Engine`] that renders a session for a model call and records its receipt. `loom serve`,
//! `loom run`, the Python package and `loom render` all go through it; none of them keeps a copy.
//!
//! Errors are [`SessionError`]s with a normalised [`ErrorKind`], which each front end maps once
//! (HTTP status, exit code, exception class).

pub mod counts;
pub mod engine;
pub mod error;
pub mod explain;
pub mod history;
pub mod import;
pub mod live;
mod memo;

pub use engine::{Engine, ModelLimits, RenderOutcome, RenderSpec};
pub use error::{ErrorKind, Result, SessionError};
pub use live::{lock_live, Backend, Live, LiveSessions};
pub use memo::BodyMemo;
