//! What the web inspector (`/ui`) reads, under `/loom/v1/inspect`: each answer is one request
//! for one page, so the page makes no call per row.
//!
//! - `sessions`: every session of the tenant with its figures (model calls, input tokens as sent
//!   and as the full history would have been, cached share, cost, last activity);
//! - `sessions/{id}`: a page of its events as a timeline, and every model call with its figures
//!   and the receipt's fates by seq (the `explain` facts of every event at once);
//! - `sessions/{id}/calls/{call}`: one call's receipt and usage, and the request it sent, rebuilt
//!   from the log (rendering is a pure function of the log, the policy and the previous call's
//!   compaction state, all stored) and checked against the stored receipt;
//! - `usage`: the tenant's calls, tokens and cost over time.
//!
//! Everything is read from the store (the receipts and reported usage `/metrics` counts as they
//! arrive), so it holds across restarts and across servers sharing one store.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use loom_core::render::{self, Audience, CompactionState, CostMemo, Format, Receipt, StepIndex};
use loom_core::{Event, EventBody, SessionId, SessionInfo, ToolOutput};
use loom_store::{ModelCall as StoredCall, Offloader};
use loom_tokens::CountTokens;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::extract::{Caller, Owned, SessionPath};
use super::{body, schema, CallPath, ModelCall};
use crate::auth::Principal;
use crate::error::{ApiError, Result};
use crate::state::AppState;

/// Framing tokens counted per event of the full history (a chat message's role and separators
/// cost about this much in every provider's count).
const MESSAGE_FRAMING: u64 = 4;

/// Bytes per token assumed for an offloaded output, whose bytes are not read to count them.
const BYTES_PER_TOKEN: u64 = 4;

/// Longest text an event row of the timeline carries; the whole event is one read away.
const PREVIEW_CHARS: usize = 240;

/// Events a timeline page holds by default, and at most.
const PAGE_DEFAULT: u64 = 1_000;
const PAGE_MAX: u64 = 5_000;

/// Figures of one model call, as the inspector charts them.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct CallFigures {
    /// The model call's number.
    id: u64,
    /// The last seq of the log it was rendered from.
    at_seq: u64,
    created_ms: i64,
    /// The model it was rendered for (`null` for a call proxied in observe mode).
    model: Option<String>,
    /// Loom's estimate of the input it sent (`null` in observe mode).
    estimate: Option<u64>,
    /// Input tokens sent: the provider's count when reported, else the estimate.
    sent: u64,
    /// Input tokens the log up to `at_seq` would have been, sent whole (an estimate: every
    /// event's text counted with the call's tokenizer, framing per event, offloaded outputs at
    /// four bytes a token, plus the call's tool definitions).
    full: u64,
    /// Input tokens the provider served from its cache, when it said.
    cached: Option<u64>,
    /// Output tokens the provider reported.
    output: Option<u64>,
    /// Input cost in uncached-token equivalents: uncached tokens plus cached ones at the model's
    /// cached-read price (the registry's; output not counted).
    cost: f64,
    /// Whether a compaction point fired for this call.
    compaction: bool,
    /// Compaction points so far in the session.
    points: u32,
    /// The hard budget (window minus the response reserve), when rendered.
    hard_total: Option<u64>,
}

/// The tenant's sessions, each with its figures.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SessionSummaries {
    sessions: Vec<SessionSummary>,
}

/// A session and its totals over its model calls.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SessionSummary {
    id: String,
    agent: String,
    parent: Option<String>,
    created_ms: i64,
    event_count: u64,
    model_calls: u64,
    /// Input tokens sent over every call (reported, else estimated).
    input_tokens: u64,
    /// Input tokens every call would have sent with the full history.
    full_tokens: u64,
    /// Cached input tokens reported.
    cached_tokens: u64,
    /// Cached over reported input tokens, over the calls whose usage was reported.
    cached_share: Option<f64>,
    /// Input cost in uncached-token equivalents (see `CallFigures.cost`).
    cost: f64,
    /// The latest of its last event, its last call and its creation, UTC milliseconds.
    last_ms: i64,
}

/// Every session of the tenant with its figures.
#[utoipa::path(get, path = "/loom/v1/inspect/sessions",
    responses((status = 200, body = SessionSummaries), schema::Errors))]
pub(crate) async fn sessions(
    State(state): State<Arc<AppState>>,
    Caller(p): Caller,
) -> Result<Response> {
    let out = state
        .blocking("summarising sessions", move |s| {
            let mut sessions = Vec::new();
            for info in s.store.sessions()? {
                if p.unscope(&info.id).is_none() {
                    continue;
                }
                let calls = s.store.model_calls(&info.id)?;
                let counted = full_history(s, &info, &calls)?;
                sessions.push(summary(s, &p, &info, &calls, &counted));
            }
            Ok(SessionSummaries { sessions })
        })
        .await?;
    Ok(Json(out).into_response())
}

fn summary(
    s: &AppState,
    p: &Principal,
    info: &SessionInfo,
    calls: &[StoredCall],
    counted: &Counted,
) -> SessionSummary {
    let figures: Vec<CallFigures> = calls.iter().map(|c| figures(s, c, counted)).collect();
    let reported: u64 = calls
        .iter()
        .filter_map(|c| c.usage.map(|u| u.input_tokens))
        .sum();
    let cached: u64 = figures.iter().filter_map(|f| f.cached).sum();
    let last_call = calls.last().map_or(0, |c| c.call.created_ms);
    let base = super::Session::of(p, info);
    SessionSummary {
        id: base.id,
        agent: base.agent,
        parent: base.parent,
        created_ms: info.created_ms,
        event_count: info.event_count,
        model_calls: calls.len() as u64,
        input_tokens: figures.iter().map(|f| f.sent).sum(),
        full_tokens: figures.iter().map(|f| f.full).sum(),
        cached_tokens: cached,
        cached_share: (reported > 0).then(|| cached as f64 / reported as f64),
        cost: figures.iter().map(|f| f.cost).sum(),
        last_ms: info.created_ms.max(last_call).max(counted.last_ms),
    }
}

/// A call's figures, from its stored receipt and usage.
fn figures(s: &AppState, c: &StoredCall, counted: &Counted) -> CallFigures {
    let r = &c.call.receipt["receipt"];
    let model = r["model"].as_str().map(str::to_owned);
    let estimate = r["estimate"].as_u64();
    let sent = c
        .usage
        .map(|u| u.input_tokens)
        .or(estimate)
        .unwrap_or_default();
    let cached = c.usage.and_then(|u| u.cached_input_tokens);
    let price = model
        .as_deref()
        .and_then(|m| s.engine.model_info(m).ok())
        .map_or(1.0, |info| info.cached_read);
    let cached_n = cached.unwrap_or(0).min(sent);
    let tools = r["tiers"]["tools"].as_u64().unwrap_or(0);
    CallFigures {
        id: c.id,
        at_seq: c.call.at_seq,
        created_ms: c.call.created_ms,
        model,
        estimate,
        sent,
        full: counted.upto(c.call.at_seq) + tools,
        cached,
        output: c.usage.and_then(|u| u.output_tokens),
        cost: (sent - cached_n) as f64 + cached_n as f64 * price,
        compaction: !r["compaction"].is_null() && r.get("compaction").is_some(),
        points: r["points"]
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        hard_total: r["budget"]["hard_total"].as_u64(),
    }
}

/// The full history's token count by seq, for one session.
#[derive(Debug, Clone, Default)]
struct Counted {
    /// The counter's name.
    meter: String,
    /// `prefix[n]`: tokens of events `1..=n` sent whole, framing included.
    prefix: Vec<u64>,
    /// The time of the last event counted.
    last_ms: i64,
}

impl Counted {
    fn upto(&self, seq: u64) -> u64 {
        let i = usize::try_from(seq).unwrap_or(usize::MAX);
        self.prefix
            .get(i)
            .or(self.prefix.last())
            .copied()
            .unwrap_or(0)
    }
}

/// Counts kept between polls, so a page that refreshes every few seconds counts only the events
/// appended since. Keyed by the store (tests run many servers in one process), the session and
/// its creation time (a deleted session's id may be used again).
type CountKey = (usize, SessionId, i64);
static COUNTED: LazyLock<Mutex<HashMap<CountKey, Counted>>> = LazyLock::new(Default::default);

/// Sessions whose counts are kept at once; past it the cache starts again.
const COUNTED_SESSIONS: usize = 4_096;

/// The session's full-history counts, with the tokenizer of its newest rendered call (or the
/// calibrated estimate when it has none).
fn full_history(s: &AppState, info: &SessionInfo, calls: &[StoredCall]) -> Result<Counted> {
    let model = calls
        .iter()
        .rev()
        .find_map(|c| c.call.receipt["receipt"]["model"].as_str());
    let Some(model) = model else {
        // No call to chart: only the last activity is needed, and the store has it cheaply.
        return Ok(Counted::default());
    };
    let (meter, _) = s
        .engine
        .model(model, "model", true)
        .map_err(|e| ApiError::internal(format!("counting with the model `{model}`: {e}")))?;
    let key: CountKey = (
        Arc::as_ptr(&s.store).cast::<()>() as usize,
        info.id.clone(),
        info.created_ms,
    );
    let held = lock(&COUNTED).get(&key).cloned();
    let mut counted = match held {
        Some(c) if c.meter == meter.id() && c.prefix.len() as u64 <= info.event_count + 1 => c,
        _ => Counted {
            meter: meter.id(),
            prefix: vec![0],
            last_ms: 0,
        },
    };
    let from = counted.prefix.len() as u64;
    if from <= info.event_count {
        for e in s.store.read(&info.id, from..=info.event_count)? {
            let n = event_cost(&meter, &e);
            let last = counted.prefix.last().copied().unwrap_or(0);
            counted.prefix.push(last + n);
            counted.last_ms = e.ts_ms;
        }
        let mut all = lock(&COUNTED);
        if all.len() >= COUNTED_SESSIONS {
            all.clear();
        }
        all.insert(key, counted.clone());
    }
    Ok(counted)
}

/// Tokens one event costs in a request that sends the whole log.
fn event_cost(meter: &dyn CountTokens, e: &Event) -> u64 {
    let offloaded = match &e.body {
        EventBody::ToolResult {
            content: ToolOutput::Blob(_),
            stats,
            ..
        } => stats.bytes.div_ceil(BYTES_PER_TOKEN),
        // Loom's own exchanges, rewrites and repeats are not messages of the client's history.
        EventBody::Hidden { .. } | EventBody::Rewrite { .. } | EventBody::Repeat { .. } => {
            return 0
        }
        _ => 0,
    };
    loom_tokens::event_tokens(meter, &e.body).sent() + offloaded + MESSAGE_FRAMING
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct Page {
    /// The first seq of the timeline page (default 1).
    #[param(value_type = Option<schema::SeqBound>, inline)]
    from: Option<u64>,
    /// Events on the page (default 1,000, at most 5,000).
    #[param(minimum = 1, maximum = 5000)]
    limit: Option<u64>,
}

/// One session for the inspector: a page of its timeline and all its model calls.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SessionDetail {
    session: super::Session,
    /// The first and last seq of this page of events.
    from: u64,
    to: u64,
    /// The page of events, in seq order.
    events: Vec<EventRow>,
    /// Every model call, oldest first.
    calls: Vec<CallRow>,
}

/// An event as the timeline shows it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EventRow {
    seq: u64,
    ts_ms: i64,
    kind: String,
    /// The start of its text (at most 240 characters).
    text: String,
    /// Whether `text` was cut.
    cut: bool,
    /// The calls an assistant turn made.
    tool_calls: Vec<CallRef>,
    /// The call a tool result answers.
    call_id: Option<String>,
    tool_name: Option<String>,
    is_error: bool,
    /// The original output's size, for a tool result.
    bytes: Option<u64>,
    /// The step's one-line observation, for a tool result.
    observation: Option<String>,
    /// The reference recall takes for its original bytes, when a step offloaded it.
    #[serde(rename = "ref")]
    reference: Option<String>,
    /// The source and target of a direct message, or the child of a spawn or result.
    source: Option<String>,
    target: Option<String>,
}

/// A tool call of an assistant turn.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CallRef {
    id: String,
    name: String,
    /// The start of its arguments.
    arguments: String,
}

/// A model call with its figures and the receipt's fates: each list of seq runs by name
/// (`verbatim`, `stubbed`, `elided`, `thinned`, `diffed`, `grouped`, `summarized`, `dropped`,
/// `replaced`), each run `[from, to]`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CallRow {
    #[serde(flatten)]
    figures: CallFigures,
    #[schema(value_type = Object)]
    fates: serde_json::Map<String, Value>,
    /// The seq the compaction point that fired cut at, if one did.
    compaction_at: Option<u64>,
}

/// A page of one session's timeline, and every model call with its fates by seq.
#[utoipa::path(get, path = "/loom/v1/inspect/sessions/{id}", params(SessionPath, Page),
    responses((status = 200, body = SessionDetail), schema::Errors))]
pub(crate) async fn session(
    State(state): State<Arc<AppState>>,
    Owned { p, sid, info, .. }: Owned,
    query: std::result::Result<Query<Page>, QueryRejection>,
) -> Result<Response> {
    let Query(page) = query.map_err(body::query_error)?;
    let limit = page.limit.unwrap_or(PAGE_DEFAULT);
    if !(1..=PAGE_MAX).contains(&limit) {
        return Err(ApiError::invalid_field(
            "limit",
            format!("expected 1 to {PAGE_MAX} events, got {limit}"),
        ));
    }
    let from = page.from.unwrap_or(1).max(1);
    let to = from.saturating_add(limit - 1).min(info.event_count);
    let out = state
        .blocking("reading a session for the inspector", move |s| {
            let calls = s.store.model_calls(&sid)?;
            let counted = full_history(s, &info, &calls)?;
            let events = if from <= to {
                s.store.read(&sid, from..=to)?
            } else {
                Vec::new()
            };
            let off = Offloader::new(s.store.as_ref(), s.blobs.as_ref(), &s.engine.reduce);
            let steps: StepIndex = off
                .steps(&sid)?
                .into_iter()
                .map(|st| (st.call_id.clone(), st))
                .collect();
            let events = events.iter().map(|e| row(e, &steps)).collect();
            let calls = calls
                .iter()
                .map(|c| {
                    let r = &c.call.receipt["receipt"];
                    let fates = FATES
                        .iter()
                        .filter_map(|name| {
                            let runs: Vec<Value> = r[*name]
                                .as_array()?
                                .iter()
                                .filter_map(|run| {
                                    Some(Value::from(vec![
                                        run["from"].as_u64()?,
                                        run["to"].as_u64()?,
                                    ]))
                                })
                                .collect();
                            (!runs.is_empty()).then(|| ((*name).to_owned(), Value::from(runs)))
                        })
                        .collect();
                    CallRow {
                        figures: figures(s, c, &counted),
                        fates,
                        compaction_at: r["compaction"]["at_seq"].as_u64(),
                    }
                })
                .collect();
            Ok(SessionDetail {
                session: super::Session::of(&p, &info),
                from,
                to: to.max(from.saturating_sub(1)),
                events,
                calls,
            })
        })
        .await?;
    Ok(Json(out).into_response())
}

/// The receipt's lists of seqs by fate (`Receipt::lists`), by name.
const FATES: [&str; 9] = [
    "verbatim",
    "stubbed",
    "elided",
    "thinned",
    "diffed",
    "grouped",
    "summarized",
    "dropped",
    "replaced",
];

fn preview(text: &str) -> (String, bool) {
    match text.char_indices().nth(PREVIEW_CHARS) {
        Some((i, _)) => (text[..i].to_owned(), true),
        None => (text.to_owned(), false),
    }
}

fn row(e: &Event, steps: &StepIndex) -> EventRow {
    let mut r = EventRow {
        seq: e.seq,
        ts_ms: e.ts_ms,
        kind: e.body.kind().as_str().to_owned(),
        text: String::new(),
        cut: false,
        tool_calls: Vec::new(),
        call_id: None,
        tool_name: None,
        is_error: false,
        bytes: None,
        observation: None,
        reference: None,
        source: None,
        target: None,
    };
    let text: std::borrow::Cow<'_, str> = match &e.body {
        EventBody::System { content } | EventBody::User { content, .. } => content.text(),
        EventBody::Assistant {
            content,
            tool_calls,
            ..
        } => {
            r.tool_calls = tool_calls
                .iter()
                .map(|c| CallRef {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments: preview(&c.arguments).0,
                })
                .collect();
            content.as_ref().map(|c| c.text()).unwrap_or_default()
        }
        EventBody::ToolResult {
            call_id,
            tool_name,
            content,
            is_error,
            stats,
        } => {
            r.call_id = Some(call_id.clone());
            r.tool_name = Some(tool_name.clone());
            r.is_error = *is_error;
            r.bytes = Some(stats.bytes);
            if let Some(step) = steps.get(call_id) {
                r.observation = Some(preview(&step.observation).0);
                r.reference = step.outcome_ref.clone();
            }
            match content {
                ToolOutput::Text(t) => t.as_str().into(),
                ToolOutput::Parts(parts) => loom_core::joined_text(parts).into(),
                ToolOutput::Blob(_) => "".into(),
            }
        }
        EventBody::DirectMessage {
            source,
            target,
            content,
            ..
        } => {
            r.source = Some(source.clone());
            r.target = Some(target.clone());
            content.as_str().into()
        }
        EventBody::Spawn { agent, goal, .. } => {
            r.target = Some(agent.as_str().to_owned());
            goal.as_str().into()
        }
        EventBody::AgentResult { agent, result, .. } => {
            r.source = Some(agent.as_str().to_owned());
            result.as_str().into()
        }
        EventBody::Pin { content, .. } => content.as_str().into(),
        _ => "".into(),
    };
    (r.text, r.cut) = preview(&text);
    r
}

/// One model call: its receipt and usage, and the request it sent.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CallDetail {
    call: ModelCall,
    /// The request as it was sent, rebuilt from the log.
    request: Rebuilt,
}

/// A request rebuilt from the log, and whether its receipt is the stored one.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Rebuilt {
    /// The body, or `null` when the call was proxied in observe mode (sent as the client
    /// sent it; Loom rendered nothing).
    #[schema(value_type = Option<Object>)]
    body: Option<Value>,
    /// Whether rendering again gave the stored receipt (then the body is the one sent, bar the
    /// client's own fields and tool definitions a proxied request carried).
    matches_receipt: bool,
    /// What the page should say of it.
    note: String,
}

/// One model call's receipt, usage and request.
#[utoipa::path(get, path = "/loom/v1/inspect/sessions/{id}/calls/{call}", params(CallPath),
    responses((status = 200, body = CallDetail), schema::Errors))]
pub(crate) async fn call(
    State(state): State<Arc<AppState>>,
    Owned { p, id, sid, info }: Owned,
    Path((_, call)): Path<(String, String)>,
) -> Result<Response> {
    let n: u64 = call
        .parse()
        .map_err(|_| ApiError::invalid_field("call", format!("`{call}` is not a call number")))?;
    let out = state
        .blocking("rebuilding a request", move |s| {
            let calls = s.store.model_calls(&sid)?;
            let i = calls.iter().position(|c| c.id == n).ok_or_else(|| {
                ApiError::not_found(format!("session `{id}` has no model call {n}"))
            })?;
            let request = rebuild(s, &sid, &info, &calls[..=i])?;
            Ok(CallDetail {
                call: ModelCall::of(&p, &calls[i]),
                request,
            })
        })
        .await?;
    Ok(Json(out).into_response())
}

/// Renders again the last of `calls` from the log as it was then, continuing from the
/// compaction state the call before it stored, as the engine did.
fn rebuild(
    s: &AppState,
    sid: &SessionId,
    info: &SessionInfo,
    calls: &[StoredCall],
) -> Result<Rebuilt> {
    let Some((last, before)) = calls.split_last() else {
        return Err(ApiError::internal("rebuilding a request: no call"));
    };
    let stored = &last.call.receipt["receipt"];
    let Ok(receipt) = serde_json::from_value::<Receipt>(stored.clone()) else {
        return Ok(Rebuilt {
            body: None,
            matches_receipt: false,
            note: "proxied in observe mode: forwarded as the client sent it, so Loom rendered \
                   nothing and kept no copy"
                .to_owned(),
        });
    };
    let unknown = |what: &str| Rebuilt {
        body: None,
        matches_receipt: false,
        note: format!("cannot be rebuilt: {what}"),
    };
    let Some(format) = Format::parse(&receipt.format) else {
        return Ok(unknown(&format!("unknown format `{}`", receipt.format)));
    };
    let Ok((meter, _)) = s.engine.model(&receipt.model, "model", true) else {
        return Ok(unknown(&format!("unknown model `{}`", receipt.model)));
    };
    let mut policy = s.engine.policy.clone();
    policy.context_window = receipt.budget.context_window;
    policy.response_reserve = receipt.budget.response_reserve;
    let events = s.store.read(sid, 1..=receipt.at_seq)?;
    let off = Offloader::new(s.store.as_ref(), s.blobs.as_ref(), &s.engine.reduce);
    let steps: StepIndex = off
        .steps(sid)?
        .into_iter()
        .map(|st| (st.call_id.clone(), st))
        .collect();
    let summaries: Vec<_> = loom_session::engine::summary_views(&s.store.summaries(sid)?)
        .into_iter()
        .filter(|v| receipt.summary_version.is_some_and(|n| v.version <= n))
        .collect();
    // The engine continues from the newest receipt when it was made under the same policy,
    // model and format; otherwise it starts afresh.
    let prev = before
        .last()
        .and_then(|c| {
            let r = &c.call.receipt["receipt"];
            let same = r["policy_version"] == receipt.policy_version.as_str()
                && r["model"] == receipt.model.as_str()
                && r["format"] == receipt.format.as_str();
            same.then(|| CompactionState::deserialize(&c.call.receipt["state"]).ok())
                .flatten()
        })
        .unwrap_or_default();
    let audience = Audience {
        agent: Some(info.agent.clone()),
        now_ms: events.last().map_or(info.created_ms, |e| e.ts_ms),
    };
    let input = render::RenderInput {
        events: &events,
        steps: &steps,
        summaries: &summaries,
        policy: &policy,
        format,
        model: &receipt.model,
        tools: &[],
        injections: &[],
        audience: &audience,
        meter: &meter,
    };
    let rendered = match render::render(&input, &prev, &mut CostMemo::default()) {
        Ok(r) => r,
        Err(e) => return Ok(unknown(&e.to_string())),
    };
    let again = serde_json::to_value(&rendered.receipt).unwrap_or(Value::Null);
    let matches_receipt = &again == stored;
    let note = if matches_receipt {
        "rendered again from the log: its receipt is the stored one, so these are the messages \
         sent"
    } else if receipt
        .tiers
        .get(&render::Tier::Tools)
        .is_some_and(|t| *t > 0)
        || !receipt.injected.is_empty()
    {
        "rendered again from the log without the call's tool definitions or injected content, \
         which are not stored: the messages may differ from those sent"
    } else {
        "rendered again from the log, but its receipt differs from the stored one (another \
         policy or server setting): the messages may differ from those sent"
    };
    Ok(Rebuilt {
        body: Some(rendered.body()),
        matches_receipt,
        note: note.to_owned(),
    })
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct UsageQuery {
    /// The width of a bucket in milliseconds (default: chosen for about 60 buckets).
    #[param(minimum = 1000, maximum = 2592000000u64)]
    bucket_ms: Option<u64>,
}

/// The tenant's model calls over time.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct UsageSeries {
    bucket_ms: u64,
    buckets: Vec<UsageBucket>,
}

/// The calls of one bucket of time.
#[derive(Debug, Default, Serialize, ToSchema)]
pub(crate) struct UsageBucket {
    /// The bucket's start, UTC milliseconds.
    start_ms: i64,
    calls: u64,
    /// Input tokens sent (reported, else estimated).
    input_tokens: u64,
    cached_tokens: u64,
    output_tokens: u64,
    /// Input tokens the full histories would have been.
    full_tokens: u64,
    /// Input cost in uncached-token equivalents.
    cost: f64,
}

/// Widths a bucket may take when the caller names none.
const WIDTHS: [u64; 10] = [
    1_000,
    10_000,
    60_000,
    600_000,
    3_600_000,
    21_600_000,
    86_400_000,
    604_800_000,
    2_592_000_000,
    31_536_000_000,
];

/// The tenant's calls, tokens and cost over time, from the stored receipts and usage.
#[utoipa::path(get, path = "/loom/v1/inspect/usage", params(UsageQuery),
    responses((status = 200, body = UsageSeries), schema::Errors))]
pub(crate) async fn usage(
    State(state): State<Arc<AppState>>,
    Caller(p): Caller,
    query: std::result::Result<Query<UsageQuery>, QueryRejection>,
) -> Result<Response> {
    let Query(q) = query.map_err(body::query_error)?;
    if let Some(w) = q.bucket_ms {
        if !(1_000..=2_592_000_000).contains(&w) {
            return Err(ApiError::invalid_field(
                "bucket_ms",
                format!("expected 1000 to 2592000000 milliseconds, got {w}"),
            ));
        }
    }
    let out = state
        .blocking("summarising usage", move |s| {
            let mut all = Vec::new();
            for info in s.store.sessions()? {
                if p.unscope(&info.id).is_none() {
                    continue;
                }
                let calls = s.store.model_calls(&info.id)?;
                let counted = full_history(s, &info, &calls)?;
                all.extend(calls.iter().map(|c| figures(s, c, &counted)));
            }
            let first = all.iter().map(|f| f.created_ms).min().unwrap_or(0);
            let last = all.iter().map(|f| f.created_ms).max().unwrap_or(0);
            let span = u64::try_from(last - first).unwrap_or(0);
            let width = q.bucket_ms.unwrap_or_else(|| {
                WIDTHS
                    .into_iter()
                    .find(|w| span / w < 60)
                    .unwrap_or(WIDTHS[WIDTHS.len() - 1])
            });
            let w = i64::try_from(width).unwrap_or(i64::MAX);
            let mut buckets: std::collections::BTreeMap<i64, UsageBucket> = Default::default();
            for f in &all {
                let start = f.created_ms.div_euclid(w) * w;
                let b = buckets.entry(start).or_insert_with(|| UsageBucket {
                    start_ms: start,
                    ..Default::default()
                });
                b.calls += 1;
                b.input_tokens += f.sent;
                b.cached_tokens += f.cached.unwrap_or(0);
                b.output_tokens += f.output.unwrap_or(0);
                b.full_tokens += f.full;
                b.cost += f.cost;
            }
            Ok(UsageSeries {
                bucket_ms: width,
                buckets: buckets.into_values().collect(),
            })
        })
        .await?;
    Ok(Json(out).into_response())
}
