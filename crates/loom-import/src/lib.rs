//! Readers that turn real agent histories into Loom log events.
//!
//! Three formats are read: OpenAI Chat Completions (a message list, `{"messages": [...]}`, or
//! JSONL of trajectories `{"id", "source", "messages"}`), Anthropic Messages (`system` plus
//! messages with content blocks) and OpenAI Responses input items. [`Format::Auto`] tells them
//! apart from the content. The mapping of every field is documented in `docs/formats.md`.
//!
//! Every event is checked by a [`loom_core::Ledger`] while it is built, and every input is read
//! and checked before anything is stored ([`Importer::run`]), so bad input changes nothing. Long
//! tool outputs are streamed into the blob store straight from the parser's buffer, never held
//! twice in memory.

mod anthropic;
mod build;
mod detect;
mod error;
mod import;
mod input;
mod opaque;
mod openai;
mod parse;
mod raw;
mod responses;

use std::fmt;
use std::str::FromStr;

pub use error::{ImportError, Location, Result};
pub use import::{
    plan, plan_extending, ImportReport, Importer, NoProgress, Outcome, Plan, Progress,
    SessionReport,
};
pub use parse::{
    parse_file, parse_reader, parse_slice, ParseOptions, ParsedSession, DEFAULT_AGENT,
    DEFAULT_INLINE_LIMIT,
};

/// An input format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Format {
    /// Tell the format from the content.
    #[default]
    Auto,
    /// OpenAI Chat Completions messages.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI Responses input items.
    Responses,
}

impl Format {
    /// Every format, `auto` first.
    pub const ALL: [Self; 4] = [Self::Auto, Self::OpenAi, Self::Anthropic, Self::Responses];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
            Self::Responses => "responses",
        }
    }

    /// The name used in messages.
    pub fn title(self) -> &'static str {
        match self {
            Self::Auto => "auto-detected",
            Self::OpenAi => "OpenAI Chat",
            Self::Anthropic => "Anthropic Messages",
            Self::Responses => "OpenAI Responses",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = ImportError;

    fn from_str(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                ImportError::Options(format!(
                    "unknown format `{s}`; expected auto, openai, anthropic or responses"
                ))
            })
    }
}

impl serde::Serialize for Format {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}
