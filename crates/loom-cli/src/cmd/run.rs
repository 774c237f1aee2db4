//! `loom run GOAL`: run an agent on Loom's engine; `loom run --resume SESSION` continues one.
//!
//! Prints the session id on stdout, then the run's progress on stderr (each model call with its
//! tokens, the cached share and the cost; each tool call with one line of its result). Exit
//! codes: 0 when the agent answered, 3 when a call waits for `loom approve`, 4 when a limit
//! stopped the run (both resume with `--resume`), 2 for bad input, 1 otherwise.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;
use loom_agent::{
    Approval, Config, Env, Model, Observer, Progress, RunSpec, Runner, Scripted, Stop,
};
use loom_core::{AgentId, SessionId};

use super::Context;
use crate::exit::{bad_input, stopped};

/// Arguments of `loom run`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The goal (not with --resume).
    goal: Option<String>,
    /// The model (its tokenizer counts the budget); the configuration's otherwise.
    #[arg(long)]
    model: Option<String>,
    /// The request budget in input tokens.
    #[arg(long, value_name = "N")]
    budget: Option<u64>,
    /// A configuration file (TOML: provider, limits, prices, sandbox, exec policy, tools).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The agent's workspace, the only place it writes (default: the current folder).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// What asks before it runs: untrusted (all but known-safe commands), on-request (rules and
    /// tools that say so), never (whatever would ask is denied).
    #[arg(long, value_name = "POLICY")]
    approval: Option<String>,
    #[command(flatten)]
    embedder: super::memory::EmbedderArg,
    /// Where replies come from: `scripted` (with --script), or the configuration's provider.
    #[arg(long, value_name = "NAME")]
    provider: Option<String>,
    /// For `--provider scripted`: a JSON list of OpenAI Chat assistant messages, in order.
    #[arg(long, value_name = "FILE")]
    script: Option<PathBuf>,
    /// The new session's id (default: `run-<time>`).
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Continue a stopped run.
    #[arg(long, value_name = "SESSION", conflicts_with = "goal")]
    resume: Option<String>,
    /// Stop after this many model calls.
    #[arg(long, value_name = "N")]
    max_turns: Option<u32>,
    /// The agent's name.
    #[arg(long, default_value = "main")]
    agent: String,
}

/// The terminal's view of a run.
struct Terminal;

impl Observer for Terminal {
    fn progress(&mut self, p: &Progress<'_>) {
        let mut err = std::io::stderr().lock();
        let _ = match p {
            Progress::Turn { agent, depth, totals, input, cached } => writeln!(
                err,
                "{}turn {} · {agent} · {input} in ({cached} cached, {:.0}%) · total {} in, {} out{}",
                "  ".repeat(*depth as usize),
                totals.turns,
                if *input > 0 { *cached as f64 * 100.0 / *input as f64 } else { 0.0 },
                totals.input,
                totals.output,
                if totals.cost_usd > 0.0 { format!(" · ${:.4}", totals.cost_usd) } else { String::new() }
            ),
            Progress::Text(text) => writeln!(err, "  » {}", text.lines().next().unwrap_or("")),
            Progress::Tool { agent, tool, note, is_error } => writeln!(
                err,
                "  {} {agent} {tool}: {note}",
                if *is_error { "✗" } else { "✓" }
            ),
        };
    }
}

pub(crate) fn run(ctx: &Context, args: Args) -> anyhow::Result<()> {
    let config = match &args.config {
        Some(path) => Config::load(path).map_err(bad_input)?,
        None => Config::default(),
    };
    let approval: Approval = match args.approval.as_deref().or(config.approval.as_deref()) {
        Some(a) => a
            .parse()
            .map_err(|e: String| bad_input(anyhow::anyhow!("--approval {e}")))?,
        None => Approval::default(),
    };
    let model_name = args
        .model
        .clone()
        .or_else(|| config.model.clone())
        .ok_or_else(|| {
            bad_input(anyhow::anyhow!(
                "--model: name the model (or set `model` in --config)"
            ))
        })?;
    let opened = ctx.open()?;
    let summarizer = config.summarizer().map_err(bad_input)?;
    let mut model: Box<dyn Model> = match args.provider.as_deref() {
        Some("scripted") => {
            let script = args.script.as_ref().ok_or_else(|| {
                bad_input(anyhow::anyhow!("--provider scripted needs --script FILE"))
            })?;
            let mut scripted = Scripted::load(script).map_err(bad_input)?;
            if let Some(session) = &args.resume {
                // A script replays from where the log stands: the replies the run's sessions
                // (its children's included) already hold are skipped.
                scripted.skip(replies_in(opened.store.as_ref(), session)?);
            }
            Box::new(scripted)
        }
        Some(other) => {
            return Err(bad_input(anyhow::anyhow!(
                "--provider `{other}`: expected `scripted`, or none to use the configuration's [provider]"
            )))
        }
        None => loom_agent::model::from_config(&config, &model_name).map_err(bad_input)?,
    };
    let workspace = match &args.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir().context("the current folder")?,
    };
    let workspace = workspace
        .canonicalize()
        .map_err(|e| bad_input(anyhow::anyhow!("--workspace {}: {e}", workspace.display())))?;
    let actions = config.actions(&workspace).map_err(bad_input)?;
    let mut env = Env::new(opened.store, opened.blobs)?;
    if let Some(reserve) = config.injection_reserve {
        env.engine.policy.injection_reserve = reserve;
    }
    // Memory lives beside the log: in its SQLite file or its PostgreSQL database.
    let memory: Option<std::sync::Arc<dyn loom_memory::Memory>> =
        Some(super::memory::open_embedded(ctx, &args.embedder)?.into());
    if config.memory.tools != Some(false) {
        env.memory = memory.clone();
    }
    if config.knowledge.is_some() && config.injection_reserve.is_none() {
        env.engine.policy.injection_reserve = loom_agent::KnowledgeConfig::DEFAULT_RESERVE;
    }
    let mut limits = config.limits();
    if args.max_turns.is_some() {
        limits.max_turns = args.max_turns;
    }
    let spec = RunSpec {
        model: model_name,
        budget: args.budget.or(config.budget),
        approval,
        limits,
        prices: config.prices,
        system: config
            .system
            .clone()
            .unwrap_or_else(|| loom_agent::DEFAULT_SYSTEM.into()),
        agent: AgentId::new(args.agent.clone()).map_err(bad_input)?,
        max_depth: config.max_depth.unwrap_or(2),
    };
    let mut terminal = Terminal;
    let mut make_child =
        |parent: &loom_agent::Actions, ws: &std::path::Path| config.child_actions(parent, ws);
    let worker = match &summarizer {
        Some(_) => Some(worker_config(&env, &spec, model.api())?),
        None => None,
    };
    let hooks = match &config.knowledge {
        Some(k) => Some(knowledge_hooks(
            &env,
            &spec,
            model.api(),
            k,
            memory.clone(),
        )?),
        None => None,
    };
    let mut runner = Runner::new(&env, model.as_mut(), &mut terminal, spec, &mut make_child);
    if let (Some(s), Some(w)) = (&summarizer, &worker) {
        runner = runner.with_summarizer(s.as_ref(), w);
    }
    if let Some(h) = &hooks {
        runner = runner.with_hooks(h);
    }
    // Spans of the model calls: the variable, else the file's `[telemetry]`; none, no spans.
    let telemetry = match std::env::var(loom_server::config::OTLP_ENDPOINT_ENV)
        .ok()
        .filter(|e| !e.trim().is_empty())
        .or_else(|| config.telemetry.otlp_endpoint.clone())
    {
        Some(endpoint) => {
            loom_telemetry::Telemetry::otlp(&endpoint, "loom-run").map_err(bad_input)?
        }
        None => loom_telemetry::Telemetry::off(),
    };
    runner = runner.with_telemetry(telemetry.clone());
    let session = match (&args.resume, &args.session) {
        (Some(s), _) | (None, Some(s)) => s.clone(),
        (None, None) => format!("run-{}", super::now_ms()),
    };
    let session = SessionId::new(session).map_err(bad_input)?;
    // The id first, so that whoever started the run can find it however the run ends.
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{session}")?;
        out.flush()?;
    }
    let report = match (&args.resume, &args.goal) {
        (Some(_), _) => runner.resume(&session, actions),
        (None, Some(goal)) => runner.start(goal, Some(session), actions),
        (None, None) => {
            return Err(bad_input(anyhow::anyhow!(
                "give a GOAL, or --resume SESSION"
            )))
        }
    }
    .map_err(|e| {
        if e.is_bad_input() {
            bad_input(e)
        } else {
            anyhow::Error::new(e)
        }
    })?;
    // The run's sessions (its children's too) become memory, for later runs to recall.
    if memory.is_some() {
        let ours: Vec<SessionId> = env
            .store
            .sessions()?
            .into_iter()
            .filter(|i| {
                let (id, top) = (i.id.as_str(), report.session.as_str());
                id == top || id.starts_with(&format!("{top}."))
            })
            .map(|i| i.id)
            .collect();
        super::memory::index_new(ctx, env.store.as_ref(), &ours)?;
    }
    let t = report.totals;
    let mut err = std::io::stderr().lock();
    writeln!(
        err,
        "{} model calls · {} input tokens ({} cached) · {} output{}",
        t.turns,
        t.input,
        t.cached,
        t.output,
        if t.cost_usd > 0.0 {
            format!(" · ${:.4}", t.cost_usd)
        } else {
            String::new()
        }
    )?;
    match report.stop {
        Stop::Answered(answer) => {
            writeln!(err, "answer: {answer}")?;
            Ok(())
        }
        Stop::Paused { session, call_id, tool, reason } => Err(stopped(
            3,
            format!(
                "paused: call {call_id} ({tool}) in session {session} waits for approval: {reason}\n\
                 answer with `loom approve {session} {call_id} --once` (or --session, --deny), \
                 then `loom run --resume {}`",
                report.session
            ),
        )),
        Stop::Halted(why) => Err(stopped(4, format!("halted by a hook: {why}"))),
        Stop::Limit(why) => Err(stopped(
            4,
            format!("stopped at a limit: {why}; `loom run --resume {}` goes on", report.session),
        )),
    }
}

/// Assistant turns in a run's sessions: `session` and the children it spawned (`session.N…`).
fn replies_in(store: &dyn loom_store::Store, session: &str) -> anyhow::Result<usize> {
    let mut count = 0;
    for info in store.sessions()? {
        let id = info.id.as_str();
        if id == session || id.starts_with(&format!("{session}.")) {
            let events = store.read(&info.id, 1..=info.event_count)?;
            count += events
                .iter()
                .filter(|e| matches!(e.body, loom_core::EventBody::Assistant { .. }))
                .count();
        }
    }
    Ok(count)
}

/// The knowledge hook `[knowledge]` asks for: the agent's long-term memory and the knowledge
/// base, queried with the current task, injected within the injection reserve.
fn knowledge_hooks(
    env: &Env,
    spec: &RunSpec,
    api: loom_core::Api,
    k: &loom_agent::KnowledgeConfig,
    memory: Option<std::sync::Arc<dyn loom_memory::Memory>>,
) -> anyhow::Result<loom_runtime::Hooks> {
    let memory = memory.ok_or_else(|| {
        bad_input(anyhow::anyhow!(
            "[knowledge] needs memory, and this run has none"
        ))
    })?;
    let (render, meter, policy) = prepared(env, spec, api)?;
    let reserve = policy.injection_reserve;
    let kb = loom_agent::MemoryKnowledge::new(memory, spec.agent.clone(), "", reserve)
        .sources(k.memory.unwrap_or(true), k.kb.unwrap_or(true));
    Ok(
        loom_runtime::Hooks::new().pre(loom_runtime::KnowledgeInjector::new(
            std::sync::Arc::new(kb),
            k.limit
                .unwrap_or(loom_agent::KnowledgeConfig::DEFAULT_LIMIT),
            render.format,
            std::sync::Arc::new(meter),
            reserve,
        )),
    )
}

/// The run's render settings (model, budget, the API's format) with the meter and policy the
/// engine prepares for them: what the knowledge hook and the summary worker both measure with.
fn prepared(
    env: &Env,
    spec: &RunSpec,
    api: loom_core::Api,
) -> anyhow::Result<(
    loom_session::engine::RenderSpec,
    loom_tokens::Tokenizer,
    loom_core::render::Policy,
)> {
    let render = loom_session::engine::RenderSpec {
        model: spec.model.clone(),
        budget: spec.budget,
        format: api.into(),
        tools: Vec::new(),
        always_record: false,
        injections: Vec::new(),
        limits: Default::default(),
        recall: None,
    };
    let (meter, policy) = env
        .engine
        .prepare(&render)
        .map_err(|e| bad_input(anyhow::anyhow!("{}", e.message)))?;
    Ok((render, meter, policy))
}

/// The summary worker's settings for the run's model, budget and format.
fn worker_config(
    env: &Env,
    spec: &RunSpec,
    api: loom_core::Api,
) -> anyhow::Result<loom_runtime::WorkerConfig> {
    let (render, meter, policy) = prepared(env, spec, api)?;
    Ok(loom_runtime::WorkerConfig::new(
        policy,
        loom_runtime::RenderSetup {
            format: render.format,
            model: spec.model.clone(),
            tools: Vec::new(),
            meter: std::sync::Arc::new(meter),
        },
    ))
}
