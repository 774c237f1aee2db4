//! `GET /loom/v1/sessions/{id}/explain?event=N`: what happened to one event in each recorded
//! model call, and how to get its original back — the API's `loom explain`.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use loom_core::render::Receipt;
use loom_core::{EventBody, SessionId};
use loom_store::Offloader;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::extract::Owned;
use super::{body, schema, SessionPath};
use crate::error::{ApiError, Result};
use crate::state::AppState;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ExplainQuery {
    /// The event's seq.
    #[param(value_type = schema::Seq, inline)]
    event: u64,
}

/// What happened to one event in each recorded model call, and where its original is.
#[derive(Debug, Serialize, ToSchema)]
pub struct Explanation {
    /// The event's seq.
    event: u64,
    /// Its kind.
    kind: String,
    /// Its fate in each recorded model call, oldest first.
    calls: Vec<CallFate>,
    /// Where its original is.
    original: Original,
}

/// What one model call did with the event.
#[derive(Debug, Serialize, ToSchema)]
pub struct CallFate {
    call: u64,
    at_seq: u64,
    /// `verbatim`, `stubbed`, `grouped`, `summarized`, `dropped`, ... (the receipt's lists).
    fate: String,
    /// The render's estimate of the call's input tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    estimate: Option<u64>,
    /// The compaction point that took the event, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    compaction: Option<loom_core::render::PointRecord>,
    /// The usage the provider reported for the call.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<schema::Usage>)]
    usage: Option<loom_store::Usage>,
}

/// Where an event's original is: an offloaded output's reference (and, through the API, the
/// URL that recalls it), or the event itself in the log.
#[derive(Debug, Serialize, ToSchema)]
pub struct Original {
    #[serde(rename = "ref", skip_serializing_if = "Option::is_none")]
    reference: Option<String>,
    /// `GET` this for the original bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    recall: Option<String>,
    /// The seqs that hold it (`[n, n]`), when it is the event itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    events: Option<OriginalEvents>,
}

/// The seqs of an original in the log: `[n, n]` in `explain_event`, the URL reading them
/// through the API.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum OriginalEvents {
    /// `[n, n]`: the event's own seq, as a range (`explain_event`, the Python package).
    Seqs([u64; 2]),
    /// The URL that reads the event through the API.
    Url(String),
}

/// What happened to one event in each recorded model call.
#[utoipa::path(get, path = "/loom/v1/sessions/{id}/explain", params(SessionPath, ExplainQuery),
    responses((status = 200, body = Explanation), schema::Errors))]
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
            let session = encode(&client_id);
            out.original = match out.original.reference.take() {
                Some(r) => Original {
                    recall: Some(format!("/loom/v1/sessions/{session}/recall?ref={r}")),
                    reference: Some(r),
                    events: None,
                },
                None => Original {
                    reference: None,
                    recall: None,
                    events: Some(OriginalEvents::Url(format!(
                        "/loom/v1/sessions/{session}/events?from={n}&to={n}"
                    ))),
                },
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
) -> Result<Explanation> {
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
        let fate = match &receipt {
            Some(r) => r.fate(n),
            None if n <= mc.call.at_seq => "sent as the client sent it (observe mode)",
            None => "not yet in the log",
        };
        calls.push(CallFate {
            call: mc.id,
            at_seq: mc.call.at_seq,
            fate: fate.to_owned(),
            estimate: receipt.as_ref().map(|r| r.estimate),
            compaction: receipt
                .as_ref()
                .and_then(|r| r.compaction.clone())
                .filter(|p| p.at_seq >= n),
            usage: mc.usage,
        });
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
    let original = Original {
        events: reference.is_none().then_some(OriginalEvents::Seqs([n, n])),
        reference,
        recall: None,
    };
    Ok(Explanation {
        event: n,
        kind: event.body.kind().as_str().to_owned(),
        calls,
        original,
    })
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
