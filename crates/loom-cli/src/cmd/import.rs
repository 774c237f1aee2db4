//! `loom import`: read agent histories (OpenAI Chat, Anthropic Messages, OpenAI Responses) into
//! the log.
//!
//! Every file is read and checked before the first session is written, so a bad file leaves the
//! database as it was. Sessions already stored with the same events are left alone.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use loom_core::{AgentId, Api, SessionId};
use loom_import::{ParseOptions, DEFAULT_INLINE_LIMIT};
use loom_session::import::{ImportReport, Importer, Progress};

use super::Context;
use crate::exit;

/// `--format`: `None` for `auto`, or the API a file's records are written for.
#[derive(Debug, Clone, Copy)]
struct FormatArg(Option<Api>);

fn format_arg(name: &str) -> Result<FormatArg, String> {
    loom_import::requested_format(name)
        .map(FormatArg)
        .map_err(|e| e.to_string())
}

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// JSON or JSONL files to import.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Input format: `auto` (tell it from the content), `openai` (OpenAI Chat Completions:
    /// a JSON list, `{"messages"}` or JSONL trajectories), `anthropic` (Anthropic Messages:
    /// `system` plus messages with content blocks) or `responses` (OpenAI Responses input items).
    #[arg(long, value_name = "FORMAT", default_value = "auto", value_parser = format_arg)]
    format: FormatArg,
    /// Session id for a single-conversation file (default: the file name without extension, or
    /// the trajectory's `id`).
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Agent id for the imported sessions (default: the trajectory's `source`, else `agent`).
    #[arg(long, value_name = "ID")]
    agent: Option<String>,
    /// Tool outputs longer than this many bytes go to the blob store.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_INLINE_LIMIT)]
    inline_limit: usize,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// Do not derive memory items from the imported sessions (`loom memory index` does it
    /// later).
    #[arg(long)]
    no_index: bool,
}

pub(crate) fn run(ctx: &Context, args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut opts = ParseOptions::new(super::now_ms());
    opts.format = args.format.0;
    opts.inline_limit = args.inline_limit;
    opts.session = args
        .session
        .map(SessionId::new)
        .transpose()
        .map_err(|e| exit::bad_input(anyhow::Error::new(e).context("--session")))?;
    opts.agent = args
        .agent
        .map(AgentId::new)
        .transpose()
        .map_err(|e| exit::bad_input(anyhow::Error::new(e).context("--agent")))?;
    let ws = ctx.open()?;
    let mut bar = Bar::new();
    let result =
        Importer::new(ws.store.as_ref(), ws.blobs.as_ref(), opts).run(&args.files, &mut bar);
    bar.clear();
    let report = result.map_err(|e| {
        if e.is_bad_input() {
            exit::bad_input(e)
        } else {
            anyhow::Error::new(e)
        }
    })?;
    // Memory for what was written, so that `loom memory search` finds it at once.
    if !args.no_index {
        let written: Vec<SessionId> = report
            .sessions
            .iter()
            .filter(|s| s.outcome != loom_session::import::Outcome::Unchanged)
            .map(|s| s.id.clone())
            .collect();
        super::memory::index_new(ctx, ws.store.as_ref(), &written)?;
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        writeln!(out, "{}", summary(&report, started.elapsed()))?;
    }
    Ok(())
}

fn summary(r: &ImportReport, took: Duration) -> String {
    let plural = |n: u64, one: &str, many: &str| {
        if n == 1 {
            format!("{n} {one}")
        } else {
            format!("{n} {many}")
        }
    };
    format!(
        "imported {} ({}, {} offloaded), {} unchanged, from {} in {:.2}s",
        plural(r.imported as u64, "session", "sessions"),
        plural(r.events, "event", "events"),
        plural(r.blobs, "blob", "blobs"),
        r.unchanged,
        plural(r.files as u64, "file", "files"),
        took.as_secs_f64()
    )
}

/// A progress bar on stderr that appears only once the work has taken more than a second, and
/// never when stderr is not a terminal.
struct Bar {
    bar: ProgressBar,
    started: Instant,
    terminal: bool,
    shown: bool,
}

impl Bar {
    const DELAY: Duration = Duration::from_secs(1);

    fn new() -> Self {
        Self {
            bar: ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden()),
            started: Instant::now(),
            terminal: std::io::stderr().is_terminal(),
            shown: false,
        }
    }

    fn tick(&mut self) {
        if self.terminal && !self.shown && self.started.elapsed() > Self::DELAY {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.shown = true;
        }
    }

    fn clear(&self) {
        self.bar.finish_and_clear();
    }
}

impl Progress for Bar {
    fn reading(&mut self, total_bytes: u64) {
        self.bar.set_length(total_bytes);
        if let Ok(style) = ProgressStyle::with_template(
            "{msg:8} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
        ) {
            self.bar.set_style(style.progress_chars("=> "));
        }
        self.bar.set_message("reading");
    }

    fn read(&mut self, bytes: u64) {
        self.bar.inc(bytes);
        self.tick();
    }

    fn writing(&mut self, sessions: u64) {
        if let Ok(style) =
            ProgressStyle::with_template("{msg:8} [{bar:30}] {pos}/{len} sessions ({eta})")
        {
            self.bar.set_style(style.progress_chars("=> "));
        }
        self.bar.set_message("writing");
        self.bar.set_length(sessions);
        self.bar.set_position(0);
    }

    fn written(&mut self, _session: &SessionId) {
        self.bar.inc(1);
        self.tick();
    }
}
