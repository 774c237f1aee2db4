//! The one error type of the memory crate: what was being done, with which record, and why.

use loom_core::SessionId;
use loom_store::StoreError;

use crate::embed::EmbedError;

/// A `Result` whose error is a [`MemoryError`].
pub type Result<T, E = MemoryError> = std::result::Result<T, E>;

/// What went wrong while indexing, searching or forgetting memory.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// Reading the log failed.
    #[error("reading the log of session `{session}` for memory: {source}")]
    Log {
        /// The session being read.
        session: SessionId,
        /// What the store said (boxed: it is large, and errors are the cold path).
        #[source]
        source: Box<StoreError>,
    },
    /// The session to index does not exist.
    #[error("session `{0}` not found: there is no log to index")]
    SessionNotFound(SessionId),
    /// A request the caller has to fix (a bad filter, an unknown tier, an empty query).
    #[error("invalid memory {field}: {reason}")]
    InvalidInput {
        /// The field or argument (`tier`, `query`, `from`/`to`).
        field: &'static str,
        /// What was expected.
        reason: String,
    },
    /// No item has this id (`forget` of an id that was never written or already forgotten).
    #[error("memory item {0} not found")]
    ItemNotFound(i64),
    /// A stored record that this build cannot read (a corrupt row, a schema from a newer build).
    #[error("memory record {record} is unreadable: {reason}")]
    Corrupt {
        /// Which record (`item 12`, `schema`).
        record: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The backend does not do this (notes on a backend without them).
    #[error("this memory backend does not support {0}")]
    Unsupported(&'static str),
    /// The embedder could not be set up or could not embed (see [`EmbedError`]).
    #[error("{0}")]
    Embed(#[from] EmbedError),
    /// The database refused an operation.
    #[error("{action}: {source}")]
    Backend {
        /// What was being done (`searching memory`, `writing item provenance`).
        action: &'static str,
        /// The backend's error (boxed: it is large, and errors are the cold path).
        #[source]
        source: Box<rusqlite::Error>,
    },
    /// PostgreSQL refused an operation.
    #[error("{action}: {source}")]
    Postgres {
        /// What was being done.
        action: &'static str,
        /// The driver's error (boxed: it is large, and errors are the cold path).
        #[source]
        source: Box<::postgres::Error>,
    },
    /// The LLM extractor's call for a window of the log failed, or its reply could not be read.
    #[error("extracting facts from session `{session}`, seqs {from_seq}–{to_seq}: {reason}")]
    Extract {
        /// The session read.
        session: SessionId,
        /// The window's first seq.
        from_seq: u64,
        /// The window's last seq.
        to_seq: u64,
        /// What went wrong.
        reason: String,
    },
    /// The memory database cannot be opened: a malformed URL, or nothing answering at it.
    #[error("cannot open memory at {db}: {reason}")]
    Open {
        /// The database, its password hidden.
        db: String,
        /// Why.
        reason: String,
    },
}

impl MemoryError {
    /// A database whose memory schema (`found`) is newer than this build's (`known`): refused
    /// rather than misread, by every backend alike.
    pub(crate) fn schema_too_new(found: i64, known: i64) -> Self {
        Self::Corrupt {
            record: "schema".into(),
            reason: format!(
                "memory schema version {found} was written by a newer build (this one knows up \
                 to {known})"
            ),
        }
    }

    /// Whether the caller's input is at fault (the CLI maps these to its bad-input exit code).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            Self::InvalidInput { .. }
                | Self::ItemNotFound(_)
                | Self::SessionNotFound(_)
                | Self::Embed(EmbedError::Spec { .. } | EmbedError::Model { .. })
        )
    }
}

/// Wraps a backend error with what was being done.
pub(crate) fn backend(action: &'static str) -> impl FnOnce(rusqlite::Error) -> MemoryError {
    move |source| MemoryError::Backend {
        action,
        source: Box::new(source),
    }
}

/// Wraps a PostgreSQL error with what was being done.
pub(crate) fn postgres(action: &'static str) -> impl FnOnce(::postgres::Error) -> MemoryError {
    move |source| MemoryError::Postgres {
        action,
        source: Box::new(source),
    }
}
