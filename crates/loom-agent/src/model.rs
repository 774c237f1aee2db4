//! The model a run talks to: a provider over HTTP, or a script of replies for tests and demos.

use std::path::Path;

use loom_wire::{parse_reply, AssistantReply};

use loom_core::Api;
use serde_json::Value;

use crate::error::{AgentError, Result};

/// What answers a run's requests.
pub trait Model: Send {
    /// The wire format its requests are written in.
    fn api(&self) -> Api;

    /// Answers one request body: Loom's render, `model` set, as the JSON bytes to send (a JSON
    /// object in [`Model::api`]'s format). `on_text` sees the reply's text as it arrives, for the
    /// terminal. An error is the provider's message; nothing of a failed call reaches the log.
    fn call(
        &mut self,
        body: &[u8],
        on_text: &mut dyn FnMut(&str),
    ) -> Result<AssistantReply, String>;
}

/// Replies from a file, in order: `--provider scripted --script FILE`.
///
/// FILE is a JSON list of OpenAI Chat assistant messages (`content`, and `tool_calls` with the
/// wire names of Loom's tools, `fs__read_file`). A call without an `id` gets `call_<turn>_<n>`.
/// Each is read by the same parser as a provider's reply, so a script cannot hold a turn a
/// provider could not send.
#[derive(Debug, Clone)]
pub struct Scripted {
    turns: Vec<AssistantReply>,
    next: usize,
}

impl Scripted {
    /// Reads a script file.
    pub fn load(path: &Path) -> Result<Self> {
        let what = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| AgentError::config(&what, format!("cannot read the script: {e}")))?;
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| AgentError::config(&what, format!("not JSON: {e}")))?;
        Self::from_value(&value).map_err(|reason| AgentError::config(what, reason))
    }

    /// A script from its JSON list.
    pub fn from_value(value: &Value) -> Result<Self, String> {
        let Some(list) = value.as_array() else {
            return Err("expected a JSON list of assistant messages".into());
        };
        let mut turns = Vec::with_capacity(list.len());
        for (i, message) in list.iter().enumerate() {
            let Some(object) = message.as_object() else {
                return Err(format!("[{i}]: expected an assistant message object"));
            };
            if let Some(role) = object
                .get("role")
                .filter(|r| r.as_str() != Some("assistant"))
            {
                return Err(format!("[{i}].role: expected \"assistant\", found {role}"));
            }
            let mut message = message.clone();
            message["role"] = Value::from("assistant");
            if let Some(Value::Array(calls)) = message.get_mut("tool_calls") {
                for (n, call) in calls.iter_mut().enumerate() {
                    if call.get("id").is_none() {
                        call["id"] = Value::from(format!("call_{}_{}", i + 1, n + 1));
                    }
                    if call.get("type").is_none() {
                        call["type"] = Value::from("function");
                    }
                    // Arguments given as an object are written as the provider would send them.
                    if let Some(args) = call.pointer_mut("/function/arguments") {
                        if !args.is_string() {
                            *args = Value::from(args.to_string());
                        }
                    }
                }
            }
            let body = serde_json::json!({
                "id": format!("scripted-{}", i + 1),
                "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            });
            let bytes = serde_json::to_vec(&body).map_err(|e| format!("[{i}]: {e}"))?;
            let reply = parse_reply(Api::OpenaiChat, &bytes).map_err(|e| format!("[{i}]: {e}"))?;
            turns.push(reply);
        }
        Ok(Self { turns, next: 0 })
    }

    /// Skips the replies a resumed run's log already holds.
    pub fn skip(&mut self, turns: usize) {
        self.next = self.next.saturating_add(turns).min(self.turns.len());
    }

    /// How many replies are left.
    pub fn remaining(&self) -> usize {
        self.turns.len() - self.next
    }
}

impl Model for Scripted {
    fn api(&self) -> Api {
        Api::OpenaiChat
    }

    fn call(
        &mut self,
        _body: &[u8],
        on_text: &mut dyn FnMut(&str),
    ) -> Result<AssistantReply, String> {
        let Some(reply) = self.turns.get(self.next) else {
            return Err(format!(
                "the script has no reply {} (it holds {})",
                self.next + 1,
                self.turns.len()
            ));
        };
        self.next += 1;
        if let Some(text) = &reply.content {
            on_text(text);
        }
        Ok(reply.clone())
    }
}

/// A provider over HTTP (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages, or an
/// OpenAI-compatible server), through the provider client `loom serve` and the summarizers use.
/// Replies are streamed; retries happen only before a reply's first byte.
pub struct Http {
    client: loom_provider::client::Client,
    api: Api,
}

impl std::fmt::Debug for Http {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http")
            .field("url", &self.client.url().as_str())
            .finish()
    }
}

impl Http {
    /// A model over `config`.
    pub fn new(config: loom_provider::client::ProviderConfig) -> Result<Self> {
        let api = config.api;
        let client = loom_provider::client::Client::new(config)
            .map_err(|e| AgentError::config("provider", e.to_string()))?;
        Ok(Self { client, api })
    }
}

impl Model for Http {
    fn api(&self) -> Api {
        self.api
    }

    fn call(
        &mut self,
        body: &[u8],
        on_text: &mut dyn FnMut(&str),
    ) -> Result<AssistantReply, String> {
        // The client wants a `Send` callback (it may run on a helper thread): text is gathered
        // there and handed to the terminal when the reply is complete.
        let text = std::sync::Mutex::new(String::new());
        let mut on_delta = |d: &loom_provider::client::Delta| {
            if let loom_provider::client::Delta::Text(t) = d {
                if let Ok(mut all) = text.lock() {
                    all.push_str(t);
                }
            }
        };
        let completion = self
            .client
            .complete_bytes(body, true, &mut on_delta)
            .map_err(|e| e.to_string())?;
        if let Ok(all) = text.lock() {
            if !all.is_empty() {
                on_text(&all);
            }
        }
        Ok(completion.reply)
    }
}

/// The model a configuration's `[provider]` names (or, without one, OpenAI Chat Completions with
/// `OPENAI_API_KEY` and `OPENAI_BASE_URL` from the environment), for `model`.
pub fn from_config(config: &crate::Config, model: &str) -> Result<Box<dyn Model>> {
    let provider = match &config.provider {
        Some(table) => {
            let mut raw: loom_provider::client::RawProviderConfig = table
                .clone()
                .try_into()
                .map_err(|e: toml::de::Error| AgentError::config("provider", e.to_string()))?;
            if raw.model.is_none() {
                raw.model = Some(model.to_owned());
            }
            raw.resolve()
                .map_err(|e| AgentError::config("provider", e.to_string()))?
        }
        None => loom_provider::client::ProviderConfig::from_env(Api::OpenaiChat, model)
            .map_err(|e| AgentError::config("provider", e.to_string()))?,
    };
    Ok(Box::new(Http::new(provider)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_reads_as_provider_replies() {
        let script = serde_json::json!([
            {"content": null, "tool_calls": [{"function": {"name": "fs__read_file", "arguments": {"path": "a.txt"}}}]},
            {"content": "done"}
        ]);
        let mut s = Scripted::from_value(&script).unwrap();
        let first = s.call(b"{}", &mut |_| {}).unwrap();
        assert_eq!(first.tool_calls[0].id, "call_1_1");
        assert_eq!(first.tool_calls[0].name, "fs__read_file");
        assert_eq!(first.tool_calls[0].arguments, r#"{"path":"a.txt"}"#);
        assert_eq!(
            s.call(b"{}", &mut |_| {}).unwrap().content.as_deref(),
            Some("done")
        );
        assert!(s
            .call(b"{}", &mut |_| {})
            .unwrap_err()
            .contains("no reply 3"));
    }

    #[test]
    fn a_bad_script_names_the_entry() {
        let err = Scripted::from_value(&serde_json::json!([{"content": "x"}, 3])).unwrap_err();
        assert!(err.starts_with("[1]"), "{err}");
        let err = Scripted::from_value(&serde_json::json!([{"role": "user", "content": "x"}]))
            .unwrap_err();
        assert!(err.contains("[0].role"), "{err}");
    }
}
