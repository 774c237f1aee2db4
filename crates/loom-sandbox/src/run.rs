//! Running one command: prepare the sandbox in the parent, spawn into a new process group, then
//! watch exit, output and the clock on one thread until the command and everything it started
//! are gone.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::cgroup::PidsCgroup;
use crate::error::{Error, Result};
use crate::prepare;
use crate::probe::{self, Support};
use crate::sandbox::{Command, Limits, Mode, Sandbox};
use crate::sys::{self, ChildSetup, Rlimit};

/// How long output is still read after the command's processes were killed at its exit; only a
/// process that escaped both the group and the cgroup could keep a pipe open that long.
const DRAIN: Duration = Duration::from_millis(500);
const CHUNK: usize = 64 * 1024;

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// It was killed by this signal.
    Signal(i32),
}

/// The limit that stopped a command, when it can be told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// The wall-clock timeout: the process group was killed.
    WallTime,
    /// CPU time (`RLIMIT_CPU`).
    CpuTime,
    /// The file-size limit (`RLIMIT_FSIZE`).
    FileSize,
    /// The process limit refused a fork (the command may still have ended on its own).
    Processes,
    /// The output cap: the command was killed once a stream passed it.
    Output,
}

/// What a command did: its whole output (up to the cap) and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Standard output, whole up to [`Limits::output_bytes`].
    pub stdout: Vec<u8>,
    /// Standard error, whole up to [`Limits::output_bytes`].
    pub stderr: Vec<u8>,
    /// A stream passed the cap: the bytes kept are its beginning.
    pub truncated: bool,
    /// Exit code or signal.
    pub exit: Exit,
    /// The wall-clock timeout fired.
    pub timed_out: bool,
    /// The limit that stopped it, when known. A memory limit is not reported: the program sees
    /// a failed allocation and ends its own way.
    pub limit: Option<Limit>,
    /// From spawn to the end of the last process.
    pub wall_time: Duration,
    /// User plus system CPU of the command and the descendants it waited for.
    pub cpu_time: Duration,
    /// Whether the sandbox's boundaries were enforced ([`Mode::Enforced`]).
    pub sandboxed: bool,
}

impl Outcome {
    /// Exit code 0 and no limit hit.
    pub fn success(&self) -> bool {
        self.exit == Exit::Code(0) && self.limit.is_none()
    }
}

pub(crate) fn run(sandbox: &Sandbox, command: &Command) -> Result<Outcome> {
    let probed = probe::probed();
    let enforced = sandbox.mode == Mode::Enforced;
    if enforced {
        refuse_unenforceable(sandbox, &probed.support)?;
    }
    let prepared = prepare::get(sandbox, probed)?;
    let workspace = &prepared.workspace;
    let limits = sandbox.limits;
    let cgroup = match (limits.processes, &probed.cgroup_root) {
        (Some(max), Some(root)) => Some(PidsCgroup::create(root, max)?),
        _ => None,
    };
    let setup = ChildSetup {
        parent: libc::pid_t::try_from(std::process::id()).unwrap_or(0),
        cgroup_procs: cgroup.as_ref().and_then(PidsCgroup::procs_fd),
        rlimits: rlimits(&limits, cgroup.is_some(), probed.support.root),
        drop_caps: enforced && probed.support.capabilities,
        cap_last: probed.cap_last,
        setpcap: probed.setpcap,
        no_new_privs: enforced,
        landlock: prepared.ruleset.as_ref().map(|r| r.fd.as_raw_fd()),
        seccomp: prepared.seccomp.clone(),
    };
    let mut cmd = std::process::Command::new(&command.program);
    cmd.args(&command.args)
        .current_dir(workspace)
        .env_clear()
        .envs(sandbox.environment(workspace, &prepared.scratch.0))
        .stdin(if command.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    setup.install(&mut cmd);
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|source| Error::Spawn {
        command: command.display(),
        source,
    })?;
    if let (Some(bytes), Some(mut stdin)) = (command.stdin.clone(), child.stdin.take()) {
        // A thread, so a command that reads its input slowly cannot stall the output loop; it
        // ends with EPIPE at the latest when the command's processes are killed.
        std::thread::spawn(move || {
            let _ = stdin.write_all(&bytes);
        });
    }
    let streams = [
        child
            .stdout
            .take()
            .map(|out| File::from(OwnedFd::from(out))),
        child
            .stderr
            .take()
            .map(|err| File::from(OwnedFd::from(err))),
    ];
    let watched =
        watch(child.id(), streams, &limits, start, cgroup.as_ref()).map_err(|(step, source)| {
            Error::Run {
                command: command.display(),
                step,
                source,
            }
        })?;
    let wall_time = start.elapsed();
    let reaped = watched.reaped;
    let exit = match (reaped.code, reaped.signal) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(signal)) => Exit::Signal(signal),
        (None, None) => Exit::Signal(libc::SIGKILL),
    };
    let limit = stopped_by(&watched, exit, limits.cpu_time, || {
        cgroup.as_ref().is_some_and(PidsCgroup::hit_max)
    });
    let [stdout, stderr] = watched.output;
    Ok(Outcome {
        stdout,
        stderr,
        truncated: watched.output_capped,
        exit,
        timed_out: watched.timed_out,
        limit,
        wall_time,
        cpu_time: reaped.cpu,
        sandboxed: enforced,
    })
}

/// The limit that stopped a command, told from how it ended. A shell reports a child killed by
/// a signal as exit code 128 + the signal, so those codes count too, but only with the evidence
/// that makes them likely (CPU used up to the limit); CPU summed over several processes that
/// each stayed under the per-process limit is not a limit hit.
fn stopped_by(
    watched: &Watched,
    exit: Exit,
    cpu_limit: Option<Duration>,
    hit_max_processes: impl FnOnce() -> bool,
) -> Option<Limit> {
    let by_shell = |signal: i32| exit == Exit::Code(128 + signal);
    let cpu_used_up = cpu_limit.is_some_and(|limit| watched.reaped.cpu >= limit);
    if watched.timed_out {
        Some(Limit::WallTime)
    } else if watched.output_capped {
        Some(Limit::Output)
    } else if exit == Exit::Signal(libc::SIGXCPU)
        || (cpu_used_up && (exit == Exit::Signal(libc::SIGKILL) || by_shell(libc::SIGXCPU)))
    {
        Some(Limit::CpuTime)
    } else if exit == Exit::Signal(libc::SIGXFSZ) || by_shell(libc::SIGXFSZ) {
        Some(Limit::FileSize)
    } else if exit != Exit::Code(0) && hit_max_processes() {
        Some(Limit::Processes)
    } else {
        None
    }
}

fn refuse_unenforceable(sandbox: &Sandbox, support: &Support) -> Result<()> {
    let mut missing = Vec::new();
    if support.landlock_abi.is_none() {
        missing.push(
            "Landlock is not available (kernel older than 5.13, or `landlock` missing from the \
             enabled LSMs), so the filesystem cannot be confined",
        );
    }
    if !sandbox.network && !support.seccomp {
        missing.push("seccomp filters are not available, so network access cannot be refused");
    }
    if sandbox.limits.processes.is_some() && !support.pids_cgroup && support.root {
        missing.push(
            "the process limit cannot be enforced: Loom runs as root, for whom RLIMIT_NPROC does \
             not apply, and no pids cgroup can be created (mount the pids controller writable, \
             or set no process limit)",
        );
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::Unsupported {
        reason: format!(
            "{}; choose the unsandboxed mode explicitly to run without these boundaries",
            missing.join("; ")
        ),
    })
}

fn rlimits(limits: &Limits, cgroup: bool, root: bool) -> Vec<Rlimit> {
    let mut out = vec![Rlimit {
        resource: libc::RLIMIT_CORE,
        soft: 0,
        hard: 0,
    }];
    let mut set = |resource, value: Option<u64>, grace: u64| {
        if let Some(value) = value {
            out.push(Rlimit {
                resource,
                soft: value,
                hard: value.saturating_add(grace),
            });
        }
    };
    // CPU: SIGXCPU at the soft limit; the hard limit just above kills a program that catches it.
    let cpu = limits
        .cpu_time
        .map(|cpu| cpu.as_secs() + u64::from(cpu.subsec_nanos() > 0));
    set(libc::RLIMIT_CPU, cpu.map(|secs| secs.max(1)), 1);
    set(libc::RLIMIT_AS, limits.memory_bytes, 0);
    set(libc::RLIMIT_FSIZE, limits.file_size_bytes, 0);
    set(libc::RLIMIT_NOFILE, limits.open_files, 0);
    if !cgroup && !root {
        // RLIMIT_NPROC counts every task of the uid, not only the command's.
        let base = probe::tasks_of_uid(probe::real_uid());
        set(
            libc::RLIMIT_NPROC,
            limits.processes.map(|max| base.saturating_add(max)),
            0,
        );
    }
    out
}

struct Watched {
    reaped: sys::Reaped,
    output: [Vec<u8>; 2],
    output_capped: bool,
    timed_out: bool,
}

type WatchError = (&'static str, std::io::Error);

/// Kills what the command left running: its process group (while the leader is unreaped its
/// pid names the group, so no other process can be hit) and its cgroup.
fn kill_all(pid: u32, cgroup: Option<&PidsCgroup>) {
    sys::kill_group(pid);
    if let Some(cgroup) = cgroup {
        cgroup.kill_all();
    }
}

fn watch(
    pid: u32,
    streams: [Option<File>; 2],
    limits: &Limits,
    start: Instant,
    cgroup: Option<&PidsCgroup>,
) -> std::result::Result<Watched, WatchError> {
    let watched = watch_loop(pid, streams, limits, start, cgroup);
    if watched.is_err() {
        // Never leave a command running unwatched: kill it and reap it (an error here means it
        // was reaped already).
        kill_all(pid, cgroup);
        let _ = sys::wait4(pid);
    }
    watched
}

fn watch_loop(
    pid: u32,
    mut streams: [Option<File>; 2],
    limits: &Limits,
    start: Instant,
    cgroup: Option<&PidsCgroup>,
) -> std::result::Result<Watched, WatchError> {
    let pidfd = sys::pidfd_open(pid).map_err(|err| ("watching the process", err))?;
    let deadline = start + limits.wall_time;
    let cap = limits.output_bytes;
    let mut output = [Vec::new(), Vec::new()];
    let mut buf = vec![0u8; CHUNK];
    let mut reaped = None;
    let mut timed_out = false;
    let mut output_capped = false;
    let mut drain_until = None;
    loop {
        let now = Instant::now();
        if reaped.is_none() && now >= deadline && !timed_out {
            timed_out = true;
            kill_all(pid, cgroup);
        }
        let open = streams.iter().any(Option::is_some);
        if reaped.is_some() && (!open || drain_until.is_some_and(|until| now >= until)) {
            break;
        }
        let wake = match (reaped.is_some(), drain_until) {
            (true, Some(until)) => until,
            _ if timed_out => now + Duration::from_millis(100),
            _ => deadline,
        };
        let timeout_ms =
            i32::try_from(wake.saturating_duration_since(now).as_millis() + 1).unwrap_or(i32::MAX);
        let mut fds = Vec::with_capacity(3);
        if reaped.is_none() {
            fds.push(sys::Poll {
                fd: pidfd.as_raw_fd(),
                ready: false,
            });
        }
        for stream in streams.iter().flatten() {
            fds.push(sys::Poll {
                fd: stream.as_raw_fd(),
                ready: false,
            });
        }
        sys::poll(&mut fds, timeout_ms).map_err(|err| ("waiting for the process", err))?;
        for ready in fds.iter().filter(|p| p.ready) {
            if ready.fd == pidfd.as_raw_fd() {
                // Kill leftovers before reaping, while the group is still pinned by the leader.
                sys::kill_group(pid);
                reaped = Some(sys::wait4(pid).map_err(|err| ("reaping the process", err))?);
                if let Some(cgroup) = cgroup {
                    cgroup.kill_all();
                }
                drain_until = Some(Instant::now() + DRAIN);
                continue;
            }
            for (i, slot) in streams.iter_mut().enumerate() {
                let Some(stream) = slot.as_mut().filter(|s| s.as_raw_fd() == ready.fd) else {
                    continue;
                };
                match stream.read(&mut buf) {
                    Ok(0) => *slot = None,
                    Ok(n) => {
                        let room = cap.saturating_sub(output[i].len());
                        output[i].extend_from_slice(&buf[..n.min(room)]);
                        if n > room && !output_capped {
                            output_capped = true;
                            kill_all(pid, cgroup);
                        }
                    }
                    Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => *slot = None,
                }
            }
        }
    }
    let reaped = match reaped {
        Some(reaped) => reaped,
        None => sys::wait4(pid).map_err(|err| ("reaping the process", err))?,
    };
    Ok(Watched {
        reaped,
        output,
        output_capped,
        timed_out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_without_the_boundaries_is_refused_with_every_reason() {
        let bare = Support {
            landlock_abi: None,
            seccomp: false,
            pids_cgroup: false,
            root: true,
            capabilities: true,
        };
        let sandbox = Sandbox::new("/");
        let Err(Error::Unsupported { reason }) = refuse_unenforceable(&sandbox, &bare) else {
            panic!("a bare kernel was accepted");
        };
        for needle in ["Landlock", "seccomp", "RLIMIT_NPROC", "unsandboxed"] {
            assert!(reason.contains(needle), "{needle} missing: {reason}");
        }
        // What the caller turned off is not asked for.
        let relaxed = sandbox.network(true).limits(Limits {
            processes: None,
            ..Limits::default()
        });
        let Err(Error::Unsupported { reason }) = refuse_unenforceable(&relaxed, &bare) else {
            panic!("no Landlock was accepted");
        };
        assert!(
            !reason.contains("seccomp") && !reason.contains("RLIMIT_NPROC"),
            "{reason}"
        );
        let full = Support {
            landlock_abi: Some(1),
            seccomp: true,
            pids_cgroup: true,
            ..bare
        };
        assert!(refuse_unenforceable(&Sandbox::new("/"), &full).is_ok());
    }

    fn ended(code: Option<i32>, signal: Option<i32>, cpu_ms: u64) -> Watched {
        Watched {
            reaped: sys::Reaped {
                code,
                signal,
                cpu: Duration::from_millis(cpu_ms),
            },
            output: [Vec::new(), Vec::new()],
            output_capped: false,
            timed_out: false,
        }
    }

    #[test]
    fn the_stopping_limit_is_told_from_how_the_command_ended() {
        let second = Some(Duration::from_secs(1));
        let stop = |code, signal, cpu_ms, hit| {
            let exit = match (code, signal) {
                (Some(code), _) => Exit::Code(code),
                (None, Some(signal)) => Exit::Signal(signal),
                (None, None) => Exit::Signal(libc::SIGKILL),
            };
            stopped_by(&ended(code, signal, cpu_ms), exit, second, || hit)
        };
        assert_eq!(
            stop(None, Some(libc::SIGXCPU), 990, false),
            Some(Limit::CpuTime)
        );
        assert_eq!(
            stop(None, Some(libc::SIGKILL), 2000, false),
            Some(Limit::CpuTime)
        );
        assert_eq!(
            stop(Some(128 + libc::SIGXCPU), None, 1000, false),
            Some(Limit::CpuTime)
        );
        // Several processes each under the limit: a success, whatever their sum.
        assert_eq!(stop(Some(0), None, 5000, false), None);
        assert_eq!(
            stop(None, Some(libc::SIGXFSZ), 5, false),
            Some(Limit::FileSize)
        );
        assert_eq!(
            stop(Some(128 + libc::SIGXFSZ), None, 5, false),
            Some(Limit::FileSize)
        );
        assert_eq!(stop(Some(1), None, 5, true), Some(Limit::Processes));
        assert_eq!(stop(Some(0), None, 5, true), None);
        assert_eq!(stop(Some(1), None, 5, false), None);
        let mut timed_out = ended(None, Some(libc::SIGKILL), 5);
        timed_out.timed_out = true;
        let exit = Exit::Signal(libc::SIGKILL);
        assert_eq!(
            stopped_by(&timed_out, exit, second, || true),
            Some(Limit::WallTime)
        );
    }

    #[test]
    fn without_a_cgroup_a_non_root_process_limit_counts_from_the_uid_s_tasks() {
        let limits = Limits::default();
        let nproc = |cgroup, root| {
            rlimits(&limits, cgroup, root)
                .into_iter()
                .find(|l| l.resource == libc::RLIMIT_NPROC)
                .map(|l| l.soft)
        };
        assert_eq!(nproc(true, false), None, "the cgroup bounds it");
        assert_eq!(
            nproc(false, true),
            None,
            "root is never bound by RLIMIT_NPROC"
        );
        let soft = nproc(false, false).unwrap();
        let max = limits.processes.unwrap();
        // This process's own tasks are already counted.
        assert!(soft > max, "{soft} <= {max}");
        let cpu = rlimits(&limits, true, false)
            .into_iter()
            .find(|l| l.resource == libc::RLIMIT_CPU)
            .unwrap();
        assert!(
            cpu.hard > cpu.soft,
            "a caught SIGXCPU is followed by SIGKILL"
        );
    }
}
