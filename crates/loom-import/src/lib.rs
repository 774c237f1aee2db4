//! Readers that turn real agent histories into Loom log events.
//!
//! Four formats are read: OpenAI Chat Completions (a message list, `{"messages": [...]}`, or
//! JSONL of trajectories `{"id", "source", "messages"}`), Anthropic Messages (`system` plus
//! messages with content blocks), OpenAI Responses input items and Gemini `contents` (with
//! `systemInstruction`); without a requested format
//! ([`ParseOptions::format`] `None`) they are told apart from the content. The mapping of every field is documented in `docs/formats.md`.
//!
//! Every event is checked by a [`loom_core::Ledger`] while it is built. Reading stores nothing but
//! long tool outputs, streamed into a [`BlobSink`] (a blob store implements it) straight from the parser's buffer (never held
//! twice in memory): sessions come out as events, and storing them is the session engine's
//! (`loom_session::import`, which reads and checks every input before the first write).

mod anthropic;
mod build;
mod detect;
mod error;
mod gemini;
mod input;
mod opaque;
mod openai;
mod parse;
mod raw;
mod responses;
mod sink;

use loom_core::Api;

pub use error::{ImportError, Location, Result};
pub use parse::{
    parse_file, parse_reader, parse_slice, ParseOptions, ParsedSession, DEFAULT_AGENT,
    DEFAULT_INLINE_LIMIT,
};
pub use sink::{BlobSink, SinkError};

/// The names a requested format is given by (`--format`, the API's `format` parameter): `auto`,
/// the importer's short names, and each API's own name.
pub const FORMAT_NAMES: [&str; 8] = [
    "auto",
    "openai",
    "anthropic",
    "responses",
    "gemini",
    "openai-chat",
    "openai-responses",
    "anthropic-messages",
];

/// The API a requested format names (one of [`FORMAT_NAMES`]), `None` for `auto` (tell it from
/// the content).
pub fn requested_format(name: &str) -> Result<Option<Api>> {
    if name == "auto" {
        return Ok(None);
    }
    FORMAT_NAMES
        .contains(&name)
        .then(|| Api::parse(name))
        .flatten()
        .map(Some)
        .ok_or_else(|| {
            ImportError::Options(format!(
                "unknown format `{name}`; expected auto, openai, anthropic, responses or gemini"
            ))
        })
}
