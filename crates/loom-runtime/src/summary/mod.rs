//! Summaries: the expensive reducer, made off the critical path (seed 004: prefix-ward, in chunks,
//! between turns) and stored as derived records the render pipeline adopts at compaction points.
//!
//! A [`Summarizer`] turns a [`SummaryRequest`] — the previous summary, the next chunk of the log
//! as bounded transcript [`Entry`]s (tool results as their step observations, never raw), the
//! identifiers later events still use, the required sections, and the conversation's stable
//! prefix — into text. Two implementations: [`DeterministicSummarizer`] (no model; the default in
//! tests and replay) and [`HttpSummarizer`] (OpenAI-compatible or Anthropic APIs). Whatever
//! produced it, the text goes through [`check_summary`] before it is stored.

mod check;
mod deterministic;
mod http;
mod ident;
mod transcript;

use loom_core::render::{Rendered, Request, SummaryView};
use loom_core::{Seq, SessionId};
use loom_store::Summary;
use serde::{Deserialize, Serialize};

use crate::error::Result;

pub use check::{check_summary, has_section, Rejection};
pub use deterministic::DeterministicSummarizer;
pub use http::HttpSummarizer;
pub use ident::{identifiers, later_identifiers};
pub use transcript::{next_chunk, Chunk, EntryLimits};

/// Sections every summary must have, in order (see the instruction in `instruction.md`):
/// **Goal** (what the user wants), **Progress** (what was done and found, failures kept),
/// **Open items** (what is unresolved or next). A section is a line holding its name as a
/// heading (`## Goal`), optionally bold or followed by a colon.
pub const DEFAULT_SECTIONS: [&str; 3] = ["Goal", "Progress", "Open items"];

/// What a transcript entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A user message.
    User,
    /// Assistant text.
    Assistant,
    /// A tool call with its result's observation.
    Step,
    /// A direct message, spawn or agent result.
    Note,
}

impl EntryKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Step => "step",
            Self::Note => "note",
        }
    }
}

/// One bounded line of the chunk being summarised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Seq of the unit it comes from.
    pub seq: Seq,
    /// What it records.
    pub kind: EntryKind,
    /// The text a model reads (bounded; a step's arguments and observation with its reference).
    pub text: String,
    /// A one-line short form (a step's observation and reference, a message's first words).
    pub brief: String,
    /// Whether it records a failed step (failures are never dropped from a summary).
    pub failed: bool,
}

impl Entry {
    /// The transcript line: `[seq 12 step] ...`.
    pub fn line(&self) -> String {
        format!("[seq {} {}] {}", self.seq, self.kind.as_str(), self.text)
    }
}

/// The summary a new one builds on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviousSummary {
    /// Its version.
    pub version: u32,
    /// It covers `[1, to_seq]`.
    pub to_seq: Seq,
    /// Its text.
    pub content: String,
}

/// Everything a summarizer is given: bounded, and enough to extend the previous summary.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryRequest {
    /// The session.
    pub session: SessionId,
    /// The task statement (the first user message), bounded.
    pub task: Option<String>,
    /// The summary being extended, covering `[1, from_seq - 1]`.
    pub previous: Option<PreviousSummary>,
    /// First seq of the chunk.
    pub from_seq: Seq,
    /// Last seq the new summary covers.
    pub to_seq: Seq,
    /// The chunk, one bounded entry per message or step.
    pub entries: Vec<Entry>,
    /// Identifiers from the covered span that later events mention: the output must keep them.
    pub must_keep: Vec<String>,
    /// Sections the output must have.
    pub sections: Vec<String>,
    /// The conversation's stable prefix (system prompt, tools, pins, compact block), so an LLM
    /// request can reuse the provider's prompt cache.
    pub prefix: Option<Request>,
    /// Tokens the summary may use.
    pub max_output_tokens: u64,
}

impl SummaryRequest {
    /// The chunk as text, one line per entry.
    pub fn transcript(&self) -> String {
        self.entries
            .iter()
            .map(Entry::line)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The user message an LLM is sent: previous summary, task, chunk, and the instruction last.
    pub fn prompt(&self) -> String {
        let mut out = String::new();
        if let Some(p) = &self.previous {
            out.push_str(&format!(
                "Running summary so far (covers seq 1..={}):\n{}\n\n",
                p.to_seq, p.content
            ));
        }
        if let Some(task) = &self.task {
            out.push_str(&format!("Task statement: {task}\n\n"));
        }
        out.push_str(&format!(
            "Events seq {}..={} to fold in (tool results appear as one-line observations with a \
             reference to the original):\n{}\n\n",
            self.from_seq,
            self.to_seq,
            self.transcript()
        ));
        out.push_str(&self.instruction());
        out
    }

    /// The summarization instruction (`instruction.md` with this request's sections and
    /// identifiers filled in).
    pub fn instruction(&self) -> String {
        let keep = if self.must_keep.is_empty() {
            "(none)".to_owned()
        } else {
            self.must_keep.join(", ")
        };
        include_str!("instruction.md")
            .replace("{sections}", &self.sections.join(", "))
            .replace("{must_keep}", &keep)
            .trim_end()
            .to_owned()
    }
}

/// Writes a summary. Implementations must be deterministic where they can be: replays use the
/// deterministic one.
pub trait Summarizer: Send + Sync {
    /// Recorded as the summary's producer (`deterministic`, a model name).
    fn name(&self) -> &str;
    /// The summary text for `request`; it is checked before it is stored.
    fn summarize(&self, request: &SummaryRequest) -> Result<String>;
}

/// The stored summaries the render pipeline can adopt: those covering `[1, to_seq]`.
pub fn summary_views(summaries: &[Summary]) -> Vec<SummaryView> {
    summaries
        .iter()
        .filter(|s| s.summary.from_seq == 1)
        .map(|s| SummaryView {
            version: s.version,
            to_seq: s.summary.to_seq,
            content: s.summary.content.clone(),
        })
        .collect()
}

/// The stable prefix of a rendered conversation request: its model, tools and
/// `messages[..stable_len]`. A summary request built on it shares the conversation's cached
/// prefix byte for byte.
pub fn conversation_prefix(rendered: &Rendered) -> Request {
    let req = &rendered.request;
    let stable = req.stable_len.min(req.messages.len());
    Request {
        model: req.model.clone(),
        tools: req.tools.clone(),
        messages: req.messages[..stable].to_vec(),
        stable_len: stable,
        max_output_tokens: req.max_output_tokens,
    }
}
