//! One dialect per provider API: what Loom knows of how that API spells a request, where it is
//! sent and with which credentials, where a client's conversation sits in it and where it may be
//! continued, which rules the provider holds a request to, and how its errors look.
//!
//! Code outside this crate asks the API's [`Dialect`] ([`dialect`]) instead of matching on
//! [`Api`]: a new API, or a new shape of an old one, is then a change here rather than in every
//! crate that speaks to providers.

mod chat;
mod gemini;
mod messages;
mod responses;

pub use gemini::{
    gemini_target, generate_url, max_output_tokens as gemini_max_output_tokens, GeminiMethod,
    GEMINI_VERSION_PATH,
};
pub use messages::ANTHROPIC_VERSION;

use std::collections::HashSet;

use serde_json::{Map, Value};

use loom_core::Api;

/// Who serves an API: the family of base URL, key and environment variables it shares with the
/// provider's other APIs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// OpenAI (and every server compatible with its APIs).
    OpenAi,
    /// Anthropic.
    Anthropic,
    /// Google (the Gemini API).
    Google,
}

impl Provider {
    /// The provider's name in metrics, configuration and logs (`openai`, `anthropic`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
            Self::Google => "gemini",
        }
    }

    /// The environment variables of the provider's key and base URL, and its default base URL.
    pub const fn env(self) -> ProviderEnv {
        match self {
            Self::OpenAi => ProviderEnv {
                key: "OPENAI_API_KEY",
                base_url: "OPENAI_BASE_URL",
                default_base_url: "https://api.openai.com/v1",
            },
            Self::Anthropic => ProviderEnv {
                key: "ANTHROPIC_API_KEY",
                base_url: "ANTHROPIC_BASE_URL",
                default_base_url: "https://api.anthropic.com",
            },
            // Gemini CLI's own variable for a gateway.
            Self::Google => ProviderEnv {
                key: "GEMINI_API_KEY",
                base_url: "GOOGLE_GEMINI_BASE_URL",
                default_base_url: "https://generativelanguage.googleapis.com",
            },
        }
    }
}

/// Where a provider's key and base URL are read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderEnv {
    /// The variable holding the key.
    pub key: &'static str,
    /// The variable holding the base URL.
    pub base_url: &'static str,
    /// The base URL when none is given.
    pub default_base_url: &'static str,
}

/// A header a request carries: its name, its value, and whether the value is a secret (to be
/// kept out of logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Lowercase name.
    pub name: &'static str,
    /// Value.
    pub value: String,
    /// Whether the value is a credential.
    pub secret: bool,
}

/// The first two fields of a conversation item, which say who it is from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ItemHead<'a> {
    /// `role`, when the item has one.
    pub role: Option<&'a str>,
    /// `type`, when the item has one.
    pub kind: Option<&'a str>,
}

/// All that Loom knows of one provider API's wire.
pub trait Dialect: Send + Sync + std::fmt::Debug {
    /// The API.
    fn api(&self) -> Api;

    /// Who serves it.
    fn provider(&self) -> Provider;

    /// The path the provider serves the API on, and so does the proxy (`/v1/chat/completions`).
    fn route(&self) -> &'static str;

    /// The path a request is posted to, below the base URL's `/v1` (`/chat/completions`).
    fn endpoint(&self) -> &'static str {
        self.route().trim_start_matches("/v1")
    }

    /// The request URL for a base URL that is already checked to be an http(s) URL (without a
    /// trailing slash). OpenAI's clients put the `/v1` in the base URL and Anthropic's do not;
    /// a bare host gets it either way.
    fn url(&self, base: &str) -> String;

    /// Whether the API names the model and the method in the path below its route
    /// (`/v1beta/models/{model}:generateContent`), rather than the model in the body.
    fn routed_by_model(&self) -> bool {
        false
    }

    /// The request field holding the conversation (`messages`, `input`).
    fn history_field(&self) -> &'static str {
        self.api().history_field()
    }

    /// The headers that carry `key`, and the API's version header when it needs one (sent even
    /// without a key). A caller forwarding a client's own version header sends that instead.
    fn credential_headers(&self, key: Option<&str>) -> Vec<Header>;

    /// Whether a request may use a call id only once (Anthropic refuses a repeated `tool_use`
    /// id; OpenAI's APIs take one used again, a result answering the oldest call waiting with it).
    fn unique_call_ids(&self) -> bool {
        false
    }

    /// Whether a conversation ending with an item headed `last` ends where a continuation can be
    /// read on its own: after a message from the user's side or a tool's result, never inside an
    /// assistant turn.
    fn ends_cleanly(&self, last: ItemHead<'_>) -> bool;

    /// Whether the API's reasoning items or blocks are sent back in later requests as they came
    /// (Anthropic's signed thinking, Responses' encrypted reasoning), so the log keeps them.
    fn replays_reasoning(&self) -> bool {
        false
    }

    /// Whether a streamed reply carries its usage only when the request asks for it
    /// (`stream_options.include_usage`).
    fn stream_usage_on_request(&self) -> bool {
        false
    }

    /// A function tool in the API's `tools` shape.
    fn tool(&self, name: &str, description: &str, parameters: &Value) -> Value;

    /// Removes the calls to the tool `name` from a whole (not streamed) reply body; a reply left
    /// with no call ends its turn.
    fn drop_calls(&self, reply: &mut Value, name: &str);

    /// Puts `text` in front of a whole reply body's own text (a text part of its own when the
    /// reply has none, after any reasoning).
    fn prepend_text(&self, reply: &mut Value, text: &str);

    /// The error body the API's clients expect for an HTTP `status`, with the request field at
    /// fault when there is one.
    fn error_body(&self, status: u16, message: &str, param: Option<&str>) -> Value;

    /// The API's name where a configuration spells it by its endpoint (`chat_completions`,
    /// `responses`, `messages`).
    fn endpoint_name(&self) -> &'static str;

    /// A request of one turn: `instructions` as its system part, `input` as the user's
    /// message, the reply at most `max_output_tokens` long (Loom's own requests: memory's fact
    /// extraction, summaries).
    fn one_turn(
        &self,
        model: &str,
        instructions: &str,
        input: &str,
        max_output_tokens: u64,
    ) -> Value;

    /// The request fields that cap a reply's length, the first one present counting
    /// (`max_tokens`; Chat's `max_completion_tokens` before its older `max_tokens`).
    fn max_output_fields(&self) -> &'static [&'static str];

    /// The reply length a request asks for: the first of [`Dialect::max_output_fields`] it sets
    /// above 0.
    fn asked_output(&self, body: &Map<String, Value>) -> Option<u64> {
        self.max_output_fields()
            .iter()
            .find_map(|key| body.get(*key).and_then(Value::as_u64).filter(|n| *n > 0))
    }

    /// The request fields by which a conversation continues one the provider keeps
    /// (Responses' `previous_response_id` and `conversation`): a request with one holds only
    /// part of its conversation, which Loom cannot fit.
    fn server_state_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// Whether a request's context window may reach a million tokens (Anthropic's beta header
    /// for it), beyond the model's usual window.
    fn million_token_window(&self, headers: &[(&str, &str)]) -> bool {
        let _ = headers;
        false
    }

    /// Puts the conversation of `rendered` (a request Loom wrote for this API) in the client's
    /// `body` in place of the client's own: the history field, and the system prompt where the
    /// API keeps it apart (Anthropic's `system`; Responses' `instructions`, which Loom renders as
    /// the leading system message). Every other field stays as the client sent it.
    fn replace_conversation(&self, body: &mut Map<String, Value>, rendered: &Value) {
        let key = self.history_field();
        if let Some(history) = rendered.get(key) {
            body.insert(key.into(), history.clone());
        }
    }

    /// Gives a fitted `body` the client's own system prompt where the render says the same
    /// (Anthropic's `system` blocks and their breakpoints; Responses' `instructions` for the
    /// leading system message Loom rendered from it).
    fn restore_system(&self, client: &Map<String, Value>, body: &mut Map<String, Value>) {
        let _ = (client, body);
    }

    /// Once the client's own items are back in a fitted `body`, makes what Loom wrote itself
    /// (the conversation's items at `ours`) agree with them and with the provider's limits:
    /// `custom` names the calls the client made to custom (freeform) tools.
    fn finish_restore(
        &self,
        body: &mut Map<String, Value>,
        ours: &[usize],
        custom: &HashSet<String>,
    ) {
        let _ = (body, ours, custom);
    }
}

/// Lines of a system prompt a client rewrites within one conversation: Claude Code's billing
/// header (`x-anthropic-billing-header: cc_version=2.1.332.832; …`), whose version suffix changes
/// after a compaction.
pub const CHURN_LINES: [&str; 1] = ["x-anthropic-billing-header:"];

/// `text` without the lines its client rewrites within one conversation ([`CHURN_LINES`]):
/// two system prompts that differ only there are one conversation's.
pub fn without_churn_lines(text: &str) -> std::borrow::Cow<'_, str> {
    if !CHURN_LINES.iter().any(|p| text.contains(p)) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(
        text.lines()
            .filter(|line| !CHURN_LINES.iter().any(|p| line.trim_start().starts_with(p)))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// Fields a client changes from one request to the next of one conversation: per-request
/// metadata (Codex's passthrough, with a `create_time` that comes and goes) and timestamps.
/// Loom models none of them, so its render never writes them.
pub const CHURN_FIELDS: [&str; 5] = [
    "internal_chat_message_metadata_passthrough",
    "metadata",
    "create_time",
    "created_at",
    "timestamp",
];

/// `v` without what its client changes within one conversation ([`CHURN_FIELDS`] at any depth,
/// [`CHURN_LINES`] in any text): what a conversation's identity is hashed from, so that a
/// conversation found once is found again after its client edits its own prefix.
pub fn without_churn(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !CHURN_FIELDS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), without_churn(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_churn).collect()),
        Value::String(s) => Value::String(without_churn_lines(s).into_owned()),
        other => other.clone(),
    }
}

/// The text of a content value: a string, or its parts' texts joined by newlines.
pub fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The API whose shape a path below `/v1/` speaks: the API whose route the path is or lies
/// under (`/v1/messages/count_tokens` is Anthropic's), else Chat Completions, the shape every
/// OpenAI-compatible server shares (`/v1/models`); `None` off `/v1/`.
pub fn api_of_path(path: &str) -> Option<Api> {
    let under = |route: &str| {
        path.strip_prefix(route)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    Api::ALL
        .into_iter()
        .find(|api| under(dialect(*api).route()))
        .or_else(|| path.starts_with("/v1/").then_some(Api::OpenaiChat))
}

/// The dialect of `api`.
pub fn dialect(api: Api) -> &'static dyn Dialect {
    match api {
        Api::OpenaiChat => &chat::Chat,
        Api::OpenaiResponses => &responses::Responses,
        Api::Anthropic => &messages::Messages,
        Api::Gemini => &gemini::Gemini,
    }
}

/// The URL of an OpenAI-style API at `base`: the path below `base`, with `/v1` added to a bare
/// host.
fn openai_url(base: &str, endpoint: &str) -> String {
    let bare = base
        .split_once("://")
        .map_or(base, |(_, rest)| rest)
        .find('/')
        .is_none();
    if bare {
        format!("{base}/v1{endpoint}")
    } else {
        format!("{base}{endpoint}")
    }
}

/// OpenAI's credentials: a bearer token.
fn bearer(key: Option<&str>) -> Vec<Header> {
    key.map(|key| Header {
        name: "authorization",
        value: format!("Bearer {key}"),
        secret: true,
    })
    .into_iter()
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_api_has_its_dialect() {
        for api in Api::ALL {
            assert_eq!(dialect(api).api(), api);
        }
        assert_eq!(dialect(Api::OpenaiChat).route(), "/v1/chat/completions");
        assert_eq!(dialect(Api::Anthropic).route(), "/v1/messages");
    }

    #[test]
    fn a_path_speaks_the_api_whose_route_it_lies_under() {
        assert_eq!(api_of_path("/v1/messages"), Some(Api::Anthropic));
        assert_eq!(
            api_of_path("/v1/messages/count_tokens"),
            Some(Api::Anthropic)
        );
        assert_eq!(
            api_of_path("/v1/responses/compact"),
            Some(Api::OpenaiResponses)
        );
        assert_eq!(api_of_path("/v1/chat/completions"), Some(Api::OpenaiChat));
        assert_eq!(api_of_path("/v1/models"), Some(Api::OpenaiChat));
        assert_eq!(api_of_path("/v1/messagesx"), Some(Api::OpenaiChat));
        assert_eq!(api_of_path("/api/sessions"), None);
    }

    #[test]
    fn urls_follow_each_clients_convention() {
        let chat = dialect(Api::OpenaiChat);
        assert_eq!(
            chat.url("https://api.openai.com/v1"),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(
            chat.url("http://127.0.0.1:8080"),
            "http://127.0.0.1:8080/v1/chat/completions"
        );
        assert_eq!(
            dialect(Api::OpenaiResponses).url("http://h/openai/v1"),
            "http://h/openai/v1/responses"
        );
        let messages = dialect(Api::Anthropic);
        assert_eq!(
            messages.url("https://api.anthropic.com"),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(messages.url("http://h/v1"), "http://h/v1/messages");
    }
}
