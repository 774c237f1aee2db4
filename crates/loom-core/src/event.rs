//! The log: sessions and the events appended to them.
//!
//! Events are the truth (DESIGN.md, principle 1): appended, numbered by a per-session `seq` that
//! starts at 1 and never skips, and never edited. Their JSON form is documented in
//! `docs/formats.md`; every map in it is ordered, so serialisation is canonical.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::api::Api;
use crate::error::{LogError, Result};
use crate::stats::ContentStats;

/// Position of an event in its session's log: 1-based, strictly increasing, no gaps.
pub type Seq = u64;

/// Priority a direct message gets when the sender gives none (seed 002).
pub const DEFAULT_PRIORITY: f64 = 0.5;

/// Longest id accepted for sessions and agents, in bytes: the 1,024 a client may use, and room
/// for the tenant a server stores it under (`TENANT/id`; tenant names are shorter than that).
const MAX_ID_LEN: usize = 2048;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Validates and wraps an id: non-empty, at most 2048 bytes, no control characters.
            pub fn new(id: impl Into<String>) -> Result<Self> {
                let id = id.into();
                if id.is_empty() {
                    return Err(LogError::invalid($what, "must not be empty"));
                }
                if id.len() > MAX_ID_LEN {
                    return Err(LogError::invalid(
                        $what,
                        format!("is {} bytes long; at most {MAX_ID_LEN} are allowed", id.len()),
                    ));
                }
                if id.chars().any(char::is_control) {
                    return Err(LogError::invalid($what, "must not contain control characters"));
                }
                Ok(Self(id))
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = LogError;
            fn try_from(id: String) -> Result<Self> {
                Self::new(id)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(
    /// Names one session: one agent's log stream.
    SessionId,
    "session"
);
id_type!(
    /// Names an agent. Each agent has its own sessions, workspace and budget (isolation).
    AgentId,
    "agent"
);

/// A session as the store lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// The session's id.
    pub id: SessionId,
    /// The agent whose log this is.
    pub agent: AgentId,
    /// The session that spawned this one, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<SessionId>,
    /// When the session was created, UTC milliseconds.
    pub created_ms: i64,
    /// Number of events in the log (equal to the last seq).
    pub event_count: u64,
}

/// Reference to content in the blob store: the SHA-256 of the bytes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct BlobRef(String);

/// A blob's reference and the stats of its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobInfo {
    /// Its reference.
    pub blob: BlobRef,
    /// Stats of the bytes (the hash among them).
    pub stats: ContentStats,
}

impl BlobRef {
    const PREFIX: &'static str = "sha256:";

    /// Wraps a lowercase hex SHA-256 digest.
    pub fn from_hex(hex: &str) -> Result<Self> {
        if hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            Ok(Self(hex.to_owned()))
        } else {
            Err(LogError::invalid(
                "blob",
                format!("`{hex}` is not a lowercase hex SHA-256 digest"),
            ))
        }
    }

    /// The 64 hex digits.
    pub fn hex(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for BlobRef {
    type Error = LogError;
    fn try_from(s: String) -> Result<Self> {
        match s.strip_prefix(Self::PREFIX) {
            Some(hex) => Self::from_hex(hex),
            None => Err(LogError::invalid(
                "blob",
                format!("`{s}` does not start with `{}`", Self::PREFIX),
            )),
        }
    }
}

impl From<BlobRef> for String {
    fn from(r: BlobRef) -> String {
        format!("{}{}", BlobRef::PREFIX, r.0)
    }
}

impl fmt::Display for BlobRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", Self::PREFIX, self.0)
    }
}

/// Message content: plain text, or a list of parts (text and images) as multimodal APIs send it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    /// Plain text.
    Text(String),
    /// Ordered parts.
    Parts(Vec<ContentPart>),
}

impl MessageContent {
    /// The text of the content: the string, or the text parts joined by newlines.
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Self::Text(s) => s.as_str().into(),
            Self::Parts(parts) => joined_text(parts).into(),
        }
    }
}

/// The text parts joined by newlines, images left out: the text of multimodal content, and what
/// the stats of a tool result given as parts describe.
pub fn joined_text(parts: &[ContentPart]) -> String {
    let texts: Vec<&str> = parts
        .iter()
        .filter_map(|p| match p {
            ContentPart::Text { text } => Some(text.as_str()),
            ContentPart::Image { .. } | ContentPart::Opaque { .. } => None,
        })
        .collect();
    texts.join("\n")
}

impl From<&str> for MessageContent {
    fn from(s: &str) -> Self {
        Self::Text(s.to_owned())
    }
}

impl From<String> for MessageContent {
    fn from(s: String) -> Self {
        Self::Text(s)
    }
}

/// One part of multimodal content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image by URL; inline images use a `data:` URL.
    Image {
        /// `https://…` or `data:<media type>;base64,…`.
        url: String,
        /// Provider detail hint (`low`, `high`, `auto`), if given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// What Loom does not model (a block, part or whole item of a type it does not know, or a
    /// role it does not know), kept exactly as the client sent it and sent back unchanged to the
    /// API it came from (DESIGN.md, principle 9). Another API gets it as text.
    Opaque {
        /// The API it came from.
        api: Api,
        /// Whether `value` is a whole message or item of the conversation (for instance a
        /// Responses item of a new type), rather than one block of a message's content.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        whole: bool,
        /// The JSON as it came.
        value: serde_json::Value,
    },
}

impl ContentPart {
    /// The `type` an opaque part's value names (`"document"`, `"additional_tools"`), for notes
    /// and counts; `None` for modelled parts.
    pub fn opaque_type(&self) -> Option<&str> {
        match self {
            Self::Opaque { value, .. } => Some(
                value
                    .get("type")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("item"),
            ),
            _ => None,
        }
    }

    /// An opaque part as text, for an API other than the one it came from.
    pub fn opaque_text(api: Api, value: &serde_json::Value) -> String {
        format!(
            "[{} content from {}]\n{value}",
            value
                .get("type")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("item"),
            api.as_str()
        )
    }
}

/// A call the assistant made. Parallel calls share one assistant event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Call id, unique within the session.
    pub id: String,
    /// Tool name exactly as the agent gave it.
    pub name: String,
    /// Arguments as the raw JSON text the model produced (kept verbatim, even when malformed).
    pub arguments: String,
}

/// Provider-native reasoning items or blocks (JSON objects as the provider sent them).
///
/// Anthropic requires earlier `thinking` blocks to come back with their `signature` unchanged, and
/// OpenAI Responses `reasoning` items carry `encrypted_content` the model needs to resume; the
/// plain `reasoning` text cannot rebuild either, so the objects are kept as they arrived. A
/// Responses `compaction` item (the provider's encrypted summary of the conversation before it,
/// the whole output of a remote compaction) is kept the same way, as its turn's output. A Gemini
/// turn keeps all its parts (thought parts, and the `thoughtSignature` on the part it signs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NativeReasoning {
    /// The provider API the items belong to; they are sent back only to that API.
    pub api: Api,
    /// The items or blocks, in the order the provider sent them.
    pub items: Vec<serde_json::Value>,
}

impl NativeReasoning {
    /// What a turn rendered without its text keeps: a Gemini turn's `functionCall` parts, each
    /// with the `thoughtSignature` the API requires of the current tool loop's calls (a thought
    /// or a text part is dropped with the text); `None` for the other APIs, whose earlier turns
    /// go without their reasoning.
    pub fn calls_only(&self) -> Option<NativeReasoning> {
        if self.api != Api::Gemini {
            return None;
        }
        let items: Vec<serde_json::Value> = self
            .items
            .iter()
            .filter(|p| p.get("functionCall").is_some())
            .cloned()
            .collect();
        (!items.is_empty()).then_some(NativeReasoning {
            api: self.api,
            items,
        })
    }

    /// Checks that every item is a reasoning item (or a Responses `compaction`) of its API, with
    /// what that API needs to accept
    /// it back: an item that is not would turn every later request of the session into a
    /// provider error, so it is refused when it is appended instead.
    fn validate(&self) -> Result<()> {
        for (i, item) in self.items.iter().enumerate() {
            let field = |name: &str| format!("native.items[{i}].{name}");
            if self.api == Api::Gemini {
                // A model turn's parts as Gemini sent them (thoughts, text and calls with their
                // `thoughtSignature`s), replayed whole.
                if !item.is_object() {
                    return Err(LogError::invalid(
                        format!("native.items[{i}]"),
                        "must be an object: a part of the model's content",
                    ));
                }
                continue;
            }
            let kind = item.get("type").and_then(serde_json::Value::as_str);
            let required = match (self.api, kind) {
                (Api::Anthropic, Some("thinking")) => "signature",
                (Api::Anthropic, Some("redacted_thinking")) => "data",
                (Api::OpenaiResponses, Some("reasoning")) => "id",
                // The provider's summary of the conversation before it (a remote compaction).
                (Api::OpenaiResponses, Some("compaction")) => "encrypted_content",
                (Api::Anthropic, _) => {
                    return Err(LogError::invalid(
                        field("type"),
                        "expected `thinking` or `redacted_thinking` for the anthropic api",
                    ))
                }
                (Api::OpenaiResponses, _) => {
                    return Err(LogError::invalid(
                        field("type"),
                        "expected `reasoning` or `compaction` for the openai-responses api",
                    ))
                }
                (Api::Gemini, _) => continue,
                (Api::OpenaiChat, _) => {
                    return Err(LogError::invalid(
                        field("type"),
                        "the openai-chat api has no native reasoning items",
                    ))
                }
            };
            if !item.get(required).is_some_and(serde_json::Value::is_string) {
                return Err(LogError::invalid(
                    field(required),
                    "must be a string: the provider accepts the item back only with it",
                ));
            }
        }
        Ok(())
    }
}

/// Where a tool result's content lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolOutput {
    /// Inline text.
    Text(String),
    /// Inline multimodal parts.
    Parts(Vec<ContentPart>),
    /// Offloaded to the blob store (large or binary outputs).
    Blob(BlobRef),
}

/// What happened. The `kind` tag names the variant in JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum EventBody {
    /// The system prompt (OpenAI `developer` messages land here too).
    System {
        /// Prompt content.
        content: MessageContent,
    },
    /// A user message.
    User {
        /// Message content.
        content: MessageContent,
        /// Participant name, if the source gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// An assistant turn: text, reasoning and zero or more tool calls.
    Assistant {
        /// Visible text; `None` when the model sent only calls.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<MessageContent>,
        /// Reasoning or thinking text, when the provider exposes it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
        /// Calls made in this turn, in order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// Participant name, if the source gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// Reasoning exactly as the provider sent it, replayed unchanged to the same provider API.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        native: Option<NativeReasoning>,
    },
    /// The result of one tool call.
    ToolResult {
        /// The call this answers.
        call_id: String,
        /// The tool that was called (taken from the call).
        tool_name: String,
        /// The output, inline or in the blob store.
        content: ToolOutput,
        /// Whether the tool reported an error.
        #[serde(default)]
        is_error: bool,
        /// Stats of the original output.
        stats: ContentStats,
    },
    /// A message between agents (seed 002).
    DirectMessage {
        /// Sending agent or node.
        source: String,
        /// Receiving agent or node.
        target: String,
        /// Message text.
        content: String,
        /// 0.0 to 1.0; higher is delivered first.
        #[serde(default = "default_priority")]
        priority: f64,
        /// Seconds after the event's timestamp when the message expires.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ttl_seconds: Option<u64>,
        /// Task this message belongs to.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_task_id: Option<String>,
        /// Free-form metadata (ordered keys).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        metadata: BTreeMap<String, serde_json::Value>,
    },
    /// This agent spawned a child with its own session.
    Spawn {
        /// The child's session.
        child: SessionId,
        /// The child agent.
        agent: AgentId,
        /// The goal the child was given.
        goal: String,
        /// An explicit, compacted extract of the parent's steps, if one was passed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        extract: Option<String>,
    },
    /// A child returned its result.
    AgentResult {
        /// The child's session.
        child: SessionId,
        /// The child agent.
        agent: AgentId,
        /// What the child returned.
        result: String,
        /// Whether the child reported success.
        success: bool,
    },
    /// Content the user wants kept verbatim in every request (instructions, constraints, plan).
    Pin {
        /// A short name for the pin.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
        /// The pinned text.
        content: String,
    },
    /// The client rewrote the conversation it sends: it compacted its own history (Claude Code's
    /// auto-compact or `/compact`, Codex's compaction, a provider's `compaction` block or item
    /// it received), or rebuilt context it re-sends every turn in a new place (aider's files in
    /// chat). The events in `replaced` are no longer part of the conversation; the events after
    /// this one are what the client sent in their place. Nothing is deleted: the log keeps what
    /// was replaced, and a render leaves it out as the client did.
    Rewrite {
        /// The replaced events, as inclusive `[from, to]` seq runs.
        replaced: Vec<[Seq; 2]>,
        /// Whether the client compacted (summarised) what it replaced, rather than moved it.
        #[serde(default)]
        compaction: bool,
    },
    /// The client sent again, here, a message it sent before: context it rebuilds every turn in
    /// a new place (aider's files in chat), unchanged since the event at `of`. The message counts
    /// as sent here, with that event's content, so the content is recorded once per version,
    /// not once per turn. Only messages without tool calls are repeated.
    Repeat {
        /// The seq of the event whose message this is.
        of: Seq,
    },
    /// Events `from..=to` were Loom's own exchange with the model, which the client never saw: a
    /// turn that called the recall tool the proxy answers itself, and its answers. They are the
    /// conversation the model sees (rendered like any call and result) but not the one the
    /// client sends, so a client's history is matched against the log without them.
    Hidden {
        /// The hidden events, an inclusive `[from, to]` run of seqs before this one.
        events: [Seq; 2],
    },
}

fn default_priority() -> f64 {
    DEFAULT_PRIORITY
}

/// The kind of an event, without its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// See [`EventBody::System`].
    System,
    /// See [`EventBody::User`].
    User,
    /// See [`EventBody::Assistant`].
    Assistant,
    /// See [`EventBody::ToolResult`].
    ToolResult,
    /// See [`EventBody::DirectMessage`].
    DirectMessage,
    /// See [`EventBody::Spawn`].
    Spawn,
    /// See [`EventBody::AgentResult`].
    AgentResult,
    /// See [`EventBody::Pin`].
    Pin,
    /// See [`EventBody::Rewrite`].
    Rewrite,
    /// See [`EventBody::Repeat`].
    Repeat,
    /// See [`EventBody::Hidden`].
    Hidden,
}

impl EventKind {
    /// The snake_case name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::ToolResult => "tool_result",
            Self::DirectMessage => "direct_message",
            Self::Spawn => "spawn",
            Self::AgentResult => "agent_result",
            Self::Pin => "pin",
            Self::Rewrite => "rewrite",
            Self::Repeat => "repeat",
            Self::Hidden => "hidden",
        }
    }
}

impl EventBody {
    /// The event's kind.
    pub fn kind(&self) -> EventKind {
        match self {
            Self::System { .. } => EventKind::System,
            Self::User { .. } => EventKind::User,
            Self::Assistant { .. } => EventKind::Assistant,
            Self::ToolResult { .. } => EventKind::ToolResult,
            Self::DirectMessage { .. } => EventKind::DirectMessage,
            Self::Spawn { .. } => EventKind::Spawn,
            Self::AgentResult { .. } => EventKind::AgentResult,
            Self::Pin { .. } => EventKind::Pin,
            Self::Rewrite { .. } => EventKind::Rewrite,
            Self::Repeat { .. } => EventKind::Repeat,
            Self::Hidden { .. } => EventKind::Hidden,
        }
    }

    /// Checks the rules a single event must meet on its own (pairing across events is the
    /// [`Ledger`](crate::Ledger)'s job).
    pub fn validate(&self) -> Result<()> {
        match self {
            Self::Assistant {
                tool_calls, native, ..
            } => {
                if let Some(native) = native {
                    native.validate()?;
                }
                for (i, call) in tool_calls.iter().enumerate() {
                    if call.id.is_empty() {
                        return Err(LogError::invalid(
                            format!("tool_calls[{i}].id"),
                            "must not be empty",
                        ));
                    }
                    if call.name.is_empty() {
                        return Err(LogError::invalid(
                            format!("tool_calls[{i}].name"),
                            "must not be empty",
                        ));
                    }
                }
                Ok(())
            }
            Self::ToolResult { call_id, .. } if call_id.is_empty() => {
                Err(LogError::invalid("call_id", "must not be empty"))
            }
            Self::DirectMessage { priority, .. } if !(0.0..=1.0).contains(priority) => Err(
                LogError::invalid("priority", format!("{priority} is outside 0.0..=1.0")),
            ),
            Self::Rewrite { replaced, .. } => {
                for (i, [from, to]) in replaced.iter().enumerate() {
                    if *from == 0 || from > to {
                        return Err(LogError::invalid(
                            format!("replaced[{i}]"),
                            format!("[{from}, {to}] is not a run of seqs (1 <= from <= to)"),
                        ));
                    }
                }
                Ok(())
            }
            Self::Repeat { of: 0 } => Err(LogError::invalid("of", "must be a seq (1 or more)")),
            Self::Hidden { events: [from, to] } if *from == 0 || from > to => {
                Err(LogError::invalid(
                    "events",
                    format!("[{from}, {to}] is not a run of seqs (1 <= from <= to)"),
                ))
            }
            _ => Ok(()),
        }
    }

    /// Whether a client may send this message again unchanged in a new place, recorded as an
    /// [`EventBody::Repeat`] of it: a system or user message, or an assistant turn that called
    /// no tool.
    pub fn repeatable(&self) -> bool {
        match self {
            Self::System { .. } | Self::User { .. } => true,
            Self::Assistant { tool_calls, .. } => tool_calls.is_empty(),
            _ => false,
        }
    }
}

/// One message of a log's conversation: where it stands in the log and what it says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Said<'a> {
    /// The seq of the event that put it here (a [`EventBody::Repeat`]'s own seq for a message
    /// sent again).
    pub seq: Seq,
    /// The seq of the event that holds its content (`seq` unless it was sent again).
    pub origin: Seq,
    /// What it says.
    pub body: &'a EventBody,
}

/// The conversation a log holds as its client last sent it: the events in order, without what a
/// client [`EventBody::Rewrite`] replaced, without Loom's own [`EventBody::Hidden`] exchanges,
/// and without those records themselves, each [`EventBody::Repeat`] standing for the message it
/// repeats. A log with none of them is its own conversation.
pub fn conversation(events: &[Event]) -> Vec<Said<'_>> {
    let mut replaced: Vec<[Seq; 2]> = Vec::new();
    for e in events {
        match &e.body {
            EventBody::Rewrite { replaced: runs, .. } => {
                replaced.extend(runs.iter().copied());
                replaced.push([e.seq, e.seq]);
            }
            EventBody::Hidden { events: run } => {
                replaced.push(*run);
                replaced.push([e.seq, e.seq]);
            }
            _ => {}
        }
    }
    let first = events.first().map_or(0, |e| e.seq);
    // Logs hold consecutive seqs; a slice that does not is searched.
    let at = |seq: Seq| -> Option<&Event> {
        let guess = usize::try_from(seq.checked_sub(first)?).ok()?;
        match events.get(guess) {
            Some(e) if e.seq == seq => Some(e),
            _ => events
                .binary_search_by_key(&seq, |e| e.seq)
                .ok()
                .map(|i| &events[i]),
        }
    };
    events
        .iter()
        .filter(|e| {
            !replaced
                .iter()
                .any(|[from, to]| *from <= e.seq && e.seq <= *to)
        })
        .filter_map(|e| match &e.body {
            EventBody::Repeat { of } => at(*of)
                .filter(|o| o.seq < e.seq && o.body.repeatable())
                .map(|o| Said {
                    seq: e.seq,
                    origin: o.seq,
                    body: &o.body,
                }),
            body => Some(Said {
                seq: e.seq,
                origin: e.seq,
                body,
            }),
        })
        .collect()
}

/// An event about to be appended: the store assigns its seq.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewEvent {
    /// When it happened, UTC milliseconds.
    pub ts_ms: i64,
    /// What happened.
    #[serde(flatten)]
    pub body: EventBody,
}

impl NewEvent {
    /// An event at the given time.
    pub fn new(ts_ms: i64, body: EventBody) -> Self {
        Self { ts_ms, body }
    }
}

/// An event in the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the session's log.
    pub seq: Seq,
    /// When it happened, UTC milliseconds.
    pub ts_ms: i64,
    /// What happened.
    #[serde(flatten)]
    pub body: EventBody,
}

#[cfg(test)]
mod tests;
