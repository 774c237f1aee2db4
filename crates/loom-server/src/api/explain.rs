//! `GET /loom/v1/sessions/{id}/explain?event=N`: what happened to one event in each recorded
//! model call, and how to get its original back — the API's `loom explain`.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use loom_core::render::Receipt;
use loom_core::{BlobRef, EventBody, SessionId, ToolOutput};
use loom_store::Offloader;
use serde::Deserialize;
use serde_json::{json, Value};

use super::body;
use super::extract::Owned;
use crate::error::{ApiError, Result};
use crate::state::AppState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExplainQuery {
    event: u64,
}

pub(crate) async fn explain(
    State(state): State<Arc<AppState>>,
    Owned { id, sid, info, .. }: Owned,
    query: std::result::Result<Query<ExplainQuery>, QueryRejection>,
) -> Result<Response> {
    let Query(q) = query.map_err(body::query_error)?;
    let n = q.event;
    if n == 0 {
        return Err(ApiError::invalid_field(
            "event",
            "seqs start at 1: expected an event's seq",
        ));
    }
    if n > info.event_count {
        let mut e = ApiError::not_found(format!(
            "session `{id}` has no event {n} (it has {})",
            info.event_count
        ));
        e.field = Some("event".into());
        return Err(e);
    }
    let client_id = id.clone();
    let out = state
        .blocking("explaining an event", move |s| {
            let mut out = explain_event(
                s.store.as_ref(),
                s.blobs.as_ref(),
                &s.engine.reduce,
                &sid,
                n,
            )?;
            out["original"] = match out["original"]["ref"].as_str() {
                Some(r) => json!({
                    "ref": r,
                    "recall": format!("/loom/v1/sessions/{}/recall?ref={r}", encode(&client_id)),
                }),
                None => json!({
                    "events": format!("/loom/v1/sessions/{}/events?from={n}&to={n}", encode(&client_id)),
                }),
            };
            Ok(out)
        })
        .await?;
    Ok(Json(out).into_response())
}

/// What happened to event `n` of `session` in each recorded model call (its fate in the call's
/// receipt, the compaction point that took it, the call's usage), and where its original is: the
/// reference of the output a step offloaded (`original.ref`), or the event itself
/// (`original.events: [n, n]`). The API's and the Python package's `explain`.
pub fn explain_event(
    store: &dyn loom_store::Store,
    blobs: &dyn loom_store::BlobStore,
    reduce: &loom_core::ReduceConfig,
    session: &SessionId,
    n: u64,
) -> Result<Value> {
    let event = store
        .read(session, n..=n)?
        .pop()
        .ok_or_else(|| ApiError::invalid_field("event", format!("no event {n}")))?;
    let mut calls = Vec::new();
    for mc in store.model_calls(session)? {
        // A call proxied in observe mode went upstream as the client sent it: there is no
        // render to explain, only that the event was sent as it is.
        let receipt: Option<Receipt> =
            serde_json::from_value(mc.call.receipt["receipt"].clone()).ok();
        let mut row = match &receipt {
            Some(r) => json!({
                "call": mc.id,
                "at_seq": mc.call.at_seq,
                "fate": r.fate(n),
                "estimate": r.estimate,
            }),
            None if n <= mc.call.at_seq => json!({
                "call": mc.id,
                "at_seq": mc.call.at_seq,
                "fate": "sent as the client sent it (observe mode)",
            }),
            None => json!({
                "call": mc.id,
                "at_seq": mc.call.at_seq,
                "fate": "not yet in the log",
            }),
        };
        if let Some(point) = receipt
            .as_ref()
            .and_then(|r| r.compaction.as_ref())
            .filter(|p| p.at_seq >= n)
        {
            row["compaction"] = serde_json::to_value(point).unwrap_or(Value::Null);
        }
        if let Some(usage) = mc.usage {
            row["usage"] = serde_json::to_value(usage).unwrap_or(Value::Null);
        }
        calls.push(row);
    }
    let reference = match &event.body {
        EventBody::ToolResult { call_id, .. } => {
            let off = Offloader::new(store, blobs, reduce);
            off.steps(session)?
                .into_iter()
                .find(|step| &step.call_id == call_id)
                .and_then(|step| step.outcome_ref)
        }
        _ => None,
    };
    let original = match reference {
        Some(r) => json!({ "ref": r }),
        None => json!({ "events": [n, n] }),
    };
    Ok(json!({
        "event": n,
        "kind": event.body.kind().as_str(),
        "calls": calls,
        "original": original,
    }))
}

/// Whether the session's log or steps refer to `blob` (an inline output offloaded by a step, or a
/// tool result stored in the blob store).
pub(crate) fn session_refers_to(s: &AppState, session: &SessionId, blob: &BlobRef) -> Result<bool> {
    let latest = s.store.latest_seq(session)?;
    let in_log = s.store.read(session, 1..=latest)?.iter().any(|e| {
        matches!(&e.body, EventBody::ToolResult { content: ToolOutput::Blob(b), .. } if b == blob)
    });
    if in_log {
        return Ok(true);
    }
    let off = Offloader::new(s.store.as_ref(), s.blobs.as_ref(), &s.engine.reduce);
    for step in off.steps(session)? {
        let Some(alias) = step.outcome_ref else {
            continue;
        };
        if let Ok(loom_store::Resolution::Found(b)) = off.resolve(Some(session), &alias) {
            if &b == blob {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// A path segment with the characters a URL path cannot carry escaped.
fn encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b));
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
