//! The one error type of the storage layer; backend errors are normalised into it.

use std::path::PathBuf;

use loom_core::{LogError, Seq, SessionId};

/// A `Result` whose error is a [`StoreError`].
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// What went wrong in a store operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The session does not exist.
    #[error("session `{0}` not found")]
    SessionNotFound(SessionId),
    /// A session with this id already exists.
    #[error("session `{0}` already exists")]
    SessionExists(SessionId),
    /// An event broke the log's rules; nothing of the batch was written.
    #[error("session `{session}`, event {index} of the batch (would be seq {seq}): {source}")]
    InvalidEvent {
        /// The session appended to.
        session: SessionId,
        /// 0-based index of the offending event in the batch.
        index: usize,
        /// The seq it would have received.
        seq: Seq,
        /// The rule it broke.
        #[source]
        source: LogError,
    },
    /// A tool-call state change that the call's state does not allow (e.g. a stale resolve).
    #[error("session `{session}`: {source}")]
    CallState {
        /// The session.
        session: SessionId,
        /// Why the change was refused.
        #[source]
        source: LogError,
    },
    /// A record that was already written differently (a model call's usage reported again with
    /// other figures): the first stands.
    #[error("session `{session}`: {record}: {reason}")]
    Conflict {
        /// The session.
        session: SessionId,
        /// Which record.
        record: String,
        /// What it already holds.
        reason: String,
    },
    /// A derived record that contradicts the log.
    #[error("session `{session}`: invalid {record}: {reason}")]
    InvalidRecord {
        /// The session.
        session: SessionId,
        /// Which record (`summary`, `step step_003`, ...).
        record: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A model call that is not recorded: its session does not exist, or has no call with this id.
    #[error("session `{session}`, model call {call}: not found: {reason}")]
    ModelCallNotFound {
        /// The session named.
        session: SessionId,
        /// The call id named.
        call: u64,
        /// Why it is not there.
        reason: String,
    },
    /// No blob with this reference or alias.
    #[error("blob `{0}` not found")]
    BlobNotFound(String),
    /// A blob's bytes no longer hash to its reference.
    #[error("blob `{reference}` is corrupt: its content hashes to {actual}")]
    BlobCorrupt {
        /// The reference that was read.
        reference: String,
        /// The hash of what is on disk.
        actual: String,
    },
    /// A reference or alias that would reach outside the workspace.
    #[error("blob reference `{reference}` is refused: {reason}")]
    UnsafeReference {
        /// The reference as given.
        reference: String,
        /// Why it is refused.
        reason: String,
    },
    /// A tenant name that breaks the naming rule (see [`TenantId`](crate::TenantId)).
    #[error("tenant name `{}` is refused: {reason}", .tenant.escape_debug())]
    InvalidTenant {
        /// The name as given.
        tenant: String,
        /// What is wrong with it, and the rule.
        reason: String,
    },
    /// A proxy mode that is not one of the known ones.
    #[error("proxy mode `{}` is unknown: expected `fit` or `observe`", .0.escape_debug())]
    InvalidProxyMode(String),
    /// An API key record with a field that breaks its rule; nothing was written.
    #[error("api key `{}`: invalid {field}: {reason}", .id.escape_debug())]
    InvalidKey {
        /// The key's id as given.
        id: String,
        /// Which field (`id`, `hash`).
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// An API key whose id or hash is already stored; nothing was written.
    #[error("api key `{id}` is refused: another stored key has the same {field}")]
    KeyExists {
        /// The id of the key that was refused.
        id: String,
        /// Which field collided (`id` or `hash`).
        field: &'static str,
    },
    /// No API key with this id.
    #[error("api key `{}` not found", .0.escape_debug())]
    KeyNotFound(String),
    /// The operating system's random number generator failed.
    #[error("drawing random bytes for {purpose}: {source}")]
    Randomness {
        /// What the bytes were for.
        purpose: &'static str,
        /// The generator's error.
        #[source]
        source: getrandom::Error,
    },
    /// A file-system operation failed.
    #[error("{action} `{}`: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A stored record could not be decoded (corrupt database or a newer schema).
    #[error("corrupt record in {table}: {reason}")]
    Corrupt {
        /// The table or file.
        table: &'static str,
        /// What failed to decode.
        reason: String,
    },
    /// A turn prepared against a log that another writer has since changed; nothing of it was
    /// written, and the caller starts again from what the store holds (see
    /// [`Store::write_turn`](crate::Store::write_turn)).
    #[error("session `{session}` moved on: {reason}")]
    Moved {
        /// The session written.
        session: SessionId,
        /// What changed.
        reason: String,
    },
    /// The database's schema is newer than this build understands.
    #[error(
        "database schema version {found} is newer than this build's {supported}; upgrade loom"
    )]
    SchemaTooNew {
        /// Version in the database.
        found: i64,
        /// Newest version this build knows.
        supported: i64,
    },
    /// The database cannot be reached now, or every connection to it is in use and none came
    /// free in time; nothing was done, and the same call may succeed later (a server answers
    /// 503).
    #[error("database unavailable while {action}: {reason}")]
    Unavailable {
        /// What was being done.
        action: &'static str,
        /// Why no connection could be had.
        reason: String,
    },
    /// A `--db` value that names no database Loom can use: an unknown URL scheme, or a URL that
    /// does not parse.
    #[error("database `{}` is refused: {reason}", .db.escape_debug())]
    UnsupportedDatabase {
        /// The value as given (a URL's password is never shown).
        db: String,
        /// What is wrong with it, and what is accepted.
        reason: String,
    },
    /// The database backend failed.
    #[error("database error while {action}: {source}")]
    Backend {
        /// What was being done.
        action: &'static str,
        /// The backend's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl StoreError {
    /// Whether the failure is temporary (the database is restarting, every connection is busy):
    /// nothing was done and the caller may retry later.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }

    /// Whether the error is the caller's fault (bad input) rather than the system's.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            Self::SessionNotFound(_)
                | Self::SessionExists(_)
                | Self::InvalidEvent { .. }
                | Self::CallState { .. }
                | Self::InvalidRecord { .. }
                | Self::Conflict { .. }
                | Self::ModelCallNotFound { .. }
                | Self::BlobNotFound(_)
                | Self::UnsafeReference { .. }
                | Self::InvalidTenant { .. }
                | Self::InvalidProxyMode(_)
                | Self::InvalidKey { .. }
                | Self::KeyExists { .. }
                | Self::KeyNotFound(_)
                | Self::UnsupportedDatabase { .. }
        )
    }
}
