//! `loom_recall` through the proxy: in `fit` mode, from the first render that leaves something
//! out, the forwarded request offers one more tool, and every stub, group and notice says how to
//! call it. When the upstream's reply calls it, Loom answers the call itself (the original of
//! the reference, within `[recall] max_tokens`), asks the upstream again with the call and its
//! answer appended, and gives the client only the final reply, with the text the model wrote
//! before the call in front of it.
//!
//! The hidden exchange is logged as Loom's own: the turn with its `loom_recall` calls (its text
//! goes with the final reply, as the client received it), the answers, and a `hidden` record
//! naming them, written with the next round's receipt and the round's usage in one turn. Later
//! renders send them like any call and result, so the model's conversation stays append-only,
//! while the client's history is matched against the log without them.
//!
//! Calls to the client's own tools in a reply that also calls `loom_recall` are dropped (the
//! model makes them again in the next round). After `[recall] max_rounds` rounds the reply goes
//! to the client without its `loom_recall` calls. A streamed reply is spliced (`splice.rs`): the
//! client gets one stream, with the text the model wrote before the call as it came.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::http::HeaderMap;
use loom_core::render::{RecallRefs, ToolSpec, RECALL_TOOL};
use loom_core::{Api, SessionId};
use loom_store::recall::tool_definition;
use loom_store::Usage;
use loom_wire::{parse_reply, AssistantReply};
use serde_json::{json, Value};

use super::ingest::RequestBody;
use super::upstream::{assistant_event, LogTarget};
use crate::auth::Principal;
use crate::config::RecallMode;
use crate::error::ApiError;
use crate::state::{now_ms, AppState};
use loom_session::engine::RenderSpec;

/// What another round of a call needs: the render's spec, the client's request, and how to
/// call the upstream again.
pub(crate) struct Rounds {
    spec: RenderSpec,
    body: Arc<RequestBody>,
    pub(crate) max_rounds: u32,
    max_tokens: u64,
    pub(crate) principal: Option<Principal>,
    pub(crate) headers: HeaderMap,
    /// The client's path (Gemini's names the model and the method).
    pub(crate) path: String,
    pub(crate) query: Option<String>,
}

impl Rounds {
    pub(crate) fn new(state: &AppState, spec: RenderSpec, body: Arc<RequestBody>) -> Self {
        Self {
            spec: counted(spec),
            body,
            max_rounds: state.config.recall.max_rounds,
            max_tokens: state.config.recall.max_tokens,
            principal: None,
            headers: HeaderMap::new(),
            path: String::new(),
            query: None,
        }
    }
}

/// Whether a `fit` request may be offered the tool: recall is on, the request is not a client's
/// summary request (known by its instruction, [`super::sync::asks_for_summary`]), does not
/// forbid tools, neither by `tool_choice` nor by an empty `tools` list (Codex's summary request
/// sends `tools: []` on purpose: a call there would break its compaction), and none of its own
/// tools has the name.
pub(crate) fn may_offer(
    state: &AppState,
    api: Api,
    client: &serde_json::Map<String, Value>,
) -> bool {
    if state.config.recall.mode == RecallMode::Off
        || super::sync::asks_for_summary(api, client).is_some()
    {
        return false;
    }
    let none = match client.get("tool_choice") {
        Some(Value::String(s)) => s == "none",
        Some(Value::Object(o)) => o.get("type").and_then(Value::as_str) == Some("none"),
        _ => false,
    };
    let named = client
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|tools| {
            tools.iter().any(|t| {
                t.get("name").or_else(|| t.pointer("/function/name")) == Some(&json!(RECALL_TOOL))
            })
        });
    let emptied = client
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty);
    !none && !emptied && !named
}

/// The tool as the render counts it.
fn tool_spec() -> ToolSpec {
    let (name, description, parameters) = tool_definition();
    ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        parameters,
    }
}

/// Makes `spec` count the tool, once.
pub(crate) fn counted(mut spec: RenderSpec) -> RenderSpec {
    if !spec.tools.iter().any(|t| t.name == RECALL_TOOL) {
        spec.tools.push(tool_spec());
    }
    spec
}

/// Whether the session's last render was past a compaction point: from then on every request
/// offers the tool, so the render counts it. (The request at the first point offers it
/// uncounted: the point lands at the low watermark, far below the budget.)
pub(crate) fn past_a_point(live: &loom_session::live::Live) -> bool {
    live.last_call()
        .is_some_and(|c| c.call.receipt["receipt"]["points"].as_u64().unwrap_or(0) > 0)
}

/// Makes `spec` write references as calls of the tool (or, in `files` mode, offloaded outputs
/// as paths under the session's folder).
pub(crate) fn count_in(state: &AppState, session: &SessionId, spec: &mut RenderSpec) {
    spec.recall = Some(
        match (&state.config.recall.mode, &state.config.recall.folder) {
            (RecallMode::Files, Some(folder)) => RecallRefs::Files {
                dir: crate::recall_files::session_dir(folder, session),
            },
            _ => RecallRefs::Tool,
        },
    );
}

/// Adds the tool to a request in `api`'s shape, after the client's own.
pub(crate) fn offer(api: Api, request: &mut Value) {
    let (name, description, parameters) = tool_definition();
    let tool = loom_wire::dialect(api).tool(name, description, &parameters);
    if let Some(obj) = request.as_object_mut() {
        match obj
            .entry("tools")
            .or_insert_with(|| Value::Array(Vec::new()))
        {
            Value::Array(list) => list.push(tool),
            other => *other = Value::Array(vec![tool]),
        }
    }
}

/// Whether a reply calls the tool.
pub(crate) fn calls_recall(reply: &AssistantReply) -> bool {
    reply.tool_calls.iter().any(|c| c.name == RECALL_TOOL)
}

/// Answers the reply's `loom_recall` calls and asks the upstream again until a reply calls it
/// no more (or the rounds run out); returns the final reply's body, as the client receives it,
/// and that reply, with `target` naming the last round's call.
pub(crate) async fn run(
    state: &Arc<AppState>,
    api: Api,
    rounds: Rounds,
    target: &mut LogTarget,
    mut body: Bytes,
    mut reply: AssistantReply,
    deadline: Instant,
) -> Result<(Bytes, AssistantReply), ApiError> {
    let mut before: Vec<String> = Vec::new();
    let mut round = 0;
    while calls_recall(&reply) {
        let sent = match round < rounds.max_rounds {
            true => ask_again(state, api, &rounds, target, &reply, deadline).await?,
            false => Round::NoRoom,
        };
        let Round::Sent(sent) = sent else {
            // The rounds ran out, or the next has no room: the reply goes without its calls.
            let mut doc: Value = serde_json::from_slice(&body)
                .map_err(|_| ApiError::internal("re-reading the reply"))?;
            loom_wire::dialect(api).drop_calls(&mut doc, RECALL_TOOL);
            body = Bytes::from(serde_json::to_vec(&doc).unwrap_or_default());
            reply = parse_reply(api, &body).map_err(|e| ApiError::internal(e.to_string()))?;
            break;
        };
        round += 1;
        if let Some(text) = reply.content.take().filter(|t| !t.is_empty()) {
            before.push(text);
        }
        body = super::upstream::read_all(sent, deadline).await?;
        reply = parse_reply(api, &body).map_err(|e| {
            ApiError::upstream(
                axum::http::StatusCode::BAD_GATEWAY,
                format!("the upstream's reply to a recall round cannot be read: {e}"),
            )
        })?;
    }
    if !before.is_empty() {
        let mut doc: Value = serde_json::from_slice(&body)
            .map_err(|_| ApiError::internal("re-reading the reply"))?;
        loom_wire::dialect(api).prepend_text(&mut doc, &before.concat());
        body = Bytes::from(serde_json::to_vec(&doc).unwrap_or_default());
        reply = parse_reply(api, &body).map_err(|e| ApiError::internal(e.to_string()))?;
    }
    Ok((body, reply))
}

/// What asking again came to.
pub(crate) enum Round {
    /// The next round's request went upstream: its response.
    Sent(reqwest::Response),
    /// The round's request cannot hold even the shortest answers within the budget: nothing
    /// was logged or sent, and the reply goes to the client as when the rounds run out.
    NoRoom,
}

/// Logs the hidden round of `reply` (its `loom_recall` calls and their answers) and asks the
/// upstream again, as the client's request asked (streamed or not); `target` then names the
/// new call. The upstream's refusal is an error.
pub(crate) async fn ask_again(
    state: &Arc<AppState>,
    api: Api,
    rounds: &Rounds,
    target: &mut LogTarget,
    reply: &AssistantReply,
    deadline: Instant,
) -> Result<Round, ApiError> {
    let started = Instant::now();
    let principal = rounds
        .principal
        .as_ref()
        .ok_or_else(|| ApiError::internal("a recall round without its caller"))?;
    let Some((call, body)) = hidden_round(state, api, rounds, target, reply).await? else {
        return Ok(Round::NoRoom);
    };
    target.call = call;
    if let Some(call) = call {
        let tenant = principal.tenant.as_ref();
        state
            .sent
            .keep(tenant, &target.session, call, &body, now_ms());
    }
    let request = super::upstream_request(
        state,
        api,
        principal,
        &rounds.headers,
        &rounds.path,
        rounds.query.as_deref(),
        body,
    )?;
    state
        .metrics
        .recall_round(super::route(api), started.elapsed());
    // Each round is its own request upstream: its own attempt span (the last one ends with
    // the call).
    target.attempt = target.span.attempt("upstream");
    let sent = tokio::time::timeout_at(deadline.into(), request.send())
        .await
        .map_err(|_| {
            ApiError::upstream(
                axum::http::StatusCode::GATEWAY_TIMEOUT,
                "the upstream did not answer in time",
            )
        })?
        .map_err(|e| {
            ApiError::upstream(
                axum::http::StatusCode::BAD_GATEWAY,
                format!(
                    "the upstream could not be reached: {}",
                    super::without_url(&e)
                ),
            )
        })?;
    let status = sent.status();
    target.attempt.status(status.as_u16());
    if !status.is_success() {
        let body = super::upstream::read_all(sent, deadline).await?;
        return Err(ApiError::upstream(
            axum::http::StatusCode::from_u16(status.as_u16())
                .unwrap_or(axum::http::StatusCode::BAD_GATEWAY),
            format!(
                "the upstream refused a recall round: {}",
                String::from_utf8_lossy(&body[..body.len().min(500)])
            ),
        ));
    }
    Ok(Round::Sent(sent))
}

/// The fewest tokens a recall answer is cut to so that a round fits the budget: below it the
/// round is refused as over budget instead.
const MIN_ANSWER_TOKENS: u64 = 64;

/// Tokens allowed for the line that says where an answer was cut.
const CUT_NOTE_TOKENS: u64 = 24;

/// What goes before the id of each `loom_recall` call logged in a hidden round.
const HIDDEN_ID_PREFIX: &str = "loom_";

/// Logs one hidden round (the turn with its recall calls, their answers, the `hidden` record,
/// the round's usage and the next render's receipt, as one turn) and renders the next request;
/// returns the next call and its body.
async fn hidden_round(
    state: &Arc<AppState>,
    api: Api,
    rounds: &Rounds,
    target: &LogTarget,
    reply: &AssistantReply,
) -> Result<Option<(Option<u64>, Bytes)>, ApiError> {
    let live = target
        .live
        .clone()
        .ok_or_else(|| ApiError::internal("a recall round without its session"))?;
    let session = target.session.clone();
    let call = target.call;
    let spec = rounds.spec.clone();
    let body = Arc::clone(&rounds.body);
    let max_tokens = rounds.max_tokens;
    let mut turn = reply.clone();
    turn.content = None;
    turn.tool_calls.retain(|c| c.name == RECALL_TOOL);
    let usage = reply.usage.as_ref().map(|u| Usage {
        input_tokens: u.input_tokens,
        cached_input_tokens: u.cached_input_tokens,
        output_tokens: u.output_tokens,
        reported_ms: now_ms(),
    });
    let asked = assistant_event(api, turn.clone());
    state
        .blocking("answering loom_recall", move |s| {
            let (meter, policy) = s.engine.prepare(&spec)?;
            let mut cap = loom_store::recall::answer_cap(max_tokens, policy.budget().oversized);
            let mut held = loom_session::live::lock_live(&live);
            // The hidden calls get ids of their own: the model may repeat one it used before,
            // and the client's history, which never holds them, must alias its calls the same.
            let mut asked = [asked];
            held.alias_calls(&mut asked, HIDDEN_ID_PREFIX);
            let [asked] = asked;
            // The answers are the round's latest turn, which every render keeps whole: when
            // they leave the request over the budget, they are answered again that much shorter
            // (each cut at a line with a note on how to read the rest), down to a floor.
            let (out, mut receipt, recalls) = loop {
                let mut recalls = Vec::new();
                let mut found = Vec::new();
                let events = loom_store::recall::hidden_round(
                    s.store.as_ref(),
                    s.blobs.as_ref(),
                    &s.engine.reduce,
                    &session,
                    asked.clone(),
                    held.last_seq(),
                    cap,
                    &meter,
                    |reference, a| {
                        found.push((a.is_error, a.tokens));
                        recalls.push(json!({"ref": reference, "tokens": a.tokens,
                            "found": !a.is_error, "answered_call": call}));
                    },
                )?;
                held.stage(s.backend(), &events)?;
                match s.engine.render(&mut held, &spec) {
                    Ok((out, receipt)) => {
                        for (is_error, tokens) in found {
                            s.metrics.recalled(is_error, tokens);
                        }
                        break (out, receipt, recalls);
                    }
                    Err(e) => {
                        held.unstage(s.backend())?;
                        let answers = found.len().max(1) as u64;
                        let longest = found.iter().map(|&(_, t)| t).max().unwrap_or(0);
                        match e.over_budget {
                            Some(over) if cap > MIN_ANSWER_TOKENS && longest > 0 => {
                                // Each answer gives up its share, and a little for the note
                                // that says where it was cut.
                                let shorter = longest
                                    .min(cap)
                                    .saturating_sub(over.div_ceil(answers) + CUT_NOTE_TOKENS);
                                cap = shorter.max(MIN_ANSWER_TOKENS);
                            }
                            // Not even the shortest answers fit: there is no round.
                            Some(_) => return Ok(None),
                            None => return Err(e.into()),
                        }
                    }
                }
            };
            // The receipt of the call that carries the answers lists them.
            if let Some(r) = receipt.as_mut() {
                r.receipt["receipt"]["recalls"] = Value::Array(recalls);
            }
            let report = call.zip(usage.as_ref());
            let next = match held.commit(s.backend(), receipt.as_ref(), report) {
                Ok(next) => next,
                Err(e) => {
                    held.discard();
                    return Err(e.into());
                }
            };
            drop(held);
            let bytes = super::assemble(api, &body, &live, &out.body, Some(&spec))
                .map_err(|why| ApiError::internal(format!("a recall round's request: {why}")))?;
            Ok(Some((next, bytes)))
        })
        .await
}
