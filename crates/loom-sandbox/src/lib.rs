//! Loom's sandbox for the commands an agent runs, and the exec policy that decides which of them
//! run unasked.
//!
//! - [`Sandbox`] runs a [`Command`] in a workspace: Landlock confines the filesystem (the
//!   workspace is the only writable place; only listed paths are readable), a seccomp filter and
//!   Landlock's TCP rules keep it off the network, rlimits and a pids cgroup bound CPU, memory,
//!   file size, open files and processes, and a wall-clock timeout kills the whole process group.
//!   Everything that allocates is prepared in the parent; the child only issues syscalls.
//! - [`probe`] says what the kernel can enforce; [`Sandbox::run`] refuses when a boundary is
//!   missing unless the caller chose [`Mode::Unsandboxed`].
//! - [`ExecPolicy`] (Level 2 of the action space) splits a command line into simple commands and
//!   judges each against allow / prompt / forbid rules, loaded from TOML with examples checked at
//!   load, over a default list of read-only commands with flag vetoes.
//!
//! Linux only. See `README.md` beside this crate for the boundaries and the policy format.

mod cgroup;
mod error;
mod landlock;
mod policy;
mod prepare;
mod probe;
mod run;
mod sandbox;
mod seccomp;
mod sys;

pub use error::{Error, Result};
pub use policy::{Decision, ExecPolicy, Verdict};
pub use probe::{probe, Support};
pub use run::{Exit, Limit, Outcome};
pub use sandbox::{
    Command, Limits, Mode, Sandbox, DEFAULT_HIDDEN, DEFAULT_READABLE, DEFAULT_WRITABLE,
};
