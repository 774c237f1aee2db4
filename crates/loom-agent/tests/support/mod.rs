//! What the runtime's tests share: a recording model, a store, a workspace with a git repo.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use loom_agent::tools::{Fetcher, Ran, Scripts, ShellPolicy, ShellRunner, Verdict};
use loom_agent::{Actions, Env, Model, Scripted};
use loom_core::Api;
use loom_wire::AssistantReply;
use serde_json::Value;

/// A scripted model that keeps every request it was sent.
pub(crate) struct Recording {
    pub(crate) inner: Scripted,
    pub(crate) requests: Arc<Mutex<Vec<Value>>>,
}

impl Recording {
    pub(crate) fn new(script: Value) -> (Self, Arc<Mutex<Vec<Value>>>) {
        let requests = Arc::new(Mutex::new(Vec::new()));
        (
            Self {
                inner: Scripted::from_value(&script).expect("a valid script"),
                requests: Arc::clone(&requests),
            },
            requests,
        )
    }
}

impl Model for Recording {
    fn api(&self) -> Api {
        self.inner.api()
    }
    fn call(
        &mut self,
        body: &[u8],
        on_text: &mut dyn FnMut(&str),
    ) -> Result<AssistantReply, String> {
        self.requests
            .lock()
            .unwrap()
            .push(serde_json::from_slice(body).expect("the body is JSON"));
        self.inner.call(body, on_text)
    }
}

/// An in-memory store.
pub(crate) fn env() -> Env {
    Env::new(
        Arc::new(loom_store::MemoryStore::new()),
        Arc::new(loom_store::MemoryBlobStore::new()),
    )
    .unwrap()
}

/// The policy of the tests: `cat`, `ls`, `git status`, `sh test.sh` are safe, `rm` asks (a
/// rule), `curl` is forbidden, anything else is unknown (asks under untrusted).
pub(crate) struct TestPolicy;

impl ShellPolicy for TestPolicy {
    fn check(&self, command: &str) -> Verdict {
        let first = command.split_whitespace().next().unwrap_or("");
        match first {
            "cat" | "ls" | "echo" | "git" | "sh" | "grep" => Verdict::Allow,
            "rm" => Verdict::Prompt {
                reason: "rm deletes files".into(),
                explicit: true,
            },
            "curl" => Verdict::Forbid("no network tools".into()),
            other => Verdict::Prompt {
                reason: format!("`{other}` is not known to be safe"),
                explicit: false,
            },
        }
    }
}

/// Runs commands with `sh -c` in the workspace, unsandboxed (the sandbox has its own tests).
pub(crate) struct PlainRunner;

impl ShellRunner for PlainRunner {
    fn run(&self, command: &str, workspace: &Path) -> Result<Ran, String> {
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(command)
            .current_dir(workspace)
            .output()
            .map_err(|e| e.to_string())?;
        Ok(Ran {
            code: out.status.code(),
            stopped: None,
            stdout: out.stdout,
            stderr: out.stderr,
        })
    }
}

pub(crate) struct NoFetch;

impl Fetcher for NoFetch {
    fn fetch(&self, url: &str) -> Result<(Vec<u8>, String), String> {
        Err(format!("no network in tests ({url})"))
    }
}

/// A workspace holding a small git repository with a failing test.
pub(crate) fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("repo");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("calc.sh"), "add() { echo $(( $1 - $2 )); }\n").unwrap();
    std::fs::write(
        ws.join("test.sh"),
        ". ./calc.sh\n[ \"$(add 2 3)\" = 5 ] && echo PASS || { echo FAIL; exit 1; }\n",
    )
    .unwrap();
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(&ws)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .unwrap()
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-qm", "start"]);
    (dir, ws)
}

pub(crate) fn actions(workspace: &Path) -> Actions {
    Actions {
        workspace: workspace.to_path_buf(),
        readable: Vec::new(),
        policy: Arc::new(TestPolicy),
        runner: Arc::new(PlainRunner),
        scripts: Scripts::default(),
        search: None,
        fetcher: Arc::new(NoFetch),
        user: Vec::new(),
        can_spawn: true,
    }
}

/// A child's actions: its own workspace, its parent's readable.
pub(crate) fn child_actions(parent: &Actions, workspace: &Path) -> Actions {
    let mut readable = vec![parent.workspace.clone()];
    readable.extend(parent.readable.iter().cloned());
    Actions {
        workspace: workspace.to_path_buf(),
        readable,
        policy: Arc::clone(&parent.policy),
        runner: Arc::clone(&parent.runner),
        scripts: parent.scripts.clone(),
        search: parent.search.clone(),
        fetcher: Arc::clone(&parent.fetcher),
        user: parent.user.clone(),
        can_spawn: parent.can_spawn,
    }
}

/// A tool call in a script.
pub(crate) fn call(name: &str, args: Value) -> Value {
    serde_json::json!({"content": null, "tool_calls": [{"function": {"name": name, "arguments": args}}]})
}

/// Every text of a request body, for "does this request mention X".
pub(crate) fn text_of(body: &Value) -> String {
    body.to_string()
}

/// Starts a run of `goal` in session `id` (no hooks, no summarizer, children as [`child_actions`]).
pub(crate) fn start(
    env: &Env,
    model: &mut Recording,
    spec: loom_agent::RunSpec,
    goal: &str,
    id: &loom_core::SessionId,
    workspace: &Path,
) -> loom_agent::Report {
    let mut quiet = loom_agent::Quiet;
    let mut make_child = child_actions;
    loom_agent::Runner::new(env, model, &mut quiet, spec, &mut make_child)
        .start(goal, Some(id.clone()), actions(workspace))
        .unwrap()
}

/// Resumes session `id`.
pub(crate) fn resume(
    env: &Env,
    model: &mut Recording,
    spec: loom_agent::RunSpec,
    id: &loom_core::SessionId,
    workspace: &Path,
) -> loom_agent::Report {
    let mut quiet = loom_agent::Quiet;
    let mut make_child = child_actions;
    loom_agent::Runner::new(env, model, &mut quiet, spec, &mut make_child)
        .resume(id, actions(workspace))
        .unwrap()
}

/// A long-term (L4) memory item of `agent`, remembered from event `seq` of `session`.
pub(crate) fn remembered_item(
    agent: &str,
    session: &str,
    seq: u64,
    text: &str,
) -> loom_memory::NewItem {
    loom_memory::NewItem {
        agent: loom_core::AgentId::new(agent).unwrap(),
        tier: loom_memory::Tier::L4,
        kind: loom_memory::ItemKind::User,
        text: text.into(),
        source: loom_memory::Provenance {
            session: loom_core::SessionId::new(session).unwrap(),
            from_seq: seq,
            to_seq: seq,
            ts_ms: 1,
        },
    }
}
