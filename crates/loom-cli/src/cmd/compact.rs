//! `loom compact SESSION`: the session's step history as the model would read it after step
//! compaction (seed 003) — recent steps in full, older ones as grouped one-line summaries,
//! failures kept with their errors, the oldest counted.
//!
//! By default the cache-stable compactor is replayed after every step, as an agent loop drives
//! it, and the history at the last step is printed. `--seed-format` runs the seed-faithful
//! compactor once over the whole history and prints the seed's `format_for_prompt` text.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;
use loom_core::{
    auto_tune_config, compact, CompactStep, CompactionConfig, EventBody, Preset, SessionId,
    StableCompactor, Step,
};
use loom_store::Opened;
use serde::Serialize;

use super::steps::{derive, load_config, open, session_id};
use super::Context;
use crate::exit;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The session.
    #[arg(value_name = "SESSION")]
    session: String,
    /// Start from a preset of the seed's tuning table: interactive-chat (the defaults),
    /// long-research, code-analysis, debugging; or `auto` to pick one from the session's task.
    #[arg(long, value_name = "NAME")]
    preset: Option<String>,
    /// Steps kept in full.
    #[arg(long, value_name = "N")]
    recent: Option<usize>,
    /// Most steps the compact summaries may cover; older ones are dropped and counted.
    #[arg(long = "max-compact", value_name = "N")]
    max_compact: Option<usize>,
    /// Do not group consecutive steps of one category.
    #[arg(long)]
    no_group: bool,
    /// Run the seed-faithful compactor and print exactly the seed's `format_for_prompt` layout.
    #[arg(long)]
    seed_format: bool,
    /// Print `{session, mode, config, steps, omitted, compact, recent, text}` as JSON.
    #[arg(long)]
    json: bool,
    /// Reduction settings (TOML) used when the session's steps are derived, as `loom steps`.
    #[arg(long = "reduce-config", value_name = "FILE")]
    reduce_config: Option<PathBuf>,
    /// Derive every step again instead of reusing the stored ones.
    #[arg(long)]
    rebuild: bool,
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
struct Report<'a> {
    session: &'a str,
    /// `stable` or `seed`.
    mode: &'static str,
    config: &'a CompactionConfig,
    /// Steps in the session.
    steps: usize,
    /// Steps dropped and not shown at all.
    omitted: usize,
    /// The compact lines, in the order printed (failure lines included).
    compact: Vec<&'a CompactStep>,
    /// Ids of the steps kept in full.
    recent: Vec<&'a str>,
    /// Compaction points taken while replaying (stable mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    points: Option<u64>,
    /// The text the model reads.
    text: &'a str,
}

pub(crate) fn run(ctx: &Context, args: Args) -> anyhow::Result<()> {
    let ws = open(ctx)?;
    let reduce = load_config(args.reduce_config.as_deref())?;
    let session = session_id(&args.session)?;
    let steps = derive(&ws, &reduce, &session, args.rebuild)?;
    let config = config(&ws, &session, &args)?;

    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if args.seed_format {
        let history = compact(&steps, &config, None);
        let text = history.format_for_prompt();
        if args.json {
            let report = Report {
                session: session.as_str(),
                mode: "seed",
                config: &config,
                steps: steps.len(),
                omitted: history.omitted.count,
                compact: history.compact_lines(),
                recent: history.recent.iter().map(|s| s.id.as_str()).collect(),
                points: None,
                text: &text,
            };
            serde_json::to_writer_pretty(&mut out, &report)?;
            writeln!(out)?;
        } else {
            out.write_all(text.as_bytes())?;
        }
        out.flush()?;
        return Ok(());
    }

    let mut compactor = StableCompactor::new(config.clone()).map_err(exit::bad_input)?;
    for n in 1..=steps.len() {
        compactor
            .update(&steps[..n], None)
            .with_context(|| format!("compacting the first {n} steps"))?;
    }
    let text = compactor.render(&steps)?;
    if args.json {
        let history = compactor.history(&steps)?;
        let state = compactor.state();
        let mut compact: Vec<&CompactStep> = state.omitted.failures.iter().collect();
        compact.extend(state.blocks.iter().flat_map(|b| b.lines()));
        let report = Report {
            session: session.as_str(),
            mode: "stable",
            config: &config,
            steps: steps.len(),
            omitted: state.omitted.count,
            compact,
            recent: history
                .recent()
                .iter()
                .map(|s: &Step| s.id.as_str())
                .collect(),
            points: Some(state.points),
            text: &text,
        };
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        out.write_all(text.as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

/// The preset (or the defaults), then the explicit overrides, validated once.
fn config(ws: &Opened, session: &SessionId, args: &Args) -> anyhow::Result<CompactionConfig> {
    let mut config = match args.preset.as_deref() {
        None => CompactionConfig::default(),
        Some("auto") => auto_tune_config(&task(ws, session)?),
        Some(name) => CompactionConfig::preset(
            Preset::from_name(name).map_err(|e| exit::bad_input(anyhow::Error::new(e)))?,
        ),
    };
    if let Some(n) = args.recent {
        config.recent_window = n;
    }
    if let Some(n) = args.max_compact {
        config.max_compact_steps = n;
    }
    if args.no_group {
        config.group_similar = false;
    }
    config
        .validate()
        .map_err(|e| exit::bad_input(anyhow::Error::new(e)))?;
    Ok(config)
}

/// The session's task: its first user message (empty when it has none).
fn task(ws: &Opened, session: &SessionId) -> anyhow::Result<String> {
    let last = ws.store.latest_seq(session)?;
    // Tasks come first; reading a bounded head keeps `auto` cheap on long sessions.
    for event in ws.store.read(session, 1..=last.min(64))? {
        if let EventBody::User { content, .. } = event.body {
            return Ok(content.text().into_owned());
        }
    }
    Ok(String::new())
}
