//! What the web inspector (`/ui`) reads, under `/loom/v1/inspect`: each answer is one request
//! for one page, so the page makes no call per row.
//!
//! - `sessions`: every session of the tenant with its figures (model calls, input tokens as sent
//!   and as the full history would have been, cached share, cost, last activity);
//! - `sessions/{id}`: a page of its events as a timeline, and every model call with its figures
//!   and the receipt's fates by seq (the `explain` facts of every event at once);
//! - `sessions/{id}/calls/{call}`: one call's receipt and usage, and its request exactly as sent
//!   when this server still holds it, else rebuilt from the log (`request`);
//! - `usage`: the tenant's calls, tokens and cost over time.
//!
//! Everything but the bodies as sent is read from the store (the receipts and reported usage
//! `/metrics` counts as they arrive), so it holds across restarts and across servers sharing one
//! store; what was read is kept between polls (`digest`).

pub(crate) mod request;

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use loom_core::{Event, EventBody, SessionInfo, ToolOutput};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::extract::{Caller, Owned, SessionPath};
use super::{body, schema};
use crate::auth::Principal;
use crate::digest::{preview, CallFacts, Digest, StepView};
use crate::error::{ApiError, Result};
use crate::state::AppState;

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
                let held = s.digests.read(&s.digest_sources(), &info, false)?;
                sessions.push(summary(&p, &info, &held.lock()));
            }
            Ok(SessionSummaries { sessions })
        })
        .await?;
    Ok(Json(out).into_response())
}

fn summary(p: &Principal, info: &SessionInfo, d: &Digest) -> SessionSummary {
    let figures: Vec<CallFigures> = d.calls.iter().map(|c| figures(c, d)).collect();
    let reported: u64 = d
        .calls
        .iter()
        .filter_map(|c| c.usage.map(|u| u.input_tokens))
        .sum();
    let cached: u64 = figures.iter().filter_map(|f| f.cached).sum();
    let last_call = d.calls.last().map_or(0, |c| c.created_ms);
    let base = super::Session::of(p, info);
    SessionSummary {
        id: base.id,
        agent: base.agent,
        parent: base.parent,
        created_ms: info.created_ms,
        event_count: info.event_count,
        model_calls: d.calls.len() as u64,
        input_tokens: figures.iter().map(|f| f.sent).sum(),
        full_tokens: figures.iter().map(|f| f.full).sum(),
        cached_tokens: cached,
        cached_share: (reported > 0).then(|| cached as f64 / reported as f64),
        cost: figures.iter().map(|f| f.cost).sum(),
        last_ms: info.created_ms.max(last_call).max(d.last_ms),
    }
}

/// A call's figures, from its receipt's facts and usage and the session's full-history counts.
fn figures(c: &CallFacts, d: &Digest) -> CallFigures {
    let sent = c
        .usage
        .map(|u| u.input_tokens)
        .or(c.estimate)
        .unwrap_or_default();
    let cached = c.usage.and_then(|u| u.cached_input_tokens);
    let cached_n = cached.unwrap_or(0).min(sent);
    CallFigures {
        id: c.id,
        at_seq: c.at_seq,
        created_ms: c.created_ms,
        model: c.model.clone(),
        estimate: c.estimate,
        sent,
        full: d.upto(c.at_seq) + c.tools,
        cached,
        output: c.usage.and_then(|u| u.output_tokens),
        cost: (sent - cached_n) as f64 + cached_n as f64 * c.cached_price,
        compaction: c.compaction,
        points: c.points,
        hard_total: c.hard_total,
    }
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
    fates: std::collections::BTreeMap<&'static str, Vec<[u64; 2]>>,
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
            let held = s.digests.read(&s.digest_sources(), &info, true)?;
            let events = if from <= to {
                s.store.read(&sid, from..=to)?
            } else {
                Vec::new()
            };
            let d = held.lock();
            let events = events.iter().map(|e| row(e, &d.steps)).collect();
            let calls = d
                .calls
                .iter()
                .map(|c| CallRow {
                    figures: figures(c, &d),
                    fates: c.fates.clone(),
                    compaction_at: c.compaction_at,
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

fn row(e: &Event, steps: &std::collections::HashMap<String, StepView>) -> EventRow {
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
                r.observation = Some(step.observation.clone());
                r.reference = step.reference.clone();
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
                let held = s.digests.read(&s.digest_sources(), &info, false)?;
                let d = held.lock();
                all.extend(d.calls.iter().map(|c| figures(c, &d)));
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
