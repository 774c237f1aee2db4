//! `GET /loom/v1/sessions/{id}/explain?event=N`: what happened to one event in each recorded
//! model call, and how to get its original back — the API's `loom explain`.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use loom_session::explain::{explain_event, Explanation, Original, OriginalEvents};
use serde::Deserialize;
use utoipa::IntoParams;

use super::extract::Owned;
use super::extract::SessionPath;
use super::{body, schema};
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
