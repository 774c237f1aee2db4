//! `loom render SESSION --model NAME`: the exact request body for the session's next model call.
//!
//! Steps are derived (and outputs offloaded) on first use; the compaction state is read from the
//! session's last receipt and the new receipt, with the new state, is recorded as a model call, so
//! consecutive renders stay append-only between compaction points. The new call's id is printed
//! on stderr (`model call N`), so that the caller can report the provider's usage for it with
//! `loom usage`; stdout holds the body alone.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;
use loom_core::render::{
    self, Audience, CompactionState, CostMemo, Format, Policy, RenderInput, Rendered, StepIndex,
    SummaryView, TokenMeter, ToolSpec,
};
use loom_core::{Event, SessionId};
use loom_replay::EncodingMeter;
use loom_session::{Backend, LiveSessions};
use loom_store::Opened;

use super::replay::read_policy;
use super::Context;
use crate::exit::bad_input;

/// Arguments shared by `render` and `explain`.
#[derive(Debug, clap::Args)]
pub(crate) struct RenderArgs {
    /// Model whose tokenizer counts and whose window applies.
    #[arg(long, default_value = "gpt-4o")]
    pub(crate) model: String,
    /// Input-token budget (default: the model's context window minus the response reserve).
    #[arg(long)]
    pub(crate) budget: Option<u64>,
    /// Output format.
    #[arg(long, default_value = "openai-chat", value_parser = super::replay::parse_format)]
    pub(crate) format: Format,
    /// Policy file (TOML).
    #[arg(long)]
    pub(crate) policy: Option<PathBuf>,
    /// Tool definitions offered to the model (JSON: a list in OpenAI, Responses or Anthropic
    /// form, or a request body with a `tools` list); they are sent and budgeted with the request.
    #[arg(long)]
    pub(crate) tools: Option<PathBuf>,
}

/// Arguments of `loom render`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The session.
    session: String,
    #[command(flatten)]
    render: RenderArgs,
    /// Print the receipt (JSON) to stderr as well.
    #[arg(long)]
    receipt: bool,
}

/// Everything a render of a stored session reads.
pub(crate) struct Loaded {
    pub(crate) ws: Opened,
    pub(crate) session: SessionId,
    pub(crate) events: Vec<Event>,
    pub(crate) steps: StepIndex,
    pub(crate) summaries: Vec<SummaryView>,
    pub(crate) policy: Policy,
    pub(crate) tools: Vec<ToolSpec>,
    pub(crate) meter: EncodingMeter,
    pub(crate) audience: Audience,
}

/// What every render of a stored session checks first: the database, the session, an exact
/// tokenizer for the model, the policy (with the budget applied) and the tools.
struct Setup {
    ws: Opened,
    session: SessionId,
    info: loom_core::SessionInfo,
    encoding: loom_tokens::Encoding,
    policy: Policy,
    tools: Vec<ToolSpec>,
}

fn setup(ctx: &Context, session: &str, args: &RenderArgs) -> anyhow::Result<Setup> {
    let ws = super::sessions::open_existing(ctx)?;
    let session = SessionId::new(session).map_err(bad_input)?;
    let info = ws
        .store
        .session(&session)?
        .ok_or_else(|| bad_input(anyhow::anyhow!("session `{session}` not found")))?;
    let registry = loom_tokens::Registry::built_in().context("loading the model registry")?;
    let model = registry.lookup(&args.model).map_err(bad_input)?;
    let loom_tokens::TokenizerSpec::Bpe(encoding) = model.tokenizer.clone() else {
        return Err(bad_input(anyhow::anyhow!(
            "model `{}` has no exact tokenizer built in; render needs one to guarantee the budget",
            args.model
        )));
    };
    let mut policy = read_policy(args.policy.as_ref())?;
    policy.context_window = match args.budget {
        Some(budget) => budget + policy.response_reserve,
        None => model.context_window,
    };
    policy.validate().map_err(bad_input)?;
    let tools = match &args.tools {
        Some(path) => read_tools(path)?,
        None => Vec::new(),
    };
    Ok(Setup {
        ws,
        session,
        info,
        encoding,
        policy,
        tools,
    })
}

/// Opens the session and derives what rendering needs.
pub(crate) fn load(ctx: &Context, session: &str, args: &RenderArgs) -> anyhow::Result<Loaded> {
    let Setup {
        ws,
        session,
        info,
        encoding,
        policy,
        tools,
    } = setup(ctx, session, args)?;
    let latest = ws.store.latest_seq(&session)?;
    let events = ws.store.read(&session, 1..=latest)?;
    let config = super::steps::load_config(None)?;
    let steps: StepIndex = super::steps::derive(&ws, &config, &session, false)?
        .into_iter()
        .map(|s| (s.call_id.clone(), s))
        .collect();
    let summaries = loom_session::engine::summary_views(&ws.store.summaries(&session)?);
    let now_ms = events.last().map_or(info.created_ms, |e| e.ts_ms);
    Ok(Loaded {
        ws,
        session,
        events,
        steps,
        summaries,
        policy,
        tools,
        meter: EncodingMeter(encoding),
        audience: Audience {
            agent: Some(info.agent),
            now_ms,
        },
    })
}

/// Reads a tool-definition file; a bad one is bad input naming the file, the entry and the field.
fn read_tools(path: &std::path::Path) -> anyhow::Result<Vec<ToolSpec>> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad_input(anyhow::anyhow!("tools file {shown}: {e}")))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| bad_input(anyhow::anyhow!("tools file {shown}: not JSON: {e}")))?;
    ToolSpec::parse_list(&value).map_err(|e| bad_input(anyhow::anyhow!("tools file {shown}: {e}")))
}

impl Loaded {
    /// Renders the log up to `upto` events with the given previous state.
    pub(crate) fn render(
        &self,
        upto: usize,
        model: &str,
        format: Format,
        prev: &CompactionState,
        memo: &mut CostMemo,
    ) -> Result<Rendered, render::RenderError> {
        let meter: &dyn TokenMeter = &self.meter;
        let input = RenderInput {
            events: &self.events[..upto],
            steps: &self.steps,
            summaries: &self.summaries,
            policy: &self.policy,
            format,
            model,
            tools: &self.tools,
            injections: &[],
            audience: &self.audience,
            meter,
        };
        render::render(&input, prev, memo)
    }
}

pub(crate) fn run(ctx: &Context, args: Args) -> anyhow::Result<()> {
    // The render itself is the session engine `loom serve` renders through, so that both render
    // a session alike and continue from the same receipts.
    let loaded = setup(ctx, &args.session, &args.render)?;
    let engine = loom_session::Engine {
        registry: loom_tokens::Registry::built_in().context("loading the model registry")?,
        policy: loaded.policy,
        reduce: super::steps::load_config(None)?,
    };
    let spec = loom_session::engine::RenderSpec {
        model: args.render.model.clone(),
        budget: args.render.budget,
        format: args.render.format,
        tools: loaded.tools,
        always_record: false,
        injections: Vec::new(),
        limits: Default::default(),
        recall: None,
    };
    let live = LiveSessions::new(1);
    let backend = Backend {
        store: loaded.ws.store.as_ref(),
        blobs: loaded.ws.blobs.as_ref(),
        reduce: &engine.reduce,
        live: &live,
    };
    let out = engine
        .render_session(backend, &loaded.session, &spec)
        .map_err(api_error)?
        .ok_or_else(|| bad_input(anyhow::anyhow!("session `{}` not found", loaded.session)))?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", out.body)?;
    let mut err = std::io::stderr().lock();
    if let Some(id) = out.model_call {
        writeln!(err, "model call {id}")?;
    }
    if args.receipt {
        writeln!(err, "{}", serde_json::to_string_pretty(&out.receipt)?)?;
    }
    Ok(())
}

/// The session engine's error as the CLI reports it: bad input, a missing session or a
/// conflict is the user's to fix (exit 2); the rest is Loom's (exit 1).
fn api_error(e: loom_session::SessionError) -> anyhow::Error {
    use loom_session::ErrorKind;
    match e.kind {
        ErrorKind::Invalid
        | ErrorKind::SessionNotFound
        | ErrorKind::NotFound
        | ErrorKind::Conflict => bad_input(anyhow::anyhow!("{}", e.message)),
        _ => anyhow::anyhow!("{}", e.message),
    }
}
