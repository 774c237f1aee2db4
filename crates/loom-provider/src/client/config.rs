//! Where a provider is and how to talk to it: the validated [`ProviderConfig`], its raw form in a
//! config file, the environment's keys and base URLs, and the one place that says which URL and
//! which credential headers each API takes (shared with `loom serve`'s proxy).

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::Url;
use serde::Deserialize;

use super::error::CallError;
use loom_core::Api;

/// The Anthropic API version Loom speaks, sent as `anthropic-version`.
pub const ANTHROPIC_VERSION: &str = loom_wire::ANTHROPIC_VERSION;

/// OpenAI's base URL, as its SDKs take it (with the version).
pub const OPENAI_BASE_URL: &str = OPENAI_ENV.default_base_url;

/// Anthropic's base URL, as its SDKs take it (without the version).
pub const ANTHROPIC_BASE_URL: &str = ANTHROPIC_ENV.default_base_url;

const OPENAI_ENV: loom_wire::ProviderEnv = loom_wire::Provider::OpenAi.env();
const ANTHROPIC_ENV: loom_wire::ProviderEnv = loom_wire::Provider::Anthropic.env();

/// How long to wait between attempts when the provider does not say.
///
/// The wait before retry `n` (from 0) is `base · 2ⁿ`, capped at `cap`, then shortened by a random
/// part of up to `jitter` of itself, so that many clients refused at once do not come back at
/// once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The wait before the first retry.
    pub base: Duration,
    /// The longest wait between two attempts.
    pub cap: Duration,
    /// The share of each wait that is random, from 0 (none) to 1 (anywhere from zero to the
    /// whole wait).
    pub jitter: f64,
}

impl Default for Backoff {
    /// Half a second doubling to eight, a quarter of it random: the official SDKs' order of
    /// magnitude.
    fn default() -> Self {
        Self {
            base: Duration::from_millis(500),
            cap: Duration::from_secs(8),
            jitter: 0.25,
        }
    }
}

/// Everything a [`super::Client`] needs to call one provider.
///
/// Build it with [`ProviderConfig::new`] or [`ProviderConfig::from_env`], or read it from a
/// config file's `[provider]` table ([`RawProviderConfig`]); the fields are public so a caller
/// can adjust one (a shorter timeout for a summarizer, say). `Debug` never shows the key nor any
/// header value, since those may be credentials.
#[derive(Clone)]
pub struct ProviderConfig {
    /// The wire format spoken.
    pub api: Api,
    /// The base URL as the provider's SDK takes it; see [`endpoint`] for how the path is added.
    pub base_url: String,
    /// The key sent as the API's credential header; `None` for servers that want none (a local
    /// vLLM or Ollama).
    pub api_key: Option<String>,
    /// The model put into every request body; `None` keeps the body's own `model`.
    pub model: Option<String>,
    /// The whole call, retries and waits included, up to the reply's last byte.
    pub timeout: Duration,
    /// Opening one TCP (and TLS) connection.
    pub connect_timeout: Duration,
    /// The longest silence allowed: before a reply's headers, and between two pieces of its body.
    pub idle_timeout: Duration,
    /// Attempts after the first; retries happen only before a reply's first byte.
    pub max_retries: u32,
    /// The waits between attempts when the provider gives no `retry-after`.
    pub backoff: Backoff,
    /// Extra headers sent with every request (`anthropic-beta`, `OpenAI-Organization`, …).
    pub headers: BTreeMap<String, String>,
}

impl std::fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("api", &self.api)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_retries", &self.max_retries)
            .field("backoff", &self.backoff)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The environment variables of an API's key and base URL, and its default base URL.
fn env_names(api: Api) -> (&'static str, &'static str, &'static str) {
    let env = loom_wire::dialect(api).provider().env();
    (env.key, env.base_url, env.default_base_url)
}

impl ProviderConfig {
    /// A config for `api` at `base_url` with no key, no model and the default limits: ten
    /// minutes for a whole call (long generations stream for minutes), ten seconds to connect,
    /// two minutes of silence, two retries.
    pub fn new(api: Api, base_url: impl Into<String>) -> Self {
        Self {
            api,
            base_url: base_url.into(),
            api_key: None,
            model: None,
            timeout: Duration::from_secs(600),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            max_retries: 2,
            backoff: Backoff::default(),
            headers: BTreeMap::new(),
        }
    }

    /// The config the official SDKs would build from the environment: `OPENAI_API_KEY` and
    /// `OPENAI_BASE_URL` for the OpenAI APIs, `ANTHROPIC_API_KEY` and `ANTHROPIC_BASE_URL` for
    /// Anthropic's, each base URL defaulting to the provider's own. A missing key is not an
    /// error here (local servers need none); the provider's 401 says so at the first call.
    pub fn from_env(api: Api, model: impl Into<String>) -> Result<Self, CallError> {
        Self::from_lookup(api, Some(model.into()), None, None, &|name| {
            std::env::var(name).ok()
        })
    }

    /// The config from the environment as read through `lookup` (tests pass a map), with the
    /// variable names and base URL a config file may override.
    pub(crate) fn from_lookup(
        api: Api,
        model: Option<String>,
        key_env: Option<&str>,
        base_url: Option<String>,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, CallError> {
        let (default_key_env, url_env, default_url) = env_names(api);
        let base_url = base_url
            .or_else(|| lookup(url_env).filter(|u| !u.trim().is_empty()))
            .unwrap_or_else(|| default_url.to_owned());
        let mut config = Self::new(api, base_url);
        config.api_key = lookup(key_env.unwrap_or(default_key_env)).filter(|k| !k.is_empty());
        config.model = model.filter(|m| !m.is_empty());
        config.validate()?;
        Ok(config)
    }

    /// Checks what can be checked before a call: the base URL, the key and headers as header
    /// values, the limits.
    pub fn validate(&self) -> Result<(), CallError> {
        endpoint(self.api, &self.base_url)?;
        if let Some(key) = &self.api_key {
            credential_headers(self.api, Some(key))?;
        }
        extra_headers(&self.headers)?;
        for (field, value) in [
            ("timeout", self.timeout),
            ("connect_timeout", self.connect_timeout),
            ("idle_timeout", self.idle_timeout),
        ] {
            if value.is_zero() {
                return Err(CallError::config(field, "must be longer than zero"));
            }
        }
        if !(0.0..=1.0).contains(&self.backoff.jitter) {
            return Err(CallError::config(
                "backoff.jitter",
                format!("{} is not between 0 and 1", self.backoff.jitter),
            ));
        }
        Ok(())
    }
}

/// The `[provider]` table of a config file, as written: every field optional but `api`, unknown
/// fields refused, durations in seconds or milliseconds as named.
///
/// ```toml
/// [provider]
/// api = "chat_completions"            # or "responses", "messages"
/// base_url = "http://127.0.0.1:11434/v1"
/// api_key_env = "OLLAMA_KEY"          # the variable holding the key (the key itself never)
/// model = "qwen2.5-coder"
/// timeout_secs = 300
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProviderConfig {
    /// The wire format; required.
    pub api: Option<Api>,
    /// The base URL; default: the API's `*_BASE_URL` variable, then the provider's own.
    pub base_url: Option<String>,
    /// The environment variable holding the key; default `OPENAI_API_KEY` or
    /// `ANTHROPIC_API_KEY`. A key is never written in the file itself.
    pub api_key_env: Option<String>,
    /// The model; default: the body's own.
    pub model: Option<String>,
    /// [`ProviderConfig::timeout`], in seconds.
    pub timeout_secs: Option<u64>,
    /// [`ProviderConfig::connect_timeout`], in seconds.
    pub connect_timeout_secs: Option<u64>,
    /// [`ProviderConfig::idle_timeout`], in seconds.
    pub idle_timeout_secs: Option<u64>,
    /// [`ProviderConfig::max_retries`].
    pub max_retries: Option<u32>,
    /// [`Backoff::base`], in milliseconds.
    pub backoff_base_ms: Option<u64>,
    /// [`Backoff::cap`], in milliseconds.
    pub backoff_cap_ms: Option<u64>,
    /// [`Backoff::jitter`].
    pub backoff_jitter: Option<f64>,
    /// [`ProviderConfig::headers`].
    pub headers: Option<BTreeMap<String, String>>,
}

impl RawProviderConfig {
    /// The validated config, the key read from the environment variable the file names.
    pub fn resolve(self) -> Result<ProviderConfig, CallError> {
        self.resolve_with(&|name| std::env::var(name).ok())
    }

    /// [`RawProviderConfig::resolve`] with the environment read through `lookup`.
    pub(crate) fn resolve_with(
        self,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ProviderConfig, CallError> {
        let api = self.api.ok_or_else(|| {
            CallError::config(
                "provider.api",
                "missing: expected \"chat_completions\", \"responses\", \"messages\" or \"gemini\"",
            )
        })?;
        let mut c = ProviderConfig::from_lookup(
            api,
            self.model,
            self.api_key_env.as_deref(),
            self.base_url,
            lookup,
        )
        .map_err(|e| e.in_table("provider"))?;
        let secs = Duration::from_secs;
        let ms = Duration::from_millis;
        c.timeout = self.timeout_secs.map(secs).unwrap_or(c.timeout);
        c.connect_timeout = self
            .connect_timeout_secs
            .map(secs)
            .unwrap_or(c.connect_timeout);
        c.idle_timeout = self.idle_timeout_secs.map(secs).unwrap_or(c.idle_timeout);
        c.max_retries = self.max_retries.unwrap_or(c.max_retries);
        c.backoff.base = self.backoff_base_ms.map(ms).unwrap_or(c.backoff.base);
        c.backoff.cap = self.backoff_cap_ms.map(ms).unwrap_or(c.backoff.cap);
        c.backoff.jitter = self.backoff_jitter.unwrap_or(c.backoff.jitter);
        c.headers = self.headers.unwrap_or_default();
        c.validate().map_err(|e| e.in_table("provider"))?;
        Ok(c)
    }
}

/// The URL `api`'s requests go to, from a base URL given the way that provider's SDK takes it.
///
/// Anthropic's base has no version (`https://api.anthropic.com`); a trailing `/v1` is accepted
/// and not doubled. OpenAI's base has one (`https://api.openai.com/v1`,
/// `http://127.0.0.1:11434/v1`, `…/v1beta/openai`) and the path is appended to it as is; a bare
/// host gets `/v1`, so `https://api.openai.com` works too.
pub fn endpoint(api: Api, base_url: &str) -> Result<Url, CallError> {
    let trimmed = base_url.trim().trim_end_matches('/');
    let url = Url::parse(trimmed)
        .map_err(|e| CallError::config("base_url", format!("`{trimmed}` is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(CallError::config(
            "base_url",
            format!("`{trimmed}` is not an http(s) URL"),
        ));
    }
    let full = loom_wire::dialect(api).url(trimmed);
    Url::parse(&full)
        .map_err(|e| CallError::config("base_url", format!("`{full}` is not a URL: {e}")))
}

/// The headers that carry `key` for `api`, and the API's version header: `Authorization: Bearer`
/// for OpenAI; `x-api-key` and `anthropic-version` for Anthropic (sent even without a key, since
/// every Anthropic request needs it).
///
/// A caller that forwards a client's own `anthropic-version` (the proxy) sends that one instead.
pub fn credential_headers(api: Api, key: Option<&str>) -> Result<HeaderMap, CallError> {
    let mut headers = HeaderMap::new();
    let secret = |value: String| {
        let mut value = HeaderValue::from_str(&value).map_err(|_| {
            CallError::config(
                "api_key",
                "holds characters a header cannot carry (a line break, a control character)",
            )
        })?;
        value.set_sensitive(true);
        Ok::<_, CallError>(value)
    };
    for header in loom_wire::dialect(api).credential_headers(key) {
        let value = if header.secret {
            secret(header.value)?
        } else {
            HeaderValue::from_str(&header.value).map_err(|_| {
                CallError::config(header.name, "holds characters a header cannot carry")
            })?
        };
        headers.insert(HeaderName::from_static(header.name), value);
    }
    Ok(headers)
}

/// The config's extra headers as a header map, naming the one that is not a valid header.
pub(crate) fn extra_headers(headers: &BTreeMap<String, String>) -> Result<HeaderMap, CallError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let field = format!("headers.{name}");
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| CallError::config(&field, "is not a valid header name"))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| CallError::config(&field, "holds characters a header cannot carry"))?;
        map.insert(name, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(api: Api, base: &str) -> String {
        endpoint(api, base)
            .map(|u| u.to_string())
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn endpoints_accept_base_urls_with_or_without_the_version() {
        let chat = Api::OpenaiChat;
        for base in [
            "https://api.openai.com/v1",
            "https://api.openai.com/v1/",
            "https://api.openai.com",
        ] {
            assert_eq!(
                url(chat, base),
                "https://api.openai.com/v1/chat/completions"
            );
        }
        assert_eq!(
            url(Api::OpenaiResponses, "http://127.0.0.1:11434/v1"),
            "http://127.0.0.1:11434/v1/responses"
        );
        assert_eq!(
            url(chat, "https://example.com/v1beta/openai/"),
            "https://example.com/v1beta/openai/chat/completions"
        );
        for base in [
            "https://api.anthropic.com",
            "https://api.anthropic.com/",
            "https://api.anthropic.com/v1",
            "https://api.anthropic.com/v1/",
        ] {
            assert_eq!(
                url(Api::Anthropic, base),
                "https://api.anthropic.com/v1/messages"
            );
        }
        assert!(url(chat, "api.openai.com").contains("base_url"));
        assert!(url(chat, "ftp://x/v1").contains("not an http(s) URL"));
    }

    #[test]
    fn credentials_per_api_and_a_key_that_cannot_be_a_header() {
        let h = credential_headers(Api::OpenaiChat, Some("sk-1")).unwrap();
        assert_eq!(h["authorization"], "Bearer sk-1");
        assert!(h["authorization"].is_sensitive());
        assert_eq!(h.len(), 1);
        let h = credential_headers(Api::Anthropic, Some("sk-ant")).unwrap();
        assert_eq!(h["x-api-key"], "sk-ant");
        assert_eq!(h["anthropic-version"], ANTHROPIC_VERSION);
        assert!(!h.contains_key("authorization"));
        assert_eq!(credential_headers(Api::Anthropic, None).unwrap().len(), 1);
        assert!(credential_headers(Api::OpenaiResponses, None)
            .unwrap()
            .is_empty());
        let err = credential_headers(Api::OpenaiResponses, Some("sk\nx")).unwrap_err();
        assert!(err.to_string().contains("api_key"), "{err}");
        assert!(!err.to_string().contains("sk"), "{err}");
    }

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn from_env_reads_each_providers_variables() {
        let vars = env(&[
            ("OPENAI_API_KEY", "sk-openai"),
            ("ANTHROPIC_API_KEY", "sk-ant"),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/v1"),
        ]);
        let c = ProviderConfig::from_lookup(
            Api::OpenaiResponses,
            Some("gpt-4o".into()),
            None,
            None,
            &vars,
        )
        .unwrap();
        assert_eq!(c.base_url, OPENAI_BASE_URL);
        assert_eq!(c.api_key.as_deref(), Some("sk-openai"));
        assert_eq!(c.model.as_deref(), Some("gpt-4o"));
        let c =
            ProviderConfig::from_lookup(Api::Anthropic, Some("claude".into()), None, None, &vars)
                .unwrap();
        assert_eq!(c.base_url, "http://127.0.0.1:9/v1");
        assert_eq!(c.api_key.as_deref(), Some("sk-ant"));
        let c = ProviderConfig::from_lookup(Api::Anthropic, None, None, None, &env(&[])).unwrap();
        assert_eq!((c.base_url.as_str(), c.api_key), (ANTHROPIC_BASE_URL, None));
        let err = ProviderConfig::from_lookup(
            Api::OpenaiChat,
            None,
            None,
            None,
            &env(&[("OPENAI_BASE_URL", "localhost:8000")]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("base_url"), "{err}");
    }

    #[test]
    fn debug_never_shows_the_key_or_header_values() {
        let mut c = ProviderConfig::new(Api::OpenaiChat, "http://x/v1");
        c.api_key = Some("sk-very-secret".into());
        c.headers
            .insert("x-proxy-token".into(), "tok-secret".into());
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("very-secret") && !shown.contains("tok-secret"),
            "{shown}"
        );
        assert!(
            shown.contains("<redacted>") && shown.contains("x-proxy-token"),
            "{shown}"
        );
    }

    #[test]
    fn a_config_file_table_resolves_with_its_key_variable() {
        let raw: RawProviderConfig = toml_like(
            r#"{"api": "chat_completions", "base_url": "http://127.0.0.1:11434/v1",
                "api_key_env": "OLLAMA_KEY", "model": "qwen", "timeout_secs": 30,
                "backoff_jitter": 0.5, "headers": {"x-team": "a"}}"#,
        );
        let c = raw.resolve_with(&env(&[("OLLAMA_KEY", "k")])).unwrap();
        assert_eq!(c.api, Api::OpenaiChat);
        assert_eq!(c.api_key.as_deref(), Some("k"));
        assert_eq!(c.timeout, Duration::from_secs(30));
        assert_eq!(c.backoff.jitter, 0.5);
        assert_eq!(c.headers["x-team"], "a");

        let err = serde_json::from_str::<RawProviderConfig>(r#"{"api": "messages", "key": "x"}"#)
            .unwrap_err();
        assert!(err.to_string().contains("unknown field `key`"), "{err}");
        let err = RawProviderConfig::default()
            .resolve_with(&env(&[]))
            .unwrap_err();
        assert!(err.to_string().contains("provider.api"), "{err}");
        let raw: RawProviderConfig = toml_like(r#"{"api": "messages", "backoff_jitter": 2.0}"#);
        let err = raw.resolve_with(&env(&[])).unwrap_err();
        assert!(err.to_string().contains("provider.backoff.jitter"), "{err}");
        let raw: RawProviderConfig = toml_like(r#"{"api": "messages", "headers": {"a b": "x"}}"#);
        let err = raw.resolve_with(&env(&[])).unwrap_err();
        assert!(err.to_string().contains("provider.headers.a b"), "{err}");
    }

    /// The same serde form a TOML table deserializes through.
    fn toml_like(json: &str) -> RawProviderConfig {
        serde_json::from_str(json).unwrap()
    }
}
