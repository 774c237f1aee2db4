//! The session engine's one error type: a normalised kind, a message that names the record and
//! the reason, and the field at fault when there is one. Each front end maps the kind once: the
//! server to an HTTP status (in its one `IntoResponse`), the CLI to an exit code, Python to an
//! exception class. Nobody matches on the message.

use loom_store::StoreError;

/// What kind of failure, as every front end tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request is wrong (bad input): a field, a model name, a budget, a history.
    Invalid,
    /// No session of that name.
    SessionNotFound,
    /// Nothing of that name: a blob, a model call, an event.
    NotFound,
    /// The request contradicts what is stored, or another writer moved the session on: the
    /// caller may send it again.
    Conflict,
    /// The store is busy or unreachable: nothing was done, and the caller may retry.
    Unavailable,
    /// Loom failed (a disk, a bug); the message says what was being done.
    Internal,
}

/// A failure of the session engine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SessionError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// What happened, naming the record and the reason.
    pub message: String,
    /// The field at fault (`events[2].call_id`, `model`), when there is one.
    pub field: Option<String>,
    /// Tokens the smallest rendering needs beyond the hard budget, when a render did not fit:
    /// a caller that can make the request smaller (a recall round's answers) learns by how much.
    pub over_budget: Option<u64>,
}

/// A `Result` whose error is a [`SessionError`].
pub type Result<T, E = SessionError> = std::result::Result<T, E>;

impl SessionError {
    /// A failure of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            field: None,
            over_budget: None,
        }
    }

    /// The request is wrong.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, message)
    }

    /// The request is wrong in one field, which it names.
    pub fn invalid_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::invalid(message).with_field(field)
    }

    /// Nothing of that name.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    /// The request contradicts what is stored.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, message)
    }

    /// The store is at a limit; retry.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }

    /// Loom failed while `doing` something; the cause is logged, not shown.
    pub fn internal(doing: impl Into<String>) -> Self {
        Self::new(
            ErrorKind::Internal,
            format!("internal error while {}", doing.into()),
        )
    }

    /// Names the field at fault.
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// Puts `context` in front of the message (`session s1: ...`).
    pub fn context(mut self, context: impl std::fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl From<StoreError> for SessionError {
    fn from(e: StoreError) -> Self {
        match &e {
            StoreError::SessionNotFound(_) => Self::new(ErrorKind::SessionNotFound, e.to_string()),
            StoreError::BlobNotFound(_) => Self::not_found(e.to_string()),
            StoreError::ModelCallNotFound { .. } => Self::not_found(e.to_string()),
            // Another writer changed the session while this call prepared its write; the caller
            // may send the call again.
            StoreError::SessionExists(_)
            | StoreError::Moved { .. }
            | StoreError::Conflict { .. } => Self::conflict(e.to_string()),
            // Every connection busy, or the database restarting: nothing was done, and the
            // caller may retry. What exactly failed is logged, not shown.
            StoreError::Unavailable { action, .. } => {
                tracing::warn!("store: {e}");
                Self::unavailable(format!(
                    "the database is busy or unreachable while {action}; retry later"
                ))
            }
            StoreError::InvalidEvent { index, .. } => {
                Self::invalid_field(format!("events[{index}]"), e.to_string())
            }
            _ if e.is_bad_input() => Self::invalid(e.to_string()),
            _ => {
                tracing::error!("store: {e}");
                Self::internal("using the store")
            }
        }
    }
}

impl From<loom_import::ImportError> for SessionError {
    fn from(e: loom_import::ImportError) -> Self {
        use loom_import::ImportError as E;
        let field = match &e {
            E::Json { field, .. } | E::Invalid { field, .. } if !field.is_empty() => {
                Some(field.clone())
            }
            _ => None,
        };
        if let E::Conflict { .. } | E::DuplicateSession { .. } = e {
            return Self::conflict(e.to_string());
        }
        if e.is_bad_input() {
            let err = Self::invalid(e.to_string());
            return match field {
                Some(f) => err.with_field(f),
                None => err,
            };
        }
        tracing::error!("import: {e}");
        Self::internal("importing a history")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unavailable_store_says_no_more_than_what_was_done() {
        let err = SessionError::from(StoreError::Unavailable {
            action: "appending events",
            reason: "cannot connect to PostgreSQL at 10.0.0.7:5432".into(),
        });
        assert_eq!(err.kind, ErrorKind::Unavailable);
        assert!(err.message.contains("appending events"), "{}", err.message);
        assert!(!err.message.contains("10.0.0.7"), "{}", err.message);
    }
}
