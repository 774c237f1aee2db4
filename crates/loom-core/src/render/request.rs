//! The provider-neutral request the layout produces and the formats serialise.

use serde::{Deserialize, Serialize};

use crate::event::{MessageContent, ToolCall};

/// A tool the model may call (passed in by the caller; not part of the log).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Tool name.
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of its arguments.
    #[serde(default = "empty_schema")]
    pub parameters: serde_json::Value,
}

fn empty_schema() -> serde_json::Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// How a result is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultForm {
    /// The original output.
    Verbatim,
    /// The step's observation and the reference to the original.
    Stubbed,
    /// Head and tail of the original with an elision marker and the reference.
    Elided,
    /// The call has no result in the log.
    Missing,
}

/// A call and the result text sent with it.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedCall {
    /// The call as the model made it.
    pub call: ToolCall,
    /// What is sent as its result.
    pub content: MessageContent,
    /// Whether the result was an error.
    pub is_error: bool,
    /// How the result was rendered.
    pub form: ResultForm,
}

/// One message of the neutral request.
#[derive(Debug, Clone, PartialEq)]
pub enum Msg {
    /// System content.
    System(MessageContent),
    /// User content.
    User {
        /// Content.
        content: MessageContent,
        /// Participant name.
        name: Option<String>,
    },
    /// An assistant turn with its calls and their results.
    Assistant {
        /// Visible text.
        content: Option<MessageContent>,
        /// Reasoning (sent only by formats that accept it back).
        reasoning: Option<String>,
        /// Participant name.
        name: Option<String>,
        /// Calls with results.
        calls: Vec<RenderedCall>,
    },
}

/// A rendered request before serialisation.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Model name.
    pub model: String,
    /// Tools offered.
    pub tools: Vec<ToolSpec>,
    /// Messages in order.
    pub messages: Vec<Msg>,
    /// `messages[..stable_len]` is the stable prefix (cache breakpoint after it).
    pub stable_len: usize,
    /// Tokens the response may use (`max_tokens` where the format requires it).
    pub max_output_tokens: u64,
}
