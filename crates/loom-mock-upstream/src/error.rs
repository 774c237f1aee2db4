//! The crate's error type, and the one place where an error (a bad request, or a fault's
//! status) becomes a reply in the provider's own error shape.

use axum::http::StatusCode;
use serde_json::{json, Value};

use crate::wire::Outgoing;

/// Results inside the crate.
pub(crate) type Result<T> = std::result::Result<T, MockError>;

/// What went wrong while answering a request. Request errors become provider-shaped 400s, so
/// their messages name the record and field as a provider's would.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum MockError {
    /// The request body is not JSON at all.
    #[error("{record}: the body is not valid JSON: {reason}")]
    NotJson {
        /// Which kind of request was being read.
        record: &'static str,
        /// The parser's complaint.
        reason: String,
    },
    /// A field is missing, has the wrong type, or breaks a rule of the provider.
    #[error("{record}: field `{field}`: {reason}")]
    BadField {
        /// Which kind of request was being read.
        record: &'static str,
        /// The JSON path of the field, e.g. `messages[2].content`.
        field: String,
        /// What was expected there.
        reason: String,
    },
    /// A fault cut the body short; the server closes the connection on this error.
    #[error("connection closed by an injected fault after {bytes} body bytes")]
    Dropped {
        /// How many body bytes were sent before the cut.
        bytes: usize,
    },
}

impl MockError {
    /// Shorthand for the common [`MockError::BadField`].
    pub(crate) fn field(
        record: &'static str,
        field: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Self::BadField {
            record,
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The field the error is about, for OpenAI's `param`.
    fn param(&self) -> Option<&str> {
        match self {
            Self::BadField { field, .. } => Some(field),
            _ => None,
        }
    }
}

/// Whose error shape a reply must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// `{"error": {"message", "type", "param", "code"}}`
    OpenAi,
    /// `{"type": "error", "error": {"type", "message"}}`
    Anthropic,
    /// `{"error": {"code", "message", "status"}}`
    Google,
}

/// A rejected request, as the provider answers a malformed one.
pub(crate) fn bad_request(flavor: Flavor, error: &MockError, request_id: &str) -> Outgoing {
    error_reply(
        flavor,
        StatusCode::BAD_REQUEST,
        &error.to_string(),
        error.param(),
        request_id,
    )
}

/// The reply to a fault's `status`. A status HTTP cannot carry becomes a 500 whose message
/// says so, rather than a panic or a silently different fault.
pub(crate) fn fault_reply(flavor: Flavor, status: u16, request_id: &str) -> Outgoing {
    match StatusCode::from_u16(status) {
        Ok(code) => {
            let message = format!("injected fault: {}", describe(status));
            error_reply(flavor, code, &message, None, request_id)
        }
        Err(_) => {
            let message = format!("injected fault: {status} is not an HTTP status");
            error_reply(
                flavor,
                StatusCode::INTERNAL_SERVER_ERROR,
                &message,
                None,
                request_id,
            )
        }
    }
}

/// A request for a path the mock does not serve.
pub(crate) fn not_found(flavor: Flavor, method: &str, path: &str, request_id: &str) -> Outgoing {
    let message = format!("Invalid URL ({method} {path})");
    error_reply(flavor, StatusCode::NOT_FOUND, &message, None, request_id)
}

/// Builds the error body and headers; retryable statuses carry a short `retry-after-ms`
/// (which both official SDKs honour) so that retry tests do not sit out real back-offs.
fn error_reply(
    flavor: Flavor,
    status: StatusCode,
    message: &str,
    param: Option<&str>,
    request_id: &str,
) -> Outgoing {
    let code = status.as_u16();
    let reply = match flavor {
        Flavor::OpenAi => {
            let (kind, error_code) = openai_kind(code);
            let body = json!({
                "error": {
                    "message": message,
                    "type": kind,
                    "param": param,
                    "code": error_code,
                }
            });
            Outgoing::json(status, &body).header("x-request-id", request_id)
        }
        Flavor::Anthropic => {
            let body = json!({
                "type": "error",
                "error": { "type": anthropic_kind(code), "message": message },
                "request_id": request_id,
            });
            Outgoing::json(status, &body).header("request-id", request_id)
        }
        Flavor::Google => {
            let message = match param {
                Some(p) if !message.contains(p) => format!("{p}: {message}"),
                _ => message.to_owned(),
            };
            let body = json!({
                "error": { "code": code, "message": message, "status": google_status(code) }
            });
            Outgoing::json(status, &body)
        }
    };
    if code == 408 || code == 409 || code == 429 || code >= 500 {
        reply.header("retry-after-ms", "10")
    } else {
        reply
    }
}

/// OpenAI's `type` and `code` for a status, as its API reports them.
fn openai_kind(status: u16) -> (&'static str, Value) {
    match status {
        401 => ("invalid_request_error", json!("invalid_api_key")),
        403 => ("permission_error", Value::Null),
        404 => ("invalid_request_error", Value::Null),
        429 => ("requests", json!("rate_limit_exceeded")),
        500.. => ("server_error", Value::Null),
        _ => ("invalid_request_error", Value::Null),
    }
}

/// Google's canonical status name for an HTTP status.
fn google_status(status: u16) -> &'static str {
    match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        500.. => "INTERNAL",
        _ => "FAILED_PRECONDITION",
    }
}

/// Anthropic's error `type` for a status, from its documented list.
fn anthropic_kind(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        500.. => "api_error",
        _ => "invalid_request_error",
    }
}

/// A human message for an injected status.
fn describe(status: u16) -> &'static str {
    match status {
        400 => "bad request",
        401 => "invalid API key",
        403 => "permission denied",
        404 => "not found",
        413 => "request too large",
        429 => "rate limit reached",
        500 => "internal server error",
        502 => "bad gateway",
        503 => "service unavailable",
        529 => "overloaded",
        _ => "error",
    }
}
