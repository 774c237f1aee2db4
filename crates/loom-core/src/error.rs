//! The one error type of the data model: what was wrong, with which record and field.

use crate::event::Seq;

/// A `Result` whose error is a [`LogError`].
pub type Result<T, E = LogError> = std::result::Result<T, E>;

/// An event or a sequence of events that breaks the log's rules.
///
/// Every variant names the record (call id, seq or field) so that a caller can tell the user exactly
/// what to fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// A field holds a value outside what the log accepts.
    #[error("invalid field `{field}`: {reason}")]
    InvalidField {
        /// Dotted path of the field, e.g. `tool_calls[1].id`.
        field: String,
        /// What was expected instead.
        reason: String,
    },
    /// A tool result refers to a call that no earlier assistant event made.
    #[error("tool result for call `{call_id}` has no matching tool call before it")]
    UnknownCall {
        /// The unmatched call id.
        call_id: String,
    },
    /// A call id was used twice in one session.
    #[error("duplicate tool call id `{call_id}` (first used at seq {first_seq})")]
    DuplicateCall {
        /// The repeated call id.
        call_id: String,
        /// Where it was first used.
        first_seq: Seq,
    },
    /// A call already has its result; a second result would be stale.
    #[error("tool call `{call_id}` was already resolved at seq {resolved_seq}; a second result is stale")]
    AlreadyResolved {
        /// The call id.
        call_id: String,
        /// Seq of the result that resolved it.
        resolved_seq: Seq,
    },
    /// The call was expired; results for it are no longer accepted.
    #[error("tool call `{call_id}` has expired; its result is no longer accepted")]
    Expired {
        /// The call id.
        call_id: String,
    },
    /// A tool result names a different tool than its call.
    #[error(
        "tool result for call `{call_id}` names tool `{got}` but the call was to `{expected}`"
    )]
    ToolNameMismatch {
        /// The call id.
        call_id: String,
        /// Tool name on the call.
        expected: String,
        /// Tool name on the result.
        got: String,
    },
    /// Appended seqs must continue the session's log without gaps.
    #[error("seq {got} does not follow the session's last seq {last}")]
    SeqGap {
        /// Last seq stored.
        last: Seq,
        /// Seq that was offered.
        got: Seq,
    },
}

impl LogError {
    /// Shorthand for [`LogError::InvalidField`].
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidField {
            field: field.into(),
            reason: reason.into(),
        }
    }
}
