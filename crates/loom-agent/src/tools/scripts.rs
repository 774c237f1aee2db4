//! Level 3: a registry folder of scripts, run by name through `python:run_script`.
//!
//! Each script declares itself in its first lines, as comments:
//!
//! ```text
//! #!/usr/bin/env python3
//! # loom:name: count_lines
//! # loom:description: Counts the lines of the given files.
//! # loom:args: {"type": "object", "properties": {"paths": {"type": "array"}}, "required": ["paths"]}
//! ```
//!
//! The arguments are checked against the declared schema, then the script runs in the sandbox
//! like a shell command, with the arguments as one JSON argument (`python3 SCRIPT 'JSON'`, or
//! the script itself when it is not Python).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{schema, shell, shell_quote, Outcome, ShellRunner};
use crate::error::{AgentError, Result};

/// A registered script.
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its arguments.
    pub args: Value,
    /// Its file.
    pub path: PathBuf,
}

/// The registry.
#[derive(Debug, Clone, Default)]
pub struct Scripts {
    list: Vec<Script>,
}

/// How many leading lines are read for the header.
const HEADER_LINES: usize = 20;

impl Scripts {
    /// Reads every file of `dir` that declares a script. A file with a partial or bad header is
    /// an error naming the file and the field (a registry is fixed before a run, not during it).
    pub fn load(dir: &Path) -> Result<Self> {
        let what = dir.display().to_string();
        let entries = std::fs::read_dir(dir).map_err(|e| {
            AgentError::config(&what, format!("cannot read the scripts folder: {e}"))
        })?;
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        paths.sort();
        let mut list: Vec<Script> = Vec::new();
        for path in paths {
            let Some(script) = Self::read(&path)? else {
                continue;
            };
            if list.iter().any(|s| s.name == script.name) {
                return Err(AgentError::config(
                    path.display().to_string(),
                    format!("a second script named `{}`", script.name),
                ));
            }
            list.push(script);
        }
        Ok(Self { list })
    }

    fn read(path: &Path) -> Result<Option<Script>> {
        let what = path.display().to_string();
        let Ok(text) = std::fs::read_to_string(path) else {
            return Ok(None); // not text: not a script
        };
        let (mut name, mut description, mut args) = (None, None, None);
        for line in text.lines().take(HEADER_LINES) {
            let line = line.trim_start_matches(['#', '/', ' ']);
            if let Some(v) = line.strip_prefix("loom:name:") {
                name = Some(v.trim().to_owned());
            } else if let Some(v) = line.strip_prefix("loom:description:") {
                description = Some(v.trim().to_owned());
            } else if let Some(v) = line.strip_prefix("loom:args:") {
                args =
                    Some(serde_json::from_str::<Value>(v.trim()).map_err(|e| {
                        AgentError::config(&what, format!("loom:args: not JSON: {e}"))
                    })?);
            }
        }
        let Some(name) = name else {
            return Ok(None);
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(AgentError::config(
                &what,
                format!("loom:name: `{name}` (letters, digits, _ and - only)"),
            ));
        }
        let description =
            description.ok_or_else(|| AgentError::config(&what, "loom:description: missing"))?;
        let args = args.unwrap_or_else(|| serde_json::json!({"type": "object"}));
        if args.get("type").and_then(Value::as_str) != Some("object") {
            return Err(AgentError::config(
                &what,
                "loom:args: expected an object schema",
            ));
        }
        Ok(Some(Script {
            name,
            description,
            args,
            path: path.to_path_buf(),
        }))
    }

    /// How many scripts are registered.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The scripts, named and described, for the tool's description.
    pub fn catalogue(&self) -> String {
        if self.list.is_empty() {
            return "(none registered)".into();
        }
        self.list
            .iter()
            .map(|s| format!("{} — {} (args: {})", s.name, s.description, s.args))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// `python:run_script`.
    pub(crate) fn run(&self, runner: &dyn ShellRunner, workspace: &Path, call: &Value) -> Outcome {
        let Some(name) = call.get("name").and_then(Value::as_str) else {
            return Outcome::error("missing argument `name`");
        };
        let Some(script) = self.list.iter().find(|s| s.name == name) else {
            let known: Vec<&str> = self.list.iter().map(|s| s.name.as_str()).collect();
            return Outcome::error(format!(
                "no script `{name}` (registered: {})",
                known.join(", ")
            ));
        };
        let args = call
            .get("args")
            .cloned()
            .unwrap_or_else(|| serde_json::json!({}));
        if let Err(e) = schema::check(&script.args, &args) {
            return Outcome::error(format!("bad arguments for script `{name}`: {e}"));
        }
        let path = script.path.display().to_string();
        let python = script.path.extension().is_some_and(|e| e == "py");
        let command = format!(
            "{}{} {}",
            if python { "python3 " } else { "" },
            shell_quote(&path),
            shell_quote(&args.to_string())
        );
        shell::run(runner, &command, workspace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_declare_themselves_and_bad_headers_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("count.py"),
            "#!/usr/bin/env python3\n# loom:name: count_lines\n# loom:description: Counts lines.\n\
             # loom:args: {\"type\": \"object\", \"properties\": {\"paths\": {\"type\": \"array\"}}, \"required\": [\"paths\"]}\nprint(1)\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not a script\n").unwrap();
        let scripts = Scripts::load(dir.path()).unwrap();
        assert_eq!(scripts.len(), 1);
        assert!(scripts
            .catalogue()
            .starts_with("count_lines — Counts lines."));
        std::fs::write(dir.path().join("bad.py"), "# loom:name: bad\n").unwrap();
        let err = Scripts::load(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("bad.py") && err.contains("loom:description"),
            "{err}"
        );
    }
}
