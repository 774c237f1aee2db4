//! Every raw system call of the crate, and the only module allowed to use `unsafe`.
//!
//! Why raw calls: the sandbox is installed in the child between `fork` and `exec`, where only
//! async-signal-safe calls are allowed (another thread of the parent may hold the allocator's
//! lock at the fork). So everything that allocates — the Landlock ruleset and its path fds, the
//! seccomp program, the cgroup's `cgroup.procs` fd — is prepared in the parent, and the child
//! closure ([`ChildSetup::install`]) only issues `prctl`, `setrlimit`, `capset`, `write` and the
//! Landlock syscalls on values it already holds. Each `unsafe` block says why it is sound.
#![expect(
    unsafe_code,
    reason = "pre_exec and raw syscalls have no safe form; each block says why it is sound"
)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;

/// `LANDLOCK_CREATE_RULESET_VERSION`: ask the kernel for its Landlock ABI instead of a ruleset.
const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
/// `LANDLOCK_RULE_PATH_BENEATH`: a rule granting rights beneath an opened path.
const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit capability sets in two 32-bit words.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `struct landlock_ruleset_attr`; the kernel reads only the prefix whose size it is given, which
/// is how older ABIs (no network rights, no scopes) are served by the same struct.
#[repr(C)]
#[derive(Debug, Default)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// `struct landlock_path_beneath_attr`, packed in the kernel's UAPI.
#[repr(C, packed)]
#[derive(Debug)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// `struct __user_cap_header_struct`.
#[repr(C)]
#[derive(Debug)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The kernel's Landlock ABI version, or `None` when Landlock is missing or disabled.
pub(crate) fn landlock_abi() -> Option<u32> {
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag the syscall reads no
    // memory and only returns a number (or -1 with errno).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(ret).ok().filter(|abi| *abi > 0)
}

/// Whether seccomp filters can be installed (the kernel was built with them).
pub(crate) fn seccomp_available() -> bool {
    // SAFETY: PR_GET_SECCOMP takes no pointer and only reports the caller's mode.
    let ret = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    ret >= 0
}

/// Creates a Landlock ruleset handling these rights; `abi` picks how much of the attribute the
/// kernel is shown (network rights need 4, scopes need 6).
pub(crate) fn landlock_ruleset(fs: u64, net: u64, scoped: u64, abi: u32) -> io::Result<OwnedFd> {
    let attr = RulesetAttr {
        handled_access_fs: fs,
        handled_access_net: net,
        scoped,
    };
    let size = match abi {
        0..=3 => std::mem::size_of::<u64>(),
        4 | 5 => 2 * std::mem::size_of::<u64>(),
        _ => std::mem::size_of::<RulesetAttr>(),
    };
    // SAFETY: `attr` is a live, properly laid out struct at least `size` bytes long.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            size,
            0u32,
        )
    };
    owned_fd(ret)
}

/// Grants `access` beneath the opened path `path` in `ruleset`.
pub(crate) fn landlock_allow_path(
    ruleset: &OwnedFd,
    path: &OwnedFd,
    access: u64,
) -> io::Result<()> {
    let attr = PathBeneathAttr {
        allowed_access: access,
        parent_fd: path.as_raw_fd(),
    };
    // SAFETY: both fds are open for the duration of the call and `attr` is a live struct of the
    // UAPI layout; the kernel copies it and keeps no pointer.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Opens a pidfd for `pid`, which becomes readable when the process exits; polling it is how the
/// parent waits for exit and output at once without a thread per child.
pub(crate) fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: pidfd_open takes plain integers.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    owned_fd(ret)
}

fn owned_fd(ret: libc::c_long) -> io::Result<OwnedFd> {
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(ret).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: the kernel just returned this fd to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One fd to poll and what came back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Poll {
    pub(crate) fd: RawFd,
    /// Readable, hung up or in error: a read will not block.
    pub(crate) ready: bool,
}

/// Waits until one of `fds` is ready or `timeout_ms` passes (retrying on EINTR).
pub(crate) fn poll(fds: &mut [Poll], timeout_ms: i32) -> io::Result<()> {
    let mut raw: [libc::pollfd; 4] = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; 4];
    let n = fds.len().min(raw.len());
    for (slot, item) in raw.iter_mut().zip(fds.iter()) {
        slot.fd = item.fd;
        slot.events = libc::POLLIN;
    }
    loop {
        // SAFETY: `raw` holds `n` initialised pollfd entries and outlives the call.
        let ret = unsafe { libc::poll(raw.as_mut_ptr(), n as libc::nfds_t, timeout_ms) };
        if ret >= 0 {
            break;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
    for (item, slot) in fds.iter_mut().zip(raw.iter()) {
        item.ready = slot.revents != 0;
    }
    Ok(())
}

/// Sends SIGKILL to every process of the group `pgid`; a group already gone is not an error.
pub(crate) fn kill_group(pgid: u32) {
    if let Ok(pgid) = libc::pid_t::try_from(pgid) {
        if pgid > 1 {
            // SAFETY: kill takes plain integers; the negative pid names the process group.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
}

/// Sends SIGKILL to one process; a process already gone is not an error.
pub(crate) fn kill_pid(pid: i32) {
    if pid > 1 {
        // SAFETY: kill takes plain integers.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// How a reaped child ended, and the CPU it and its waited-for descendants used.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reaped {
    pub(crate) code: Option<i32>,
    pub(crate) signal: Option<i32>,
    pub(crate) cpu: std::time::Duration,
}

/// Reaps `pid` (blocking until it exits) and returns its status and resource usage.
pub(crate) fn wait4(pid: u32) -> io::Result<Reaped> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ECHILD))?;
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain old data; zeroes are a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: both out-pointers are live locals.
        let ret = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if ret >= 0 {
            break;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
    let time = |tv: libc::timeval| {
        std::time::Duration::from_secs(u64::try_from(tv.tv_sec).unwrap_or(0))
            + std::time::Duration::from_micros(u64::try_from(tv.tv_usec).unwrap_or(0))
    };
    let cpu = time(usage.ru_utime) + time(usage.ru_stime);
    let (code, signal) = if libc::WIFEXITED(status) {
        (Some(libc::WEXITSTATUS(status)), None)
    } else if libc::WIFSIGNALED(status) {
        (None, Some(libc::WTERMSIG(status)))
    } else {
        (None, None)
    };
    Ok(Reaped { code, signal, cpu })
}

/// An rlimit to set in the child: the resource and its soft and hard values.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rlimit {
    pub(crate) resource: libc::__rlimit_resource_t,
    pub(crate) soft: u64,
    pub(crate) hard: u64,
}

/// Everything the child applies to itself before exec, prepared by the parent.
#[derive(Debug)]
pub(crate) struct ChildSetup {
    /// Loom's pid, to notice a parent that died before the child armed its death signal.
    pub(crate) parent: libc::pid_t,
    /// `cgroup.procs` of the command's pids cgroup, opened for writing.
    pub(crate) cgroup_procs: Option<RawFd>,
    pub(crate) rlimits: Vec<Rlimit>,
    /// Drop every capability (bounding, ambient, effective, permitted, inheritable) and lock
    /// root's special treatment off; set when the parent holds capabilities.
    pub(crate) drop_caps: bool,
    /// The highest capability number the kernel knows.
    pub(crate) cap_last: u32,
    /// The parent holds CAP_SETPCAP, so the child can also lock securebits and empty the
    /// bounding set (without it those steps would fail, and capset alone is what is possible).
    pub(crate) setpcap: bool,
    /// Set `no_new_privs` (needed for Landlock and seccomp; left off when unsandboxed so that a
    /// command the user chose to trust may still use setuid programs).
    pub(crate) no_new_privs: bool,
    pub(crate) landlock: Option<RawFd>,
    pub(crate) seccomp: Option<Vec<libc::sock_filter>>,
}

// The filter is plain integers; the raw fds are owned by the parent until `spawn` returns.
// SAFETY: nothing in `ChildSetup` is tied to a thread.
unsafe impl Send for ChildSetup {}
// SAFETY: the closure only reads the setup.
unsafe impl Sync for ChildSetup {}

impl ChildSetup {
    /// Registers the child-side steps on `cmd`. The fds named in `self` must stay open until
    /// `cmd.spawn()` returns.
    pub(crate) fn install(self, cmd: &mut std::process::Command) {
        let setup = self;
        // SAFETY: the closure runs in the forked child before exec. It allocates nothing, takes
        // no lock and calls only async-signal-safe syscalls on values prepared by the parent;
        // errors are built with `from_raw_os_error`, which does not allocate.
        unsafe {
            cmd.pre_exec(move || setup.apply());
        }
    }

    fn apply(&self) -> io::Result<()> {
        // If Loom dies, its command dies with it rather than running on unwatched. The thread
        // that spawned the command is the one blocked watching it, so it outlives the command.
        // SAFETY: integer arguments only.
        check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) }.into())?;
        // SAFETY: getppid cannot fail.
        if unsafe { libc::getppid() } != self.parent {
            // The parent died before the death signal was armed.
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        if let Some(fd) = self.cgroup_procs {
            // Writing "0" moves the writing process into the cgroup (v1 and v2 alike).
            // SAFETY: a one-byte static buffer and an fd the parent keeps open.
            let n = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
            check(n as libc::c_long)?;
        }
        for limit in &self.rlimits {
            let value = libc::rlimit {
                rlim_cur: limit.soft,
                rlim_max: limit.hard,
            };
            // SAFETY: `value` is a live local.
            check(unsafe { libc::setrlimit(limit.resource, &value) }.into())?;
        }
        if self.drop_caps {
            self.drop_capabilities()?;
        }
        if self.no_new_privs {
            // SAFETY: integer arguments only.
            check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }.into())?;
        }
        if let Some(ruleset) = self.landlock {
            // SAFETY: integer arguments only; the ruleset fd is open (the parent owns it).
            let ret = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) };
            check(ret)?;
        }
        if let Some(filter) = &self.seccomp {
            let prog = libc::sock_fprog {
                len: u16::try_from(filter.len())
                    .map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?,
                filter: filter.as_ptr().cast_mut(),
            };
            // SAFETY: `prog` points into a vector that lives as long as the closure; the kernel
            // copies the program.
            let ret = unsafe {
                libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                    &prog as *const libc::sock_fprog,
                    0,
                    0,
                )
            };
            check(ret.into())?;
        }
        Ok(())
    }

    fn drop_capabilities(&self) -> io::Result<()> {
        let bits = libc::SECBIT_NOROOT
            | libc::SECBIT_NOROOT_LOCKED
            | libc::SECBIT_NO_SETUID_FIXUP
            | libc::SECBIT_NO_SETUID_FIXUP_LOCKED
            | libc::SECBIT_NO_CAP_AMBIENT_RAISE
            | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
        if self.setpcap {
            // SAFETY: integer arguments only. Needs CAP_SETPCAP, which is why it comes first.
            let ret =
                unsafe { libc::prctl(libc::PR_SET_SECUREBITS, bits as libc::c_ulong, 0, 0, 0) };
            check(ret.into())?;
            for cap in 0..=self.cap_last {
                // SAFETY: integer arguments only.
                let ret =
                    unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
                check(ret.into())?;
            }
        }
        // SAFETY: integer arguments only.
        check(
            unsafe {
                libc::prctl(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
                    0,
                    0,
                    0,
                )
            }
            .into(),
        )?;
        let header = CapHeader {
            version: CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [CapData::default(); 2];
        // SAFETY: `header` and `data` are live locals of the layout capset(2) expects.
        let ret =
            unsafe { libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) };
        check(ret)
    }
}

fn check(ret: libc::c_long) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
