//! The Landlock ruleset of one command, built in the parent: which rights are handled at the
//! kernel's ABI, and which paths get read or write rights.
//!
//! Landlock only grants: every handled right is denied everywhere except beneath the paths given
//! here. Read paths get execute, read-file and read-dir; write paths get every handled right.

use std::fs::OpenOptions;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::sys;

const EXECUTE: u64 = 1 << 0;
const WRITE_FILE: u64 = 1 << 1;
const READ_FILE: u64 = 1 << 2;
const READ_DIR: u64 = 1 << 3;
/// ABI 1: remove dir/file, make char/dir/reg/sock/fifo/block/sym.
const ABI1_ALL: u64 = (1 << 13) - 1;
/// ABI 2: link or rename across directories (without it such moves are always refused).
const REFER: u64 = 1 << 13;
/// ABI 3: truncate.
const TRUNCATE: u64 = 1 << 14;
/// The rights that make sense on a file rather than a directory; the kernel refuses a rule
/// that grants directory rights on a file.
const FILE_RIGHTS: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE;

const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;

const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

/// The read rights: enough to run programs and read files and listings.
const READ: u64 = EXECUTE | READ_FILE | READ_DIR;

/// A ruleset ready to be enforced by the child, with the path fds it was built from.
#[derive(Debug)]
pub(crate) struct Ruleset {
    pub(crate) fd: OwnedFd,
}

/// The filesystem rights Loom handles at `abi`.
fn handled_fs(abi: u32) -> u64 {
    let mut fs = ABI1_ALL;
    if abi >= 2 {
        fs |= REFER;
    }
    if abi >= 3 {
        fs |= TRUNCATE;
    }
    fs
}

/// Builds the ruleset: `readable` paths get [`READ`] except beneath a `hidden` path, `writable`
/// paths every handled right (the caller refuses hidden paths inside writable ones). A listed
/// path that does not exist is skipped (system layouts differ: `/lib64`, `/lib32`); a path that
/// exists but cannot be opened is an error naming it. Without `network`, TCP bind and
/// connect are handled with no rule (so refused) where the ABI has them, and abstract unix
/// sockets outside the sandbox are out of reach. Signals to processes outside the sandbox are
/// always refused where the ABI can scope them.
pub(crate) fn build(
    abi: u32,
    readable: &[PathBuf],
    writable: &[PathBuf],
    hidden: &[PathBuf],
    network: bool,
) -> Result<Ruleset> {
    let fs = handled_fs(abi);
    let net = if abi >= 4 && !network {
        NET_BIND_TCP | NET_CONNECT_TCP
    } else {
        0
    };
    let mut scoped = 0;
    if abi >= 6 {
        scoped |= SCOPE_SIGNAL;
        if !network {
            scoped |= SCOPE_ABSTRACT_UNIX_SOCKET;
        }
    }
    let fd = sys::landlock_ruleset(fs, net, scoped, abi).map_err(|source| Error::Setup {
        step: "creating the Landlock ruleset",
        source,
    })?;
    let ruleset = Ruleset { fd };
    let hidden: Vec<PathBuf> = hidden
        .iter()
        .filter_map(|path| path.canonicalize().ok())
        .collect();
    for path in readable {
        grant(&ruleset, path, READ & fs, &hidden, 0)?;
    }
    for path in writable {
        allow(&ruleset, path, fs)?;
    }
    Ok(ruleset)
}

/// How deep a granted directory is opened up to leave a hidden path out (symlinks inside it
/// could otherwise lead round in circles).
const MAX_DEPTH: usize = 8;

/// Grants `rights` beneath `path`, except beneath the `hidden` paths: a directory holding a hidden
/// path is granted child by child instead (Landlock cannot take back a right granted above).
/// Paths are compared resolved, so a symlink to a hidden file is no way in.
fn grant(
    ruleset: &Ruleset,
    path: &Path,
    rights: u64,
    hidden: &[PathBuf],
    depth: usize,
) -> Result<()> {
    let resolved = match path.canonicalize() {
        Ok(resolved) => resolved,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(Error::Path {
                path: path.to_path_buf(),
                reason: "cannot be resolved to grant access",
                source,
            })
        }
    };
    if hidden.iter().any(|h| resolved.starts_with(h)) {
        return Ok(());
    }
    let holds_hidden = hidden.iter().any(|h| h.starts_with(&resolved));
    if !holds_hidden || !resolved.is_dir() {
        return allow(ruleset, &resolved, rights);
    }
    if depth >= MAX_DEPTH {
        // Too deep to open up safely: leave it out rather than grant the hidden path.
        return Ok(());
    }
    let entries = std::fs::read_dir(&resolved).map_err(|source| Error::Path {
        path: resolved.clone(),
        reason: "cannot be listed to leave hidden paths out",
        source,
    })?;
    for entry in entries.flatten() {
        grant(ruleset, &entry.path(), rights, hidden, depth + 1)?;
    }
    Ok(())
}

fn allow(ruleset: &Ruleset, path: &Path, rights: u64) -> Result<()> {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let path = path.as_path();
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(Error::Path {
                path: path.to_path_buf(),
                reason: "cannot be opened to grant access",
                source,
            })
        }
    };
    let is_dir = file.metadata().map(|m| m.is_dir()).unwrap_or(false);
    let rights = if is_dir { rights } else { rights & FILE_RIGHTS };
    let fd = OwnedFd::from(file);
    sys::landlock_allow_path(&ruleset.fd, &fd, rights).map_err(|source| Error::Path {
        path: path.to_path_buf(),
        reason: "cannot be added to the Landlock ruleset",
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_abis_handle_more_rights() {
        assert_eq!(handled_fs(1) & REFER, 0);
        assert_ne!(handled_fs(2) & REFER, 0);
        assert_eq!(handled_fs(2) & TRUNCATE, 0);
        assert_ne!(handled_fs(7) & TRUNCATE, 0);
    }
}
