//! A run's configuration file (`loom run --config FILE`), and the action space it builds.
//!
//! ```toml
//! model = "gpt-4o"
//! budget = 16000
//! approval = "untrusted"          # untrusted | on-request | never
//! max_depth = 2                   # how deep spawned agents nest (0: no agent:spawn)
//! system = "You are …"            # the system prompt (a default otherwise)
//!
//! [provider]                      # where the model is (see the provider client's settings)
//! api = "chat_completions"        # chat_completions | responses | messages
//! base_url = "http://127.0.0.1:11434/v1"
//! api_key_env = "OPENAI_API_KEY"
//!
//! [limits]
//! max_turns = 50
//! max_wall_seconds = 1800
//! max_tokens = 2000000
//! max_cost_usd = 5.0
//!
//! [prices]                        # per million tokens
//! input = 2.5
//! cached_input = 1.25
//! output = 10.0
//!
//! [sandbox]
//! network = false
//! readable = ["/opt/datasets"]    # besides the system directories and the workspace
//! timeout_seconds = 120
//! memory_mb = 4096
//! processes = 256
//! unsandboxed = false             # run without Landlock/seccomp (only limits): an explicit choice
//!
//! [exec_policy]
//! file = "policy.toml"            # rules over the built-in read-only list
//!
//! [tools]
//! scripts = "scripts"             # Level 3: the registry folder
//! web_search = "my-search {query}"  # a command printing results; none: web:search says so
//!
//! [memory]
//! tools = true                    # memory:search and memory:save (default: with an SQLite db)
//!
//! [knowledge]                     # inject the best memories and kb chunks for the task
//! limit = 5                       # snippets per turn, within injection_reserve
//! memory = true                   # the agent's long-term memory (L4)
//! kb = true                       # the knowledge base (`loom kb add`)
//!
//! [telemetry]                     # OpenTelemetry spans of the model calls (off by default)
//! otlp_endpoint = "http://127.0.0.1:4318"   # OTLP/HTTP; LOOM_OTLP_ENDPOINT overrides it
//!
//! [[tools.user]]
//! name = "deploy:preview"
//! description = "Deploy the workspace to a preview URL."
//! command = "./deploy.sh --preview {branch}"
//! parameters = { type = "object", properties = { branch = { type = "string" } }, required = ["branch"] }
//! requires_approval = true
//! ```
//!
//! Relative paths are relative to the configuration file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Deserialize;

use crate::error::{AgentError, Result};
use crate::tools::{
    Actions, Approval, Fetcher, Ran, Scripts, SearchBackend, ShellPolicy, ShellRunner, UserTool,
    Verdict,
};
use crate::{names, Limits, Prices};

/// The file, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The model.
    pub model: Option<String>,
    /// The request budget.
    pub budget: Option<u64>,
    /// The approval policy.
    pub approval: Option<String>,
    /// How deep children nest.
    pub max_depth: Option<u32>,
    /// The system prompt.
    pub system: Option<String>,
    /// The provider (read by the provider client).
    pub provider: Option<toml::Value>,
    /// Limits.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// Prices.
    pub prices: Option<Prices>,
    /// The sandbox.
    #[serde(default)]
    pub sandbox: SandboxConfig,
    /// The exec policy.
    #[serde(default)]
    pub exec_policy: PolicyConfig,
    /// Tools.
    #[serde(default)]
    pub tools: ToolsConfig,
    /// The summary worker run between turns (none: no summaries are written).
    pub summarizer: Option<SummarizerConfig>,
    /// Tokens kept free at each request's tail for what hooks inject.
    pub injection_reserve: Option<u64>,
    /// Memory tools.
    #[serde(default)]
    pub memory: MemoryConfig,
    /// The knowledge hook (none: nothing is injected).
    pub knowledge: Option<KnowledgeConfig>,
    /// Where spans of the model calls go.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// Where the file is (relative paths are resolved against it).
    #[serde(skip)]
    pub dir: PathBuf,
}

/// `[memory]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryConfig {
    /// Whether agents get `memory:search` and `memory:save` (default: yes, when the database
    /// can hold memory).
    pub tools: Option<bool>,
}

/// `[knowledge]`: each turn, the best long-term memories and knowledge-base chunks for the
/// current task are injected at the request's tail, under the injection reserve.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnowledgeConfig {
    /// The most snippets per turn.
    pub limit: Option<usize>,
    /// Draw on the agent's long-term memory (L4; default yes).
    pub memory: Option<bool>,
    /// Draw on the knowledge base (`loom kb add`; default yes).
    pub kb: Option<bool>,
}

impl KnowledgeConfig {
    /// Snippets per turn when the file sets no limit.
    pub const DEFAULT_LIMIT: usize = 5;

    /// The injection reserve used when the file sets none: knowledge needs room to land in.
    pub const DEFAULT_RESERVE: u64 = 1_000;
}

/// `[telemetry]`: OpenTelemetry spans of the run's model calls, one per call, exported over
/// OTLP/HTTP.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The collector (`http://127.0.0.1:4318`, to which `/v1/traces` is added, or its full
    /// traces URL); none: no spans.
    pub otlp_endpoint: Option<String>,
}

/// `[limits]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Model calls.
    pub max_turns: Option<u32>,
    /// Wall-clock seconds.
    pub max_wall_seconds: Option<u64>,
    /// Tokens in and out.
    pub max_tokens: Option<u64>,
    /// Dollars.
    pub max_cost_usd: Option<f64>,
}

/// `[sandbox]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// Allow network sockets.
    #[serde(default)]
    pub network: bool,
    /// More readable paths.
    #[serde(default)]
    pub readable: Vec<PathBuf>,
    /// More paths hidden inside readable ones.
    #[serde(default)]
    pub hidden: Vec<PathBuf>,
    /// Wall-clock timeout per command.
    pub timeout_seconds: Option<u64>,
    /// CPU seconds per process.
    pub cpu_seconds: Option<u64>,
    /// Address space per process, MiB.
    pub memory_mb: Option<u64>,
    /// Tasks at once.
    pub processes: Option<u64>,
    /// Largest file written, MiB.
    pub file_size_mb: Option<u64>,
    /// Run without Landlock and seccomp.
    #[serde(default)]
    pub unsandboxed: bool,
}

/// `[summarizer]`: what writes the session's summary between turns.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SummarizerConfig {
    /// `deterministic` (no model: a structured digest of the steps), or `http`.
    pub kind: String,
    /// For `http`: `openai-chat` (and compatible servers), `openai-responses` or `anthropic`.
    pub api: Option<loom_core::Api>,
    /// For `http`: the endpoint's base URL.
    pub base_url: Option<String>,
    /// For `http`: the variable holding the key.
    pub api_key_env: Option<String>,
    /// For `http`: a model other than the run's.
    pub model: Option<String>,
}

/// `[exec_policy]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// A TOML policy file.
    pub file: Option<PathBuf>,
}

/// `[tools]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    /// The scripts folder.
    pub scripts: Option<PathBuf>,
    /// A search command (`{query}` replaced, shell-quoted).
    pub web_search: Option<String>,
    /// The user's tools.
    #[serde(default)]
    pub user: Vec<UserTool>,
}

impl Config {
    /// Reads a configuration file.
    pub fn load(path: &Path) -> Result<Self> {
        let what = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| AgentError::config(&what, format!("cannot read: {e}")))?;
        let mut config: Config =
            toml::from_str(&text).map_err(|e| AgentError::config(&what, e.to_string()))?;
        config.dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        for tool in &config.tools.user {
            names::check(&tool.name)
                .map_err(|e| AgentError::config(&what, format!("tools.user: {e}")))?;
            if tool.parameters.get("type").and_then(|t| t.as_str()) != Some("object") {
                return Err(AgentError::config(
                    &what,
                    format!(
                        "tools.user `{}`: parameters must be an object schema",
                        tool.name
                    ),
                ));
            }
        }
        if let Some(a) = &config.approval {
            a.parse::<Approval>()
                .map_err(|e| AgentError::config(&what, format!("approval: {e}")))?;
        }
        Ok(config)
    }

    fn path(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.dir.join(p)
        }
    }

    /// The summarizer `[summarizer]` names, if any.
    pub fn summarizer(&self) -> Result<Option<Box<dyn loom_runtime::Summarizer>>> {
        let Some(c) = &self.summarizer else {
            return Ok(None);
        };
        match c.kind.as_str() {
            "deterministic" => Ok(Some(Box::new(
                loom_runtime::DeterministicSummarizer::default(),
            ))),
            "http" => {
                let api = c.api.ok_or_else(|| {
                    AgentError::config("summarizer.api", "missing: openai-chat or anthropic")
                })?;
                let base = c
                    .base_url
                    .clone()
                    .ok_or_else(|| AgentError::config("summarizer.base_url", "missing"))?;
                let mut s = loom_runtime::HttpSummarizer::new(api, base);
                if let Some(var) = &c.api_key_env {
                    let key = std::env::var(var).map_err(|_| {
                        AgentError::config("summarizer.api_key_env", format!("`{var}` is not set"))
                    })?;
                    s = s.api_key(key);
                }
                if let Some(m) = &c.model {
                    s = s.model(m.clone());
                }
                Ok(Some(Box::new(s)))
            }
            other => Err(AgentError::config(
                "summarizer.kind",
                format!("`{other}`: expected deterministic or http"),
            )),
        }
    }

    /// The limits.
    pub fn limits(&self) -> Limits {
        Limits {
            max_turns: self.limits.max_turns,
            max_wall: self.limits.max_wall_seconds.map(Duration::from_secs),
            max_tokens: self.limits.max_tokens,
            max_cost_usd: self.limits.max_cost_usd,
        }
    }

    /// The action space for the top agent in `workspace`. Fails when the sandbox cannot be
    /// enforced here and the configuration did not choose to run unsandboxed.
    pub fn actions(&self, workspace: &Path) -> Result<Actions> {
        let policy = match &self.exec_policy.file {
            Some(file) => {
                let file = self.path(file);
                let text = std::fs::read_to_string(&file).map_err(|e| {
                    AgentError::config(file.display().to_string(), format!("cannot read: {e}"))
                })?;
                loom_sandbox::ExecPolicy::from_toml(&text)
                    .map_err(|e| AgentError::config(file.display().to_string(), e.to_string()))?
            }
            None => loom_sandbox::ExecPolicy::default(),
        };
        let scripts = match &self.tools.scripts {
            Some(dir) => Scripts::load(&self.path(dir))?,
            None => Scripts::default(),
        };
        let runner = SandboxRunner::new(&self.sandbox, Vec::new())?;
        let search = self.tools.web_search.clone().map(|command| {
            Arc::new(CommandSearch {
                command,
                runner: runner.clone(),
            }) as Arc<dyn SearchBackend>
        });
        Ok(Actions {
            workspace: workspace.to_path_buf(),
            readable: Vec::new(),
            policy: Arc::new(Policy(policy)),
            runner: Arc::new(runner),
            scripts,
            search,
            fetcher: Arc::new(HttpFetcher),
            user: self.tools.user.clone(),
            can_spawn: self.max_depth.unwrap_or(2) > 0,
        })
    }

    /// A child's action space: its own workspace (the only writable place), its parent's
    /// readable; the same policy, scripts and tools.
    pub fn child_actions(&self, parent: &Actions, workspace: &Path) -> Actions {
        let mut readable = vec![parent.workspace.clone()];
        readable.extend(parent.readable.iter().cloned());
        let runner = SandboxRunner::new(&self.sandbox, readable.clone())
            .map(|r| Arc::new(r) as Arc<dyn ShellRunner>)
            .unwrap_or_else(|_| Arc::clone(&parent.runner));
        Actions {
            workspace: workspace.to_path_buf(),
            readable,
            policy: Arc::clone(&parent.policy),
            runner,
            scripts: parent.scripts.clone(),
            search: parent.search.clone(),
            fetcher: Arc::clone(&parent.fetcher),
            user: parent.user.clone(),
            can_spawn: parent.can_spawn,
        }
    }
}

/// The exec policy behind [`ShellPolicy`].
#[derive(Debug)]
pub struct Policy(pub loom_sandbox::ExecPolicy);

impl ShellPolicy for Policy {
    fn check(&self, command: &str) -> Verdict {
        let d = self.0.check(command);
        match d.verdict {
            loom_sandbox::Verdict::Allow => Verdict::Allow,
            loom_sandbox::Verdict::Forbid => Verdict::Forbid(d.reason),
            // A rule that asks is explicit; a command no rule knows, or shell syntax the policy
            // cannot judge, is not: under `on-request` the sandbox is what guards those.
            loom_sandbox::Verdict::Prompt => Verdict::Prompt {
                explicit: d.rule != "default" && d.rule != "shell-syntax",
                reason: d.reason,
            },
        }
    }
}

/// The sandbox behind [`ShellRunner`]: one [`loom_sandbox::Sandbox`] per workspace, kept (its
/// ruleset is prepared once).
#[derive(Debug, Clone)]
pub struct SandboxRunner {
    readable: Vec<PathBuf>,
    hidden: Vec<PathBuf>,
    network: bool,
    limits: loom_sandbox::Limits,
    mode: loom_sandbox::Mode,
    by_workspace: Arc<Mutex<HashMap<PathBuf, loom_sandbox::Sandbox>>>,
}

impl SandboxRunner {
    /// A runner under `config`, with `readable` added (a child reads its parent's workspace).
    /// Fails when the kernel cannot enforce the sandbox and `unsandboxed` was not chosen.
    pub fn new(config: &SandboxConfig, readable: Vec<PathBuf>) -> Result<Self> {
        let mode = if config.unsandboxed {
            loom_sandbox::Mode::Unsandboxed
        } else {
            let support = loom_sandbox::probe();
            if support.landlock_abi.is_none() || !support.seccomp {
                return Err(AgentError::config(
                    "sandbox",
                    format!(
                        "this kernel cannot enforce the sandbox (Landlock ABI {:?}, seccomp {}); \
                         set `[sandbox] unsandboxed = true` to run commands without it",
                        support.landlock_abi, support.seccomp
                    ),
                ));
            }
            loom_sandbox::Mode::Enforced
        };
        let mut limits = loom_sandbox::Limits::default();
        if let Some(s) = config.timeout_seconds {
            limits.wall_time = Duration::from_secs(s);
        }
        if let Some(s) = config.cpu_seconds {
            limits.cpu_time = Some(Duration::from_secs(s));
        }
        if let Some(m) = config.memory_mb {
            limits.memory_bytes = Some(m << 20);
        }
        if let Some(p) = config.processes {
            limits.processes = Some(p);
        }
        if let Some(m) = config.file_size_mb {
            limits.file_size_bytes = Some(m << 20);
        }
        let mut all: Vec<PathBuf> = loom_sandbox::DEFAULT_READABLE
            .iter()
            .map(PathBuf::from)
            .collect();
        all.extend(config.readable.iter().cloned());
        all.extend(readable);
        let mut hidden: Vec<PathBuf> = loom_sandbox::DEFAULT_HIDDEN
            .iter()
            .map(PathBuf::from)
            .collect();
        hidden.extend(config.hidden.iter().cloned());
        Ok(Self {
            readable: all,
            hidden,
            network: config.network,
            limits,
            mode,
            by_workspace: Arc::default(),
        })
    }

    fn sandbox(&self, workspace: &Path) -> loom_sandbox::Sandbox {
        let mut map = self
            .by_workspace
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.entry(workspace.to_path_buf())
            .or_insert_with(|| {
                loom_sandbox::Sandbox::new(workspace)
                    .readable(self.readable.clone())
                    .hidden(self.hidden.clone())
                    .network(self.network)
                    .limits(self.limits)
                    .mode(self.mode)
            })
            .clone()
    }
}

impl ShellRunner for SandboxRunner {
    fn run(&self, command: &str, workspace: &Path) -> std::result::Result<Ran, String> {
        let out = self
            .sandbox(workspace)
            .run(&loom_sandbox::Command::shell(command))
            .map_err(|e| e.to_string())?;
        let stopped = match (out.limit, out.exit) {
            (Some(limit), _) => Some(format!("{limit:?} limit")),
            (None, loom_sandbox::Exit::Signal(sig)) => Some(format!("signal {sig}")),
            (None, loom_sandbox::Exit::Code(_)) => None,
        };
        let mut stderr = out.stderr;
        if out.truncated {
            stderr.extend_from_slice(b"\n[output past the sandbox's cap was not kept]");
        }
        Ok(Ran {
            code: match out.exit {
                loom_sandbox::Exit::Code(c) => Some(c),
                loom_sandbox::Exit::Signal(_) => None,
            },
            stopped,
            stdout: out.stdout,
            stderr,
        })
    }
}

/// `web:search` through a user command.
struct CommandSearch {
    command: String,
    runner: SandboxRunner,
}

impl SearchBackend for CommandSearch {
    fn search(&self, query: &str) -> std::result::Result<String, String> {
        let command = self
            .command
            .replace("{query}", &crate::tools::shell_quote(query));
        let dir = std::env::temp_dir();
        let ran = self.runner.run(&command, &dir)?;
        if ran.code == Some(0) {
            Ok(String::from_utf8_lossy(&ran.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&ran.stderr).into_owned())
        }
    }
}

/// `browser:navigate` over HTTP.
#[derive(Debug)]
pub struct HttpFetcher;

impl Fetcher for HttpFetcher {
    fn fetch(&self, url: &str) -> std::result::Result<(Vec<u8>, String), String> {
        fetch(url, Duration::from_secs(30), 5 << 20)
    }
}

/// GETs `url` (redirects followed), at most `max` bytes of body, within `timeout`.
fn fetch(
    url: &str,
    timeout: Duration,
    max: usize,
) -> std::result::Result<(Vec<u8>, String), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .user_agent(concat!("loom/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| e.to_string())?;
        let mut response = client
            .get(url)
            .send()
            .await
            .map_err(|e| e.without_url().to_string())?;
        let status = response.status();
        let kind = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| e.without_url().to_string())?
        {
            body.extend_from_slice(&chunk);
            if body.len() >= max {
                body.truncate(max);
                break;
            }
        }
        if !status.is_success() {
            return Err(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&body)
                    .chars()
                    .take(300)
                    .collect::<String>()
            ));
        }
        Ok((body, kind))
    })
}
