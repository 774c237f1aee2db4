//! Reads ../shared/traces the way scripts/tiktoken_fixture.py does, for the exactness test and
//! the benchmark (included by both with `#[path]`, so the two cannot drift apart).

use std::path::{Path, PathBuf};

/// Where the traces live, relative to this crate.
pub fn traces_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/traces"
    ))
}

/// One trace file: its name, the SHA-256 of its bytes, its trajectories.
pub struct TraceFile {
    pub name: String,
    pub sha256: String,
    pub trajectories: Vec<serde_json::Value>,
}

/// Every `*.jsonl` file in `dir`, sorted by name; `None` when the folder is absent.
pub fn load(dir: &Path) -> anyhow::Result<Option<Vec<TraceFile>>> {
    use sha2::Digest;
    if !dir.is_dir() {
        return Ok(None);
    }
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    paths.retain(|p| p.extension().is_some_and(|x| x == "jsonl"));
    paths.sort();
    let mut files = Vec::new();
    for path in paths {
        let raw = std::fs::read(&path)?;
        let text = std::str::from_utf8(&raw)?;
        let trajectories = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(serde_json::from_str)
            .collect::<Result<Vec<serde_json::Value>, _>>()?;
        files.push(TraceFile {
            name: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            sha256: format!("{:x}", sha2::Sha256::digest(&raw)),
            trajectories,
        });
    }
    Ok(Some(files))
}

/// The text pieces of one message, labelled, in the generator's order: content (string or text
/// parts), name, then each tool call's function name and arguments.
pub fn pieces(message: &serde_json::Value) -> Vec<(String, &str)> {
    let mut out = Vec::new();
    match message.get("content") {
        Some(serde_json::Value::String(s)) => out.push(("content".to_owned(), s.as_str())),
        Some(serde_json::Value::Array(parts)) => {
            for (i, p) in parts.iter().enumerate() {
                if p.get("type").and_then(|t| t.as_str()) == Some("text") {
                    if let Some(t) = p.get("text").and_then(|t| t.as_str()) {
                        out.push((format!("content[{i}].text"), t));
                    }
                }
            }
        }
        _ => {}
    }
    if let Some(name) = message.get("name").and_then(|n| n.as_str()) {
        out.push(("name".to_owned(), name));
    }
    if let Some(calls) = message.get("tool_calls").and_then(|c| c.as_array()) {
        for (i, call) in calls.iter().enumerate() {
            let f = &call["function"];
            if let Some(n) = f.get("name").and_then(|n| n.as_str()) {
                out.push((format!("tool_calls[{i}].function.name"), n));
            }
            if let Some(a) = f.get("arguments").and_then(|a| a.as_str()) {
                out.push((format!("tool_calls[{i}].function.arguments"), a));
            }
        }
    }
    out
}

/// Every piece of every message of every trajectory, in order (the benchmark's workload).
pub fn all_pieces(files: &[TraceFile]) -> Vec<&str> {
    files
        .iter()
        .flat_map(|f| f.trajectories.iter())
        .filter_map(|t| t.get("messages").and_then(|m| m.as_array()))
        .flatten()
        .flat_map(|m| pieces(m).into_iter().map(|(_, s)| s))
        .collect()
}
