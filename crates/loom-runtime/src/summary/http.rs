//! The LLM summarizer: OpenAI-compatible `/v1/chat/completions` or Anthropic `/v1/messages`,
//! through `loom-provider`'s client (the one HTTP stack Loom has), blocking on the worker's thread.
//!
//! The request is the conversation's request cut at its stable prefix — the same model, system
//! prompt, tools, pins and compact block, serialised by the same format code, so the bytes match
//! and the provider's prompt cache applies — followed by one user message holding the previous
//! summary, the bounded chunk and, last, the instruction. No `tool_choice` is sent: on Anthropic a
//! change of `tool_choice` invalidates cached message blocks; the instruction says not to call
//! tools, and a reply without text is an error.

use std::sync::OnceLock;
use std::time::Duration;

use loom_core::render::{Format, Msg, Request};
use loom_core::{Api, MessageContent};
use loom_provider::client::{CallError, Client, ProviderConfig};
use serde_json::Value;

use super::{Summarizer, SummaryRequest};
use crate::error::{Result, RuntimeError};

/// The whole-call limit unless [`HttpSummarizer::timeout`] says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// See the module documentation.
pub struct HttpSummarizer {
    api: Api,
    /// Where and how to call; `model` stays `None`, the body carries it.
    config: ProviderConfig,
    model: Option<String>,
    /// Built at the first call, from the config as the builder methods left it.
    client: OnceLock<Client>,
    name: String,
}

impl std::fmt::Debug for HttpSummarizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The config's own `Debug` redacts the key.
        f.debug_struct("HttpSummarizer")
            .field("api", &self.api)
            .field("config", &self.config)
            .field("model", &self.model)
            .finish()
    }
}

impl HttpSummarizer {
    /// A summarizer for `api` at `base_url` (`https://api.openai.com`, `http://127.0.0.1:8000/v1`:
    /// a trailing `/v1` is accepted). Timeout: two minutes for the whole call; failures before a
    /// reply starts (connection, 429, 5xx, 529) are retried by the provider client.
    pub fn new(api: Api, base_url: impl Into<String>) -> Self {
        let mut config = ProviderConfig::new(api, base_url);
        config.timeout = DEFAULT_TIMEOUT;
        Self {
            api,
            config,
            model: None,
            client: OnceLock::new(),
            name: format!("http:{}", Format::from(api).as_str()),
        }
    }

    /// The key sent as `Authorization: Bearer` (OpenAI) or `x-api-key` (Anthropic).
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.config.api_key = Some(key.into());
        self.client = OnceLock::new();
        self
    }

    /// A model other than the conversation's. The provider's cache is per model, so this gives up
    /// the prefix reuse; it is required when a request carries no conversation prefix.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        let model = model.into();
        self.name = format!("http:{}:{model}", Format::from(self.api).as_str());
        self.model = Some(model);
        self
    }

    /// The whole-request timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.config.timeout = timeout;
        self.client = OnceLock::new();
        self
    }

    /// The URL requests go to (the base URL as given when it is not a URL; the call then fails
    /// with a config error naming it).
    pub fn endpoint(&self) -> String {
        loom_provider::client::endpoint(self.api, &self.config.base_url)
            .map(String::from)
            .unwrap_or_else(|_| self.config.base_url.clone())
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
        let mut body = Format::from(self.api).body(&request);
        // Every field a server of the API may read the reply's bound from (Chat's older
        // `max_tokens` beside the render's own).
        if let Value::Object(map) = &mut body {
            for field in loom_wire::dialect(self.api).max_output_fields() {
                map.entry(*field)
                    .or_insert_with(|| Value::from(req.max_output_tokens));
            }
        }
        Ok(body)
    }

    /// The provider client, built once.
    fn client(&self) -> Result<&Client> {
        if let Some(client) = self.client.get() {
            return Ok(client);
        }
        let client = Client::new(self.config.clone()).map_err(|e| self.error(e))?;
        Ok(self.client.get_or_init(|| client))
    }

    /// A provider error in the runtime's terms: a status or transport failure is
    /// [`RuntimeError::Http`], a reply that cannot be read is [`RuntimeError::Response`].
    fn error(&self, e: CallError) -> RuntimeError {
        let url = self.endpoint();
        let status = match &e {
            CallError::Status { status, .. } | CallError::Overloaded { status, .. } => {
                Some(*status)
            }
            CallError::RateLimited { .. } => Some(429),
            CallError::Config { field, reason } => {
                return RuntimeError::config(format!("summarizer.{field}"), reason.clone())
            }
            CallError::Protocol { .. } => {
                return RuntimeError::Response {
                    url,
                    reason: e.to_string(),
                }
            }
            _ => None,
        };
        RuntimeError::Http {
            url,
            status,
            detail: e.to_string(),
        }
    }

    /// The summary text of `body`'s reply.
    fn call(&self, body: &Value) -> Result<String> {
        let done = self
            .client()?
            .complete(body, false, &mut |_| {})
            .map_err(|e| self.error(e))?;
        match done.reply.content {
            Some(text) if !text.trim().is_empty() => Ok(text),
            _ => Err(RuntimeError::Response {
                url: self.endpoint(),
                reason: "the reply holds no text (a tool call or an empty answer)".to_owned(),
            }),
        }
    }
}

impl Summarizer for HttpSummarizer {
    fn name(&self) -> &str {
        &self.name
    }

    fn summarize(&self, req: &SummaryRequest) -> Result<String> {
        let body = self.request_body(req)?;
        self.call(&body)
    }
}
