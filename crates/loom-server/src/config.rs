//! What `loom serve` is told: the command line and the config file, resolved once into a
//! validated [`ServeConfig`].
//!
//! The file is read into an all-optional raw struct that refuses unknown keys, then merged with
//! the command line (which wins) and checked: an address that is not loopback with `--auth none`,
//! a limit of zero or an upstream URL that is not http(s) is an error naming the setting.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use loom_store::{ProxyMode, TenantId};
use serde::Deserialize;

/// Who may call the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// Local single user: no Loom key; the client's own `Authorization` goes upstream. Only on a
    /// loopback address.
    None,
    /// Shared: every request carries a Loom key; upstream credentials are the server's.
    Keys,
}

impl AuthMode {
    /// Parses `none` or `keys`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "none" => Some(Self::None),
            "keys" => Some(Self::Keys),
            _ => None,
        }
    }
}

/// An upstream provider endpoint and the credential the server holds for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// Base URL, as the provider's SDK takes it: `https://api.openai.com/v1` (Loom appends
    /// `/chat/completions`, `/responses`, `/models`) or `https://api.anthropic.com` (Loom appends
    /// `/v1/messages`).
    pub base_url: String,
    /// The credential sent upstream under `--auth keys` (never logged or echoed).
    pub key: Option<String>,
}

/// Limits that keep one client from starving the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Longest a request may take end to end (a stream included).
    pub request_timeout: Duration,
    /// Longest connecting to an upstream may take (the whole call is bounded by
    /// `request_timeout`).
    pub upstream_connect_timeout: Duration,
    /// Upstream calls in flight at once; past it a request waits `queue_timeout`, then gets 503.
    pub max_upstream_calls: usize,
    /// How long a request waits for an upstream slot or a store connection before 503.
    pub queue_timeout: Duration,
    /// Sessions whose render state is kept in memory (least recently used are dropped).
    pub live_sessions: usize,
    /// Bytes of render state kept in memory, estimated from the sessions' events (least
    /// recently used sessions are dropped past it, whatever their count).
    pub live_bytes: usize,
    /// Longest a connection may take to send a request's headers, counted from when it is
    /// idle (just opened, or done with its last reply): also the idle keep-alive timeout. The
    /// connection is closed past it.
    pub header_timeout: Duration,
    /// Longest a request's body may take to arrive once its headers have; past it the request
    /// gets a 408 and its connection is closed.
    pub body_timeout: Duration,
    /// Connections open at once; past it a new connection is answered 503 and closed.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 32 << 20,
            request_timeout: Duration::from_secs(600),
            upstream_connect_timeout: Duration::from_secs(60),
            max_upstream_calls: 512,
            queue_timeout: Duration::from_secs(5),
            live_sessions: 10_000,
            live_bytes: 1 << 30,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            max_connections: 4_096,
        }
    }
}

/// Everything the server needs, validated.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The database.
    pub db: PathBuf,
    /// Who may call.
    pub auth: AuthMode,
    /// The mode of requests whose key and headers name none.
    pub default_mode: ProxyMode,
    /// The `fit` budget (input tokens) of requests that name none with `X-Loom-Budget`: for
    /// clients that cannot send a header; `None` fits to the model's window.
    pub default_budget: Option<u64>,
    /// OpenAI (Chat Completions, Responses, models).
    pub openai: Upstream,
    /// Anthropic (Messages).
    pub anthropic: Upstream,
    /// Google (the Gemini API).
    pub gemini: Upstream,
    /// Per-tenant upstream credentials that override the server-wide ones.
    pub tenant_keys: BTreeMap<TenantId, TenantUpstreams>,
    /// Limits.
    pub limits: Limits,
    /// The render policy file (TOML), if any.
    pub policy: Option<PathBuf>,
    /// A model registry file extending the built-in one, if any.
    pub models: Option<PathBuf>,
    /// How what a `fit` render leaves out is recovered by the agent itself.
    pub recall: RecallConfig,
    /// Where spans of the proxied calls are exported (`[telemetry]`).
    pub telemetry: TelemetryConfig,
    /// What the web inspector keeps (`[inspector]`).
    pub inspector: InspectorConfig,
}

/// `[inspector]`: what the web inspector (`/ui`) keeps in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InspectorConfig {
    /// Bytes of request bodies kept exactly as sent, the oldest dropped first; 0 keeps none
    /// (the inspector then shows each request rebuilt from the log).
    pub keep_requests_bytes: usize,
}

impl Default for InspectorConfig {
    fn default() -> Self {
        Self {
            keep_requests_bytes: 64 << 20,
        }
    }
}

/// `[telemetry]`: OpenTelemetry traces of the proxied calls, off by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// The OTLP/HTTP collector (`http://127.0.0.1:4318`, to which `/v1/traces` is added, or
    /// its full traces URL); `None`: no spans are recorded.
    pub otlp_endpoint: Option<String>,
}

/// The variable that sets (and overrides) `telemetry.otlp_endpoint`.
pub const OTLP_ENDPOINT_ENV: &str = "LOOM_OTLP_ENDPOINT";

/// How an agent behind the proxy reads again what a `fit` render left out (`[recall]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecallConfig {
    /// `tool`, `files` or `off`.
    pub mode: RecallMode,
    /// The most tokens one answer of the recall tool holds (a longer original says how to read
    /// the rest).
    pub max_tokens: u64,
    /// The most recall rounds one client request may take before the reply goes to the client.
    pub max_rounds: u32,
    /// Where `files` mode writes offloaded outputs: a folder per session below it.
    pub folder: Option<PathBuf>,
}

/// What the proxy offers the model to recover what a render left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecallMode {
    /// From the first compaction point on, the request offers `loom_recall`, which Loom answers
    /// itself; every stub, group and notice says how to call it.
    Tool,
    /// As `tool`, and every offloaded output is also a file under `folder` whose absolute path
    /// the stub names (for agents on the same machine, `--auth none`).
    Files,
    /// No tool: stubs name references for `loom recall` and the API.
    Off,
}

impl Default for RecallConfig {
    fn default() -> Self {
        Self {
            mode: RecallMode::Tool,
            max_tokens: loom_store::recall::DEFAULT_MAX_TOKENS,
            max_rounds: 3,
            folder: None,
        }
    }
}

/// A tenant's own upstream credentials.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantUpstreams {
    /// Its OpenAI key.
    pub openai: Option<String>,
    /// Its Anthropic key.
    pub anthropic: Option<String>,
    /// Its Gemini API key.
    pub gemini: Option<String>,
}

impl TenantUpstreams {
    /// Its key for `provider`.
    pub fn key(&self, provider: loom_wire::Provider) -> Option<&String> {
        match provider {
            loom_wire::Provider::OpenAi => self.openai.as_ref(),
            loom_wire::Provider::Anthropic => self.anthropic.as_ref(),
            loom_wire::Provider::Google => self.gemini.as_ref(),
        }
    }
}

/// The command line's part, all optional so the file can fill the gaps.
#[derive(Debug, Clone, Default)]
pub struct ServeArgs {
    /// `--listen`.
    pub listen: Option<SocketAddr>,
    /// `--db`.
    pub db: PathBuf,
    /// `--config`.
    pub config: Option<PathBuf>,
    /// `--upstream-openai`.
    pub upstream_openai: Option<String>,
    /// `--upstream-anthropic`.
    pub upstream_anthropic: Option<String>,
    /// `--upstream-gemini`.
    pub upstream_gemini: Option<String>,
    /// `--auth`.
    pub auth: Option<AuthMode>,
}

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The config file is not valid TOML for this schema.
    #[error("config file {path}: {reason}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong (serde names the key).
        reason: String,
    },
    /// A setting has a value that cannot be used.
    #[error("setting `{setting}`: {reason}")]
    Invalid {
        /// Which setting (`listen`, `upstream.openai.url`, ...).
        setting: String,
        /// Why.
        reason: String,
    },
}

fn invalid(setting: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        setting: setting.into(),
        reason: reason.into(),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    auth: Option<String>,
    mode: Option<String>,
    budget: Option<u64>,
    policy: Option<PathBuf>,
    models: Option<PathBuf>,
    #[serde(default)]
    upstream: RawUpstreams,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    tenants: BTreeMap<String, RawTenant>,
    /// `recall = "files"` (the mode alone) or a `[recall]` table, read by [`recall_config`] so
    /// that an error in the table still names its key.
    recall: Option<toml::Value>,
    #[serde(default)]
    telemetry: RawTelemetry,
    #[serde(default)]
    inspector: RawInspector,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInspector {
    keep_requests_bytes: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTelemetry {
    otlp_endpoint: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRecall {
    mode: Option<String>,
    max_tokens: Option<u64>,
    max_rounds: Option<u32>,
    folder: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstreams {
    openai: Option<RawUpstream>,
    anthropic: Option<RawUpstream>,
    gemini: Option<RawUpstream>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    url: Option<String>,
    /// The environment variable holding the key (the key itself never sits in the file).
    key_env: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_body_bytes: Option<usize>,
    request_timeout_secs: Option<u64>,
    upstream_connect_timeout_secs: Option<u64>,
    max_upstream_calls: Option<usize>,
    queue_timeout_ms: Option<u64>,
    live_sessions: Option<usize>,
    live_bytes: Option<usize>,
    header_timeout_ms: Option<u64>,
    body_timeout_ms: Option<u64>,
    max_connections: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenant {
    openai_key_env: Option<String>,
    anthropic_key_env: Option<String>,
    gemini_key_env: Option<String>,
}

/// OpenAI's public endpoint, as its SDK's base URL.
pub const OPENAI_URL: &str = "https://api.openai.com/v1";
/// Anthropic's public endpoint, as its SDK's base URL.
pub const ANTHROPIC_URL: &str = "https://api.anthropic.com";
/// Where the server-wide OpenAI key is read from by default.
pub const OPENAI_KEY_ENV: &str = "LOOM_UPSTREAM_OPENAI_KEY";
/// Where the server-wide Anthropic key is read from by default.
pub const ANTHROPIC_KEY_ENV: &str = "LOOM_UPSTREAM_ANTHROPIC_KEY";
/// The Gemini API's public endpoint, as Google's SDKs take it.
pub const GEMINI_URL: &str = "https://generativelanguage.googleapis.com";
/// Where the server-wide Gemini API key is read from by default.
pub const GEMINI_KEY_ENV: &str = "LOOM_UPSTREAM_GEMINI_KEY";

impl ServeConfig {
    /// The upstream that serves `provider`'s APIs.
    pub fn upstream(&self, provider: loom_wire::Provider) -> &Upstream {
        match provider {
            loom_wire::Provider::OpenAi => &self.openai,
            loom_wire::Provider::Anthropic => &self.anthropic,
            loom_wire::Provider::Google => &self.gemini,
        }
    }

    /// Resolves the command line and the config file it names; `env` reads environment
    /// variables (the process environment in `loom serve`, a map in tests).
    pub fn resolve(
        args: ServeArgs,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let raw = match &args.config {
            Some(path) => read_file(path)?,
            None => RawConfig::default(),
        };
        let listen = match (args.listen, raw.listen.as_deref()) {
            (Some(addr), _) => addr,
            (None, Some(text)) => text
                .parse()
                .map_err(|e| invalid("listen", format!("`{text}` is not an address: {e}")))?,
            (None, None) => SocketAddr::from(([127, 0, 0, 1], 8080)),
        };
        let auth = match (args.auth, raw.auth.as_deref()) {
            (Some(a), _) => a,
            (None, Some(text)) => AuthMode::parse(text)
                .ok_or_else(|| invalid("auth", format!("`{text}`: expected none or keys")))?,
            (None, None) => AuthMode::None,
        };
        if auth == AuthMode::None && !listen.ip().is_loopback() {
            return Err(invalid(
                "auth",
                format!(
                    "`none` is only allowed on a loopback address, and {listen} is not one: \
                     use --auth keys to serve other machines"
                ),
            ));
        }
        let default_mode = match raw.mode.as_deref() {
            None => ProxyMode::Fit,
            Some(text) => text
                .parse()
                .map_err(|_| invalid("mode", format!("`{text}`: expected fit or observe")))?,
        };
        if raw.budget == Some(0) {
            return Err(invalid("budget", "must be greater than 0"));
        }
        let upstream = |name: &str,
                        arg: Option<String>,
                        raw: Option<RawUpstream>,
                        default_url: &str,
                        default_env: &str|
         -> Result<Upstream, ConfigError> {
            let raw = raw.unwrap_or_default();
            let base_url = arg
                .or(raw.url)
                .unwrap_or_else(|| default_url.to_owned())
                .trim_end_matches('/')
                .to_owned();
            if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
                return Err(invalid(
                    format!("upstream.{name}.url"),
                    format!("`{base_url}` is not an http(s) URL"),
                ));
            }
            let key = env(raw.key_env.as_deref().unwrap_or(default_env)).filter(|k| !k.is_empty());
            Ok(Upstream { base_url, key })
        };
        let openai = upstream(
            "openai",
            args.upstream_openai,
            raw.upstream.openai,
            OPENAI_URL,
            OPENAI_KEY_ENV,
        )?;
        let anthropic = upstream(
            "anthropic",
            args.upstream_anthropic,
            raw.upstream.anthropic,
            ANTHROPIC_URL,
            ANTHROPIC_KEY_ENV,
        )?;
        let gemini = upstream(
            "gemini",
            args.upstream_gemini,
            raw.upstream.gemini,
            GEMINI_URL,
            GEMINI_KEY_ENV,
        )?;
        let mut tenant_keys = BTreeMap::new();
        for (name, t) in raw.tenants {
            let tenant = TenantId::new(&name)
                .map_err(|e| invalid(format!("tenants.{name}"), e.to_string()))?;
            let read = |var: Option<String>| var.and_then(|v| env(&v)).filter(|k| !k.is_empty());
            tenant_keys.insert(
                tenant,
                TenantUpstreams {
                    openai: read(t.openai_key_env),
                    anthropic: read(t.anthropic_key_env),
                    gemini: read(t.gemini_key_env),
                },
            );
        }
        let d = Limits::default();
        let r = raw.limits;
        let positive = |name: &str, v: Option<u64>, default: u64| match v {
            Some(0) => Err(invalid(format!("limits.{name}"), "must be greater than 0")),
            Some(v) => Ok(v),
            None => Ok(default),
        };
        let limits = Limits {
            max_body_bytes: positive(
                "max_body_bytes",
                r.max_body_bytes.map(|v| v as u64),
                d.max_body_bytes as u64,
            )? as usize,
            request_timeout: Duration::from_secs(positive(
                "request_timeout_secs",
                r.request_timeout_secs,
                d.request_timeout.as_secs(),
            )?),
            upstream_connect_timeout: Duration::from_secs(positive(
                "upstream_connect_timeout_secs",
                r.upstream_connect_timeout_secs,
                d.upstream_connect_timeout.as_secs(),
            )?),
            max_upstream_calls: positive(
                "max_upstream_calls",
                r.max_upstream_calls.map(|v| v as u64),
                d.max_upstream_calls as u64,
            )? as usize,
            queue_timeout: Duration::from_millis(positive(
                "queue_timeout_ms",
                r.queue_timeout_ms,
                d.queue_timeout.as_millis() as u64,
            )?),
            live_sessions: positive(
                "live_sessions",
                r.live_sessions.map(|v| v as u64),
                d.live_sessions as u64,
            )? as usize,
            live_bytes: positive(
                "live_bytes",
                r.live_bytes.map(|v| v as u64),
                d.live_bytes as u64,
            )? as usize,
            header_timeout: Duration::from_millis(positive(
                "header_timeout_ms",
                r.header_timeout_ms,
                d.header_timeout.as_millis() as u64,
            )?),
            body_timeout: Duration::from_millis(positive(
                "body_timeout_ms",
                r.body_timeout_ms,
                d.body_timeout.as_millis() as u64,
            )?),
            max_connections: positive(
                "max_connections",
                r.max_connections.map(|v| v as u64),
                d.max_connections as u64,
            )? as usize,
        };
        let recall = recall_config(raw.recall, auth, &args.db)?;
        let otlp_endpoint = env(OTLP_ENDPOINT_ENV)
            .or(raw.telemetry.otlp_endpoint)
            .map(|e| e.trim().to_owned())
            .filter(|e| !e.is_empty());
        if let Some(e) = &otlp_endpoint {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                return Err(invalid(
                    "telemetry.otlp_endpoint",
                    format!("`{e}` is not an http(s) URL"),
                ));
            }
        }
        Ok(Self {
            recall,
            listen,
            db: args.db,
            auth,
            default_mode,
            default_budget: raw.budget,
            openai,
            anthropic,
            gemini,
            tenant_keys,
            limits,
            policy: raw.policy,
            models: raw.models,
            telemetry: TelemetryConfig { otlp_endpoint },
            inspector: InspectorConfig {
                keep_requests_bytes: match raw.inspector.keep_requests_bytes {
                    None => InspectorConfig::default().keep_requests_bytes,
                    Some(n) => usize::try_from(n).map_err(|_| {
                        invalid(
                            "inspector.keep_requests_bytes",
                            format!("{n} bytes is more than this machine can address"),
                        )
                    })?,
                },
            },
        })
    }
}

/// The `[recall]` section, checked: `files` needs `--auth none` (the files are readable by
/// whoever runs the agent on this machine) and a folder it can name absolutely.
fn recall_config(
    raw: Option<toml::Value>,
    auth: AuthMode,
    db: &Path,
) -> Result<RecallConfig, ConfigError> {
    let raw = match raw {
        None => RawRecall::default(),
        Some(toml::Value::String(mode)) => RawRecall {
            mode: Some(mode),
            ..RawRecall::default()
        },
        Some(table @ toml::Value::Table(_)) => {
            RawRecall::deserialize(table).map_err(|e| invalid("recall", e.to_string()))?
        }
        Some(other) => {
            return Err(invalid(
                "recall",
                format!("expected \"tool\", \"files\", \"off\" or a table, not {other}"),
            ))
        }
    };
    let d = RecallConfig::default();
    let mode = match raw.mode.as_deref() {
        None | Some("tool") => RecallMode::Tool,
        Some("files") => RecallMode::Files,
        Some("off") => RecallMode::Off,
        Some(other) => {
            return Err(invalid(
                "recall.mode",
                format!("`{other}`: expected tool, files or off"),
            ))
        }
    };
    if raw.max_tokens.is_some_and(|t| t < 100) {
        return Err(invalid("recall.max_tokens", "must be at least 100"));
    }
    if raw.max_rounds == Some(0) {
        return Err(invalid("recall.max_rounds", "must be greater than 0"));
    }
    let folder = match (mode, raw.folder) {
        (RecallMode::Files, _) if auth != AuthMode::None => return Err(invalid(
            "recall.mode",
            "`files` writes outputs where the agent's own tools read them: only with --auth none",
        )),
        (RecallMode::Files, Some(f)) => Some(f),
        (RecallMode::Files, None) if db.to_str().is_some_and(|d| d.starts_with("postgres")) => {
            return Err(invalid(
                "recall.folder",
                "name a folder for `files` mode: the database is not a file",
            ))
        }
        (RecallMode::Files, None) => Some(loom_store::Workspace::folder_of(db).join("recall")),
        (_, folder) => folder,
    };
    let folder = match folder {
        Some(f) if f.is_relative() => Some(
            std::env::current_dir()
                .map_err(|e| invalid("recall.folder", e.to_string()))?
                .join(f),
        ),
        other => other,
    };
    Ok(RecallConfig {
        mode,
        max_tokens: raw.max_tokens.unwrap_or(d.max_tokens),
        max_rounds: raw.max_rounds.unwrap_or(d.max_rounds),
        folder,
    })
}

fn read_file(path: &Path) -> Result<RawConfig, ConfigError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: shown.clone(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: shown,
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(args: ServeArgs) -> Result<ServeConfig, ConfigError> {
        ServeConfig::resolve(args, &|name| {
            (name == OPENAI_KEY_ENV).then(|| "sk-test".to_owned())
        })
    }

    #[test]
    fn defaults_are_local_and_keyless() {
        let c = resolve(ServeArgs::default()).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.auth, AuthMode::None);
        assert_eq!(c.openai.base_url, OPENAI_URL);
        assert_eq!(c.openai.key.as_deref(), Some("sk-test"));
        assert_eq!(c.anthropic.key, None);
    }

    #[test]
    fn auth_none_is_refused_off_loopback() {
        let err = resolve(ServeArgs {
            listen: Some("0.0.0.0:8080".parse().unwrap()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("setting `auth`"), "{err}");
        let ok = resolve(ServeArgs {
            listen: Some("0.0.0.0:8080".parse().unwrap()),
            auth: Some(AuthMode::Keys),
            ..Default::default()
        });
        assert!(ok.is_ok());
    }

    #[test]
    fn a_bad_file_names_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("serve.toml");
        std::fs::write(&path, "[limits]\nmax_body_byte = 3\n").unwrap();
        let err = resolve(ServeArgs {
            config: Some(path.clone()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("max_body_byte"), "{err}");
        std::fs::write(&path, "[limits]\nlive_sessions = 0\n").unwrap();
        let err = resolve(ServeArgs {
            config: Some(path.clone()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("limits.live_sessions"), "{err}");
        std::fs::write(&path, "[upstream.openai]\nurl = \"ftp://x\"\n").unwrap();
        let err = resolve(ServeArgs {
            config: Some(path),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("upstream.openai.url"), "{err}");
    }

    #[test]
    fn telemetry_is_off_by_default_and_the_variable_wins_over_the_file() {
        assert_eq!(
            resolve(ServeArgs::default())
                .unwrap()
                .telemetry
                .otlp_endpoint,
            None
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("serve.toml");
        std::fs::write(
            &path,
            "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\n",
        )
        .unwrap();
        let args = || ServeArgs {
            config: Some(path.clone()),
            ..Default::default()
        };
        let c = resolve(args()).unwrap();
        assert_eq!(
            c.telemetry.otlp_endpoint.as_deref(),
            Some("http://127.0.0.1:4318")
        );
        let c = ServeConfig::resolve(args(), &|name| {
            (name == OTLP_ENDPOINT_ENV).then(|| "http://collector:4318".to_owned())
        })
        .unwrap();
        assert_eq!(
            c.telemetry.otlp_endpoint.as_deref(),
            Some("http://collector:4318")
        );
        std::fs::write(&path, "[telemetry]\notlp_endpoint = \"collector:4317\"\n").unwrap();
        let err = resolve(args()).unwrap_err();
        assert!(err.to_string().contains("telemetry.otlp_endpoint"), "{err}");
        std::fs::write(&path, "[telemetry]\nendpoint = \"http://x\"\n").unwrap();
        let err = resolve(args()).unwrap_err();
        assert!(err.to_string().contains("endpoint"), "{err}");
    }

    #[test]
    fn recall_is_a_mode_or_a_table_and_files_needs_auth_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("serve.toml");
        let with = |text: &str| {
            std::fs::write(&path, text).unwrap();
            resolve(ServeArgs {
                config: Some(path.clone()),
                db: dir.path().join("loom.db"),
                ..Default::default()
            })
        };
        let c = with("recall = \"files\"\n").unwrap();
        assert_eq!(c.recall.mode, RecallMode::Files);
        assert_eq!(
            c.recall.folder,
            Some(dir.path().join("loom.workspace/recall"))
        );
        let c = with("[recall]\nmode = \"off\"\nmax_rounds = 1\n").unwrap();
        assert_eq!((c.recall.mode, c.recall.max_rounds), (RecallMode::Off, 1));
        assert_eq!(with("").unwrap().recall, RecallConfig::default());
        let err = with("[recall]\nmax_round = 1\n").unwrap_err();
        assert!(err.to_string().contains("max_round"), "{err}");
        let err = with("recall = \"file\"\n").unwrap_err();
        assert!(err.to_string().contains("recall.mode"), "{err}");
        let err = with("auth = \"keys\"\nrecall = \"files\"\n").unwrap_err();
        assert!(err.to_string().contains("--auth none"), "{err}");
    }

    #[test]
    fn the_inspector_keeps_64_mib_of_requests_unless_told() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("serve.toml");
        let with = |text: &str| {
            std::fs::write(&path, text).unwrap();
            resolve(ServeArgs {
                config: Some(path.clone()),
                ..Default::default()
            })
        };
        assert_eq!(with("").unwrap().inspector.keep_requests_bytes, 64 << 20);
        let c = with("[inspector]\nkeep_requests_bytes = 0\n").unwrap();
        assert_eq!(c.inspector.keep_requests_bytes, 0);
        let err = with("[inspector]\nkeep_request_bytes = 1\n").unwrap_err();
        assert!(err.to_string().contains("keep_request_bytes"), "{err}");
        let err = with("[inspector]\nkeep_requests_bytes = -1\n").unwrap_err();
        assert!(err.to_string().contains("keep_requests_bytes"), "{err}");
    }
}
