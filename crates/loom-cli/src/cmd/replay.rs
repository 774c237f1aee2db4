//! `loom replay FILE... --model NAME --budget N`: the main job.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::Context as _;
use loom_core::render::{Format, Policy};
use loom_core::ReduceConfig;
use loom_import::{parse_file, ParseOptions};
use loom_replay::{summaries, EncodingMeter, ReplayOptions, Replayer, Summary, TraceRun};
use loom_store::MemoryBlobStore;

use super::Context;
use crate::exit::bad_input;

/// Arguments of `loom replay`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Trace files: OpenAI Chat JSONL trajectories or any format `loom import` reads.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Model whose tokenizer counts and whose prices apply.
    #[arg(long, default_value = "gpt-4o")]
    model: String,
    /// Input-token budget of every request.
    #[arg(long)]
    budget: u64,
    /// Policy file (TOML) with render-pipeline settings; defaults for the rest.
    #[arg(long)]
    policy: Option<PathBuf>,
    /// Output format of Loom's requests.
    #[arg(long, default_value = "openai-chat", value_parser = parse_format)]
    format: Format,
    /// Write every Loom request to this JSONL file: `{"trace_id", "call", "request"}`.
    #[arg(long)]
    emit_requests: Option<PathBuf>,
    /// Write an HTML report with charts into this folder.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Print the summaries as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub(crate) fn parse_format(s: &str) -> Result<Format, String> {
    Format::parse(s).ok_or_else(|| {
        format!("unknown format `{s}`; expected openai-chat, openai-responses, anthropic or react")
    })
}

/// Reads a policy file: the render pipeline's settings, every field optional.
pub(crate) fn read_policy(path: Option<&PathBuf>) -> anyhow::Result<Policy> {
    let Some(path) = path else {
        return Ok(Policy::default());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading policy file {}", path.display()))
        .map_err(bad_input)?;
    let policy: Policy = toml::from_str(&text)
        .with_context(|| format!("policy file {}", path.display()))
        .map_err(bad_input)?;
    policy
        .validate()
        .with_context(|| format!("policy file {}", path.display()))
        .map_err(bad_input)?;
    Ok(policy)
}

pub(crate) fn run(_ctx: &Context, args: Args) -> anyhow::Result<()> {
    let registry = loom_tokens::Registry::built_in().context("loading the model registry")?;
    let model = registry.lookup(&args.model).map_err(bad_input)?;
    let loom_tokens::TokenizerSpec::Bpe(encoding) = model.tokenizer.clone() else {
        return Err(bad_input(anyhow::anyhow!(
            "model `{}` has no exact tokenizer built in; replay needs one to measure tokens",
            args.model
        )));
    };
    let policy = read_policy(args.policy.as_ref())?;
    if args.budget <= policy.injection_reserve {
        return Err(bad_input(anyhow::anyhow!(
            "--budget {} leaves nothing after the injection reserve {}",
            args.budget,
            policy.injection_reserve
        )));
    }
    let meter = EncodingMeter(encoding);
    let blobs = MemoryBlobStore::new();
    let opts = ReplayOptions {
        model: args.model.clone(),
        budget: args.budget,
        policy,
        format: args.format,
        reduce: ReduceConfig::default(),
    };
    let replayer = Replayer::new(opts, &meter, &blobs);

    let mut err = std::io::stderr().lock();
    writeln!(
        err,
        "replaying with model {} ({}), budget {} tokens, format {}; effective policy:\n{}",
        args.model,
        encoding.name(),
        args.budget,
        args.format.as_str(),
        toml::to_string(&replayer.options().policy).unwrap_or_default()
    )?;
    drop(err);

    let parse_opts = ParseOptions::new(0);
    let mut inputs = Vec::new();
    for path in &args.files {
        let sessions = parse_file(path, &parse_opts, &blobs).map_err(bad_input)?;
        let source = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        inputs.push((source, sessions));
    }
    let total: u64 = inputs.iter().map(|(_, s)| s.len() as u64).sum();
    let bar = crate::progress::bar(total, "replaying");

    let mut emit = match &args.emit_requests {
        Some(p) => Some(BufWriter::new(
            File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => None,
    };
    let mut runs: Vec<TraceRun> = Vec::new();
    for (source, sessions) in &inputs {
        for session in sessions {
            let mut write_err: Option<std::io::Error> = None;
            let run = replayer.run(session, source, &mut |call, rendered| {
                if let Some(w) = emit.as_mut() {
                    // `{"call", "request", "trace_id"}` in sorted key order, as a JSON value of
                    // the line would write it; the request as the bytes a provider is sent.
                    let mut line = || -> std::io::Result<()> {
                        w.write_all(b"{\"call\":")?;
                        serde_json::to_writer(&mut *w, &call)?;
                        w.write_all(b",\"request\":")?;
                        w.write_all(&rendered.body_bytes()?)?;
                        w.write_all(b",\"trace_id\":")?;
                        serde_json::to_writer(&mut *w, session.id.as_str())?;
                        w.write_all(b"}\n")
                    };
                    if let Err(e) = line() {
                        write_err.get_or_insert(e);
                    }
                }
            })?;
            if let Some(e) = write_err {
                return Err(e).context("writing --emit-requests");
            }
            runs.push(run);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    if let Some(mut w) = emit {
        w.flush().context("writing --emit-requests")?;
    }
    let sums = summaries(&runs, model.cached_read);
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&sums)?)?;
    } else {
        write_table(&mut out, &sums, model.cached_read)?;
    }
    if let Some(dir) = &args.report {
        loom_replay::write_report(dir, &runs, &sums, args.budget)
            .with_context(|| format!("writing the report into {}", dir.display()))?;
        writeln!(out, "report: {}", dir.join("index.html").display())?;
    }
    for r in runs.iter().filter(|r| r.error.is_some()) {
        writeln!(
            out,
            "not rendered: {}: {}",
            r.id,
            r.error.as_deref().unwrap_or("")
        )?;
    }
    Ok(())
}

fn write_table(
    out: &mut impl Write,
    sums: &[Summary],
    registry_cached: f64,
) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<34} {:<7} {:>6} {:>12} {:>6} {:>6} {:>7} {:>7} {:>6} {:>5} {:>6}",
        "source",
        "method",
        "calls",
        "input tok",
        "cache",
        "append",
        "cost",
        "cost*",
        "recall",
        "over",
        "orphan"
    )?;
    for s in sums {
        for (name, st) in [("loom", &s.loom), ("full", &s.full), ("window", &s.window)] {
            writeln!(
                out,
                "{:<34} {:<7} {:>6} {:>12} {:>6.3} {:>6.3} {:>7.4} {:>7.4} {:>6.3} {:>5} {:>6}",
                truncate(&s.scope, 34),
                name,
                s.calls,
                st.input_tokens,
                st.cache_share,
                st.append_only_share,
                st.cost,
                st.cost_registry,
                st.evidence_recall,
                st.over_budget,
                st.orphans
            )?;
        }
        writeln!(
            out,
            "{:<34} render p50 {:.0} µs, p99 {:.0} µs; {} compaction points (re-sent {:.1}% of input); {}/{} references recovered{}",
            "",
            s.render_p50_us,
            s.render_p99_us,
            s.compaction_points,
            s.resent_share * 100.0,
            s.refs_checked - s.refs_failed,
            s.refs_checked,
            if s.errors > 0 {
                format!("; {} trajectories not rendered", s.errors)
            } else {
                String::new()
            }
        )?;
    }
    writeln!(
        out,
        "cost = sum(uncached + 0.1 x cached) / full history uncached; cost* uses the model's cached-read price ({registry_cached})"
    )
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        s.chars().take(n - 1).chain(['…']).collect()
    }
}
