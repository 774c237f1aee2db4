//! Shared helpers: a workspace per test, a marker to find a test's processes, and the check
//! that the run goes on after each escape attempt.

mod boundaries;
mod commands;
mod limits;

use std::path::Path;
use std::time::Duration;

use loom_sandbox::{Command, Limits, Outcome, Sandbox};

/// A workspace in a fresh temporary directory, and a sandbox over it with short limits.
pub(crate) fn workspace() -> (tempfile::TempDir, Sandbox) {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(dir.path()).limits(Limits {
        wall_time: Duration::from_secs(20),
        ..Limits::default()
    });
    (dir, sandbox)
}

pub(crate) fn sh(sandbox: &Sandbox, script: &str) -> Outcome {
    sandbox.run(&Command::shell(script)).unwrap()
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// After an escape attempt, an ordinary command still runs and writes in the workspace.
pub(crate) fn assert_run_goes_on(sandbox: &Sandbox, workspace: &Path) {
    let outcome = sh(sandbox, "echo goes-on > after.txt && cat after.txt");
    assert!(outcome.success(), "{outcome:?}");
    assert_eq!(text(&outcome.stdout), "goes-on\n");
    assert!(workspace.join("after.txt").is_file());
}

/// Processes on the machine whose command line contains `marker`.
pub(crate) fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = text(&cmdline).replace('\0', " ");
        if cmdline.contains(marker) {
            found.push(format!(
                "{}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

/// A number unlikely to appear in any other process's command line.
pub(crate) fn marker() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{}{:09}", 7000 + std::process::id() % 1000, nanos)
}
