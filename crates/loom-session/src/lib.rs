//! One session engine under every front end.
//!
//! A session's render state ([`SessionState`]: the log as held, its projection, steps and cost
//! memo, which `loom replay` holds too), its live state over the store ([`live::Live`]: that state
//! with the ledger, summaries, newest receipt and the memo of the last client body), the bounded
//! cache of live sessions ([`live::LiveSessions`]), the per-model token counts ([`counts`]) and the
//! [`Engine`] that renders a session for a model call and records its receipt. `loom serve`, `loom
//! run`, the Python package and `loom render` all go through it; none of them keeps a copy.
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
pub mod lru;
mod memo;
pub mod state;

pub use engine::{Engine, ModelLimits, RenderOutcome, RenderSpec};
pub use error::{ErrorKind, Result, SessionError};
pub use live::{lock_live, Backend, Live, LiveSessions, MemoryBackend};
pub use memo::BodyMemo;
pub use state::{SessionState, View};
