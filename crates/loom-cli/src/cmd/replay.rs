//! `loom replay FILE... --model NAME --budget N`: the main job.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::Context as _;
use loom_core::render::{Format, Policy};
use loom_core::ReduceConfig;
use loom_import::{parse_file, ParseOptions};
use loom_replay::{
    replay_parallel, summaries, EncodingMeter, Job, ParallelError, ReplayOptions, Summary, TraceRun,
};
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
    /// Trajectories replayed at once, each on its own thread (default: the machine's cores).
    /// Every figure and emitted request is the same for any number.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    jobs: Option<u32>,
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
    }
    .derived();
    let mut err = std::io::stderr().lock();
    writeln!(
        err,
        "replaying with model {} ({}), budget {} tokens, format {}; effective policy:\n{}",
        args.model,
        encoding.name(),
        args.budget,
        args.format.as_str(),
        toml::to_string(&opts.policy).unwrap_or_default()
    )?;
    drop(err);

    let threads = match args.jobs {
        Some(n) => n as usize,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    // The tokenizer's tables load while the files parse.
    let inputs = std::thread::scope(|scope| {
        scope.spawn(|| loom_core::render::TokenMeter::count(&meter, "warm up"));
        parse_all(&args.files, &blobs, threads)
    })?;
    let jobs: Vec<Job<'_>> = inputs
        .iter()
        .flat_map(|(source, sessions)| {
            sessions.iter().map(|session| Job {
                source: source.as_str(),
                session,
            })
        })
        .collect();
    let bar = crate::progress::bar(jobs.len() as u64, "replaying");

    let mut emit_file = match &args.emit_requests {
        Some(p) => Some(BufWriter::new(
            File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => None,
    };
    // `{"call", "request", "trace_id"}` in sorted key order, as a JSON value of the line would
    // write it; the request as the bytes a provider is sent.
    let line = |session: &loom_import::ParsedSession,
                call: usize,
                rendered: &loom_core::render::Rendered,
                w: &mut Vec<u8>|
     -> std::io::Result<()> {
        w.extend_from_slice(b"{\"call\":");
        serde_json::to_writer(&mut *w, &call)?;
        w.extend_from_slice(b",\"request\":");
        w.extend_from_slice(&rendered.body_bytes()?);
        w.extend_from_slice(b",\"trace_id\":");
        serde_json::to_writer(&mut *w, session.id.as_str())?;
        w.extend_from_slice(b"}\n");
        Ok(())
    };
    let mut runs: Vec<TraceRun> = Vec::with_capacity(jobs.len());
    let replayed = replay_parallel(
        &opts,
        &meter,
        &blobs,
        &jobs,
        threads,
        emit_file.is_some().then_some(&line as _),
        &mut |_, run, bytes| -> std::io::Result<()> {
            if let Some(w) = emit_file.as_mut() {
                w.write_all(&bytes)?;
            }
            runs.push(run);
            bar.inc(1);
            Ok(())
        },
    );
    match replayed {
        Ok(()) => {}
        Err(ParallelError::Replay(e)) => return Err(e.into()),
        Err(ParallelError::Emit { trace, source }) => {
            return Err(anyhow::Error::new(source)
                .context(format!("writing --emit-requests for trajectory `{trace}`")))
        }
        Err(ParallelError::Done(e)) => return Err(e).context("writing --emit-requests"),
    }
    bar.finish_and_clear();
    if let Some(mut w) = emit_file {
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

/// Parses every file on up to `threads` threads; the sessions of each file under its stem, in the
/// order given. The first file (in that order) that fails is the error.
fn parse_all(
    files: &[PathBuf],
    blobs: &MemoryBlobStore,
    threads: usize,
) -> anyhow::Result<Vec<(String, Vec<loom_import::ParsedSession>)>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let parse_opts = ParseOptions::new(0);
    let next = AtomicUsize::new(0);
    let mut parsed: Vec<(usize, anyhow::Result<_>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.clamp(1, files.len().max(1)))
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(path) = files.get(i) else { break };
                        let sessions = parse_file(path, &parse_opts, blobs).map_err(bad_input);
                        let source = path
                            .file_stem()
                            .map(|s| s.to_string_lossy().into_owned())
                            .unwrap_or_else(|| path.display().to_string());
                        done.push((i, sessions.map(|s| (source, s))));
                    }
                    done
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    parsed.sort_by_key(|(i, _)| *i);
    parsed.into_iter().map(|(_, r)| r).collect()
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
