//! Who is calling: the Loom key (or none, locally), its tenant, and the tenant's view of ids.
//!
//! Tenancy is by namespace. Under `--auth keys` a tenant's session `s1` is stored as
//! `TENANT/s1`; a tenant can only name ids inside its own namespace, so another tenant's session
//! is not forbidden but simply absent (a 404, never a 403: ids cannot be probed). Tenant names
//! cannot hold `/`, so two namespaces never overlap. Under `--auth none` (one local user) ids are
//! stored as given and every session of the database is visible, as with the CLI.

use axum::http::HeaderMap;
use loom_core::{AgentId, SessionId};
use loom_store::{hash_api_key, ProxyMode, TenantId};

use crate::error::{ApiError, Result};

/// Longest session id a client may use, in bytes (stored under its tenant, it is longer).
pub const CLIENT_ID_LEN: usize = 1024;

/// The caller of one request.
#[derive(Debug, Clone)]
pub struct Principal {
    /// The tenant, or `None` for the local user of `--auth none`.
    pub tenant: Option<TenantId>,
    /// The key's public id, when a key authenticated.
    pub key_id: Option<String>,
    /// The agent the key is for; sessions it creates belong to it.
    pub agent: Option<AgentId>,
    /// The key's mode, when it sets one.
    pub mode: Option<ProxyMode>,
    /// Under `--auth none`, the client's own credentials, forwarded upstream as they came.
    pub forwarded: Vec<(axum::http::HeaderName, axum::http::HeaderValue)>,
}

/// Headers that carry a client's credentials, to the provider or to Loom.
pub(crate) const CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "x-api-key", "x-goog-api-key"];

impl Principal {
    /// The local user: everything visible, the client's own credentials forwarded.
    pub fn local(headers: &HeaderMap) -> Self {
        let forwarded = CREDENTIAL_HEADERS
            .iter()
            .filter_map(|name| {
                let value = headers.get(*name)?;
                Some((axum::http::HeaderName::from_static(name), value.clone()))
            })
            .collect();
        Self {
            tenant: None,
            key_id: None,
            agent: None,
            mode: None,
            forwarded,
        }
    }

    /// The stored id of the client's session `id` (`field` names where the id came from).
    pub fn scope(&self, id: &str, field: &str) -> Result<SessionId> {
        // An id that is blank or padded could be stored but never named again: a header value
        // loses its padding, and a blank path segment is no segment.
        if id.trim().is_empty() {
            return Err(ApiError::invalid_field(field, "must not be empty or blank"));
        }
        if id.trim() != id {
            return Err(ApiError::invalid_field(
                field,
                "must not begin or end with whitespace",
            ));
        }
        // The client's id is held to the id rules on its own; the stored one adds the tenant.
        if id.len() > CLIENT_ID_LEN {
            return Err(ApiError::invalid_field(
                field,
                format!(
                    "is {} bytes long; at most {CLIENT_ID_LEN} are allowed",
                    id.len()
                ),
            ));
        }
        SessionId::new(id).map_err(|e| ApiError::invalid_field(field, e.to_string()))?;
        let full = match &self.tenant {
            None => id.to_owned(),
            Some(t) => format!("{t}/{id}"),
        };
        SessionId::new(full).map_err(|e| ApiError::invalid_field(field, e.to_string()))
    }

    /// An agent named by a client (`field`), held to the same rules as its session ids.
    pub fn agent(name: &str, field: &str) -> Result<loom_core::AgentId> {
        if name.len() > CLIENT_ID_LEN {
            return Err(ApiError::invalid_field(
                field,
                format!(
                    "is {} bytes long; at most {CLIENT_ID_LEN} are allowed",
                    name.len()
                ),
            ));
        }
        loom_core::AgentId::new(name).map_err(|e| ApiError::invalid_field(field, e.to_string()))
    }

    /// The client's id of a stored session, or `None` when it is not this tenant's.
    pub fn unscope<'a>(&self, stored: &'a SessionId) -> Option<&'a str> {
        match &self.tenant {
            None => Some(stored.as_str()),
            Some(t) => stored
                .as_str()
                .strip_prefix(t.as_str())
                .and_then(|rest| rest.strip_prefix('/')),
        }
    }

    /// The name metrics and logs use for the caller.
    pub fn tenant_name(&self) -> &str {
        self.tenant.as_ref().map_or("local", TenantId::as_str)
    }
}

/// The Loom key a request presents: `Authorization: Bearer KEY` (OpenAI SDKs), `x-api-key: KEY`
/// (Anthropic SDKs) or `x-goog-api-key: KEY` (Google's).
pub(crate) fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
        let v = v.trim();
        if let Some(key) = v
            .strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("bearer "))
        {
            return Some(key.trim());
        }
    }
    ["x-api-key", "x-goog-api-key"]
        .iter()
        .find_map(|name| headers.get(*name)?.to_str().ok())
        .map(str::trim)
}

/// The stored hash a presented key is looked up by.
pub(crate) fn key_hash(key: &str) -> String {
    hash_api_key(key)
}

/// A key was presented but is unknown or revoked.
pub(crate) fn refused() -> ApiError {
    ApiError::unauthorized(
        "invalid Loom key: send a key made by `loom keys create` as the API key \
         (Authorization: Bearer KEY, x-api-key: KEY or x-goog-api-key: KEY)",
    )
}
