//! Importing through the API: a whole history into sessions (`/loom/v1/import`), and a
//! framework's history appended to one session (`/loom/v1/sessions/{id}/history`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Principal;
use crate::error::{ApiError, ErrorBody, Result};
use crate::state::{now_ms, AppState};

use super::body;
use super::extract::Caller;
use super::extract::SessionPath;
use super::schema;
use super::schema::Appended;
use loom_session::history::append_history;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ImportQuery {
    /// The history's format (default: recognised from the body).
    #[param(value_type = Option<schema::FormatName>, inline)]
    format: Option<String>,
    /// The session to import into.
    #[param(value_type = schema::Id, inline)]
    session: Option<String>,
    /// The agent of a session the import creates.
    #[param(value_type = Option<schema::Id>, inline)]
    agent: Option<String>,
    /// A session stored with a log the history extends gets the rest appended, instead of 409.
    extend: Option<bool>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ImportReport {
    sessions: Vec<ImportedSession>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ImportedSession {
    id: String,
    #[schema(value_type = String, pattern = "^(imported|unchanged|extended)$")]
    outcome: loom_session::import::Outcome,
    events: u64,
    blobs: u64,
}

/// Import an OpenAI Chat, Anthropic Messages or OpenAI Responses history.
#[utoipa::path(post, path = "/loom/v1/import", params(ImportQuery), request_body = schema::History,
    responses((status = 200, body = ImportReport), (status = 201, body = ImportReport),
        (status = 409, body = ErrorBody), schema::Errors))]
pub(crate) async fn import(
    State(state): State<Arc<AppState>>,
    Caller(p): Caller,
    query: std::result::Result<Query<ImportQuery>, QueryRejection>,
    body: Bytes,
) -> Result<Response> {
    let Query(q) = query.map_err(body::query_error)?;
    let mut opts = loom_import::ParseOptions::new(now_ms());
    if let Some(f) = &q.format {
        opts.format = loom_import::requested_format(f)
            .map_err(|e| ApiError::invalid_field("format", e.to_string()))?;
    }
    let client_id = q.session.clone().ok_or_else(|| {
        ApiError::invalid_field("session", "name the session to import into (?session=ID)")
    })?;
    opts.session = Some(p.scope(&client_id, "session")?);
    opts.agent = match (&q.agent, &p.agent) {
        (Some(a), _) => Some(Principal::agent(a, "agent")?),
        (None, agent) => agent.clone(),
    };
    let extend = q.extend.unwrap_or(false);
    let report = state
        .blocking("importing a history", move |s| {
            let sessions =
                loom_import::parse_slice("body", "body", &body[..], &opts, s.blobs.as_ref())?;
            let plan = if extend {
                loom_session::import::plan_extending(s.store.as_ref(), sessions)?
            } else {
                loom_session::import::plan(s.store.as_ref(), sessions)?
            };
            Ok(plan.commit(
                s.store.as_ref(),
                now_ms(),
                &mut loom_session::import::NoProgress,
            )?)
        })
        .await?;
    for r in &report.sessions {
        if r.outcome != loom_session::import::Outcome::Unchanged {
            state.index_later(&p, &r.id);
        }
    }
    let sessions = report
        .sessions
        .iter()
        .map(|r| ImportedSession {
            id: p.unscope(&r.id).unwrap_or(r.id.as_str()).to_owned(),
            outcome: r.outcome,
            events: r.events,
            blobs: r.blobs,
        })
        .collect();
    let status = if report.imported > 0 || report.extended > 0 {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(ImportReport { sessions })).into_response())
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct HistoryQuery {
    /// The history's format (default: recognised from the body).
    #[param(value_type = Option<schema::FormatName>, inline)]
    format: Option<String>,
    /// The agent of the session, when this creates it.
    #[param(value_type = Option<schema::Id>, inline)]
    agent: Option<String>,
}

/// Append the next messages or items of a provider history (only the new ones; results may
/// answer calls already logged), creating the session if needed.
#[utoipa::path(post, path = "/loom/v1/sessions/{id}/history", params(SessionPath, HistoryQuery),
    request_body = schema::History, responses((status = 200, body = Appended), schema::Errors))]
pub(crate) async fn history(
    State(state): State<Arc<AppState>>,
    Caller(p): Caller,
    Path(id): Path<String>,
    query: std::result::Result<Query<HistoryQuery>, QueryRejection>,
    body: Bytes,
) -> Result<Response> {
    let Query(q) = query.map_err(body::query_error)?;
    let format = match &q.format {
        Some(f) => loom_import::requested_format(f)
            .map_err(|e| ApiError::invalid_field("format", e.to_string()))?,
        None => None,
    };
    let sid = p.scope(&id, "session")?;
    let agent = match (&q.agent, &p.agent) {
        (Some(a), _) => Some(Principal::agent(a, "agent")?),
        (None, agent) => agent.clone(),
    };
    let lock = state.session_locks.get(&sid);
    let _guard = lock.lock().await;
    let index_id = sid.clone();
    let seqs = state
        .blocking("appending a history", move |s| {
            append_history(
                s.store.as_ref(),
                s.blobs.as_ref(),
                &sid,
                &body,
                format,
                agent,
                now_ms(),
            )
            .map_err(ApiError::from)
        })
        .await
        .map_err(|e| e.context(format!("session `{id}`")))?;
    state.index_later(&p, &index_id);
    Ok(Json(Appended::of(&seqs)).into_response())
}
