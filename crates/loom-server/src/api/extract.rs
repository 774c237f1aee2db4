//! Extractors every `/loom/v1` handler starts from: the authenticated caller, and the caller's
//! session named in the path.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use loom_core::{SessionId, SessionInfo};
use utoipa::IntoParams;

use crate::auth::Principal;
use crate::error::{ApiError, Result};
use crate::state::AppState;

/// The authenticated caller.
#[derive(Debug)]
pub(crate) struct Caller(pub(crate) Principal);

impl FromRequestParts<Arc<AppState>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self> {
        state.authenticate(&parts.headers).await.map(Caller)
    }
}

/// The caller's session named by the path's `{id}`: a 404 when the caller's tenant has none by
/// that name, whoever else may.
#[derive(Debug)]
pub(crate) struct Owned {
    /// The caller.
    pub(crate) p: Principal,
    /// The session as the caller names it.
    pub(crate) id: String,
    /// The session as stored.
    pub(crate) sid: SessionId,
    /// What the store says of it.
    pub(crate) info: SessionInfo,
}

impl FromRequestParts<Arc<AppState>> for Owned {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self> {
        let Caller(p) = Caller::from_request_parts(parts, state).await?;
        let params = path_params(parts, state).await?;
        let id = params
            .get("id")
            .cloned()
            .ok_or_else(|| ApiError::invalid("path: no session id"))?;
        let (sid, info) = existing(state, &p, &id).await?;
        Ok(Self { p, id, sid, info })
    }
}

/// The path's parameters, decoded; a segment that does not decode is a 400 naming the path.
pub(crate) async fn path_params(
    parts: &mut Parts,
    state: &Arc<AppState>,
) -> Result<HashMap<String, String>> {
    Path::<HashMap<String, String>>::from_request_parts(parts, state)
        .await
        .map(|Path(p)| p)
        .map_err(|e| ApiError::invalid(format!("path: {}", e.body_text())))
}

/// The path of an endpoint on one session.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Read by `Owned`; here for the description.
pub(crate) struct SessionPath {
    /// The session, as the tenant names it.
    #[param(value_type = super::schema::Id, inline)]
    id: String,
}

/// The stored id of the tenant's session `id`, which must exist (404 otherwise).
pub(crate) async fn existing(
    state: &Arc<AppState>,
    p: &Principal,
    id: &str,
) -> Result<(SessionId, SessionInfo)> {
    let sid = p.scope(id, "id")?;
    let lookup = sid.clone();
    let info = state
        .blocking("reading a session", move |s| {
            Ok(s.store.session(&lookup)?)
        })
        .await?
        .ok_or_else(|| ApiError::not_found(format!("session `{id}` not found")))?;
    Ok((sid, info))
}
