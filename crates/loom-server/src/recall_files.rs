//! `[recall] mode = "files"`: every offloaded output of a session is also a file under the
//! session's folder, byte-identical to the original, and its stub names the file's absolute
//! path, so an agent on the same machine reads it with its own file tool (Claude Code's Read,
//! Codex's shell, `cat`). Files are written once, confined to the folder (an alias has only
//! plain path components), and removed with the folder.

use std::io::Write;
use std::path::{Component, Path, PathBuf};

use loom_core::{ReduceConfig, SessionId};
use loom_store::{BlobStore, Offloader, Resolution, Store};
use sha2::{Digest, Sha256};

/// The folder of `session`'s files under `folder`: its id with every character but letters,
/// digits, `.`, `_` and `-` replaced, and a hash of the id, so two ids never share one.
pub fn session_dir(folder: &Path, session: &SessionId) -> PathBuf {
    let id = session.as_str();
    let mut name: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    name = name.trim_start_matches('.').to_owned();
    let hash = hex::encode(&Sha256::digest(id.as_bytes())[..6]);
    folder.join(format!("{name}-{hash}"))
}

/// Removes `session`'s folder under `folder` and everything in it (the session was deleted);
/// `false` when there was none.
pub fn remove_session(folder: &Path, session: &SessionId) -> std::io::Result<bool> {
    match std::fs::remove_dir_all(session_dir(folder, session)) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Writes every offloaded output of `session` not yet in `dir`; returns how many it wrote.
pub fn write_outputs(
    store: &dyn Store,
    blobs: &dyn BlobStore,
    reduce: &ReduceConfig,
    session: &SessionId,
    dir: &Path,
) -> loom_store::Result<usize> {
    let off = Offloader::new(store, blobs, reduce);
    let mut written = 0;
    for step in off.steps(session)? {
        let Some(alias) = step.outcome_ref.as_deref() else {
            continue;
        };
        let relative = Path::new(alias);
        if alias.starts_with("sha256:")
            || !relative
                .components()
                .all(|c| matches!(c, Component::Normal(_)))
        {
            continue;
        }
        let path = dir.join(relative);
        if path.exists() {
            continue;
        }
        let Ok(Resolution::Found(blob)) = off.resolve(Some(session), alias) else {
            continue;
        };
        let bytes = blobs.get(&blob)?;
        write_once(&path, &bytes).map_err(|source| loom_store::StoreError::Io {
            action: "writing an offloaded output",
            path: path.clone(),
            source,
        })?;
        written += 1;
    }
    Ok(written)
}

/// Writes `bytes` at `path` through a temporary file, so a reader never sees half of it.
fn write_once(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)?;
    let tmp = parent.join(format!(
        ".{}.tmp",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("output")
    ));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_folder_is_plain_and_unique() {
        let folder = Path::new("/w/recall");
        let a = session_dir(folder, &SessionId::new("t/../x y").unwrap());
        let b = session_dir(folder, &SessionId::new("t/.._x y").unwrap());
        assert_ne!(a, b);
        let name = a.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("t_.._x_y-"), "{name}");
        assert_eq!(a.parent(), Some(folder));
    }
}
