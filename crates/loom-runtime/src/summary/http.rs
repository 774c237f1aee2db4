//! The LLM summarizer: OpenAI-compatible `/v1/chat/completions` or Anthropic `/v1/messages`, over
//! blocking HTTP (no async runtime: it runs on the worker's thread).
//!
//! The request is the conversation's request cut at its stable prefix — the same model, system
//! prompt, tools, pins and compact block, serialised by the same format code, so the bytes match
//! and the provider's prompt cache applies — followed by one user message holding the previous
//! summary, the bounded chunk and, last, the instruction. No `tool_choice` is sent: on Anthropic a
//! change of `tool_choice` invalidates cached message blocks; the instruction says not to call
//! tools, and a reply without text is an error.

use std::time::Duration;

use loom_core::render::{Format, Msg, Request};
use loom_core::MessageContent;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Summarizer, SummaryRequest};
use crate::error::{Result, RuntimeError};

/// Anthropic API version header sent with every request.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Longest part of an error body kept in an error.
const DETAIL_CHARS: usize = 500;

/// The wire protocol of the summary endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Api {
    /// OpenAI Chat Completions and compatible servers.
    OpenaiChat,
    /// Anthropic Messages.
    Anthropic,
}

impl Api {
    /// The render format whose request this API accepts.
    pub fn format(self) -> Format {
        match self {
            Self::OpenaiChat => Format::OpenaiChat,
            Self::Anthropic => Format::Anthropic,
        }
    }

    fn path(self) -> &'static str {
        match self {
            Self::OpenaiChat => "/chat/completions",
            Self::Anthropic => "/messages",
        }
    }
}

/// See the module documentation.
pub struct HttpSummarizer {
    api: Api,
    base_url: String,
    api_key: Option<String>,
    model: Option<String>,
    agent: ureq::Agent,
    name: String,
}

impl std::fmt::Debug for HttpSummarizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSummarizer")
            .field("api", &self.api)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("model", &self.model)
            .finish()
    }
}

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::AgentBuilder::new().timeout(timeout).build()
}

fn cut(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

impl HttpSummarizer {
    /// A summarizer for `api` at `base_url` (`https://api.openai.com`, `http://127.0.0.1:8000/v1`:
    /// a trailing `/v1` is accepted). Timeout: 120 s.
    pub fn new(api: Api, base_url: impl Into<String>) -> Self {
        Self {
            api,
            base_url: base_url.into(),
            api_key: None,
            model: None,
            agent: agent(Duration::from_secs(120)),
            name: format!("http:{}", api.format().as_str()),
        }
    }

    /// The key sent as `Authorization: Bearer` (OpenAI) or `x-api-key` (Anthropic).
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// A model other than the conversation's. The provider's cache is per model, so this gives up
    /// the prefix reuse; it is required when a request carries no conversation prefix.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        let model = model.into();
        self.name = format!("http:{}:{model}", self.api.format().as_str());
        self.model = Some(model);
        self
    }

    /// The whole-request timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.agent = agent(timeout);
        self
    }

    /// The URL requests go to.
    pub fn endpoint(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        let base = base.strip_suffix("/v1").unwrap_or(base);
        format!("{base}/v1{}", self.api.path())
    }

    /// The request body for `req`: the conversation's prefix, then the prompt with the
    /// instruction last.
    pub fn request_body(&self, req: &SummaryRequest) -> Result<Value> {
        let mut request = match &req.prefix {
            Some(prefix) => prefix.clone(),
            None => Request {
                model: self.model.clone().ok_or_else(|| {
                    RuntimeError::config(
                        "summarizer.model",
                        "a model is required when the request has no conversation prefix",
                    )
                })?,
                tools: Vec::new(),
                messages: Vec::new(),
                stable_len: 0,
                max_output_tokens: 0,
            },
        };
        if let Some(model) = &self.model {
            request.model.clone_from(model);
        }
        request.max_output_tokens = req.max_output_tokens;
        request.messages.push(Msg::User {
            content: MessageContent::Text(req.prompt()),
            name: None,
        });
        let mut body = self.api.format().body(&request);
        if self.api == Api::OpenaiChat {
            if let Value::Object(map) = &mut body {
                map.insert("max_tokens".into(), Value::from(req.max_output_tokens));
            }
        }
        Ok(body)
    }

    fn post(&self, body: &Value) -> Result<Value> {
        let url = self.endpoint();
        let mut call = self
            .agent
            .post(&url)
            .set("content-type", "application/json");
        match (self.api, &self.api_key) {
            (Api::OpenaiChat, Some(key)) => {
                call = call.set("authorization", &format!("Bearer {key}"));
            }
            (Api::Anthropic, key) => {
                call = call.set("anthropic-version", ANTHROPIC_VERSION);
                if let Some(key) = key {
                    call = call.set("x-api-key", key);
                }
            }
            (Api::OpenaiChat, None) => {}
        }
        let response = match call.send_string(&body.to_string()) {
            Ok(r) => r,
            Err(ureq::Error::Status(code, r)) => {
                let detail = r.into_string().unwrap_or_default();
                return Err(RuntimeError::Http {
                    url,
                    status: Some(code),
                    detail: cut(&detail, DETAIL_CHARS),
                });
            }
            Err(ureq::Error::Transport(t)) => {
                return Err(RuntimeError::Http {
                    url,
                    status: None,
                    detail: t.to_string(),
                })
            }
        };
        let text = response.into_string().map_err(|e| RuntimeError::Http {
            url: url.clone(),
            status: None,
            detail: format!("reading the body: {e}"),
        })?;
        serde_json::from_str(&text).map_err(|e| RuntimeError::Response {
            url,
            reason: format!("body is not JSON ({e}): {}", cut(&text, DETAIL_CHARS)),
        })
    }

    fn text_of(&self, reply: &Value) -> Result<String> {
        let bad = |reason: &str| RuntimeError::Response {
            url: self.endpoint(),
            reason: reason.to_owned(),
        };
        let text = match self.api {
            Api::OpenaiChat => match &reply["choices"][0]["message"]["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<Vec<_>>()
                    .join(""),
                _ => return Err(bad("`choices[0].message.content` holds no text")),
            },
            Api::Anthropic => match &reply["content"] {
                Value::Array(blocks) => blocks
                    .iter()
                    .filter(|b| b["type"] == "text")
                    .filter_map(|b| b["text"].as_str())
                    .collect::<Vec<_>>()
                    .join(""),
                _ => return Err(bad("`content` is not a list of blocks")),
            },
        };
        if text.trim().is_empty() {
            return Err(bad(
                "the reply holds no text (a tool call or an empty answer)",
            ));
        }
        Ok(text)
    }
}

impl Summarizer for HttpSummarizer {
    fn name(&self) -> &str {
        &self.name
    }

    fn summarize(&self, req: &SummaryRequest) -> Result<String> {
        let body = self.request_body(req)?;
        let reply = self.post(&body)?;
        self.text_of(&reply)
    }
}
