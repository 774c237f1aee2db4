//! The one error type of the HTTP API and the one place it becomes a response.
//!
//! Every failure of a `/loom/v1` endpoint is an [`ApiError`]: a status, a machine-readable type,
//! a message that names the record and the reason, and the field at fault when there is one. It
//! is rendered as `{"error": {"type", "message", "field"}}`. Internal failures (a failing disk, a
//! bug) are 500s whose message says what was being done, never a backend's internals; bad input
//! is always a 4xx. The proxy endpoints answer in the provider's own error shape instead (see
//! `proxy`), but their errors are built from the same type.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use loom_session::{ErrorKind, SessionError};
use loom_store::StoreError;
use serde::Serialize;

/// What went wrong, as a client sees it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Machine-readable type: `invalid_request`, `not_found`, `unauthorized`, `conflict`,
    /// `payload_too_large`, `unavailable`, `upstream_error`, `internal`.
    pub kind: &'static str,
    /// What happened, naming the record and the reason.
    pub message: String,
    /// The field at fault (`events[2].call_id`, `model`), when there is one.
    pub field: Option<String>,
}

/// A `Result` whose error is an [`ApiError`].
pub type Result<T, E = ApiError> = std::result::Result<T, E>;

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
            field: None,
        }
    }

    /// The request is wrong: 400.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// The request is wrong in one field: 400 naming it.
    pub fn invalid_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::invalid(message).with_field(field)
    }

    /// Nothing of that name for this tenant: 404 (another tenant's records are 404 too, so ids
    /// cannot be probed).
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// No valid credentials: 401.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// The request contradicts what is stored: 409.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// The body is over the size limit: 413.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message)
    }

    /// The server is at a limit and the client should retry: 503.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    /// The upstream failed or could not be reached: 502 (504 for a timeout).
    pub fn upstream(status: StatusCode, message: impl Into<String>) -> Self {
        Self::new(status, "upstream_error", message)
    }

    /// Loom failed: 500. `doing` says what was being done; the cause is logged, not sent.
    pub fn internal(doing: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("internal error while {}", doing.into()),
        )
    }

    /// An error answered by the HTTP layer itself (a path that does not decode, a body over the
    /// limit, a wrong method), with its text as the message.
    pub fn from_status(status: StatusCode, message: impl Into<String>) -> Self {
        let kind = match status {
            StatusCode::NOT_FOUND => "not_found",
            StatusCode::UNAUTHORIZED => "unauthorized",
            StatusCode::CONFLICT => "conflict",
            StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
            StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            StatusCode::REQUEST_TIMEOUT | StatusCode::GATEWAY_TIMEOUT => "timeout",
            StatusCode::SERVICE_UNAVAILABLE => "unavailable",
            s if s.is_server_error() => "internal",
            _ => "invalid_request",
        };
        Self::new(status, kind, message)
    }

    /// Names the field at fault.
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// Puts `context` in front of the message (`session s1: ...`).
    pub fn context(mut self, context: impl std::fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }

    /// The JSON body: `{"error": {"type", "message", "field"}}`.
    pub fn body(&self) -> serde_json::Value {
        serde_json::to_value(ErrorBody {
            error: ErrorDetail {
                kind: self.kind,
                message: &self.message,
                field: self.field.as_deref(),
            },
        })
        .unwrap_or(serde_json::Value::Null)
    }
}

/// Every error's body: `{"error": {"type", "message", "field"}}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
pub(crate) struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorDetail<'a> {
    /// What kind of error: `invalid_request`, `unauthorized`, `not_found`, `conflict`, ...
    #[serde(rename = "type")]
    kind: &'a str,
    /// What went wrong, and what to do about it.
    message: &'a str,
    /// The field at fault, when one is.
    field: Option<&'a str>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}

impl From<SessionError> for ApiError {
    /// The one place a session engine's failure becomes an HTTP status.
    fn from(e: SessionError) -> Self {
        let err = match e.kind {
            ErrorKind::Invalid => Self::invalid(e.message),
            ErrorKind::SessionNotFound | ErrorKind::NotFound => Self::not_found(e.message),
            ErrorKind::Conflict => Self::conflict(e.message),
            ErrorKind::Unavailable => Self::unavailable(e.message),
            _ => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.message),
        };
        match e.field {
            Some(field) => err.with_field(field),
            None => err,
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        SessionError::from(e).into()
    }
}

impl From<loom_import::ImportError> for ApiError {
    fn from(e: loom_import::ImportError) -> Self {
        SessionError::from(e).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unavailable_store_is_503_and_says_no_more_than_what_was_done() {
        let err = ApiError::from(StoreError::Unavailable {
            action: "appending events",
            reason: "cannot connect to PostgreSQL at 10.0.0.7:5432".into(),
        });
        assert_eq!(err.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(err.kind, "unavailable");
        assert!(err.message.contains("appending events"), "{}", err.message);
        assert!(!err.message.contains("10.0.0.7"), "{}", err.message);
    }
}
