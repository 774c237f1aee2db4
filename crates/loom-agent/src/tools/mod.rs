//! The hierarchical action space (seed 001 §4–5).
//!
//! - **Level 1**: the function tools listed in the request, with JSON Schemas: `fs:read_file`,
//!   `fs:write_file`, `fs:list_dir`, `web:search`, `browser:navigate`, `system:shell`,
//!   `python:run_script`, `agent:spawn`, `agent:send_message`, and the user's tools from the
//!   configuration; `memory:search` and `memory:save` when the run has memory ([`memory`]). On
//!   the wire their names are written `fs__read_file` ([`crate::names`]).
//! - **Level 2**: shell utilities, reached through `system:shell`: each command is checked
//!   against the exec policy ([`ShellPolicy`]) and run in the sandbox ([`ShellRunner`]).
//! - **Level 3**: scripts in a registry folder, reached through `python:run_script`
//!   ([`scripts`]), each declaring its name, description and argument schema.
//!
//! Only Level 1 is in the prompt; a call is first *gated* ([`Actions::gate`]: run, ask the
//! user, or deny, under the run's [`Approval`] policy), then executed ([`Actions::execute`]).
//! Every call gets a result, whatever happens to it, so calls and results stay paired.

pub(crate) mod fs;
pub mod memory;
pub mod schema;
pub mod scripts;
pub mod shell;
pub mod web;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use loom_core::render::ToolSpec;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

pub use scripts::{Script, Scripts};
pub use shell::{Ran, ShellPolicy, ShellRunner, Verdict};
pub use web::{Fetcher, SearchBackend};

use crate::names;

/// What a tool call produced: the text the model sees, and the whole output when the text is
/// a cut of it (kept in the blob store, the text naming its reference).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The result's text.
    pub text: String,
    /// Whether the tool failed (or was denied).
    pub is_error: bool,
    /// The whole output, when `text` holds only part of it.
    pub whole: Option<Vec<u8>>,
}

impl Outcome {
    /// A successful result.
    pub fn ok(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            is_error: false,
            whole: None,
        }
    }

    /// A failed one.
    pub fn error(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            is_error: true,
            whole: None,
        }
    }
}

/// The run-wide approval policy (`--approval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Approval {
    /// Only commands the exec policy knows to be safe run unasked; everything else asks.
    #[default]
    Untrusted,
    /// Commands run in the sandbox unasked unless a policy rule says `prompt`; tools marked
    /// `requires_approval` ask.
    OnRequest,
    /// Nothing asks: whatever would ask is denied.
    Never,
}

impl std::str::FromStr for Approval {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "untrusted" => Ok(Self::Untrusted),
            "on-request" => Ok(Self::OnRequest),
            "never" => Ok(Self::Never),
            other => Err(format!(
                "`{other}`: expected untrusted, on-request or never"
            )),
        }
    }
}

/// What happens to a call before it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// It runs.
    Run,
    /// The user is asked; the run pauses until `loom approve` answers.
    Ask(String),
    /// It is refused; the reason is its result.
    Deny(String),
}

/// A tool the user declares in the configuration: a command template run like a shell command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserTool {
    /// Its seed name (`deploy:preview`).
    pub name: String,
    /// What the model is told it does.
    pub description: String,
    /// JSON Schema of its arguments (an object schema).
    #[serde(default = "empty_object")]
    pub parameters: Value,
    /// The command, with `{arg}` replaced by each argument, shell-quoted.
    pub command: String,
    /// Ask before every run (under `untrusted` and `on-request`; denied under `never`).
    #[serde(default)]
    pub requires_approval: bool,
}

fn empty_object() -> Value {
    json!({"type": "object", "properties": {}})
}

/// One Level-1 tool as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    /// Seed name.
    pub name: String,
    /// Description.
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
    /// Ask before every run.
    pub requires_approval: bool,
}

/// Everything a run's tools act through.
pub struct Actions {
    /// The agent's workspace: the only place it writes.
    pub workspace: PathBuf,
    /// Places it may read besides (a child reads its parent's workspace).
    pub readable: Vec<PathBuf>,
    /// Level 2's policy.
    pub policy: Arc<dyn ShellPolicy>,
    /// Level 2's sandbox.
    pub runner: Arc<dyn ShellRunner>,
    /// Level 3.
    pub scripts: Scripts,
    /// `web:search`'s backend; none configured is an error result.
    pub search: Option<Arc<dyn SearchBackend>>,
    /// `browser:navigate`'s fetcher.
    pub fetcher: Arc<dyn Fetcher>,
    /// The user's tools.
    pub user: Vec<UserTool>,
    /// Whether agents may spawn children (a child's depth limit turns it off).
    pub can_spawn: bool,
}

impl std::fmt::Debug for Actions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Actions")
            .field("workspace", &self.workspace)
            .field("readable", &self.readable)
            .field("scripts", &self.scripts.len())
            .field("user", &self.user.len())
            .finish()
    }
}

/// Reads a string argument.
pub(crate) fn arg_str<'a>(args: &'a Value, key: &str) -> Result<&'a str, String> {
    match args.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(format!("`{key}` must be a string, not {other}")),
        None => Err(format!("missing argument `{key}`")),
    }
}

/// Quotes `s` for `/bin/sh`.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl Actions {
    /// The Level-1 tools, built-in first, in a stable order (the request's tool list is part of
    /// the cached prefix).
    pub fn tools(&self) -> Vec<ToolDef> {
        let def = |name: &str, description: &str, parameters: Value| ToolDef {
            name: name.into(),
            description: description.into(),
            parameters,
            requires_approval: false,
        };
        let mut out = vec![
            def(
                "fs:read_file",
                "Read a text file in the workspace (optionally lines start_line..=end_line).",
                json!({"type": "object", "properties": {
                    "path": {"type": "string"},
                    "start_line": {"type": "integer", "minimum": 1},
                    "end_line": {"type": "integer", "minimum": 1}},
                    "required": ["path"], "additionalProperties": false}),
            ),
            def(
                "fs:write_file",
                "Write (create or replace) a text file in the workspace.",
                json!({"type": "object", "properties": {
                    "path": {"type": "string"}, "content": {"type": "string"}},
                    "required": ["path", "content"], "additionalProperties": false}),
            ),
            def(
                "fs:list_dir",
                "List a folder of the workspace (folders end with /).",
                json!({"type": "object", "properties": {"path": {"type": "string"}},
                    "additionalProperties": false}),
            ),
            def(
                "web:search",
                "Search the web; returns titles, URLs and snippets.",
                json!({"type": "object", "properties": {"query": {"type": "string"}},
                    "required": ["query"], "additionalProperties": false}),
            ),
            def(
                "browser:navigate",
                "Fetch a web page over HTTP and return its text.",
                json!({"type": "object", "properties": {"url": {"type": "string"}},
                    "required": ["url"], "additionalProperties": false}),
            ),
            def(
                "system:shell",
                "Run a shell command in the workspace (sandboxed; commands are checked against \
                 the exec policy).",
                json!({"type": "object", "properties": {"command": {"type": "string"}},
                    "required": ["command"], "additionalProperties": false}),
            ),
            def(
                "python:run_script",
                &format!(
                    "Run a registered script by name with its arguments. Scripts: {}",
                    self.scripts.catalogue()
                ),
                json!({"type": "object", "properties": {
                    "name": {"type": "string"}, "args": {"type": "object"}},
                    "required": ["name"], "additionalProperties": false}),
            ),
        ];
        if self.can_spawn {
            out.push(def(
                "agent:spawn",
                "Hand a sub-task to a new agent with its own context and workspace; returns only \
                 its result. Give it a self-contained goal.",
                json!({"type": "object", "properties": {
                    "goal": {"type": "string"},
                    "extract": {"type": "boolean", "description":
                        "also pass a compacted extract of your own steps"}},
                    "required": ["goal"], "additionalProperties": false}),
            ));
        }
        // What a render leaves out, read again: the same tool, arguments and answer as behind
        // `loom serve` (loom_store::recall).
        let (name, description, parameters) = loom_store::recall::tool_definition();
        out.push(def(name, description, parameters));
        out.push(def(
            "agent:send_message",
            "Send a direct message to another agent of this run (your parent or a child).",
            json!({"type": "object", "properties": {
                "to": {"type": "string"}, "content": {"type": "string"},
                "priority": {"type": "number", "minimum": 0, "maximum": 1},
                "ttl_seconds": {"type": "integer", "minimum": 1}},
                "required": ["to", "content"], "additionalProperties": false}),
        ));
        for tool in &self.user {
            out.push(ToolDef {
                name: tool.name.clone(),
                description: tool.description.clone(),
                parameters: tool.parameters.clone(),
                requires_approval: tool.requires_approval,
            });
        }
        out
    }

    /// The tools as the render lists them (wire names).
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools()
            .into_iter()
            .map(|t| ToolSpec {
                name: names::wire(&t.name),
                description: t.description,
                parameters: t.parameters,
            })
            .collect()
    }

    /// Whether a call may run now. `granted` holds what the user approved for the session
    /// (`tool` or `tool command`).
    pub fn gate(
        &self,
        tool: &ToolDef,
        args: &Value,
        approval: Approval,
        granted: &BTreeSet<String>,
    ) -> Gate {
        let ask = |reason: String, key: String| {
            if granted.contains(&key) {
                Gate::Run
            } else if approval == Approval::Never {
                Gate::Deny(format!(
                    "denied: {reason}, and the run's approval policy is `never`"
                ))
            } else {
                Gate::Ask(reason)
            }
        };
        match tool.name.as_str() {
            "system:shell" => {
                let Ok(command) = arg_str(args, "command") else {
                    return Gate::Run; // execution reports the bad argument
                };
                match self.policy.check(command) {
                    Verdict::Allow => Gate::Run,
                    Verdict::Forbid(reason) => Gate::Deny(format!("forbidden: {reason}")),
                    Verdict::Prompt { reason, explicit } => {
                        if approval == Approval::OnRequest && !explicit {
                            Gate::Run
                        } else {
                            ask(reason, format!("{} {command}", tool.name))
                        }
                    }
                }
            }
            _ if tool.requires_approval => ask(
                format!("`{}` requires approval", tool.name),
                tool.name.clone(),
            ),
            _ => Gate::Run,
        }
    }

    /// Runs a Level-1 tool other than the `agent:` ones (which the loop runs).
    pub fn execute(&self, tool: &ToolDef, args: &Value) -> Outcome {
        if let Err(e) = schema::check(&tool.parameters, args) {
            return Outcome::error(format!("bad arguments for {}: {e}", tool.name));
        }
        let mut roots = vec![self.workspace.clone()];
        roots.extend(self.readable.iter().cloned());
        match tool.name.as_str() {
            "fs:read_file" => fs::read_file(&roots, args),
            "fs:write_file" => fs::write_file(&self.workspace, args),
            "fs:list_dir" => fs::list_dir(&roots, args),
            "web:search" => web::search(self.search.as_deref(), args),
            "browser:navigate" => web::navigate(self.fetcher.as_ref(), args),
            "system:shell" => match arg_str(args, "command") {
                Ok(command) => shell::run(self.runner.as_ref(), command, &self.workspace),
                Err(e) => Outcome::error(e),
            },
            "python:run_script" => self
                .scripts
                .run(self.runner.as_ref(), &self.workspace, args),
            name => match self.user.iter().find(|t| t.name == name) {
                Some(user) => shell::run_user(self.runner.as_ref(), user, args, &self.workspace),
                None => Outcome::error(format!("unknown tool `{name}`")),
            },
        }
    }

    /// The tool a call names (by its wire or seed name).
    pub fn find(&self, name: &str) -> Option<ToolDef> {
        let seed = names::seed(name);
        self.tools()
            .into_iter()
            .find(|t| t.name == seed || t.name == name)
    }
}
