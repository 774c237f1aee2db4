//! What a [`Sandbox`] prepares once and reuses for every command: the resolved workspace, the
//! scratch directory, the Landlock ruleset and the seccomp program.
//!
//! Why cache: opening every granted path and adding it to a ruleset costs a few hundred syscalls
//! (more when a hidden path makes a directory be granted entry by entry), which would dominate a
//! short command's start. A ruleset fd can restrict any number of children. The cache is dropped
//! when the sandbox's settings change (its builders start a fresh one) and rebuilt when the
//! workspace or scratch directory was replaced on disk (the rules hold the old inodes).

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::landlock;
use crate::probe::Probed;
use crate::sandbox::{Mode, Sandbox};
use crate::seccomp;

/// The shared slot a sandbox (and its clones) keep their preparation in.
pub(crate) type Slot = Arc<Mutex<Option<Arc<Prepared>>>>;

#[derive(Debug)]
pub(crate) struct Prepared {
    pub(crate) workspace: PathBuf,
    pub(crate) scratch: Scratch,
    pub(crate) ruleset: Option<landlock::Ruleset>,
    pub(crate) seccomp: Option<Vec<libc::sock_filter>>,
    /// Device and inode of the workspace and the scratch directory when the rules were made.
    ids: [(u64, u64); 2],
}

fn id(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The sandbox's preparation, reused when still current, else built (and kept).
pub(crate) fn get(sandbox: &Sandbox, probed: &Probed) -> Result<Arc<Prepared>> {
    let slot = sandbox
        .prepared
        .lock()
        .unwrap_or_else(|poison| poison.into_inner());
    if let Some(prepared) = slot.as_ref().filter(|p| p.is_current(sandbox)) {
        return Ok(Arc::clone(prepared));
    }
    drop(slot);
    let prepared = Arc::new(Prepared::build(sandbox, probed)?);
    let mut slot = sandbox
        .prepared
        .lock()
        .unwrap_or_else(|poison| poison.into_inner());
    *slot = Some(Arc::clone(&prepared));
    Ok(prepared)
}

impl Prepared {
    fn is_current(&self, sandbox: &Sandbox) -> bool {
        id(&sandbox.workspace) == Some(self.ids[0]) && id(&self.scratch.0) == Some(self.ids[1])
    }

    fn build(sandbox: &Sandbox, probed: &Probed) -> Result<Self> {
        let workspace = sandbox.checked_workspace()?;
        let scratch = Scratch::create()?;
        let enforced = sandbox.mode == Mode::Enforced;
        let mut readable = sandbox.readable.clone();
        readable.push(workspace.clone());
        let mut writable = sandbox.writable.clone();
        writable.push(workspace.clone());
        writable.push(scratch.0.clone());
        let ruleset = match (enforced, probed.support.landlock_abi) {
            (true, Some(abi)) => Some(landlock::build(
                abi,
                &readable,
                &writable,
                &sandbox.hidden,
                sandbox.network,
            )?),
            _ => None,
        };
        let seccomp = if enforced && !sandbox.network {
            Some(seccomp::network_filter().ok_or_else(|| Error::Unsupported {
                reason: "no seccomp filter for this architecture".into(),
            })?)
        } else {
            None
        };
        let ids = [
            id(&workspace).unwrap_or_default(),
            id(&scratch.0).unwrap_or_default(),
        ];
        Ok(Self {
            workspace,
            scratch,
            ruleset,
            seccomp,
            ids,
        })
    }
}

/// A private directory for the commands' `TMPDIR`, removed with what it holds when the sandbox
/// is dropped; `/tmp` itself stays closed (other programs' secrets live there).
#[derive(Debug)]
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Scratch {
    fn create() -> Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("loom-sandbox-tmp-{}-{n}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|source| Error::Path {
                path: path.clone(),
                reason: "cannot create the sandbox's scratch directory",
                source,
            })?;
        Ok(Self(path))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
