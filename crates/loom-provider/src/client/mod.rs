//! The HTTP client for the three APIs: one request, retried only before a reply's first byte,
//! read whole or streamed into an [`AssistantReply`] through the crate's own parsers.
//!
//! A blocking API ([`Client::complete`]) for a synchronous agent loop or a summary worker's
//! thread: it drives the async client on a current-thread runtime the [`Client`] owns. Callers
//! already on tokio use [`Client::complete_async`]. [`Client::embed`] calls an OpenAI-compatible
//! `/v1/embeddings` endpoint the same way.
//!
//! Retries: a failed connection, no reply headers within the idle timeout, or a status a provider
//! uses for "not now" (408, 409, 429, 5xx, 529) is tried again after the provider's
//! `retry-after-ms` / `retry-after`, or else an exponential back-off with jitter, as long as
//! attempts and the whole call's timeout allow. Once a successful reply has started, nothing is
//! retried: a reply that breaks off is [`CallError::StreamCut`], and the caller decides.
//!
//! ```no_run
//! use loom_provider::client::{Client, Delta, ProviderConfig};
//! use loom_core::Api;
//!
//! let client = Client::new(ProviderConfig::from_env(Api::Anthropic, "claude-sonnet-4-5")?)?;
//! let body = serde_json::json!({
//!     "max_tokens": 1024,
//!     "messages": [{"role": "user", "content": "List the files."}],
//! });
//! let mut shown = 0;
//! let done = client.complete(&body, true, &mut |d| {
//!     if let Delta::Text(t) = d {
//!         shown += t.len();
//!     }
//! })?;
//! let usage = done.reply.usage.unwrap_or_default();
//! assert!(usage.cached_input_tokens.unwrap_or(0) <= usage.input_tokens);
//! # Ok::<(), loom_provider::client::CallError>(())
//! ```

mod call;
mod config;
mod embed;
mod error;
mod retry;

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use reqwest::Url;
use serde_json::Value;

pub use config::{
    credential_headers, endpoint, Backoff, ProviderConfig, RawProviderConfig, ANTHROPIC_BASE_URL,
    ANTHROPIC_VERSION, OPENAI_BASE_URL,
};
pub use embed::{embeddings_endpoint, Embeddings};
pub use error::CallError;
pub use loom_wire::Delta;

use loom_wire::AssistantReply;

/// A finished call: the assistant turn and how it went.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The assistant turn: text, thinking (native blocks byte for byte), tool calls, usage.
    pub reply: AssistantReply,
    /// Requests sent, the successful one included.
    pub attempts: u32,
    /// From the start of the call (retries and waits included) to the first byte of the reply's
    /// body.
    pub first_byte: Duration,
    /// From the start of the call to the reply's last byte.
    pub total: Duration,
    /// The provider's id of the request (`x-request-id`, `request-id`), for support tickets.
    pub request_id: Option<String>,
}

/// A client for one provider endpoint; see the module documentation. Cheap to share between
/// threads (`&Client` is all a call needs).
pub struct Client {
    config: ProviderConfig,
    url: Url,
    headers: HeaderMap,
    /// Used only on `runtime`, so its pooled connections live on the runtime that drives them.
    blocking_http: reqwest::Client,
    /// Used on the caller's runtime by [`Client::complete_async`].
    async_http: reqwest::Client,
    /// Taken on drop, to shut down without blocking (dropping a runtime inside another panics).
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.url.as_str())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Client {
    /// A client for `config`, which is validated here (URL, key, headers, limits).
    pub fn new(config: ProviderConfig) -> Result<Self, CallError> {
        config.validate()?;
        let url = endpoint(config.api, &config.base_url)?;
        let mut headers = config::extra_headers(&config.headers)?;
        // The credentials win over an extra header of the same name.
        for (name, value) in &credential_headers(config.api, config.api_key.as_deref())? {
            headers.insert(name, value.clone());
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let http = || {
            reqwest::Client::builder()
                .connect_timeout(config.connect_timeout)
                // A redirected POST would be replayed as a GET; a provider never redirects.
                .redirect(reqwest::redirect::Policy::none())
                .user_agent(concat!("loom/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|e| CallError::config("client", format!("cannot build: {e}")))
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| CallError::config("client", format!("cannot start its runtime: {e}")))?;
        Ok(Self {
            blocking_http: http()?,
            async_http: http()?,
            url,
            headers,
            config,
            runtime: Some(runtime),
        })
    }

    /// The config the client was built with.
    pub fn config(&self) -> &ProviderConfig {
        &self.config
    }

    /// The URL requests go to.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// Sends `body` and returns the assistant turn, blocking the calling thread.
    ///
    /// The body is sent with `model` (when configured) and `stream` set, and for a streamed Chat
    /// Completions call `stream_options.include_usage`, so the usage always comes back.
    /// `on_delta` sees text, thinking and tool names as they arrive (once each, whole, when not
    /// streaming).
    ///
    /// Callable from any thread. On a thread that is inside a tokio runtime (a `spawn_blocking`
    /// closure, say) the call runs on a short-lived helper thread, since a runtime cannot be
    /// driven from inside another; on an async worker thread it still blocks that worker, so
    /// async code should use [`Client::complete_async`].
    pub fn complete(
        &self,
        body: &Value,
        stream: bool,
        on_delta: &mut (dyn FnMut(&Delta) + Send),
    ) -> Result<Completion, CallError> {
        self.complete_bytes(&call::value_bytes(body)?, stream, on_delta)
    }

    /// [`Client::complete`] of a body given as JSON bytes (a JSON object), as a caller that
    /// writes its request straight to bytes has it: no value tree is built. Only the body's top
    /// level is read, to set `model`, `stream` and `stream_options`; the rest is sent as it was
    /// given, so a compact body (as serde writes it) goes out as the same bytes the value would.
    pub fn complete_bytes(
        &self,
        body: &[u8],
        stream: bool,
        on_delta: &mut (dyn FnMut(&Delta) + Send),
    ) -> Result<Completion, CallError> {
        let Some(runtime) = &self.runtime else {
            return Err(CallError::config("client", "already shut down"));
        };
        let run = move || {
            // Moved in, so the closure runs once and can be sent to a helper thread.
            let on_delta = on_delta;
            runtime.block_on(call::run(self, &self.blocking_http, body, stream, on_delta))
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return run();
        }
        std::thread::scope(|scope| match scope.spawn(run).join() {
            Ok(result) => result,
            // Only `on_delta`, the caller's code, can panic in there: the panic is theirs.
            Err(panic) => std::panic::resume_unwind(panic),
        })
    }

    /// [`Client::complete`] for callers on a tokio runtime (with its time driver enabled, as
    /// `#[tokio::main]` has).
    pub async fn complete_async(
        &self,
        body: &Value,
        stream: bool,
        on_delta: &mut (dyn FnMut(&Delta) + Send),
    ) -> Result<Completion, CallError> {
        let bytes = call::value_bytes(body)?;
        call::run(self, &self.async_http, &bytes, stream, on_delta).await
    }

    /// [`Client::complete_async`] of a body given as JSON bytes (see [`Client::complete_bytes`]).
    pub async fn complete_bytes_async(
        &self,
        body: &[u8],
        stream: bool,
        on_delta: &mut (dyn FnMut(&Delta) + Send),
    ) -> Result<Completion, CallError> {
        call::run(self, &self.async_http, body, stream, on_delta).await
    }
}
