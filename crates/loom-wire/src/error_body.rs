//! Loom's own errors in each provider's error shape, so a client's SDK raises its usual exception.
//!
//! OpenAI (both APIs): `{"error": {"message", "type", "param", "code"}}`.
//! Anthropic: `{"type": "error", "error": {"type", "message"}}`.
//! Google (Gemini): `{"error": {"code", "message", "status"}}`.

use serde_json::{json, Value};

use loom_core::Api;

/// The error body `api`'s clients expect for an HTTP `status`.
///
/// `param` names the request field at fault (a JSON path such as `messages[3].content`). OpenAI
/// has a field for it; Anthropic has none, so there it opens the message the way Anthropic's own
/// errors do (`messages.3.content: …`, here with the path as given).
pub fn error_body(api: Api, status: u16, message: &str, param: Option<&str>) -> Value {
    crate::dialect(api).error_body(status, message, param)
}

/// OpenAI's error body (both APIs).
pub(crate) fn openai(status: u16, message: &str, param: Option<&str>) -> Value {
    // A [`crate::RequestError`] about the body itself has an empty field: no param to name.
    let param = param.filter(|p| !p.is_empty());
    let (kind, code) = openai_type(status);
    json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
}

/// Anthropic's error body: the field at fault opens the message.
pub(crate) fn anthropic(status: u16, message: &str, param: Option<&str>) -> Value {
    let message = match param.filter(|p| !p.is_empty()) {
        Some(p) => format!("{p}: {message}"),
        None => message.to_owned(),
    };
    json!({"type": "error", "error": {"type": anthropic_type(status), "message": message}})
}

/// Google's error body: the HTTP status as `code`, its canonical name as `status`, and the field
/// at fault opening the message (Google's own errors name it there).
pub(crate) fn google(status: u16, message: &str, param: Option<&str>) -> Value {
    let message = match param.filter(|p| !p.is_empty()) {
        Some(p) => format!("{p}: {message}"),
        None => message.to_owned(),
    };
    json!({"error": {"code": status, "message": message, "status": google_status(status)}})
}

/// The canonical status name Google's APIs give an HTTP status.
fn google_status(status: u16) -> &'static str {
    match status {
        400 | 413 | 422 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "UNIMPLEMENTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        500..=599 => "INTERNAL",
        _ => "FAILED_PRECONDITION",
    }
}

/// OpenAI's `type` and `code` for a status.
fn openai_type(status: u16) -> (&'static str, Option<&'static str>) {
    match status {
        401 => ("authentication_error", Some("invalid_api_key")),
        403 => ("permission_error", None),
        404 => ("not_found_error", None),
        408 | 504 => ("timeout", None),
        429 => ("rate_limit_error", Some("rate_limit_exceeded")),
        500..=599 => ("server_error", None),
        _ => ("invalid_request_error", None),
    }
}

/// Anthropic's error `type` for a status; Anthropic uses `invalid_request_error` for 4xx codes it
/// does not list and `api_error` for internal failures.
fn anthropic_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_shape_carries_type_param_and_code() {
        let b = error_body(Api::OpenaiChat, 400, "bad", Some("messages[1].role"));
        assert_eq!(
            b,
            json!({"error": {"message": "bad", "type": "invalid_request_error",
                              "param": "messages[1].role", "code": null}})
        );
        let b = error_body(Api::OpenaiResponses, 401, "no key", None);
        assert_eq!(b["error"]["type"], "authentication_error");
        assert_eq!(b["error"]["code"], "invalid_api_key");
        assert_eq!(b["error"]["param"], Value::Null);
        let b = error_body(Api::OpenaiChat, 400, "expected an object", Some(""));
        assert_eq!(b["error"]["param"], Value::Null);
        for (status, kind) in [
            (403, "permission_error"),
            (404, "not_found_error"),
            (408, "timeout"),
            (413, "invalid_request_error"),
            (429, "rate_limit_error"),
            (500, "server_error"),
            (502, "server_error"),
            (504, "timeout"),
        ] {
            let b = error_body(Api::OpenaiChat, status, "m", None);
            assert_eq!(b["error"]["type"], kind, "status {status}");
        }
    }

    #[test]
    fn anthropic_shape_names_the_field_in_the_message() {
        let b = error_body(Api::Anthropic, 400, "expected a string", Some("system"));
        assert_eq!(
            b,
            json!({"type": "error", "error": {"type": "invalid_request_error",
                                               "message": "system: expected a string"}})
        );
        for (status, kind) in [
            (401, "authentication_error"),
            (403, "permission_error"),
            (404, "not_found_error"),
            (413, "request_too_large"),
            (429, "rate_limit_error"),
            (500, "api_error"),
            (529, "overloaded_error"),
            (418, "invalid_request_error"),
        ] {
            let b = error_body(Api::Anthropic, status, "m", None);
            assert_eq!(b["error"]["type"], kind, "status {status}");
            assert_eq!(b["error"]["message"], "m");
        }
    }
}
