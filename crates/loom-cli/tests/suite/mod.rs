//! Helpers to run `loom` against a fresh database; one file per command.

mod blob;
mod compact;
mod db;
mod import;
mod import_errors;
mod keys;
mod large;
mod log;
mod memory;
mod memory_surfaces;
mod recall_corpus;
mod render;
mod replay;
mod run;
mod serve;
mod steps;
mod usage;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The shared traces, relative to this crate.
pub(crate) const TRACES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces");

/// A temp dir with a database path in it.
pub(crate) struct Loom {
    pub(crate) dir: tempfile::TempDir,
}

/// What a run printed and how it ended.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: String,
}

impl Run {
    pub(crate) fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.stdout()))
    }

    /// Panics with the output unless the run succeeded.
    pub(crate) fn ok(self) -> Self {
        assert_eq!(
            self.code,
            0,
            "stderr: {}\nstdout: {}",
            self.stderr,
            self.stdout()
        );
        self
    }
}

impl Loom {
    pub(crate) fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub(crate) fn db(&self) -> PathBuf {
        self.dir.path().join("loom.db")
    }

    /// Writes a fixture file into the temp dir.
    pub(crate) fn file(&self, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// Runs `loom ARGS --db <db>` in the temp dir.
    pub(crate) fn run<I, S>(&self, args: I) -> Run
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let out: Output = Command::new(env!("CARGO_BIN_EXE_loom"))
            .args(args)
            .arg("--db")
            .arg(self.db())
            .current_dir(self.dir.path())
            .env_remove("LOOM_DB")
            .output()
            .unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: out.stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs `loom ARGS --db <db>` in the temp dir, with `db` given as is (a URL, a bad value).
    pub(crate) fn run_on<I, S>(&self, db: &str, args: I) -> Run
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let out: Output = Command::new(env!("CARGO_BIN_EXE_loom"))
            .args(args)
            .arg("--db")
            .arg(db)
            .current_dir(self.dir.path())
            .env_remove("LOOM_DB")
            .output()
            .unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: out.stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `loom sessions --json`.
    pub(crate) fn sessions(&self) -> serde_json::Value {
        self.run(["sessions", "--json"]).ok().json()
    }

    /// A fresh database holding the session `chat` ([`chat_with_output`] with two lines).
    pub(crate) fn with_chat() -> Self {
        let loom = Self::new();
        let f = loom.file("chat.json", chat_with_output("line one\nline two\n"));
        loom.import(&[&f]);
        loom
    }

    /// Imports `paths`; panics unless it succeeds.
    pub(crate) fn import(&self, paths: &[&Path]) -> serde_json::Value {
        let mut args: Vec<&std::ffi::OsStr> = vec!["import".as_ref(), "--json".as_ref()];
        args.extend(paths.iter().map(|p| p.as_os_str()));
        self.run(args).ok().json()
    }
}

/// The `.jsonl` files of the shared traces, sorted.
pub(crate) fn trace_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(TRACES)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no traces under {TRACES}");
    files
}

/// A small OpenAI chat with one tool call and its result `output`.
pub(crate) fn chat_with_output(output: &str) -> String {
    serde_json::json!([
        {"role": "user", "content": "show me"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "cat", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": output},
        {"role": "assistant", "content": "done"}
    ])
    .to_string()
}
