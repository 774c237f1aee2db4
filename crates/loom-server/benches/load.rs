//! A bounded load tool for `loom serve`: the mock upstream and the server in this process, real
//! durable logging to a fresh SQLite database, a pool of HTTP clients, and three scenarios.
//!
//! - `latency`: one conversation of `--turns` calls in `fit` (and `observe`) mode; for the last
//!   `--sample` calls, each request is also sent straight to the mock, so the latency Loom adds
//!   is measured call by call, beside the server's own `loom_proxy_overhead_seconds`.
//! - `throughput`: `--clients` concurrent clients, each running `--conversation-turns`-call
//!   conversations one after another for `--duration` seconds (or `--requests` calls).
//! - `sessions`: `--sessions` conversations of `--session-turns` calls, with the process's
//!   resident memory read as they accumulate, to show it stays bounded.
//!
//! Run: `cargo bench -p loom-server --bench load -- [--scenario latency|throughput|sessions|all]
//! [--mode fit|observe|both] [options]`; `--help` lists them. Every run is bounded by counts and
//! by `--time-limit` per scenario, and ends with a table per scenario on stdout (progress goes to
//! stderr). Run without `--bench` (as `cargo test --benches` does), it is a quick smoke run of
//! every scenario at small sizes. The figures are in `docs/performance.md`, "loom serve".

#![expect(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a command-line tool: tables on stdout, progress on stderr"
)]

#[path = "load/conversation.rs"]
mod conversation;
#[path = "load/harness.rs"]
mod harness;
#[path = "load/metrics.rs"]
mod metrics;
#[path = "load/report.rs"]
mod report;
#[path = "load/scenarios.rs"]
mod scenarios;

use std::time::Duration;

use anyhow::{bail, Context, Result};
use loom_store::ProxyMode;

const HELP: &str = "\
loom serve load tool

USAGE: cargo bench -p loom-server --bench load -- [OPTIONS]

  --scenario S            latency | throughput | sessions | all   [all]
  --mode M                fit | observe | both  [both; sessions: fit]
  --budget N              X-Loom-Budget in fit mode, tokens       [16000]
  --turns N               latency: calls in the conversation      [1000]
  --sample N              latency: last calls measured            [100]
  --clients N             throughput and sessions: clients        [32]
  --duration SECS         throughput: how long each mode runs     [10]
  --requests N            throughput: stop after N calls instead
  --conversation-turns N  throughput: calls per conversation      [20]
  --sessions N            sessions: conversations                 [10000]
  --session-turns N       sessions: calls per conversation        [3]
  --live-sessions N       sessions: the server's live-session cache size [server default]
  --live-bytes N          sessions: the server's live-session cache bound in bytes [server default]
  --memory on|off         agents' memory, indexed in the background (loom serve's
                          default is on; off keeps earlier figures comparable) [off]
  --otlp off|on|URL       spans of every call exported over OTLP/HTTP: on sends them to
                          a collector in this process that counts and drops them [off]
  --db URL                a PostgreSQL database (postgres://...) instead of a fresh
                          SQLite file per run; its round trips per call are printed
  --db-dir DIR            where the fresh SQLite file is made (e.g. /dev/shm, to take
                          the disk's commits out of a comparison) [Cargo's target folder]
  --time-limit SECS       wall-clock bound of each scenario run   [900]
  --seed N                the conversations' seed                 [1]
  --stream                replies as server-sent events (stream: true)
  --recall-every N        latency: every Nth user turn asks the model to read an earlier
                          output again; in fit mode it calls loom_recall, which Loom
                          answers in a hidden round (loom_recall_round_seconds) [0: never]
  --breakpoint none|last|second
                          latency: a cache breakpoint (`cache_control`) on the newest
                          message of every call, as Claude Code moves it (the history
                          still only appends: the fast path), or on the second newest
                          (the message that ended the last call changes: every history
                          is read whole); the two read the same log  [none]
  --quick                 small sizes, to check the tool works
";

/// Which scenarios to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Latency,
    Throughput,
    Sessions,
    All,
}

/// The command line.
#[derive(Debug, Clone)]
struct Options {
    scenario: Scenario,
    modes: Option<Vec<ProxyMode>>,
    budget: u64,
    turns: usize,
    sample: usize,
    clients: usize,
    duration: Duration,
    requests: Option<u64>,
    conversation_turns: usize,
    sessions: usize,
    session_turns: usize,
    live_sessions: Option<usize>,
    live_bytes: Option<usize>,
    time_limit: Duration,
    seed: u64,
    stream: bool,
    recall_every: usize,
    breakpoint: conversation::Breakpoint,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            scenario: Scenario::All,
            modes: None,
            budget: 16_000,
            turns: 1_000,
            sample: 100,
            clients: 32,
            duration: Duration::from_secs(10),
            requests: None,
            conversation_turns: 20,
            sessions: 10_000,
            session_turns: 3,
            live_sessions: None,
            live_bytes: None,
            time_limit: Duration::from_secs(900),
            seed: 1,
            stream: false,
            recall_every: 0,
            breakpoint: conversation::Breakpoint::None,
        }
    }
}

impl Options {
    /// Small sizes that still cross a compaction point in the latency run.
    fn quick(mut self) -> Self {
        self.turns = 60;
        self.sample = 10;
        self.budget = 4_000;
        self.clients = 4;
        self.duration = Duration::from_secs(1);
        self.sessions = 40;
        self.time_limit = Duration::from_secs(120);
        self
    }

    /// Reads the arguments; `None` when help was asked for.
    fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Self>> {
        let args: Vec<String> = args.into_iter().collect();
        // Cargo passes `--bench` to a benchmark; without it this is a test run.
        let mut o = if args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--quick") {
            Self::default()
        } else {
            Self::default().quick()
        };
        let mut it = args.into_iter();
        while let Some(flag) = it.next() {
            let mut value = || {
                it.next()
                    .with_context(|| format!("{flag}: expected a value after it"))
            };
            match flag.as_str() {
                "--bench" | "--quick" => {}
                "--stream" => o.stream = true,
                "--help" | "-h" => return Ok(None),
                "--scenario" => {
                    o.scenario = match value()?.as_str() {
                        "latency" => Scenario::Latency,
                        "throughput" => Scenario::Throughput,
                        "sessions" => Scenario::Sessions,
                        "all" => Scenario::All,
                        other => bail!(
                            "--scenario: `{other}`: expected latency, throughput, sessions or all"
                        ),
                    }
                }
                "--mode" => {
                    o.modes = Some(match value()?.as_str() {
                        "fit" => vec![ProxyMode::Fit],
                        "observe" => vec![ProxyMode::Observe],
                        "both" => vec![ProxyMode::Observe, ProxyMode::Fit],
                        other => bail!("--mode: `{other}`: expected fit, observe or both"),
                    })
                }
                "--budget" => o.budget = number(&flag, &value()?)?,
                "--recall-every" => o.recall_every = number(&flag, &value()?)?,
                "--breakpoint" => {
                    o.breakpoint = match value()?.as_str() {
                        "none" => conversation::Breakpoint::None,
                        "last" => conversation::Breakpoint::Last,
                        "second" => conversation::Breakpoint::Second,
                        other => bail!("--breakpoint: `{other}`; expected none, last or second"),
                    }
                }
                "--turns" => o.turns = number(&flag, &value()?)?,
                "--sample" => o.sample = number(&flag, &value()?)?,
                "--clients" => o.clients = number(&flag, &value()?)?,
                "--duration" => o.duration = Duration::from_secs(number(&flag, &value()?)?),
                "--requests" => o.requests = Some(number(&flag, &value()?)?),
                "--conversation-turns" => o.conversation_turns = number(&flag, &value()?)?,
                "--sessions" => o.sessions = number(&flag, &value()?)?,
                "--session-turns" => o.session_turns = number(&flag, &value()?)?,
                "--live-sessions" => o.live_sessions = Some(number(&flag, &value()?)?),
                "--live-bytes" => o.live_bytes = Some(number(&flag, &value()?)?),
                "--otlp" => {
                    let _ = harness::OTLP.set(value()?);
                }
                "--db-dir" => {
                    let _ = harness::DB_DIR.set(value()?.into());
                }
                "--memory" => {
                    let on = match value()?.as_str() {
                        "on" => true,
                        "off" => false,
                        other => bail!("--memory: `{other}`: expected on or off"),
                    };
                    let _ = harness::MEMORY.set(on);
                }
                "--db" => {
                    let url = value()?;
                    if !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
                        bail!("--db: `{url}`: expected a PostgreSQL URL (postgres://...)");
                    }
                    let _ = harness::DATABASE.set(url);
                }
                "--time-limit" => o.time_limit = Duration::from_secs(number(&flag, &value()?)?),
                "--seed" => {
                    let text = value()?;
                    o.seed = text
                        .parse()
                        .with_context(|| format!("{flag}: `{text}`: expected a whole number"))?;
                }
                other => bail!("unknown option `{other}` (see --help)"),
            }
        }
        Ok(Some(o))
    }

    fn modes(&self, default: &[ProxyMode]) -> Vec<ProxyMode> {
        self.modes.clone().unwrap_or_else(|| default.to_vec())
    }
}

/// A positive whole number for `flag`.
fn number<T: std::str::FromStr + PartialEq + Default>(flag: &str, text: &str) -> Result<T> {
    match text.parse::<T>() {
        Ok(n) if n != T::default() => Ok(n),
        _ => bail!("{flag}: `{text}`: expected a positive whole number"),
    }
}

/// A line of progress on stderr.
fn progress(line: std::fmt::Arguments<'_>) {
    eprintln!("{line}");
}

fn main() -> std::process::ExitCode {
    let options = match Options::parse(std::env::args().skip(1)) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{HELP}");
            return std::process::ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    match run(&options) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(o: &Options) -> Result<()> {
    let common = scenarios::Common {
        budget: o.budget,
        seed: o.seed,
        stream: o.stream,
        recall_every: o.recall_every,
        breakpoint: o.breakpoint,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async {
        println!("{}", report::header());
        let both = [ProxyMode::Observe, ProxyMode::Fit];
        if matches!(o.scenario, Scenario::Latency | Scenario::All) {
            let mut runs = Vec::new();
            for mode in o.modes(&both) {
                runs.push(scenarios::latency(mode, o.turns, o.sample, common, o.time_limit).await?);
            }
            println!("{}", report::latency(&runs, o.sample, o.budget));
            check(runs.iter().all(|r| !r.stopped_early), "latency")?;
        }
        if matches!(o.scenario, Scenario::Throughput | Scenario::All) {
            let bound = scenarios::Bound {
                duration: o.duration.min(o.time_limit),
                requests: o.requests,
            };
            // The clients and the mock alone first: the baseline Loom's rows compare with.
            let mut runs = Vec::new();
            let targets = std::iter::once(None).chain(o.modes(&both).into_iter().map(Some));
            for mode in targets {
                runs.push(
                    scenarios::throughput(mode, o.clients, o.conversation_turns, common, bound)
                        .await?,
                );
            }
            println!("{}", report::throughput(&runs, o.conversation_turns));
            check(
                runs.iter()
                    .all(|r| r.errors == 0 && !r.latencies.is_empty()),
                "throughput",
            )?;
        }
        if matches!(o.scenario, Scenario::Sessions | Scenario::All) {
            let mut runs = Vec::new();
            for mode in o.modes(&[ProxyMode::Fit]) {
                runs.push(
                    scenarios::sessions(
                        mode,
                        o.sessions,
                        o.session_turns,
                        o.clients,
                        common,
                        harness::ServerOptions {
                            live_sessions: o.live_sessions,
                            live_bytes: o.live_bytes,
                        },
                        o.time_limit,
                    )
                    .await?,
                );
            }
            println!("{}", report::sessions(&runs, o.session_turns));
            check(
                runs.iter().all(|r| r.errors == 0 && !r.stopped_early),
                "sessions",
            )?;
        }
        Ok(())
    })
}

/// A run with failed calls or cut short by its time limit still prints its table, then fails.
fn check(ok: bool, scenario: &str) -> Result<()> {
    if ok {
        Ok(())
    } else {
        bail!("{scenario}: some calls failed or the time limit cut the run short (see the table)")
    }
}
