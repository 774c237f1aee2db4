//! Provider wire formats: the neutral [`Request`] as each provider's request body.
//!
//! Every format builds its body from per-message wire values ([`Format::wire`]) and the pipeline
//! meters exactly those values, so what it budgets is what it sends. Bodies are
//! `serde_json::Value`s whose maps are ordered, so serialisation is canonical: the same request
//! always gives the same bytes.
//!
//! [`Format::write_body`] writes those same bytes straight from the request, without building
//! the value tree first: the agent loop sends a body every turn, and the tree (a map and a string
//! copy per field of every message) cost more than everything else the turn does.

mod anthropic;
mod gemini;
mod openai_chat;
mod react;
mod responses;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::meter::{message_tokens, string_tokens, tool_tokens, TokenMeter, REPLY_PRIMING};
use super::request::{Msg, Request};
use crate::api::Api;
use crate::event::{ContentPart, MessageContent};

/// Tokens Anthropic adds to every request that offers tools (its tool-use system prompt, from
/// its pricing documentation; the largest of the published figures).
pub const ANTHROPIC_TOOL_PROMPT: u64 = 346;

/// What a render writes: a provider API's request body, or the seed's ReAct text prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// A provider API's request (Anthropic's with the cache breakpoint on the stable prefix).
    Api(Api),
    /// The seed's ReAct text prompt (Thought / Action / Observation).
    React,
}

impl Default for Format {
    fn default() -> Self {
        Self::OPENAI_CHAT
    }
}

impl From<Api> for Format {
    fn from(api: Api) -> Self {
        Self::Api(api)
    }
}

impl Format {
    /// OpenAI Chat Completions.
    pub const OPENAI_CHAT: Format = Format::Api(Api::OpenaiChat);
    /// OpenAI Responses.
    pub const OPENAI_RESPONSES: Format = Format::Api(Api::OpenaiResponses);
    /// Anthropic Messages.
    pub const ANTHROPIC: Format = Format::Api(Api::Anthropic);
    /// The Gemini API.
    pub const GEMINI: Format = Format::Api(Api::Gemini);

    /// Every format, for tests and help texts.
    pub const ALL: [Format; 5] = [
        Format::OPENAI_CHAT,
        Format::OPENAI_RESPONSES,
        Format::ANTHROPIC,
        Format::GEMINI,
        Format::React,
    ];

    /// The provider API this format's request goes to; `None` for the ReAct prompt.
    pub fn api(self) -> Option<Api> {
        match self {
            Self::Api(api) => Some(api),
            Self::React => None,
        }
    }

    /// The format's command-line name: the API's, or `react`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Api(api) => api.as_str(),
            Self::React => "react",
        }
    }

    /// Parses a command-line name ([`Api::parse`]'s names, or `react`).
    pub fn parse(name: &str) -> Option<Self> {
        if name.trim().eq_ignore_ascii_case("react") {
            return Some(Self::React);
        }
        Api::parse(name).map(Self::Api)
    }

    /// The wire values one neutral message becomes (an assistant turn with calls may become
    /// several: the call message and its results).
    pub fn wire(self, msg: &Msg) -> Vec<Value> {
        match self {
            Self::OPENAI_CHAT => openai_chat::wire(msg),
            Self::OPENAI_RESPONSES => responses::wire(msg),
            Self::ANTHROPIC => anthropic::wire(msg),
            Self::GEMINI => gemini::wire(msg),
            Self::React => vec![Value::String(react::text(msg))],
        }
    }

    /// Tokens one neutral message costs in this format.
    pub fn msg_tokens(self, msg: &Msg, meter: &dyn TokenMeter) -> u64 {
        match self {
            // The ReAct prompt is one text: its pieces are counted as text, joined by newlines.
            Self::React => meter.count(&react::text(msg)) + 1,
            // A tool_use input is an object: the model reads it as JSON text, keys and all.
            Self::ANTHROPIC => self
                .wire(msg)
                .iter()
                .map(|w| message_tokens(&anthropic::as_metered(w), meter))
                .sum(),
            // So is a `functionCall`'s `args`.
            Self::GEMINI => self
                .wire(msg)
                .iter()
                .map(|w| message_tokens(&gemini::as_metered(w), meter))
                .sum(),
            _ => self
                .wire(msg)
                .iter()
                .map(|w| message_tokens(w, meter))
                .sum(),
        }
    }

    /// Tokens a tool result's content adds to its message: in every JSON format the content is
    /// one string value of the result's wire message (`text_only`), so it adds that value's
    /// tokens and nothing else. `None` for the ReAct prompt, where the observation is part of
    /// one text and cannot be metered apart from it.
    pub(crate) fn result_tokens(
        self,
        content: &MessageContent,
        meter: &dyn TokenMeter,
    ) -> Option<u64> {
        match content {
            MessageContent::Text(s) => self.result_text_tokens(s, meter),
            MessageContent::Parts(_) => self.result_text_tokens(&text_only(content), meter),
        }
    }

    /// [`Format::result_tokens`] of a text content.
    pub(crate) fn result_text_tokens(self, text: &str, meter: &dyn TokenMeter) -> Option<u64> {
        match self {
            Self::React => None,
            _ => Some(string_tokens(text, meter).saturating_sub(string_tokens("", meter))),
        }
    }

    /// Tokens the request costs besides its messages and tools.
    pub fn priming_tokens(self) -> u64 {
        match self {
            // The ReAct prompt is one text with no framing of its own.
            Self::React => 0,
            // Anthropic adds cache-control markers and may add a leading user message; both are
            // small and counted here so the estimate stays an upper bound.
            Self::ANTHROPIC => REPLY_PRIMING + 16,
            _ => REPLY_PRIMING,
        }
    }

    /// Tokens the request costs besides its messages: priming and tool definitions (Anthropic
    /// adds its tool-use system prompt whenever tools are offered).
    pub fn overhead_tokens(self, tools: &[Value], meter: &dyn TokenMeter) -> u64 {
        let tool_prompt = match self {
            Self::ANTHROPIC if !tools.is_empty() => ANTHROPIC_TOOL_PROMPT,
            _ => 0,
        };
        self.priming_tokens()
            + tool_prompt
            + tools.iter().map(|t| tool_tokens(t, meter)).sum::<u64>()
    }

    /// The tool definitions in this format.
    pub fn tools(self, req: &Request) -> Vec<Value> {
        match self {
            Self::OPENAI_CHAT => openai_chat::tools(&req.tools),
            Self::OPENAI_RESPONSES => responses::tools(&req.tools),
            Self::ANTHROPIC => anthropic::tools(&req.tools),
            Self::GEMINI => gemini::tools(&req.tools),
            Self::React => react::tools(&req.tools),
        }
    }

    /// The request body.
    pub fn body(self, req: &Request) -> Value {
        match self {
            Self::OPENAI_CHAT => openai_chat::body(req),
            Self::OPENAI_RESPONSES => responses::body(req),
            Self::ANTHROPIC => anthropic::body(req),
            Self::GEMINI => gemini::body(req),
            Self::React => react::body(req),
        }
    }

    /// Appends the request body to `out` as JSON: the bytes `serde_json::to_vec(&self.body(req))`
    /// gives, written without the value tree. An error is only a tool schema or a reasoning item
    /// serde cannot write (none can be, as they are JSON values already).
    pub fn write_body(self, req: &Request, out: &mut Vec<u8>) -> serde_json::Result<()> {
        match self {
            Self::OPENAI_CHAT => serde_json::to_writer(out, &openai_chat::Body(req)),
            Self::OPENAI_RESPONSES => serde_json::to_writer(out, &responses::Body(req)),
            Self::ANTHROPIC => serde_json::to_writer(out, &anthropic::Body(req)),
            // Built as the body builds it: contents of one role are merged, which a writer
            // straight from the messages would have to look ahead for.
            Self::GEMINI => serde_json::to_writer(out, &gemini::body(req)),
            // One text, built as the body builds it.
            Self::React => serde_json::to_writer(out, &react::body(req)),
        }
    }
}

impl Serialize for Format {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Format {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Self::parse(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown format {name:?}: expected {} or \"react\"",
                Api::NAMES
            ))
        })
    }
}

/// The body last written for a session, for [`Format::write_body_reusing`]: its messages' keys,
/// where each message's bytes end, and the bytes up to the end of its message list.
#[derive(Debug, Default, Clone)]
pub(crate) struct BodyMemo {
    format: Option<Format>,
    keys: Vec<u64>,
    ends: Vec<usize>,
    bytes: Vec<u8>,
}

impl Format {
    /// [`Format::write_body`], copying the messages this request shares with the one `memo` last
    /// saw instead of writing them again; `keys` identify the request's messages (equal keys
    /// write equal bytes within a session, [`super::Piece::key`]). Chat Completions and
    /// Responses open their body with the message list, so a request that extends the previous
    /// one (every call between compaction points) writes only its new messages; the other
    /// formats are written whole.
    pub(crate) fn write_body_reusing(
        self,
        req: &Request,
        keys: &[u64],
        memo: &mut BodyMemo,
        out: &mut Vec<u8>,
    ) -> serde_json::Result<()> {
        if keys.len() != req.messages.len() {
            *memo = BodyMemo::default();
            return self.write_body(req, out);
        }
        match self {
            Self::OPENAI_CHAT => write_list_body(
                self,
                "messages",
                req,
                keys,
                memo,
                out,
                openai_chat::items,
                &openai_chat::Tools(&req.tools),
            ),
            Self::OPENAI_RESPONSES => write_list_body(
                self,
                "input",
                req,
                keys,
                memo,
                out,
                responses::items,
                &responses::Tools(&req.tools),
            ),
            Self::ANTHROPIC | Self::GEMINI | Self::React => self.write_body(req, out),
        }
    }
}

/// A body of the shape `{"<list>": [items], "model": …, "tools": […]}` (keys in sorted order, as
/// serde writes the body's map), its list's leading messages copied from `memo`.
#[expect(
    clippy::too_many_arguments,
    reason = "the two formats' parts, named at the call"
)]
fn write_list_body<'r, I, It>(
    format: Format,
    list: &str,
    req: &'r Request,
    keys: &[u64],
    memo: &mut BodyMemo,
    out: &mut Vec<u8>,
    items: fn(&'r Msg) -> It,
    tools: &impl Serialize,
) -> serde_json::Result<()>
where
    It: Iterator<Item = I>,
    I: Serialize,
{
    let shared = if memo.format == Some(format) {
        memo.keys
            .iter()
            .zip(keys)
            .take_while(|(a, b)| a == b)
            .count()
    } else {
        0
    };
    let start = out.len();
    let mut ends = Vec::with_capacity(keys.len());
    match shared.checked_sub(1).and_then(|i| memo.ends.get(i)) {
        Some(&end) => {
            out.extend_from_slice(&memo.bytes[..end]);
            ends.extend(memo.ends[..shared].iter().map(|e| start + e));
        }
        None => {
            out.push(b'{');
            serde_json::to_writer(&mut *out, list)?;
            out.extend_from_slice(b":[");
        }
    }
    let shared = ends.len();
    let mut first = shared == 0;
    for msg in &req.messages[shared..] {
        for item in items(msg) {
            if !first {
                out.push(b',');
            }
            first = false;
            serde_json::to_writer(&mut *out, &item)?;
        }
        ends.push(out.len());
    }
    let listed = out.len();
    out.extend_from_slice(b"],\"model\":");
    serde_json::to_writer(&mut *out, &req.model)?;
    if !req.tools.is_empty() {
        out.extend_from_slice(b",\"tools\":");
        serde_json::to_writer(&mut *out, tools)?;
    }
    out.push(b'}');
    memo.format = Some(format);
    memo.keys.clear();
    memo.keys.extend_from_slice(keys);
    memo.ends.clear();
    memo.ends.extend(ends.iter().map(|e| e - start));
    memo.bytes.clear();
    memo.bytes.extend_from_slice(&out[start..listed]);
    Ok(())
}

/// Text of content, borrowed when it is one text (see [`text_only`]).
fn text_of(content: &MessageContent) -> std::borrow::Cow<'_, str> {
    match content {
        MessageContent::Text(s) => std::borrow::Cow::Borrowed(s),
        MessageContent::Parts(_) => std::borrow::Cow::Owned(text_only(content)),
    }
}

/// Text of content, with images named rather than dropped (for formats that take text only).
fn text_only(content: &MessageContent) -> String {
    match content {
        MessageContent::Text(s) => s.clone(),
        MessageContent::Parts(parts) => parts
            .iter()
            .map(|p| match p {
                ContentPart::Text { text } => text.clone(),
                ContentPart::Image { .. } => "[image]".to_owned(),
                ContentPart::Opaque { api, value, .. } => ContentPart::opaque_text(*api, value),
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// The whole message or item that `content` stands for when it is one opaque item of `api`
/// (a message of a role or an item of a type Loom does not model): it is sent as it came.
fn whole_item(content: &MessageContent, api: Api) -> Option<&Value> {
    match content {
        MessageContent::Parts(parts) => match parts.as_slice() {
            [ContentPart::Opaque {
                api: from,
                whole: true,
                value,
            }] if *from == api => Some(value),
            _ => None,
        },
        MessageContent::Text(_) => None,
    }
}

/// The whole items that `content` stands for when every one of its parts is a whole opaque item
/// of `api` (a built-in tool's call and its output, logged together): they are sent as they
/// came, in order.
fn whole_items(content: &MessageContent, api: Api) -> Option<Vec<&Value>> {
    match content {
        MessageContent::Parts(parts) if !parts.is_empty() => parts
            .iter()
            .map(|p| match p {
                ContentPart::Opaque {
                    api: from,
                    whole: true,
                    value,
                } if *from == api => Some(value),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// Parses tool-call arguments for formats that want an object; malformed text is kept under
/// `_raw` rather than lost.
fn arguments_object(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        Ok(other) => serde_json::json!({ "_value": other }),
        Err(_) => serde_json::json!({ "_raw": arguments }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::Api;
    use crate::event::{NativeReasoning, ToolCall};
    use crate::render::request::{RenderedCall, ResultForm, ToolSpec};

    fn call(id: &str, arguments: &str, content: MessageContent, is_error: bool) -> RenderedCall {
        RenderedCall {
            call: ToolCall {
                id: id.into(),
                name: "fs__read_file".into(),
                arguments: arguments.into(),
            },
            content,
            is_error,
            form: ResultForm::Verbatim,
        }
    }

    fn assistant(
        content: Option<MessageContent>,
        native: Option<NativeReasoning>,
        calls: Vec<RenderedCall>,
    ) -> Msg {
        Msg::Assistant {
            content,
            reasoning: Some("thought about it".into()),
            name: Some("agent-7".into()),
            native,
            calls,
        }
    }

    /// Every shape a message takes in some format: names, images by URL and inline, details,
    /// escapes, a turn with calls and no text, an empty turn, error results, arguments that are
    /// not an object or not JSON, reasoning items of both APIs (markable or not), a system
    /// message mid-conversation, and a conversation that opens with the assistant.
    fn messages() -> Vec<Msg> {
        let parts = MessageContent::Parts(vec![
            ContentPart::Text {
                text: "look \"here\"\n\u{1}é".into(),
            },
            ContentPart::Image {
                url: "https://example.com/a.png".into(),
                detail: Some("low".into()),
            },
            ContentPart::Image {
                url: "data:image/png;base64,iVBORw0KGgo=".into(),
                detail: None,
            },
        ]);
        let thinking = NativeReasoning {
            api: Api::Anthropic,
            items: vec![
                json!({"type": "thinking", "thinking": "hm", "signature": "sig"}),
                json!({"type": "redacted_thinking", "data": "xyz"}),
            ],
        };
        let reasoning = NativeReasoning {
            api: Api::OpenaiResponses,
            items: vec![json!({"type": "reasoning", "id": "rs_1", "summary": []})],
        };
        vec![
            assistant(Some("I start".into()), None, Vec::new()),
            Msg::System("You are terse.".into()),
            Msg::User {
                content: parts.clone(),
                name: Some("ann".into()),
            },
            assistant(
                None,
                Some(thinking.clone()),
                vec![
                    call(
                        "c1",
                        r#"{"path": "a.txt", "b": 1}"#,
                        "one\ttwo".into(),
                        false,
                    ),
                    call("c2", "[1, 2]", parts.clone(), true),
                    call("c3", "{not json", "".into(), false),
                ],
            ),
            assistant(None, Some(thinking), Vec::new()),
            assistant(None, Some(reasoning.clone()), Vec::new()),
            Msg::System("A rule changed.".into()),
            assistant(
                Some(parts),
                Some(reasoning),
                vec![call("c4", "{}", "ok".into(), false)],
            ),
            Msg::User {
                content: MessageContent::Parts(Vec::new()),
                name: None,
            },
            assistant(Some("done".into()), None, Vec::new()),
        ]
    }

    fn request(messages: Vec<Msg>, stable_len: usize, tools: bool) -> Request {
        let tools = if tools {
            vec![ToolSpec {
                name: "fs__read_file".into(),
                description: "Reads a file".into(),
                parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            }]
        } else {
            Vec::new()
        };
        Request {
            model: "gpt-4o".into(),
            tools,
            messages,
            stable_len,
            max_output_tokens: 4096,
        }
    }

    #[test]
    fn the_bytes_written_are_the_body_serialised() {
        let all = messages();
        // Every window of the messages, with every stable prefix, with and without tools; with
        // and without leading system messages (the Anthropic `system` list).
        let mut cases = Vec::new();
        for from in 0..all.len() {
            for to in from..=all.len() {
                let mut msgs = vec![
                    Msg::System("Be brief.".into()),
                    Msg::System("Be kind.".into()),
                ];
                msgs.extend_from_slice(&all[from..to]);
                for lead in [0, 2] {
                    let msgs = msgs[2 - lead..].to_vec();
                    for stable_len in 0..=msgs.len() + 1 {
                        cases.push(request(msgs.clone(), stable_len, (from + to) % 2 == 0));
                    }
                }
            }
        }
        for format in Format::ALL {
            for req in &cases {
                let mut bytes = Vec::new();
                format.write_body(req, &mut bytes).unwrap();
                let expected = serde_json::to_vec(&format.body(req)).unwrap();
                assert_eq!(
                    String::from_utf8_lossy(&bytes),
                    String::from_utf8_lossy(&expected),
                    "{format:?}, stable_len {}",
                    req.stable_len
                );
            }
        }
    }

    #[test]
    fn a_body_reusing_the_last_ones_messages_has_the_same_bytes() {
        let all = messages();
        for format in Format::ALL {
            let mut memo = BodyMemo::default();
            // A session that grows a message at a time, then compacts (new keys from message
            // 4 on) and grows again, then changes its tools.
            let mut steps: Vec<(usize, u64, bool)> =
                (0..=all.len()).map(|n| (n, 0, true)).collect();
            steps.extend((4..=all.len()).map(|n| (n, 100, true)));
            steps.push((all.len(), 100, false));
            for (n, changed, tools) in steps {
                let req = request(all[..n].to_vec(), 1, tools);
                let keys: Vec<u64> = (0..n as u64)
                    .map(|i| if i >= 4 { i + changed } else { i })
                    .collect();
                let mut bytes = Vec::new();
                format
                    .write_body_reusing(&req, &keys, &mut memo, &mut bytes)
                    .unwrap();
                let expected = serde_json::to_vec(&format.body(&req)).unwrap();
                assert_eq!(
                    String::from_utf8_lossy(&bytes),
                    String::from_utf8_lossy(&expected),
                    "{format:?}, {n} messages"
                );
            }
        }
    }
}
