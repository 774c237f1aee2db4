//! What this kernel and this process can enforce, found once per process.

use std::fs;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::{cgroup, seccomp, sys};

/// What the sandbox can enforce here. [`crate::Sandbox::run`] refuses (unless the caller chose
/// [`crate::Mode::Unsandboxed`]) when a boundary it was asked for is missing, so this is also
/// what a caller shows a user who asks "why was my command refused".
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Support {
    /// The kernel's Landlock ABI (filesystem rules from 1, TCP rules from 4, scopes from 6), or
    /// `None` when Landlock is missing or not enabled among the LSMs.
    pub landlock_abi: Option<u32>,
    /// Seccomp filters can be installed and this build knows the architecture's syscall numbers.
    pub seccomp: bool,
    /// A pids cgroup can be created per command (bounds the process count even for root).
    pub pids_cgroup: bool,
    /// The process runs with real uid 0, for which the kernel never checks `RLIMIT_NPROC`.
    pub root: bool,
    /// The process holds capabilities, which the child must drop so its limits stick.
    pub capabilities: bool,
}

pub(crate) struct Probed {
    pub(crate) support: Support,
    pub(crate) cgroup_root: Option<PathBuf>,
    pub(crate) cap_last: u32,
    /// The process may change securebits and the bounding set.
    pub(crate) setpcap: bool,
}

/// `CAP_SETPCAP`'s bit number.
const CAP_SETPCAP: u32 = 8;

static PROBED: OnceLock<Probed> = OnceLock::new();

/// What the kernel can enforce; probed on first use and remembered.
pub fn probe() -> Support {
    probed().support.clone()
}

pub(crate) fn probed() -> &'static Probed {
    PROBED.get_or_init(|| {
        let cgroup_root = cgroup::find_root();
        let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .map(str::trim)
                .unwrap_or_default()
                .to_owned()
        };
        let root = field("Uid:").split_whitespace().next() == Some("0");
        let caps = |name: &str| u64::from_str_radix(&field(name), 16).unwrap_or(0);
        let effective = caps("CapEff:");
        let capabilities = effective != 0 || caps("CapPrm:") != 0;
        let setpcap = effective & (1 << CAP_SETPCAP) != 0;
        let cap_last = fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(40);
        Probed {
            support: Support {
                landlock_abi: sys::landlock_abi(),
                seccomp: seccomp::SUPPORTED && sys::seccomp_available(),
                pids_cgroup: cgroup_root.is_some(),
                root,
                capabilities,
            },
            cgroup_root,
            cap_last,
            setpcap,
        }
    })
}

/// How many tasks (processes and threads) the real uid `uid` runs now: the base that
/// `RLIMIT_NPROC` counts from when no cgroup is available.
pub(crate) fn tasks_of_uid(uid: u32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|entry| entry.metadata().is_ok_and(|m| m.uid() == uid))
        .map(|entry| {
            fs::read_dir(entry.path().join("task")).map_or(1, |tasks| tasks.count() as u64)
        })
        .sum()
}

/// The real uid of this process.
pub(crate) fn real_uid() -> u32 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().next())
                .and_then(|uid| uid.parse().ok())
        })
        .unwrap_or(0)
}
