//! Level 2: shell commands, checked by the exec policy and run by the sandbox.
//!
//! The policy and the sandbox are behind two small traits so that the loop does not depend on
//! how they are enforced; `crates/loom-sandbox` provides both (Landlock, seccomp, limits).

use std::path::Path;

use serde_json::Value;

use super::{shell_quote, Outcome, UserTool};

/// What the exec policy says about a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Known safe: runs unasked.
    Allow,
    /// Asks (under `untrusted`; under `on-request` only when `explicit`, a rule saying so rather
    /// than a command the policy does not know).
    Prompt {
        /// Why.
        reason: String,
        /// A rule asked for it.
        explicit: bool,
    },
    /// Never runs.
    Forbid(String),
}

/// Level 2's policy.
pub trait ShellPolicy: Send + Sync {
    /// Judges a whole command line.
    fn check(&self, command: &str) -> Verdict;
}

/// How a command ended, with its whole output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ran {
    /// Exit code, when it exited.
    pub code: Option<i32>,
    /// What stopped it otherwise (a signal, the wall-clock timeout, a limit).
    pub stopped: Option<String>,
    /// Standard output, whole.
    pub stdout: Vec<u8>,
    /// Standard error, whole.
    pub stderr: Vec<u8>,
}

/// Level 2's sandbox.
pub trait ShellRunner: Send + Sync {
    /// Runs `command` with `/bin/sh -c` in `workspace`. An error is a command that could not be
    /// started (or a sandbox that cannot be enforced).
    fn run(&self, command: &str, workspace: &Path) -> Result<Ran, String>;
}

/// Most of an output the result's text holds; the rest is in the blob store.
pub const RESULT_CAP: usize = 16 << 10;

/// The result of a command: exit status, then its output, cut at [`RESULT_CAP`] (head and tail)
/// with the whole kept for the blob store.
pub(crate) fn outcome(ran: Ran) -> Outcome {
    let mut whole = ran.stdout;
    if !ran.stderr.is_empty() {
        if !whole.is_empty() && !whole.ends_with(b"\n") {
            whole.push(b'\n');
        }
        whole.extend_from_slice(&ran.stderr);
    }
    let status = match (&ran.code, &ran.stopped) {
        (_, Some(why)) => format!("[stopped: {why}]"),
        (Some(0), None) => String::new(),
        (Some(code), None) => format!("[exit code {code}]"),
        (None, None) => "[no exit status]".into(),
    };
    let failed = ran.code != Some(0) || ran.stopped.is_some();
    let text = String::from_utf8_lossy(&whole);
    let (body, cut) = if whole.len() > RESULT_CAP {
        let head: String = text.chars().take(RESULT_CAP * 3 / 4).collect();
        let tail: String = {
            let rev: Vec<char> = text.chars().rev().take(RESULT_CAP / 4).collect();
            rev.into_iter().rev().collect()
        };
        (
            format!(
                "{head}\n[… {} bytes of output cut here; the whole output is kept: see its \
                 reference …]\n{tail}",
                whole.len() - head.len() - tail.len()
            ),
            true,
        )
    } else {
        (text.into_owned(), false)
    };
    let text = match (status.is_empty(), body.is_empty()) {
        (true, true) => "[no output]".to_owned(),
        (true, false) => body,
        (false, true) => status,
        (false, false) => format!("{status}\n{body}"),
    };
    Outcome {
        text,
        is_error: failed,
        whole: cut.then_some(whole),
    }
}

/// `system:shell`.
pub(crate) fn run(runner: &dyn ShellRunner, command: &str, workspace: &Path) -> Outcome {
    match runner.run(command, workspace) {
        Ok(ran) => outcome(ran),
        Err(e) => Outcome::error(format!("the command could not run: {e}")),
    }
}

/// A user tool: its command template with the arguments put in, shell-quoted.
pub(crate) fn run_user(
    runner: &dyn ShellRunner,
    tool: &UserTool,
    args: &Value,
    workspace: &Path,
) -> Outcome {
    let mut command = tool.command.clone();
    if let Some(map) = args.as_object() {
        for (key, value) in map {
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            command = command.replace(&format!("{{{key}}}"), &shell_quote(&text));
        }
    }
    run(runner, &command, workspace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_output_is_cut_and_kept_whole() {
        let ran = Ran {
            code: Some(1),
            stdout: vec![b'x'; RESULT_CAP * 2],
            ..Ran::default()
        };
        let out = outcome(ran);
        assert!(out.is_error);
        assert!(out.text.starts_with("[exit code 1]\n"));
        assert!(out.text.len() < RESULT_CAP + 200);
        assert_eq!(out.whole.as_ref().map(Vec::len), Some(RESULT_CAP * 2));
        let short = outcome(Ran {
            code: Some(0),
            ..Ran::default()
        });
        assert_eq!(short.text, "[no output]");
        assert!(!short.is_error && short.whole.is_none());
    }
}
