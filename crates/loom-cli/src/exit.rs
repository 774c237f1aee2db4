//! The one place where errors become messages and exit codes.
//!
//! Exit codes: 0 success, 1 internal error (a bug, a failing disk), 2 bad input (the user can fix
//! it: a malformed file, an unknown session, a bad flag; clap also uses 2 for usage errors).

use std::io::Write;
use std::process::ExitCode;

/// Bad input: the user can fix it.
pub(crate) const BAD_INPUT: u8 = 2;
/// Internal error.
pub(crate) const INTERNAL: u8 = 1;

/// Marks an error as the user's to fix (exit code 2).
#[derive(Debug)]
pub(crate) struct BadInput(pub(crate) anyhow::Error);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for BadInput {}

/// Wraps an error as bad input.
pub(crate) fn bad_input(e: impl Into<anyhow::Error>) -> anyhow::Error {
    anyhow::Error::new(BadInput(e.into()))
}

/// A command that ended on purpose before its work was done (a run paused for approval or at a
/// limit): its message and exit code, not an error's.
#[derive(Debug)]
pub(crate) struct Stopped {
    code: u8,
    message: String,
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Stopped {}

/// Ends the command with `code` and `message` on stderr.
pub(crate) fn stopped(code: u8, message: String) -> anyhow::Error {
    anyhow::Error::new(Stopped { code, message })
}

fn is_bad_input(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause.is::<BadInput>()
            || cause
                .downcast_ref::<loom_store::StoreError>()
                .is_some_and(loom_store::StoreError::is_bad_input)
    })
}

/// Prints the error chain to stderr and picks the exit code.
pub(crate) fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<Stopped>() => {
            let code = e.downcast_ref::<Stopped>().map_or(INTERNAL, |s| s.code);
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "{e}");
            ExitCode::from(code)
        }
        Err(e) => {
            let code = if is_bad_input(&e) {
                BAD_INPUT
            } else {
                INTERNAL
            };
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "error: {e:#}");
            ExitCode::from(code)
        }
    }
}

/// Output cut short by a closed pipe (`loom sessions | head`) is not an error.
pub(crate) fn closed_pipe_is_fine(result: anyhow::Result<()>) -> anyhow::Result<()> {
    let Err(e) = result else { return Ok(()) };
    let broken = e.chain().any(|cause| {
        let io = cause
            .downcast_ref::<std::io::Error>()
            .map(std::io::Error::kind);
        let json = cause
            .downcast_ref::<serde_json::Error>()
            .and_then(serde_json::Error::io_error_kind);
        io.or(json) == Some(std::io::ErrorKind::BrokenPipe)
    });
    if broken {
        Ok(())
    } else {
        Err(e)
    }
}

/// Memory errors the user can fix leave with the bad-input exit code.
pub(crate) fn mapped(e: loom_memory::MemoryError) -> anyhow::Error {
    if e.is_bad_input() {
        bad_input(e)
    } else {
        anyhow::Error::new(e)
    }
}
