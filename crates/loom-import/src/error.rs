//! The one error type of the importers: what was wrong, in which file, line, record and field.

use std::fmt;

use crate::sink::SinkError;
use loom_core::{Seq, SessionId};

/// A `Result` whose error is an [`ImportError`].
pub type Result<T, E = ImportError> = std::result::Result<T, E>;

/// Where in an input something was found.
///
/// `line` is the line where the offending record or message starts (JSONL: the trajectory's line);
/// `record` counts top-level JSON values from 1 (a JSONL file's N-th trajectory).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Location {
    /// The input's name, as the user gave it.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<u64>,
    /// 1-based column, for JSON syntax errors.
    pub column: Option<u64>,
    /// 1-based index of the top-level record.
    pub record: Option<usize>,
}

#[cfg(test)]
impl Location {
    /// The start of a file.
    pub(crate) fn file(file: &str) -> Self {
        Self {
            file: file.to_owned(),
            ..Self::default()
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        if let Some(record) = self.record {
            write!(f, " (record {record})")?;
        }
        Ok(())
    }
}

/// What went wrong while reading, checking or storing an import.
///
/// Every input problem names the file and, where it applies, the line, the record, the field
/// (`messages[3].tool_call_id`) and the reason, so the user knows exactly what to fix. Locations
/// and store errors are boxed to keep `Result`s small on the paths that succeed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The input could not be opened or read.
    #[error("{file}: cannot read: {source}")]
    Io {
        /// The input.
        file: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The input holds nothing but whitespace.
    #[error("{file}: the file is empty; expected JSON or JSONL")]
    Empty {
        /// The input.
        file: String,
    },
    /// The input is not valid UTF-8 (JSON must be).
    #[error("{file}: invalid UTF-8 at byte offset {offset}")]
    InvalidUtf8 {
        /// The input.
        file: String,
        /// Offset of the first byte that is not UTF-8.
        offset: u64,
    },
    /// The input is not valid JSON, or a JSON value has the wrong type.
    #[error("{at}: invalid JSON{}: {reason}", in_field(.field))]
    Json {
        /// Line and column of the error.
        at: Box<Location>,
        /// The field being read, when known.
        field: String,
        /// What the JSON parser reported.
        reason: String,
    },
    /// A record breaks the format or the log's rules.
    #[error("{at}: field `{field}`: {reason}")]
    Invalid {
        /// The record (and the line of its message).
        at: Box<Location>,
        /// Path of the field, e.g. `messages[3].tool_call_id`.
        field: String,
        /// What is wrong and what was expected.
        reason: String,
    },
    /// The format could not be told from the content, or the content fits none.
    #[error("{at}: {reason}")]
    Format {
        /// The record.
        at: Box<Location>,
        /// Why detection failed; names the clues found.
        reason: String,
    },
    /// The import's options do not fit its inputs.
    #[error("{0}")]
    Options(String),
    /// Two inputs define the same session with different events.
    #[error(
        "session `{session}` is defined twice with different events: at {first} and at {second}"
    )]
    DuplicateSession {
        /// The session id.
        session: SessionId,
        /// Where it was first defined.
        first: Box<Location>,
        /// Where it was defined again.
        second: Box<Location>,
    },
    /// The session is already stored with different events; re-importing would rewrite the log.
    #[error("{at}: session `{session}` already exists with different events (first difference at seq {seq}: {reason})")]
    Conflict {
        /// Where the session comes from.
        at: Box<Location>,
        /// The session id.
        session: SessionId,
        /// First seq whose events differ.
        seq: Seq,
        /// What differs.
        reason: String,
    },
    /// Writing an offloaded output to the blob store failed.
    #[error("{at}: storing a large output in the blob store: {source}")]
    Blob {
        /// Where the output was read.
        at: Box<Location>,
        /// The blob store's error.
        #[source]
        source: SinkError,
    },
    /// The store refused or failed to write a session.
    #[error("{at}: storing session `{session}`: {source}")]
    Store {
        /// Where the session comes from.
        at: Box<Location>,
        /// The session id.
        session: SessionId,
        /// The store's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
        /// Whether the store refused the input (rather than failed).
        bad_input: bool,
    },
}

fn in_field(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!(" in `{field}`")
    }
}

impl ImportError {
    /// Whether the user can fix the error by changing the input or the options (as opposed to a
    /// failing disk or database).
    pub fn is_bad_input(&self) -> bool {
        match self {
            Self::Io { source, .. } => matches!(
                source.kind(),
                std::io::ErrorKind::NotFound
                    | std::io::ErrorKind::PermissionDenied
                    | std::io::ErrorKind::InvalidInput
                    | std::io::ErrorKind::IsADirectory
            ),
            Self::Empty { .. }
            | Self::InvalidUtf8 { .. }
            | Self::Json { .. }
            | Self::Invalid { .. }
            | Self::Format { .. }
            | Self::Options(_)
            | Self::DuplicateSession { .. }
            | Self::Conflict { .. } => true,
            Self::Blob { .. } => false,
            Self::Store { bad_input, .. } => *bad_input,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_names_file_line_column_and_record() {
        let at = Location {
            file: "a.jsonl".into(),
            line: Some(3),
            column: Some(7),
            record: Some(3),
        };
        assert_eq!(at.to_string(), "a.jsonl:3:7 (record 3)");
        assert_eq!(Location::file("b.json").to_string(), "b.json");
    }

    #[test]
    fn json_errors_name_the_field_when_known() {
        let e = ImportError::Json {
            at: Box::new(Location::file("x.json")),
            field: "messages[1].role".into(),
            reason: "expected a string".into(),
        };
        assert_eq!(
            e.to_string(),
            "x.json: invalid JSON in `messages[1].role`: expected a string"
        );
        assert!(e.is_bad_input());
    }
}
