//! The sandbox's settings ([`Sandbox`], [`Limits`], [`Mode`]) and the commands it runs
//! ([`Command`]). Running is in `run`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::prepare;
use crate::run::{self, Outcome};

/// The paths a sandboxed command may read and execute by default: what a shell, coreutils, git
/// and Python need. `/etc` is included whole because programs read many files there (the loader
/// cache, passwd, nsswitch, gitconfig, alternatives); replace the list with
/// [`Sandbox::readable`] to narrow it. `/tmp`, `/home`, `/root`, `/var`, `/run` and `/sys` are
/// left out, so secrets kept there cannot be read.
pub const DEFAULT_READABLE: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/dev",
];

/// Paths left out even where a readable path holds them: the password hashes, sudo
/// rules and host keys under `/etc` (root can read them by file permission alone).
pub const DEFAULT_HIDDEN: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
];

/// Devices a command may write besides the workspace: the data sinks and sources, nothing that
/// reaches hardware.
pub const DEFAULT_WRITABLE: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];

/// The search path a sandboxed command gets; the parent's own environment is not passed on (it
/// may hold API keys).
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Whether the boundaries are enforced. Running unsandboxed is always an explicit choice: when
/// the kernel cannot enforce a boundary, [`Sandbox::run`] refuses rather than degrading quietly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Landlock, seccomp (without network), dropped capabilities and all limits.
    #[default]
    Enforced,
    /// Limits, the process group and the timeout only: no filesystem or network boundary.
    Unsandboxed,
}

/// Resource limits for one command. `None` leaves a limit at what Loom itself has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time after which the command's whole process group (and cgroup) is killed.
    pub wall_time: Duration,
    /// CPU time per process (`RLIMIT_CPU`: SIGXCPU at the limit, SIGKILL just after for a program
    /// that catches it).
    pub cpu_time: Option<Duration>,
    /// Address space per process in bytes (`RLIMIT_AS`); allocations beyond it fail.
    pub memory_bytes: Option<u64>,
    /// Largest file a process may write, in bytes (`RLIMIT_FSIZE`: SIGXFSZ beyond it).
    pub file_size_bytes: Option<u64>,
    /// Open file descriptors per process (`RLIMIT_NOFILE`).
    pub open_files: Option<u64>,
    /// Tasks (processes and threads) the command may have at once: a pids cgroup, or
    /// `RLIMIT_NPROC` above the uid's current count when no cgroup can be made and Loom is not
    /// root.
    pub processes: Option<u64>,
    /// Bytes kept of each of stdout and stderr; a command that writes more is killed and its
    /// outcome flagged `truncated`.
    pub output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            wall_time: Duration::from_secs(120),
            cpu_time: Some(Duration::from_secs(120)),
            memory_bytes: Some(8 << 30),
            file_size_bytes: Some(1 << 30),
            open_files: Some(1024),
            processes: Some(256),
            output_bytes: 64 << 20,
        }
    }
}

/// A command to run: a program and its arguments, or a shell script, with optional stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
    pub(crate) stdin: Option<Vec<u8>>,
}

impl Command {
    /// `/bin/sh -c script`: how `system:shell` runs what the model wrote.
    pub fn shell(script: impl Into<String>) -> Self {
        Self {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into().into()],
            stdin: None,
        }
    }

    /// A program run directly (found on the sandbox's `PATH` when it has no slash).
    pub fn new(program: impl Into<OsString>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            stdin: None,
        }
    }

    /// Appends an argument.
    #[must_use]
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// How errors name the command: the script of a shell command, else the program and its
    /// arguments.
    pub fn display(&self) -> String {
        if self.program == "/bin/sh" && self.args.len() == 2 && self.args[0] == "-c" {
            return self.args[1].to_string_lossy().into_owned();
        }
        let mut text = self.program.to_string_lossy().into_owned();
        for arg in &self.args {
            text.push(' ');
            text.push_str(&arg.to_string_lossy());
        }
        text
    }

    /// Gives the command these bytes on stdin (otherwise stdin is `/dev/null`).
    #[must_use]
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }
}

/// Runs commands in a workspace under Landlock, seccomp and resource limits. Build it once per
/// workspace and policy; [`Sandbox::run`] may be called from many threads.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub(crate) workspace: PathBuf,
    pub(crate) readable: Vec<PathBuf>,
    pub(crate) writable: Vec<PathBuf>,
    pub(crate) hidden: Vec<PathBuf>,
    pub(crate) network: bool,
    pub(crate) limits: Limits,
    pub(crate) env: Vec<(OsString, OsString)>,
    pub(crate) mode: Mode,
    /// The ruleset and scratch directory, made on the first run and shared by clones; every
    /// builder starts a fresh one.
    pub(crate) prepared: prepare::Slot,
}

impl Sandbox {
    /// A sandbox for `workspace` with the default readable and writable lists, no network and
    /// default [`Limits`].
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        Self {
            workspace: workspace.into(),
            readable: DEFAULT_READABLE.iter().map(PathBuf::from).collect(),
            writable: DEFAULT_WRITABLE.iter().map(PathBuf::from).collect(),
            hidden: DEFAULT_HIDDEN.iter().map(PathBuf::from).collect(),
            network: false,
            limits: Limits::default(),
            env: Vec::new(),
            mode: Mode::Enforced,
            prepared: prepare::Slot::default(),
        }
    }

    /// Replaces the readable (and executable) paths; the workspace is always readable.
    #[must_use]
    pub fn readable(mut self, paths: impl IntoIterator<Item = impl Into<PathBuf>>) -> Self {
        self.prepared = prepare::Slot::default();
        self.readable = paths.into_iter().map(Into::into).collect();
        self
    }

    /// Replaces the writable paths besides the workspace (which is always writable).
    #[must_use]
    pub fn writable(mut self, paths: impl IntoIterator<Item = impl Into<PathBuf>>) -> Self {
        self.prepared = prepare::Slot::default();
        self.writable = paths.into_iter().map(Into::into).collect();
        self
    }

    /// Replaces the paths left out of the readable ones (secrets inside a readable directory,
    /// such as `/etc/shadow`). A path inside the workspace or another writable path cannot be
    /// hidden ([`Sandbox::run`] refuses the setting).
    #[must_use]
    pub fn hidden(mut self, paths: impl IntoIterator<Item = impl Into<PathBuf>>) -> Self {
        self.prepared = prepare::Slot::default();
        self.hidden = paths.into_iter().map(Into::into).collect();
        self
    }

    /// Allows or refuses network sockets (refused by default).
    #[must_use]
    pub fn network(mut self, allowed: bool) -> Self {
        self.prepared = prepare::Slot::default();
        self.network = allowed;
        self
    }

    /// Sets the resource limits.
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Adds an environment variable (the command otherwise sees only `PATH`, `HOME`, `TMPDIR`,
    /// `LANG` and `TERM`).
    #[must_use]
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Chooses whether boundaries are enforced.
    #[must_use]
    pub fn mode(mut self, mode: Mode) -> Self {
        self.prepared = prepare::Slot::default();
        self.mode = mode;
        self
    }

    /// The workspace as given.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// Runs `command` to its end (or its limits) and returns its output and how it ended. A
    /// command that cannot start, or a sandbox that cannot be enforced, is an error; a command
    /// that fails or is killed is an [`Outcome`].
    pub fn run(&self, command: &Command) -> Result<Outcome> {
        run::run(self, command)
    }

    /// Checks the settings and resolves the workspace to a canonical directory.
    pub(crate) fn checked_workspace(&self) -> Result<PathBuf> {
        let bad = |reason: String| Error::Config {
            field: "workspace",
            reason,
        };
        if !self.workspace.is_absolute() {
            return Err(bad(format!(
                "`{}` is relative; give an absolute path",
                self.workspace.display()
            )));
        }
        let workspace = self.workspace.canonicalize().map_err(|err| {
            bad(format!(
                "`{}` cannot be resolved: {err}",
                self.workspace.display()
            ))
        })?;
        if !workspace.is_dir() {
            return Err(bad(format!("`{}` is not a directory", workspace.display())));
        }
        for (field, paths) in [
            ("readable", &self.readable),
            ("writable", &self.writable),
            ("hidden", &self.hidden),
        ] {
            if let Some(path) = paths.iter().find(|p| !p.is_absolute()) {
                return Err(Error::Config {
                    field,
                    reason: format!("`{}` is relative; give an absolute path", path.display()),
                });
            }
        }
        // Landlock grants a directory together with everything beneath it, so a directory can
        // only leave a hidden path out by being granted child by child, which would take away
        // the right to create entries in it: writable directories cannot hide anything.
        let resolve = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        let writable = self
            .writable
            .iter()
            .map(|p| resolve(p))
            .chain([workspace.clone()]);
        for dir in writable {
            if let Some(hidden) = self.hidden.iter().find(|h| resolve(h).starts_with(&dir)) {
                return Err(Error::Config {
                    field: "hidden",
                    reason: format!(
                        "`{}` is inside the writable `{}`; only paths inside readable \
                         directories can be hidden",
                        hidden.display(),
                        dir.display()
                    ),
                });
            }
        }
        if self.limits.wall_time.is_zero() {
            return Err(Error::Config {
                field: "limits.wall_time",
                reason: "must be more than zero".into(),
            });
        }
        Ok(workspace)
    }

    /// The environment a command starts with.
    pub(crate) fn environment(&self, workspace: &Path, tmp: &Path) -> Vec<(OsString, OsString)> {
        let mut env: Vec<(OsString, OsString)> = vec![
            ("PATH".into(), PATH.into()),
            ("HOME".into(), workspace.into()),
            ("TMPDIR".into(), tmp.into()),
            ("LANG".into(), "C.UTF-8".into()),
            ("TERM".into(), "dumb".into()),
        ];
        env.extend(self.env.iter().cloned());
        env
    }
}
