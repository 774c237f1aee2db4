//! A pids cgroup per command: the process-count limit that also binds root, and a way to find
//! and kill every process a command left behind, even one that left the process group.
//!
//! Why a cgroup: `RLIMIT_NPROC` is never checked for uid 0 (the kernel exempts the root user, not
//! just capabilities), and Loom's CI runs as root. The cgroup is created beside Loom's own under
//! the pids hierarchy (cgroup v1 `pids`, or the v2 root when it delegates `pids`), the child joins
//! it before exec, and it is emptied and removed when the command ends.

use std::fs::{self, OpenOptions};
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::sys;

const V1_ROOT: &str = "/sys/fs/cgroup/pids";
const V2_ROOT: &str = "/sys/fs/cgroup";

static NEXT: AtomicU64 = AtomicU64::new(0);

/// Where per-command pids cgroups can be made, if anywhere: probed by creating and removing one.
pub(crate) fn find_root() -> Option<PathBuf> {
    let v1 = Path::new(V1_ROOT);
    let v2 = Path::new(V2_ROOT);
    let candidates = [
        v1.join("cgroup.procs").is_file().then(|| v1.to_path_buf()),
        fs::read_to_string(v2.join("cgroup.subtree_control"))
            .ok()
            .filter(|controllers| controllers.split_whitespace().any(|c| c == "pids"))
            .map(|_| v2.to_path_buf()),
    ];
    let root = candidates.into_iter().flatten().find(|root| {
        let probe = root.join(unique_name("probe"));
        let made = fs::create_dir(&probe).is_ok() && probe.join("pids.max").is_file();
        let _ = fs::remove_dir(&probe);
        made
    })?;
    sweep_stale(&root);
    Some(root)
}

/// Removes the cgroups of Loom processes that died without cleaning up, killing what still runs
/// in them: nobody watches those commands any more.
fn sweep_stale(root: &Path) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let owner = name
            .strip_prefix("loom-sandbox-")
            .and_then(|rest| rest.split('-').nth(1))
            .and_then(|pid| pid.parse::<u32>().ok());
        let Some(owner) = owner else {
            continue;
        };
        if owner == std::process::id() || Path::new("/proc").join(owner.to_string()).exists() {
            continue;
        }
        let stale = PidsCgroup {
            dir: entry.path(),
            procs: None,
        };
        drop(stale);
    }
}

fn unique_name(kind: &str) -> String {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("loom-sandbox-{kind}-{}-{n}", std::process::id())
}

/// One command's cgroup; dropping it kills what is left inside and removes it.
#[derive(Debug)]
pub(crate) struct PidsCgroup {
    dir: PathBuf,
    /// `None` for a stale cgroup found on disk, which is only emptied and removed.
    procs: Option<OwnedFd>,
}

impl PidsCgroup {
    /// Creates a cgroup under `root` allowing at most `max` tasks (threads count).
    pub(crate) fn create(root: &Path, max: u64) -> Result<Self> {
        let dir = root.join(unique_name("run"));
        let fail = |reason: &'static str| {
            let dir = dir.clone();
            move |source| Error::Path {
                path: dir,
                reason,
                source,
            }
        };
        fs::create_dir(&dir).map_err(fail("cannot create the command's pids cgroup"))?;
        let made = Self::configure(&dir, max);
        match made {
            Ok(procs) => Ok(Self {
                dir,
                procs: Some(procs),
            }),
            Err(source) => {
                let _ = fs::remove_dir(&dir);
                Err(fail("cannot configure the command's pids cgroup")(source))
            }
        }
    }

    fn configure(dir: &Path, max: u64) -> std::io::Result<OwnedFd> {
        fs::write(dir.join("pids.max"), max.to_string())?;
        let procs = OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))?;
        Ok(OwnedFd::from(procs))
    }

    /// The fd the child writes itself into.
    pub(crate) fn procs_fd(&self) -> Option<RawFd> {
        self.procs.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Whether a fork in this cgroup was ever refused for hitting `pids.max`.
    pub(crate) fn hit_max(&self) -> bool {
        fs::read_to_string(self.dir.join("pids.events"))
            .ok()
            .and_then(|events| {
                events
                    .lines()
                    .find_map(|line| line.strip_prefix("max "))
                    .and_then(|n| n.trim().parse::<u64>().ok())
            })
            .is_some_and(|n| n > 0)
    }

    /// Kills every process in the cgroup until it stays empty (bounded: a process that cannot
    /// fork any more cannot outrun repeated SIGKILLs, and the task limit bounds each round).
    pub(crate) fn kill_all(&self) {
        for round in 0..200u32 {
            let pids = self.pids();
            if pids.is_empty() {
                return;
            }
            for pid in pids {
                sys::kill_pid(pid);
            }
            if round > 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    fn pids(&self) -> Vec<i32> {
        let mut text = String::new();
        let read = fs::File::open(self.dir.join("cgroup.procs"))
            .and_then(|mut file| file.read_to_string(&mut text));
        if read.is_err() {
            return Vec::new();
        }
        text.lines().filter_map(|l| l.trim().parse().ok()).collect()
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        self.kill_all();
        // Killed tasks leave the cgroup asynchronously; rmdir fails with EBUSY until they have.
        for _ in 0..500u32 {
            if fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            self.kill_all();
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn a_dead_loom_s_cgroup_is_emptied_and_removed() {
        let Some(root) = find_root() else {
            return; // no pids cgroup here; the integration tests say whether one is expected
        };
        // No process has this pid (it is above any pid_max), so its owner is dead.
        let stale = root.join("loom-sandbox-run-4000000000-0");
        // It may be left from an earlier run of this test that failed halfway.
        let _ = fs::create_dir(&stale);
        assert!(stale.is_dir());
        let mut sleeper = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        fs::write(stale.join("cgroup.procs"), sleeper.id().to_string()).unwrap();
        let mine = root.join(unique_name("run"));
        fs::create_dir(&mine).unwrap();
        sweep_stale(&root);
        assert!(!stale.exists());
        assert_eq!(sleeper.wait().unwrap().signal(), Some(libc::SIGKILL));
        // A live Loom's cgroup (this process's) is left alone.
        assert!(mine.exists());
        fs::remove_dir(&mine).unwrap();
    }
}
