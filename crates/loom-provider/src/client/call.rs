//! One call: the body prepared, attempts made until a reply starts (or retrying must stop), then
//! the reply read whole or streamed, under the idle and whole-call limits.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderValue, ACCEPT};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::time::{sleep, timeout_at, Instant};

use super::error::{retryable_status, CallError};
use super::retry;
use super::{Client, Completion};
use loom_core::Api;
use loom_wire::{reply_deltas, stream_deltas, Delta};

use loom_wire::{parse_reply, ProviderError, SseParser, StreamAssembler};

/// Largest reply body read into memory; a provider's reply is far smaller, so more is a fault.
const MAX_REPLY_BYTES: u64 = 64 << 20;

/// Longest error body read; the provider's message is at its start.
const MAX_ERROR_BYTES: u64 = 64 << 10;

/// Longest part of a body that is not the provider's error shape kept in an error's message.
const MESSAGE_CHARS: usize = 500;

/// The call, from the body's JSON bytes to [`Completion`].
pub(super) async fn run<F: FnMut(&Delta) + ?Sized>(
    client: &Client,
    http: &reqwest::Client,
    body: &[u8],
    stream: bool,
    on_delta: &mut F,
) -> Result<Completion, CallError> {
    let start = Instant::now();
    let config = &client.config;
    let deadline = start + config.timeout;
    let bytes = prepare(config.api, config.model.as_deref(), body, stream)?;
    // Gemini names the model and whether to stream in the path, not the body.
    let gemini_url;
    let target = match config.api {
        Api::Gemini => {
            gemini_url = gemini_target(client, config.model.as_deref(), body, stream)?;
            &gemini_url
        }
        _ => &client.url,
    };
    let url = target.as_str();
    let accept = if stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    let (response, attempts) = send(client, http, target, accept, bytes, deadline).await?;
    let request_id = ["x-request-id", "request-id"]
        .iter()
        .find_map(|name| response.headers().get(*name)?.to_str().ok())
        .map(str::to_owned);
    let sse = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
    let mut read = Reader {
        response,
        api: config.api,
        url,
        attempts,
        idle: config.idle_timeout,
        deadline,
        received: 0,
        first_byte: None,
        start,
    };
    // A server that ignores `stream` answers with one JSON body; read what it sent.
    let reply = if stream && sse {
        read.stream(on_delta).await?
    } else {
        let body = read.whole(MAX_REPLY_BYTES).await?;
        let reply = parse_reply(config.api, &body).map_err(|source| CallError::Protocol {
            url: url.to_owned(),
            attempts,
            source,
        })?;
        for d in reply_deltas(&reply) {
            on_delta(&d);
        }
        reply
    };
    let total = start.elapsed();
    Ok(Completion {
        reply,
        attempts,
        first_byte: read.first_byte.unwrap_or(total),
        total,
        request_id,
    })
}

/// Posts `bytes` to `target` until a success status comes back, retrying what may be retried
/// (see the module documentation of [`super`]); returns the response and the attempts made.
pub(super) async fn send(
    client: &Client,
    http: &reqwest::Client,
    target: &reqwest::Url,
    accept: &'static str,
    bytes: Vec<u8>,
    deadline: Instant,
) -> Result<(reqwest::Response, u32), CallError> {
    let config = &client.config;
    let url = target.as_str();
    let mut headers = client.headers.clone();
    headers.insert(ACCEPT, HeaderValue::from_static(accept));
    let mut attempts: u32 = 0;
    loop {
        attempts = attempts.saturating_add(1);
        let sent = http
            .post(target.clone())
            .headers(headers.clone())
            .body(bytes.clone())
            .send();
        let failure = match attempt(sent, url, config, deadline).await {
            Ok(response) if response.status().is_success() => return Ok((response, attempts)),
            Ok(response) => refused(response, config.api, url, config.idle_timeout, deadline).await,
            Err(failure) => failure,
        };
        if !failure.retry || attempts > config.max_retries {
            return Err(failure.error.with_attempts(attempts));
        }
        let wait = failure
            .retry_after
            .unwrap_or_else(|| retry::backoff(&config.backoff, attempts.saturating_sub(1)));
        if Instant::now() + wait >= deadline {
            return Err(failure.error.with_attempts(attempts));
        }
        sleep(wait).await;
    }
}

/// A body given as a value, as JSON bytes for [`run`]: refused unless it is an object.
pub(super) fn value_bytes(body: &Value) -> Result<Vec<u8>, CallError> {
    if !body.is_object() {
        return Err(CallError::Request {
            reason: format!("expected a JSON object, got {}", loom_wire::json_kind(body)),
        });
    }
    serde_json::to_vec(body).map_err(|e| CallError::Request {
        reason: format!("cannot be serialised: {e}"),
    })
}

/// The URL of a Gemini call: the configured model (or the body's `model`) and the method, below
/// the collection URL the client holds.
fn gemini_target(
    client: &Client,
    model: Option<&str>,
    body: &[u8],
    stream: bool,
) -> Result<reqwest::Url, CallError> {
    let named;
    let model = match model {
        Some(m) => m,
        None => {
            named = serde_json::from_slice::<Map<String, Value>>(body)
                .ok()
                .and_then(|b| b.get("model")?.as_str().map(str::to_owned))
                .ok_or_else(|| CallError::Request {
                    reason: "field `model`: missing, and no model is configured".into(),
                })?;
            named.as_str()
        }
    };
    let model = model.strip_prefix("models/").unwrap_or(model);
    let method = if stream {
        loom_wire::GeminiMethod::Stream
    } else {
        loom_wire::GeminiMethod::Generate
    };
    let base = client.url.as_str().trim_end_matches('/');
    let base = base.strip_suffix("/models").unwrap_or(base);
    let full = loom_wire::generate_url(base, model, method);
    reqwest::Url::parse(&full)
        .map_err(|e| CallError::config("model", format!("`{full}` is not a URL: {e}")))
}

/// The body as sent: `model` and `stream` set, Chat's usage asked for when streaming (Gemini's
/// body has neither: the path names both).
///
/// Only the top level is read: each field's value is checked and kept as the bytes it was given
/// (a request's messages are most of its size, and are sent as they are), and the fields are
/// written back in sorted order, as a body serialised from a `serde_json::Value` has them. A
/// compact body, as serde writes it, comes out the same bytes but for the fields set here.
fn prepare(api: Api, model: Option<&str>, body: &[u8], stream: bool) -> Result<Vec<u8>, CallError> {
    let fields: BTreeMap<String, &RawValue> =
        serde_json::from_slice(body).map_err(|e| CallError::Request {
            reason: format!("expected a JSON object: {e}"),
        })?;
    let mut map: BTreeMap<String, Cow<'_, RawValue>> = fields
        .into_iter()
        .map(|(k, v)| (k, Cow::Borrowed(v)))
        .collect();
    if api == Api::Gemini {
        map.remove("model");
        map.remove("stream");
        let mut out = Vec::with_capacity(body.len());
        serde_json::to_writer(&mut out, &map).map_err(|e| CallError::Request {
            reason: format!("cannot be serialised: {e}"),
        })?;
        return Ok(out);
    }
    match model {
        Some(model) => {
            map.insert("model".into(), raw(model)?);
        }
        None if map.get("model").is_some_and(|m| m.get().starts_with('"')) => {}
        None => {
            return Err(CallError::Request {
                reason: "field `model`: missing, and no model is configured".into(),
            })
        }
    }
    map.insert("stream".into(), raw(&stream)?);
    if loom_wire::dialect(api).stream_usage_on_request() {
        if stream {
            // Options the caller gave are kept, with the usage asked for.
            let mut options = map
                .get("stream_options")
                .and_then(|o| serde_json::from_str::<Map<String, Value>>(o.get()).ok())
                .unwrap_or_default();
            options.insert("include_usage".into(), Value::Bool(true));
            map.insert("stream_options".into(), raw(&options)?);
        } else {
            // OpenAI refuses `stream_options` on a call that does not stream.
            map.remove("stream_options");
        }
    }
    let mut out = Vec::with_capacity(body.len().saturating_add(64));
    serde_json::to_writer(&mut out, &map).map_err(|e| CallError::Request {
        reason: format!("cannot be serialised: {e}"),
    })?;
    Ok(out)
}

/// A value [`prepare`] sets, as raw JSON.
fn raw<T: serde::Serialize + ?Sized>(value: &T) -> Result<Cow<'static, RawValue>, CallError> {
    serde_json::value::to_raw_value(value)
        .map(Cow::Owned)
        .map_err(|e| CallError::Request {
            reason: format!("cannot be serialised: {e}"),
        })
}

/// An attempt that did not produce a reply to read.
struct Failure {
    error: CallError,
    /// Whether another attempt may be made (attempts and time permitting).
    retry: bool,
    /// The wait the provider asked for.
    retry_after: Option<Duration>,
}

/// Sends one request and waits for its headers, within the idle timeout and the deadline.
async fn attempt(
    sent: impl std::future::Future<Output = reqwest::Result<reqwest::Response>>,
    url: &str,
    config: &super::ProviderConfig,
    deadline: Instant,
) -> Result<reqwest::Response, Failure> {
    let idle_end = Instant::now() + config.idle_timeout;
    let (limit, waiting_for, after) = if idle_end < deadline {
        (idle_end, "reply headers", config.idle_timeout)
    } else {
        (deadline, "complete reply", config.timeout)
    };
    match timeout_at(limit, sent).await {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(e)) => Err(Failure {
            error: CallError::Connect {
                url: url.to_owned(),
                attempts: 0,
                detail: transport_detail(&e),
            },
            retry: true,
            retry_after: None,
        }),
        Err(_) => Err(Failure {
            error: CallError::Timeout {
                url: url.to_owned(),
                attempts: 0,
                waiting_for,
                after,
            },
            retry: true,
            retry_after: None,
        }),
    }
}

/// The error chain of a transport error, which reqwest keeps in its sources (`error sending
/// request` alone says nothing).
fn transport_detail(e: &reqwest::Error) -> String {
    let mut detail = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        detail.push_str(": ");
        detail.push_str(&s.to_string());
        source = s.source();
    }
    detail
}

/// An error status read into the provider's type and message, and whether to try again.
async fn refused(
    response: reqwest::Response,
    api: Api,
    url: &str,
    idle: Duration,
    deadline: Instant,
) -> Failure {
    let status = response.status().as_u16();
    let headers: HeaderMap = response.headers().clone();
    let retry_after = retry::retry_after(&headers, SystemTime::now());
    let mut read = Reader {
        response,
        api,
        url,
        attempts: 0,
        idle,
        deadline,
        received: 0,
        first_byte: None,
        start: Instant::now(),
    };
    // A body that cannot be read whole still has its status; say what was read.
    let body = read.whole(MAX_ERROR_BYTES).await.unwrap_or_default();
    let (kind, message) = error_of(&body);
    let retry = retry::should_retry(&headers).unwrap_or_else(|| retryable_status(status));
    let url = url.to_owned();
    let error = if status == 429 {
        CallError::RateLimited {
            url,
            attempts: 0,
            retry_after,
            message,
        }
    } else if status == 529 || kind == "overloaded_error" {
        CallError::Overloaded {
            url,
            attempts: 0,
            status,
            retry_after,
            message,
        }
    } else {
        CallError::Status {
            url,
            attempts: 0,
            status,
            kind,
            message,
        }
    };
    Failure {
        error,
        retry,
        retry_after,
    }
}

/// The provider's error type and message from an error body: `{"error": {"type"|"code",
/// "message"}}` (OpenAI, and Anthropic inside its `{"type": "error", …}`), Google's
/// `{"error": {"code", "message", "status"}}` (its `status`); otherwise `unknown` and the start
/// of the body.
fn error_of(body: &[u8]) -> (String, String) {
    let value: Option<Value> = serde_json::from_slice(body).ok();
    let error = value.as_ref().and_then(|v| v.get("error"));
    let field = |k: &str| {
        error
            .and_then(|e| e.get(k))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let kind = field("type")
        .or_else(|| field("status"))
        .or_else(|| field("code"))
        .unwrap_or("unknown");
    let message = match field("message") {
        Some(m) => m.to_owned(),
        None if body.is_empty() => "(empty body)".to_owned(),
        None => String::from_utf8_lossy(body)
            .chars()
            .take(MESSAGE_CHARS)
            .collect(),
    };
    (kind.to_owned(), message)
}

/// Reads a response's body under the idle timeout and the deadline.
pub(super) struct Reader<'a> {
    pub(super) response: reqwest::Response,
    pub(super) api: Api,
    pub(super) url: &'a str,
    pub(super) attempts: u32,
    pub(super) idle: Duration,
    pub(super) deadline: Instant,
    pub(super) received: u64,
    pub(super) first_byte: Option<Duration>,
    /// The call's start, for `first_byte`.
    pub(super) start: Instant,
}

impl Reader<'_> {
    /// The next piece of the body, `None` at its end.
    async fn next(&mut self) -> Result<Option<bytes::Bytes>, CallError> {
        let idle_end = Instant::now() + self.idle;
        let limit = idle_end.min(self.deadline);
        match timeout_at(limit, self.response.chunk()).await {
            Ok(Ok(Some(chunk))) => {
                if self.first_byte.is_none() {
                    self.first_byte = Some(self.start.elapsed());
                }
                self.received = self.received.saturating_add(chunk.len() as u64);
                Ok(Some(chunk))
            }
            Ok(Ok(None)) => Ok(None),
            Ok(Err(e)) => Err(self.cut(transport_detail(&e))),
            Err(_) if limit == self.deadline => Err(CallError::Timeout {
                url: self.url.to_owned(),
                attempts: self.attempts,
                waiting_for: "complete reply",
                after: self.start.elapsed(),
            }),
            Err(_) => Err(self.cut(format!("no data for {:?}", self.idle))),
        }
    }

    fn cut(&self, reason: String) -> CallError {
        CallError::StreamCut {
            url: self.url.to_owned(),
            attempts: self.attempts,
            received: self.received,
            reason,
        }
    }

    /// The whole body, up to `max` bytes.
    pub(super) async fn whole(&mut self, max: u64) -> Result<Vec<u8>, CallError> {
        let mut body = Vec::new();
        while let Some(chunk) = self.next().await? {
            if self.received > max {
                return Err(CallError::Protocol {
                    url: self.url.to_owned(),
                    attempts: self.attempts,
                    source: ProviderError::Shape {
                        api: self.api,
                        record: "reply body".into(),
                        field: String::new(),
                        reason: format!("larger than {max} bytes"),
                    },
                });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// A streamed reply, assembled; deltas passed on as their events complete. Reading stops at
    /// the event that completes the reply, whatever the server does with the connection after.
    async fn stream<F: FnMut(&Delta) + ?Sized>(
        &mut self,
        on_delta: &mut F,
    ) -> Result<loom_wire::AssistantReply, CallError> {
        let api = self.api;
        let mut parser = SseParser::new();
        let mut turn = StreamAssembler::new(api);
        let mut deltas = Vec::new();
        let protocol = |read: &Self, source| CallError::Protocol {
            url: read.url.to_owned(),
            attempts: read.attempts,
            source,
        };
        loop {
            let chunk = self.next().await?;
            let events = match &chunk {
                Some(chunk) => parser.push(chunk),
                None => parser.finish(),
            };
            for event in &events {
                stream_deltas(api, event, &mut deltas);
                for d in deltas.drain(..) {
                    on_delta(&d);
                }
                turn.push(event).map_err(|e| protocol(self, e))?;
            }
            if chunk.is_none() || turn.is_complete() {
                break;
            }
        }
        turn.finish().map_err(|e| match e {
            ProviderError::Incomplete { reason, .. } => self.cut(format!(
                "the stream ended before the provider said the reply was complete ({reason})"
            )),
            other => protocol(self, other),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// How the body was prepared from a value before bodies were taken as bytes: the reference
    /// the bytes must match.
    fn prepare_value(api: Api, model: Option<&str>, body: &Value, stream: bool) -> Vec<u8> {
        let mut map = body.as_object().unwrap().clone();
        match model {
            Some(model) => {
                map.insert("model".into(), Value::from(model));
            }
            None => assert!(map.get("model").is_some_and(Value::is_string)),
        }
        map.insert("stream".into(), Value::Bool(stream));
        if loom_wire::dialect(api).stream_usage_on_request() {
            if stream {
                let options = map
                    .entry("stream_options")
                    .or_insert_with(|| Value::Object(Map::new()));
                if !options.is_object() {
                    *options = Value::Object(Map::new());
                }
                if let Value::Object(options) = options {
                    options.insert("include_usage".into(), Value::Bool(true));
                }
            } else {
                map.remove("stream_options");
            }
        }
        serde_json::to_vec(&map).unwrap()
    }

    #[test]
    fn a_body_given_as_bytes_is_sent_as_the_value_was() {
        let messages = json!([
            {"role": "system", "content": "Be \"brief\"\n\u{1}é 🦀"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "f", "arguments": "{\"a\": 1.5e3}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": [1.25, -0.0, 12345678901234567890u64]},
        ]);
        let bodies = [
            json!({"model": "from-body", "messages": messages}),
            json!({"model": "from-body", "messages": messages, "tools": [{"type": "function",
                "function": {"name": "f", "parameters": {"type": "object"}}}], "stream": false}),
            json!({"model": "m", "input": messages, "stream_options": {"zeta": 1, "alpha": [2]}}),
            json!({"model": "m", "max_tokens": 16, "messages": messages, "stream_options": 3}),
            json!({"model": "m", "a\"b": {"z": null, "y": true}, "\u{7f}": "x"}),
        ];
        for api in [Api::OpenaiChat, Api::OpenaiResponses, Api::Anthropic] {
            for body in &bodies {
                for model in [None, Some("configured")] {
                    for stream in [false, true] {
                        let bytes = serde_json::to_vec(body).unwrap();
                        let sent = prepare(api, model, &bytes, stream).unwrap();
                        let expected = prepare_value(api, model, body, stream);
                        assert_eq!(
                            String::from_utf8(sent).unwrap(),
                            String::from_utf8(expected).unwrap(),
                            "{api} model={model:?} stream={stream}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_body_that_is_not_an_object_or_not_json_is_refused() {
        for body in [&b"[1]"[..], b"\"x\"", b"{\"model\": ", b""] {
            let err = prepare(Api::Anthropic, Some("m"), body, true).unwrap_err();
            assert!(err.to_string().contains("JSON object"), "{err}");
        }
        let err = prepare(Api::Anthropic, None, br#"{"model": 3}"#, true).unwrap_err();
        assert!(err.to_string().contains("model"), "{err}");
        let err = value_bytes(&json!([1])).unwrap_err();
        assert!(err.to_string().contains("an array"), "{err}");
    }
}
