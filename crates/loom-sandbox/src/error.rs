//! The one error type of the crate: what could not be set up, run or loaded, and with what.

use std::path::PathBuf;

/// A `Result` whose error is an [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong in the sandbox or the exec policy.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The kernel cannot enforce the sandbox as configured, and the caller did not choose to run
    /// unsandboxed.
    #[error("the sandbox cannot be enforced on this machine: {reason}")]
    Unsupported {
        /// What is missing (Landlock, seccomp, a pids cgroup) and how to proceed.
        reason: String,
    },
    /// A sandbox setting is unusable.
    #[error("invalid sandbox setting `{field}`: {reason}")]
    Config {
        /// The setting.
        field: &'static str,
        /// What is wrong and what was expected.
        reason: String,
    },
    /// A path could not be prepared for the sandbox.
    #[error("{}: {reason}: {source}", path.display())]
    Path {
        /// The path.
        path: PathBuf,
        /// What was being done with it.
        reason: &'static str,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A step of building the sandbox failed in the parent.
    #[error("{step}: {source}")]
    Setup {
        /// The step.
        step: &'static str,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The command could not be started (not found, not executable, or the sandbox could not be
    /// applied in the child).
    #[error("cannot start `{command}`: {source}")]
    Spawn {
        /// The command as given.
        command: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The command started but could not be watched to its end.
    #[error("while running `{command}`: {step}: {source}")]
    Run {
        /// The command as given.
        command: String,
        /// What was being done.
        step: &'static str,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// An exec policy file is not valid TOML of the expected shape.
    #[error("exec policy: {reason}")]
    PolicyParse {
        /// The parser's message (with line and column).
        reason: String,
    },
    /// An exec policy rule is invalid, or one of its examples does not behave as it says.
    #[error("exec policy rule `{rule}`: {reason}")]
    PolicyRule {
        /// The rule's name (or its position when it has none).
        rule: String,
        /// What is wrong: the field, or the example and how it failed.
        reason: String,
    },
}
