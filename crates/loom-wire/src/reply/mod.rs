//! The assistant turn of a provider's reply, read from a whole body or assembled from a stream.
//!
//! Each API has its own module with both readers, and both end in the same function, so that a
//! streamed reply and the same reply sent whole give the same [`AssistantReply`] (the fixtures
//! test exactly that).

mod chat;
mod gemini;
mod messages;
mod responses;

use loom_core::Api;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ProviderError, Result};
use crate::json::FieldError;
use crate::sse::SseEvent;

/// The provider's own token counts for one call, normalised so that input includes cached input.
///
/// OpenAI already counts cached tokens inside its input figure; Anthropic reports cache reads
/// and cache writes beside `input_tokens`, so they are added in. Receipts compare this against
/// Loom's estimate, which always counts the whole input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ProviderUsage {
    /// Every input token the provider billed, cached or not.
    pub input_tokens: u64,
    /// The part of `input_tokens` read from the provider's prompt cache, when reported.
    pub cached_input_tokens: Option<u64>,
    /// Output tokens (reasoning included), when reported.
    pub output_tokens: Option<u64>,
}

/// The assistant turn of one reply: what the proxy appends to the log and replays later.
///
/// Empty text is reported as `None` whichever way the provider sent it (absent, `null`, `""`), so
/// a streamed reply and the same reply sent whole compare equal.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AssistantReply {
    /// Visible text: text blocks or parts concatenated in the provider's order; refusals count.
    pub content: Option<String>,
    /// Thinking or reasoning-summary text, separate blocks or parts joined by a blank line.
    pub reasoning: Option<String>,
    /// Provider-native reasoning, exactly as sent, to replay to the same API: Anthropic's
    /// `thinking` / `redacted_thinking` blocks, the Responses API's `reasoning` items; empty for
    /// Chat Completions, which has none.
    pub native: Vec<Value>,
    /// The calls the assistant made, in the provider's order, arguments as raw JSON text.
    pub tool_calls: Vec<loom_core::ToolCall>,
    /// The provider's usage, when it reported one.
    pub usage: Option<ProviderUsage>,
    /// The provider's id of the reply (`chatcmpl-…`, `resp_…`, `msg_…`).
    pub id: Option<String>,
    /// The model that answered, as the provider names it.
    pub model: Option<String>,
    /// Why generation stopped, in the provider's words (`stop`, `tool_calls`, `end_turn`,
    /// `max_output_tokens`, …); for the Responses API the status, or the reason it is incomplete.
    pub finish_reason: Option<String>,
    /// The Responses API's output items as sent, when one of them is of a type the fields above
    /// do not hold (a built-in tool's call such as `web_search_call`): a client sends them back
    /// in place, so a log that is to match its next request reads them as it will. Empty
    /// otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<Value>,
}

/// Reads the assistant turn of a non-streaming reply body.
///
/// An error body (`{"error": …}`, Anthropic's `{"type": "error", …}`) is returned as
/// [`ProviderError::Upstream`], so the caller never logs it as a turn.
pub fn parse_reply(api: Api, body: &[u8]) -> Result<AssistantReply> {
    let ctx = Ctx { api, event: None };
    let value: Value = serde_json::from_slice(body).map_err(|e| ctx.json(e))?;
    let reply = match api {
        Api::OpenaiChat => chat::parse(&value),
        Api::OpenaiResponses => responses::parse(&value),
        Api::Anthropic => messages::parse(&value, body),
        Api::Gemini => gemini::parse(&value),
    };
    reply.map(normalise).map_err(|f| ctx.fault(f))
}

/// Assembles the assistant turn of a streamed reply from its SSE events.
///
/// Feed it every event the [`crate::SseParser`] yields, in order; the proxy keeps streaming bytes
/// to its client regardless and only logs the turn if [`StreamAssembler::finish`] succeeds.
#[derive(Debug)]
pub struct StreamAssembler {
    api: Api,
    /// Events pushed so far, to name the one at fault.
    events: usize,
    state: State,
}

#[derive(Debug)]
enum State {
    Chat(chat::Stream),
    Responses(responses::Stream),
    Messages(messages::Stream),
    Gemini(gemini::Stream),
}

impl StreamAssembler {
    /// An assembler for a stream in `api`'s format.
    pub fn new(api: Api) -> Self {
        let state = match api {
            Api::OpenaiChat => State::Chat(chat::Stream::default()),
            Api::OpenaiResponses => State::Responses(responses::Stream::default()),
            Api::Anthropic => State::Messages(messages::Stream::default()),
            Api::Gemini => State::Gemini(gemini::Stream::default()),
        };
        Self {
            api,
            events: 0,
            state,
        }
    }

    /// Takes the next event. An error event from the provider, or a payload that is not the
    /// provider's JSON, is an error naming the event; unknown event types are ignored, since
    /// providers add new ones.
    pub fn push(&mut self, event: &SseEvent) -> Result<()> {
        self.events = self.events.saturating_add(1);
        let name = event.event.as_deref();
        let ctx = Ctx {
            api: self.api,
            event: Some((self.events, name)),
        };
        if let State::Chat(stream) = &mut self.state {
            // The one payload of these streams that is not JSON.
            if event.data.trim() == "[DONE]" {
                stream.done();
                return Ok(());
            }
        }
        let data: Value = serde_json::from_str(&event.data).map_err(|e| ctx.json(e))?;
        let ctx = Ctx {
            event: Some((
                self.events,
                data.get("type").and_then(Value::as_str).or(name),
            )),
            ..ctx
        };
        let pushed = match &mut self.state {
            State::Chat(s) => s.push(&data),
            State::Responses(s) => s.push(&data, name),
            State::Messages(s) => s.push(&data),
            State::Gemini(s) => s.push(&data),
        };
        pushed.map_err(|f| ctx.fault(f))
    }

    /// Whether the provider has said the reply is complete: `data: [DONE]` (Chat Completions),
    /// `response.completed` / `.incomplete` / `.failed` (Responses), `message_stop` (Messages), a
    /// candidate's `finishReason` (Gemini).
    pub fn is_complete(&self) -> bool {
        match &self.state {
            State::Chat(s) => s.is_complete(),
            State::Responses(s) => s.is_complete(),
            State::Messages(s) => s.is_complete(),
            State::Gemini(s) => s.is_complete(),
        }
    }

    /// The assembled turn; [`ProviderError::Incomplete`] when the stream ended before the
    /// provider said it was complete, since a partial turn must not be logged as the reply.
    pub fn finish(self) -> Result<AssistantReply> {
        let ctx = Ctx {
            api: self.api,
            event: None,
        };
        if !self.is_complete() {
            return Err(ProviderError::Incomplete {
                api: self.api,
                reason: match self.api {
                    Api::OpenaiChat => "no `data: [DONE]`",
                    Api::OpenaiResponses => {
                        "no `response.completed`, `.incomplete` or `.failed` event"
                    }
                    Api::Anthropic => "no `message_stop` event",
                    Api::Gemini => "no response with a `finishReason`",
                }
                .to_owned(),
            });
        }
        let reply = match self.state {
            State::Chat(s) => s.finish(),
            State::Responses(s) => s.finish(),
            State::Messages(s) => s.finish(),
            State::Gemini(s) => s.finish(),
        };
        reply
            .map(normalise)
            .map_err(|f| Ctx { event: None, ..ctx }.fault(f))
    }
}

/// The result of the API modules' readers.
pub(crate) type Out<T> = std::result::Result<T, Fault>;

/// What went wrong inside an API module, before the API and record are attached.
#[derive(Debug)]
pub(crate) enum Fault {
    /// A field missing or of the wrong type.
    Field(FieldError),
    /// The provider reported an error.
    Upstream { kind: String, message: String },
}

impl From<FieldError> for Fault {
    fn from(e: FieldError) -> Self {
        Fault::Field(e)
    }
}

/// The provider's error object (`{"type"|"code", "message"}`) as a [`Fault`].
pub(crate) fn upstream(error: &Value) -> Fault {
    let field = |k: &str| error.get(k).and_then(Value::as_str);
    Fault::Upstream {
        kind: field("type")
            .or_else(|| field("code"))
            .unwrap_or("error")
            .to_owned(),
        message: field("message")
            .map(str::to_owned)
            .unwrap_or_else(|| error.to_string()),
    }
}

/// The API and record being read, turned into an error's context only when something fails.
#[derive(Debug, Clone, Copy)]
struct Ctx<'a> {
    api: Api,
    /// 1-based index and type of the stream event, or `None` for a whole body.
    event: Option<(usize, Option<&'a str>)>,
}

impl Ctx<'_> {
    fn record(&self) -> String {
        match self.event {
            None => "reply body".to_owned(),
            Some((n, Some(name))) => format!("event {n} ({name})"),
            Some((n, None)) => format!("event {n}"),
        }
    }

    fn json(&self, source: serde_json::Error) -> ProviderError {
        ProviderError::Json {
            api: self.api,
            record: self.record(),
            source,
        }
    }

    fn fault(&self, fault: Fault) -> ProviderError {
        match fault {
            Fault::Field(e) => ProviderError::Shape {
                api: self.api,
                record: self.record(),
                field: e.field,
                reason: e.reason,
            },
            Fault::Upstream { kind, message } => ProviderError::Upstream {
                api: self.api,
                record: self.record(),
                kind,
                message,
            },
        }
    }
}

/// Text pieces gathered while reading, turned into the reply's optional strings at the end.
#[derive(Debug, Default)]
pub(crate) struct Text {
    content: String,
    reasoning: Vec<String>,
}

impl Text {
    /// Visible text, appended as is (blocks of one reply are fragments of one text).
    pub(crate) fn content(&mut self, text: &str) {
        self.content.push_str(text);
    }

    /// One whole reasoning block or summary part.
    pub(crate) fn reasoning(&mut self, text: &str) {
        if !text.is_empty() {
            self.reasoning.push(text.to_owned());
        }
    }

    pub(crate) fn into_reply(self, reply: &mut AssistantReply) {
        reply.content = Some(self.content);
        reply.reasoning = Some(self.reasoning.join("\n\n"));
    }
}

/// Empty strings become `None`, whichever way the provider said "no text".
fn normalise(mut reply: AssistantReply) -> AssistantReply {
    reply.content = reply.content.filter(|s| !s.is_empty());
    reply.reasoning = reply.reasoning.filter(|s| !s.is_empty());
    reply
}
