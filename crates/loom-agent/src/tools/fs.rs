//! `fs:read_file`, `fs:write_file`, `fs:list_dir`: files inside the agent's workspace only.
//!
//! Paths are relative to the workspace (absolute paths inside it are accepted). A path that
//! leaves it — `..`, an absolute path elsewhere, a symlink pointing out — is refused before
//! anything is read or written: the check is on the canonical path of the deepest part that
//! exists, so a symlink cannot be used to escape.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use super::{arg_str, Outcome};

/// Largest file `fs:read_file` returns whole; longer files are read as a window of lines.
const READ_LIMIT: usize = 256 << 10;

/// Resolves `path` inside `root` (the workspace, or a readable root), refusing escapes.
pub(crate) fn resolve(root: &Path, path: &str) -> Result<PathBuf, String> {
    if path.is_empty() {
        return Err("`path` is empty".into());
    }
    let root = root
        .canonicalize()
        .map_err(|e| format!("the workspace {}: {e}", root.display()))?;
    let given = Path::new(path);
    let joined = if given.is_absolute() {
        given.to_path_buf()
    } else {
        root.join(given)
    };
    // Normalise `.` and `..` lexically, then check the deepest existing ancestor for symlinks.
    let mut clean = PathBuf::new();
    for part in joined.components() {
        match part {
            Component::ParentDir => {
                if !clean.pop() {
                    return Err(format!("`{path}` leaves the workspace"));
                }
            }
            Component::CurDir => {}
            other => clean.push(other.as_os_str()),
        }
    }
    if !clean.starts_with(&root) {
        return Err(format!("`{path}` is outside the workspace"));
    }
    let mut existing = clean.as_path();
    while !existing.exists() {
        match existing.parent() {
            Some(parent) => existing = parent,
            None => break,
        }
    }
    let real = existing
        .canonicalize()
        .map_err(|e| format!("`{path}`: {e}"))?;
    if !real.starts_with(&root) {
        return Err(format!(
            "`{path}` resolves outside the workspace (a symlink)"
        ));
    }
    Ok(clean)
}

/// Resolves `path` in the first root that holds it: the workspace, then the read-only roots.
fn resolve_readable(roots: &[PathBuf], path: &str) -> Result<PathBuf, String> {
    let mut first_err = None;
    for root in roots {
        match resolve(root, path) {
            Ok(p) if p.exists() || roots.len() == 1 => return Ok(p),
            Ok(p) => first_err.get_or_insert(format!("`{}` does not exist", p.display())),
            Err(e) => first_err.get_or_insert(e),
        };
    }
    Err(first_err.unwrap_or_else(|| format!("`{path}`: no readable root")))
}

pub(crate) fn read_file(roots: &[PathBuf], args: &Value) -> Outcome {
    let path = match arg_str(args, "path") {
        Ok(p) => p,
        Err(e) => return Outcome::error(e),
    };
    let file = match resolve_readable(roots, path) {
        Ok(f) => f,
        Err(e) => return Outcome::error(e),
    };
    let bytes = match std::fs::read(&file) {
        Ok(b) => b,
        Err(e) => return Outcome::error(format!("cannot read `{path}`: {e}")),
    };
    let text = String::from_utf8_lossy(&bytes);
    let start = args
        .get("start_line")
        .and_then(Value::as_u64)
        .unwrap_or(1)
        .max(1) as usize;
    let end = args
        .get("end_line")
        .and_then(Value::as_u64)
        .map(|n| n as usize);
    if start == 1 && end.is_none() && bytes.len() <= READ_LIMIT {
        return Outcome::ok(text.into_owned());
    }
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    let last = end.unwrap_or(lines.len()).min(lines.len());
    for (n, line) in lines.iter().enumerate().take(last).skip(start - 1) {
        if out.len() + line.len() > READ_LIMIT {
            out.push_str(&format!(
                "[… cut at line {}: ask for start_line={} to read on]\n",
                n + 1,
                n + 1
            ));
            break;
        }
        out.push_str(line);
        out.push('\n');
    }
    Outcome::ok(out)
}

pub(crate) fn write_file(workspace: &Path, args: &Value) -> Outcome {
    let (path, content) = match (arg_str(args, "path"), arg_str(args, "content")) {
        (Ok(p), Ok(c)) => (p, c),
        (Err(e), _) | (_, Err(e)) => return Outcome::error(e),
    };
    let file = match resolve(workspace, path) {
        Ok(f) => f,
        Err(e) => return Outcome::error(e),
    };
    if let Some(parent) = file.parent() {
        if let Err(e) = std::fs::create_dir_all(parent) {
            return Outcome::error(format!("cannot create the folder of `{path}`: {e}"));
        }
    }
    match std::fs::write(&file, content) {
        Ok(()) => Outcome::ok(format!("wrote {} bytes to {path}", content.len())),
        Err(e) => Outcome::error(format!("cannot write `{path}`: {e}")),
    }
}

pub(crate) fn list_dir(roots: &[PathBuf], args: &Value) -> Outcome {
    let path = args.get("path").and_then(Value::as_str).unwrap_or(".");
    let dir = match resolve_readable(roots, path) {
        Ok(d) => d,
        Err(e) => return Outcome::error(e),
    };
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) => return Outcome::error(format!("cannot list `{path}`: {e}")),
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                name + "/"
            } else {
                name
            }
        })
        .collect();
    names.sort();
    Outcome::ok(names.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_cannot_leave_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("src")).unwrap();
        assert!(resolve(&ws, "src/a.rs").is_ok());
        assert!(resolve(&ws, "new/dir/b.rs").is_ok());
        assert!(resolve(&ws, "../x").unwrap_err().contains("outside"));
        assert!(resolve(&ws, "/etc/passwd").unwrap_err().contains("outside"));
        std::os::unix::fs::symlink("/etc", ws.join("link")).unwrap();
        assert!(resolve(&ws, "link/passwd").unwrap_err().contains("symlink"));
    }

    #[test]
    fn files_are_written_read_and_listed() {
        let dir = tempfile::tempdir().unwrap();
        let roots = vec![dir.path().to_path_buf()];
        let w = write_file(
            dir.path(),
            &serde_json::json!({"path": "a/b.txt", "content": "1\n2\n3\n"}),
        );
        assert!(!w.is_error, "{}", w.text);
        let r = read_file(
            &roots,
            &serde_json::json!({"path": "a/b.txt", "start_line": 2, "end_line": 2}),
        );
        assert_eq!(r.text, "2\n");
        let l = list_dir(&roots, &serde_json::json!({}));
        assert_eq!(l.text, "a/");
        let bad = write_file(
            dir.path(),
            &serde_json::json!({"path": "../escape.txt", "content": "x"}),
        );
        assert!(bad.is_error);
        assert!(!dir.path().parent().unwrap().join("escape.txt").exists());
    }
}
