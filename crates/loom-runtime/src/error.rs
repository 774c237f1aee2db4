//! The one error type of the runtime: what failed, in which hook, source, request or record.

use loom_core::render::RenderError;
use loom_store::StoreError;

/// A `Result` whose error is a [`RuntimeError`].
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// Errors that user code (hooks, sources, knowledge bases, custom summarizers) returns. Their
/// types are the caller's, so the runtime only needs them to be displayable and sendable.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What went wrong in the runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A store operation failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The render pipeline refused the request.
    #[error("render: {0}")]
    Render(#[from] RenderError),
    /// A hook's injected content pushed the turn's injections over the injection reserve.
    #[error(
        "hook `{hook}` injected {hook_tokens} tokens, bringing the turn's injected content to \
         {tokens} tokens, over the injection reserve of {reserve}"
    )]
    InjectionOverflow {
        /// The hook that crossed the reserve.
        hook: String,
        /// Tokens of that hook's own injections.
        hook_tokens: u64,
        /// Tokens of all injections after it ran.
        tokens: u64,
        /// The policy's injection reserve.
        reserve: u64,
    },
    /// A configuration value is incoherent.
    #[error("invalid configuration `{field}`: {reason}")]
    Config {
        /// Dotted path of the field.
        field: String,
        /// What is wrong and what was expected.
        reason: String,
    },
    /// The context does not fit even with every optional part left out.
    #[error("context for task `{task}` does not fit: {reason}")]
    DoesNotFit {
        /// The task the context was built for.
        task: String,
        /// What needs how many tokens, against which limit.
        reason: String,
    },
    /// A timestamp could not be read as UTC.
    #[error("invalid timestamp in `{field}`: `{value}`: {reason}")]
    Timestamp {
        /// Where it was read.
        field: String,
        /// The text as given.
        value: String,
        /// What was expected.
        reason: String,
    },
    /// The summary provider could not be reached or answered with an error status.
    #[error("summary request to {url} failed{}: {detail}", status.map(|s| format!(" with status {s}")).unwrap_or_default())]
    Http {
        /// The endpoint.
        url: String,
        /// HTTP status, when the server answered.
        status: Option<u16>,
        /// The transport error, or the start of the error body.
        detail: String,
    },
    /// The summary provider answered 2xx with a body that holds no summary text.
    #[error("summary response from {url}: {reason}")]
    Response {
        /// The endpoint.
        url: String,
        /// What was missing or malformed.
        reason: String,
    },
    /// A summarizer supplied by the caller failed.
    #[error("summarizer `{name}` failed: {source}")]
    Summarizer {
        /// The summarizer.
        name: String,
        /// Its error.
        #[source]
        source: BoxError,
    },
    /// A stored step could not be decoded.
    #[error("step `{id}` of session `{session}` is corrupt: {reason}")]
    CorruptStep {
        /// The session.
        session: String,
        /// The step id.
        id: String,
        /// The decode error.
        reason: String,
    },
    /// A context source or knowledge base failed.
    #[error("context source `{name}` failed: {source}")]
    Source {
        /// The source.
        name: String,
        /// Its error.
        #[source]
        source: BoxError,
    },
    /// The background worker is gone (its thread ended or panicked).
    #[error("summary worker: {0}")]
    Worker(String),
    /// A thread could not be started.
    #[error("could not start thread `{name}`: {source}")]
    Spawn {
        /// The thread's name.
        name: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl RuntimeError {
    /// Whether the error is the caller's to fix (configuration, input, a hook's content) rather
    /// than a failure of the system, so front ends can map it to their bad-input exit code.
    pub fn is_bad_input(&self) -> bool {
        match self {
            Self::Store(e) => e.is_bad_input(),
            Self::Config { .. }
            | Self::DoesNotFit { .. }
            | Self::Timestamp { .. }
            | Self::InjectionOverflow { .. } => true,
            _ => false,
        }
    }

    /// A configuration error for `field`.
    pub(crate) fn config(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Config {
            field: field.into(),
            reason: reason.into(),
        }
    }
}
