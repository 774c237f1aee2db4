//! The runtime's errors: what stopped a run, named so that the CLI can say what to do next.

use loom_core::SessionId;

/// Why a run could not go on.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] loom_store::StoreError),
    /// A render failed (an unknown model, a budget too small for the task).
    #[error("render of session `{session}`: {message}")]
    Render {
        /// The session rendered.
        session: SessionId,
        /// What the engine said.
        message: String,
    },
    /// The model could not be called, or its reply could not be read.
    #[error("model call {turn} of session `{session}`: {message}")]
    Model {
        /// The session.
        session: SessionId,
        /// The turn (1-based) whose call failed.
        turn: u32,
        /// What went wrong, in the provider's words where it gave some.
        message: String,
    },
    /// A configuration, script or tool definition that cannot be used.
    #[error("{what}: {reason}")]
    Config {
        /// The file, section or field.
        what: String,
        /// Why it was refused.
        reason: String,
    },
    /// A session that cannot be resumed or answered.
    #[error("session `{session}`: {reason}")]
    Session {
        /// The session.
        session: SessionId,
        /// Why.
        reason: String,
    },
}

impl AgentError {
    pub(crate) fn config(what: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Config {
            what: what.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn session(session: &SessionId, reason: impl Into<String>) -> Self {
        Self::Session {
            session: session.clone(),
            reason: reason.into(),
        }
    }

    /// Whether the input was at fault (exit code 2 in the CLI) rather than the environment.
    pub fn is_bad_input(&self) -> bool {
        match self {
            Self::Store(e) => e.is_bad_input(),
            Self::Config { .. } | Self::Session { .. } | Self::Render { .. } => true,
            Self::Model { .. } => false,
        }
    }
}

/// The runtime's result type.
pub type Result<T, E = AgentError> = std::result::Result<T, E>;
