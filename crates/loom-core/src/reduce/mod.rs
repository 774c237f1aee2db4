//! Reduction at ingest (seeds 000, 001): each tool result becomes a [`Step`] with a one-line,
//! truthful observation, and a decision whether its original output is offloaded.
//!
//! Pure: the caller hands over the call, the original bytes and their stats; nothing here reads
//! or writes anything. The tool-kind mapping ([`ToolKinds`]) picks a reducer; each reducer reads
//! the output inside its framework's wrapper (exit codes, footers), and writes an observation that
//! keeps what the agent is likely to need next — paths, ids, counts, exit codes, error names —
//! within [`ReduceConfig::max_chars`], with secrets masked. Figures in observations come from the
//! whole output, never from a preview. Offloaded outputs get a seed-style alias
//! (`outputs/shell_003.log`) and keep their content address (the SHA-256 of the original bytes),
//! so the reference returns exactly what the tool produced.

mod args;
mod cmdline;
mod config;
mod envelope;
mod files;
mod find;
mod generic;
mod ingest;
mod kind;
mod outline;
pub(crate) use outline::{definitions as code_definitions, uses as code_uses};
mod secrets;
mod shell;
mod template;
mod text;
mod web;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::event::{BlobRef, Seq, ToolCall};
use crate::stats::{ContentStats, ContentType};
use crate::step::{Step, ToolKind};

pub use config::{ReduceConfig, Thresholds};
pub use ingest::{Arrived, Ingest};
pub use kind::ToolKinds;
pub use template::Templates;

use args::Args;
use envelope::Envelope;

/// Where a step sits in its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepContext {
    /// 1-based number of the step in its session (`step_003` is 3).
    pub number: u32,
    /// Seq of the assistant event that made the call.
    pub call_seq: Seq,
    /// Seq of the tool result.
    pub result_seq: Seq,
    /// When the result arrived, UTC milliseconds.
    pub timestamp_ms: i64,
}

/// One tool result to reduce: the original bytes as the tool produced them.
#[derive(Debug, Clone, Copy)]
pub struct ResultInput<'a> {
    /// The call this answers; `None` when the log has no call for it (the step says so).
    pub call: Option<&'a ToolCall>,
    /// The result's call id.
    pub call_id: &'a str,
    /// The tool name on the result (used when there is no call).
    pub tool_name: &'a str,
    /// The original output.
    pub content: &'a [u8],
    /// Whether the tool reported an error.
    pub is_error: bool,
    /// Stats of `content`.
    pub stats: &'a ContentStats,
}

/// A reduced result: the step and, when the output is offloaded, its alias.
#[derive(Debug, Clone, PartialEq)]
pub struct Reduction {
    /// The step. When offloaded, `outcome_ref` is the alias and `blob` the content address.
    pub step: Step,
    /// `outputs/shell_003.log` when the original output should go to the blob store.
    pub offload: Option<String>,
}

/// `step_001`, `step_042`, `step_1000`.
pub fn step_id(number: u32) -> String {
    format!("step_{number:03}")
}

/// What a reducer works from.
#[derive(Debug)]
pub(crate) struct Input<'a> {
    pub(crate) tool_name: &'a str,
    pub(crate) args: Args,
    /// The output inside its framework's wrapper.
    pub(crate) env: Envelope<'a>,
    pub(crate) is_error: bool,
    pub(crate) stats: &'a ContentStats,
    pub(crate) max: usize,
}

/// What a reducer found.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// The kind the step gets (a shell command that reads a file is a file read).
    pub(crate) kind: ToolKind,
    pub(crate) observation: String,
    pub(crate) success: bool,
    pub(crate) error: Option<String>,
    pub(crate) results: Option<u64>,
    pub(crate) facts: BTreeMap<String, Value>,
    pub(crate) minimal_args: BTreeMap<String, Value>,
}

impl Outcome {
    pub(crate) fn new(kind: ToolKind, observation: String) -> Self {
        Self {
            kind,
            observation,
            success: true,
            error: None,
            results: None,
            facts: BTreeMap::new(),
            minimal_args: BTreeMap::new(),
        }
    }

    pub(crate) fn fact(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.facts.insert(key.to_owned(), value.into());
        self
    }

    pub(crate) fn arg(mut self, key: &str, value: Option<&str>) -> Self {
        if let Some(v) = value {
            self.minimal_args.insert(key.to_owned(), args::short(v));
        }
        self
    }

    pub(crate) fn failed(mut self, error: impl Into<String>) -> Self {
        self.success = false;
        self.error = Some(text::piece(&error.into(), 400));
        self
    }
}

impl ReduceConfig {
    /// Reduces one tool result to a step and an offload decision. Never fails and never panics:
    /// malformed arguments, binary or non-UTF-8 output, and results without a call all give a
    /// correct step.
    pub fn reduce(&self, input: &ResultInput<'_>, ctx: &StepContext) -> Reduction {
        let (tool_name, raw_args) = match input.call {
            Some(call) => (call.name.as_str(), call.arguments.as_str()),
            None => (input.tool_name, ""),
        };
        let args = Args::parse(raw_args);
        let kind = self.kinds.resolve(tool_name, &args);
        let text = match input.stats.content_type {
            ContentType::Binary => None,
            _ => std::str::from_utf8(input.content).ok(),
        };
        let malformed = args.malformed();
        let mut outcome = match text {
            None => {
                let mut binary =
                    generic::binary(tool_name, kind.clone(), input.content, self.max_chars);
                binary.minimal_args = args::generic_minimal(&args);
                binary
            }
            Some(text) => {
                let reducer_input = Input {
                    tool_name,
                    args,
                    env: Envelope::parse(text),
                    is_error: input.is_error,
                    stats: input.stats,
                    max: self.max_chars,
                };
                dispatch(&kind, &reducer_input)
            }
        };
        if input.is_error && outcome.success {
            // The tool said it failed even though its output did not: trust the tool.
            let why = text
                .and_then(|t| text::error_line(t).or_else(|| text::first_meaningful(t)))
                .unwrap_or("the tool reported an error")
                .to_owned();
            outcome = outcome.failed(why);
        }
        if malformed {
            outcome
                .facts
                .insert("malformed_arguments".into(), Value::Bool(true));
            if outcome.minimal_args.is_empty() {
                outcome
                    .minimal_args
                    .insert("raw".into(), args::short(raw_args));
            }
        }
        // A short one-line answer says more than any description of it, in fewer tokens: it is
        // its own observation (masked like any other). Only for kinds whose observation would
        // describe the output alone; file, listing, search and shell observations also carry
        // what was asked (path, range, exit code), which the output does not repeat.
        let describes_output = matches!(
            outcome.kind,
            ToolKind::Unknown | ToolKind::Custom(_) | ToolKind::WebSearch
        );
        if let Some(t) = text.filter(|_| describes_output) {
            let trimmed = t.trim();
            let short = !trimmed.is_empty()
                && !trimmed.contains('\n')
                && trimmed.chars().count() <= outcome.observation.chars().count();
            if short {
                let verbatim = text::piece(trimmed, self.max_chars);
                if !verbatim.ends_with('…') {
                    outcome.observation = verbatim;
                    outcome.facts.insert("verbatim".into(), Value::Bool(true));
                }
            }
        }
        if input.call.is_none() {
            outcome.facts.insert("orphan".into(), Value::Bool(true));
        }
        let offload = self.offload_alias(&outcome, input, ctx.number, text);
        let blob = offload
            .as_ref()
            .and_then(|_| BlobRef::from_hex(&input.stats.sha256).ok());
        let step = Step {
            id: step_id(ctx.number),
            call_id: input.call_id.to_owned(),
            call_seq: ctx.call_seq,
            result_seq: ctx.result_seq,
            tool_name: tool_name.to_owned(),
            kind: outcome.kind,
            minimal_args: outcome.minimal_args,
            observation: outcome.observation,
            outcome_ref: offload.clone(),
            blob,
            success: outcome.success,
            error: outcome.error,
            timestamp_ms: ctx.timestamp_ms,
            stats: input.stats.clone(),
            results: outcome.results,
            facts: outcome.facts,
        };
        Reduction { step, offload }
    }

    /// The seeds' offload rules; `None` keeps the output inline (it stays in the log anyway).
    fn offload_alias(
        &self,
        outcome: &Outcome,
        input: &ResultInput<'_>,
        number: u32,
        text: Option<&str>,
    ) -> Option<String> {
        let t = &self.thresholds;
        let bytes = input.stats.bytes;
        if bytes == 0 {
            return None;
        }
        // A count decides for kinds that have one; size is the safety net for a few huge results.
        let counted = |limit: u64| match outcome.results {
            Some(n) => n > limit || bytes > t.default_bytes,
            None => bytes > t.default_bytes,
        };
        let offload = match (&outcome.kind, text) {
            (_, None) => true,
            (ToolKind::ReadFile, _) => bytes > t.read_file_bytes,
            (ToolKind::WriteFile, _) => bytes > t.write_file_bytes,
            (ToolKind::ListDir, _) => counted(t.list_dir_entries),
            (ToolKind::Grep | ToolKind::WebSearch, _) => counted(t.search_results),
            (ToolKind::Navigate, _) => bytes > t.navigate_bytes,
            (ToolKind::BrowserAction, _) => bytes > t.browser_bytes,
            (ToolKind::Shell, Some(text)) => {
                // Characters, as the seeds count them; bytes bound them from above.
                bytes > t.shell_chars && text.chars().count() as u64 > t.shell_chars
            }
            (ToolKind::Custom(_) | ToolKind::Unknown, _) => bytes > t.default_bytes,
        };
        offload.then(|| {
            alias(
                &outcome.kind,
                input.tool_name_for_alias(),
                number,
                input,
                text,
            )
        })
    }
}

impl ResultInput<'_> {
    fn tool_name_for_alias(&self) -> &str {
        self.call.map_or(self.tool_name, |c| c.name.as_str())
    }
}

/// The seed-style name of an offloaded output: `outputs/<what>_<NNN>.<ext>`.
fn alias(
    kind: &ToolKind,
    tool: &str,
    number: u32,
    input: &ResultInput<'_>,
    text: Option<&str>,
) -> String {
    let what = match kind {
        ToolKind::ReadFile => "file".to_owned(),
        ToolKind::WriteFile => "write".to_owned(),
        ToolKind::ListDir => "list".to_owned(),
        ToolKind::Grep => "grep".to_owned(),
        ToolKind::WebSearch => "search".to_owned(),
        ToolKind::Navigate | ToolKind::BrowserAction => "page".to_owned(),
        ToolKind::Shell => "shell".to_owned(),
        ToolKind::Custom(name) => sanitize(name),
        ToolKind::Unknown => sanitize(tool),
    };
    // Framework wrappers (mini-swe-agent's `<returncode>` tags) make outputs look like XML:
    // only JSON and HTML pages are named by their type, the rest by what produced them.
    let ext = match (text, input.stats.content_type) {
        (None, _) => text::sniff_binary(input.content).1,
        (_, ContentType::Json) => "json",
        (_, ContentType::Html) if *kind != ToolKind::Shell => "html",
        _ if *kind == ToolKind::Shell => "log",
        _ => "txt",
    };
    format!("outputs/{what}_{number:03}.{ext}")
}

/// A tool name as a file name part: `[a-z0-9_-]`, at most 40 characters, never empty.
fn sanitize(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    out = out.trim_matches('_').to_owned();
    if out.is_empty() {
        "output".to_owned()
    } else {
        out
    }
}

fn dispatch(kind: &ToolKind, input: &Input<'_>) -> Outcome {
    match kind {
        ToolKind::ReadFile => files::read(input),
        ToolKind::WriteFile => files::write(input),
        ToolKind::ListDir => find::list(input),
        ToolKind::Grep => find::grep(input),
        ToolKind::WebSearch => web::search(input),
        ToolKind::Navigate => web::navigate(input),
        ToolKind::BrowserAction => web::browser(input),
        ToolKind::Shell => shell::reduce(input),
        ToolKind::Custom(_) | ToolKind::Unknown => generic::reduce(kind.clone(), input),
    }
}

#[cfg(test)]
mod tests;
