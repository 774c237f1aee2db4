//! Seed 002's `Task`: the unit its memory layers and event bus hold.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::time::de_utc_ms;

/// The actions the message converter knows (seed 002, Message Converter and Direct Message
/// Protocol).
pub mod action {
    /// A user request: becomes a user message.
    pub const EXECUTE: &str = "execute";
    /// The agent's thinking: becomes an assistant message.
    pub const THINKING: &str = "node.thinking";
    /// A tool call: becomes an assistant message with the call.
    pub const TOOL_CALL: &str = "node.tool_call";
    /// A tool result: rendered as its observation with its call (or omitted, the seed's rule).
    pub const TOOL_RESULT: &str = "node.tool_result";
    /// A point-to-point message between agents.
    pub const MESSAGE: &str = "node.message";
}

/// One task record (seed 002's `Task`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskItem {
    /// Its id.
    pub task_id: String,
    /// What it is (see [`action`]).
    pub action: String,
    /// Its parameters (`content`, `tool_name`, `priority`, `ttl_seconds`, ...).
    #[serde(default)]
    pub parameters: BTreeMap<String, Value>,
    /// The sending agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_agent: Option<String>,
    /// The receiving agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_agent: Option<String>,
    /// The session it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// When it was made, UTC milliseconds. From JSON also as text: an RFC 3339 timestamp, or a
    /// naive one, which is read as UTC.
    #[serde(alias = "created_at", deserialize_with = "de_utc_ms")]
    pub created_ms: i64,
}

impl TaskItem {
    /// A task with no parameters.
    pub fn new(task_id: impl Into<String>, action: impl Into<String>, created_ms: i64) -> Self {
        Self {
            task_id: task_id.into(),
            action: action.into(),
            parameters: BTreeMap::new(),
            source_agent: None,
            target_agent: None,
            session_id: None,
            created_ms,
        }
    }

    /// Sets a parameter.
    pub fn param(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.parameters.insert(key.to_owned(), value.into());
        self
    }

    /// Sets the session.
    pub fn session(mut self, session: impl Into<String>) -> Self {
        self.session_id = Some(session.into());
        self
    }

    /// Sets the source and target agents.
    pub fn between(mut self, source: impl Into<String>, target: impl Into<String>) -> Self {
        self.source_agent = Some(source.into());
        self.target_agent = Some(target.into());
        self
    }

    /// A string parameter.
    pub fn str_param(&self, key: &str) -> Option<&str> {
        self.parameters.get(key).and_then(Value::as_str)
    }

    /// `parameters.content`.
    pub fn content(&self) -> Option<&str> {
        self.str_param("content")
    }
}
