//! A tool call's arguments as the reducers read them.
//!
//! Models produce malformed JSON (truncated strings, trailing text, Python literals); such a call
//! still gets a correct step, with its arguments recorded as raw text. Frameworks also spell the
//! same argument differently (`path`, `file_path`, `filename`), so lookups take a list of names.

use std::collections::BTreeMap;

use serde_json::Value;

use super::secrets;
use super::text::piece;

/// Longest argument string kept whole in minimal arguments, in characters.
const MAX_ARG_CHARS: usize = 200;

/// The parsed arguments of one call.
#[derive(Debug, Clone)]
pub(crate) struct Args {
    /// The JSON value, when the text parsed.
    value: Option<Value>,
    /// The text exactly as the model produced it.
    raw: String,
}

impl Args {
    /// Parses raw argument text; never fails.
    pub(crate) fn parse(raw: &str) -> Self {
        let trimmed = raw.trim();
        let value = if trimmed.is_empty() {
            Some(Value::Object(serde_json::Map::new()))
        } else {
            serde_json::from_str(trimmed).ok()
        };
        Self {
            value,
            raw: raw.to_owned(),
        }
    }

    /// Whether the text was not valid JSON.
    pub(crate) fn malformed(&self) -> bool {
        self.value.is_none()
    }

    /// The raw text.
    pub(crate) fn raw(&self) -> &str {
        &self.raw
    }

    /// The arguments object, when they form one.
    pub(crate) fn object(&self) -> Option<&serde_json::Map<String, Value>> {
        self.value.as_ref().and_then(Value::as_object)
    }

    /// The first of `names` present as a string (or a number, as text).
    pub(crate) fn str(&self, names: &[&str]) -> Option<&str> {
        let obj = self.object()?;
        names.iter().find_map(|n| match obj.get(*n) {
            Some(Value::String(s)) => Some(s.as_str()),
            _ => None,
        })
    }

    /// The first of `names` present, as any value.
    pub(crate) fn get(&self, names: &[&str]) -> Option<&Value> {
        let obj = self.object()?;
        names.iter().find_map(|n| obj.get(*n))
    }

    /// The first of `names` present as an integer.
    pub(crate) fn int(&self, names: &[&str]) -> Option<i64> {
        self.get(names).and_then(|v| match v {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        })
    }

    /// A command given as a string, or as an argv array (Codex `shell`: `["bash", "-lc", "…"]`).
    pub(crate) fn command(&self) -> Option<String> {
        match self.get(&["command", "cmd", "script", "code", "input"])? {
            Value::String(s) => Some(s.clone()),
            Value::Array(parts) => {
                let words: Vec<&str> = parts.iter().filter_map(Value::as_str).collect();
                match words.as_slice() {
                    [shell, flag, script]
                        if matches!(*shell, "bash" | "sh" | "zsh" | "/bin/bash" | "/bin/sh")
                            && flag.starts_with('-')
                            && flag.contains('c') =>
                    {
                        Some((*script).to_owned())
                    }
                    _ => Some(words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ")),
                }
            }
            _ => None,
        }
    }
}

/// Shell-quotes a word only when it needs it.
fn quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// A string argument for minimal arguments: masked, on one line, cut to a sane length.
pub(crate) fn short(s: &str) -> Value {
    Value::String(piece(s, MAX_ARG_CHARS))
}

/// Minimal arguments for a tool Loom knows nothing about: every argument, with long strings and
/// large structures replaced by a description of their size, and secrets masked.
pub(crate) fn generic_minimal(args: &Args) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    match (&args.value, args.object()) {
        (_, Some(obj)) => {
            for (k, v) in obj {
                out.insert(k.clone(), minimal_value(k, v));
            }
        }
        (Some(other), None) => {
            out.insert("input".into(), minimal_value("input", other));
        }
        (None, None) => {
            out.insert("raw".into(), short(&args.raw));
        }
    }
    out
}

fn minimal_value(key: &str, v: &Value) -> Value {
    match v {
        Value::String(s) if s.chars().count() <= MAX_ARG_CHARS && !s.contains('\n') => {
            Value::String(masked_value(key, s))
        }
        Value::String(s) => Value::String(format!(
            "<{} chars, {} lines>",
            s.chars().count(),
            super::text::line_count(s)
        )),
        Value::Array(_) | Value::Object(_) => {
            let text = v.to_string();
            if text.len() <= MAX_ARG_CHARS {
                match serde_json::from_str(&secrets::mask(&text)) {
                    Ok(masked) => masked,
                    Err(_) => Value::String(secrets::mask(&text).into_owned()),
                }
            } else if let Value::Array(items) = v {
                Value::String(format!("<array of {}>", items.len()))
            } else {
                Value::String(format!("<object, {} bytes>", text.len()))
            }
        }
        other => other.clone(),
    }
}

/// Masks a string argument, treating the whole value as secret when its key names one.
fn masked_value(key: &str, s: &str) -> String {
    let probe = format!("{key}={s}");
    let masked = secrets::mask(&probe);
    match masked.strip_prefix(&format!("{key}=")) {
        Some(rest) => rest.to_owned(),
        None => secrets::mask(s).into_owned(),
    }
}

/// Parses a call written as text, like BrowserGym's `fill('224', 'Service Desk')`: the function
/// name and its literal arguments (strings unquoted). `None` when it is not of that shape.
pub(crate) fn parse_call_text(text: &str) -> Option<(&str, Vec<String>)> {
    let text = text.trim();
    let open = text.find('(')?;
    let name = text[..open].trim();
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
    {
        return None;
    }
    let inner = text[open + 1..].strip_suffix(')')?;
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(if n == q { n } else { '\\' });
                    if n != q {
                        cur.push(n);
                    }
                }
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => quote = Some(c),
            (None, ',') => out.push(std::mem::take(&mut cur).trim().to_owned()),
            (None, c) => cur.push(c),
        }
    }
    if !cur.trim().is_empty() || !out.is_empty() {
        out.push(cur.trim().to_owned());
    }
    Some((name, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_arguments_are_kept_raw() {
        let args = Args::parse(r#"{"command": "ls -la"#);
        assert!(args.malformed());
        assert_eq!(args.str(&["command"]), None);
        let min = generic_minimal(&args);
        assert_eq!(min["raw"], Value::String(r#"{"command": "ls -la"#.into()));
    }

    #[test]
    fn reads_argv_commands() {
        let args = Args::parse(r#"{"command": ["bash", "-lc", "ls -la src"]}"#);
        assert_eq!(args.command().as_deref(), Some("ls -la src"));
        let args = Args::parse(r#"{"command": ["git", "log", "--format=%h %s"]}"#);
        assert_eq!(args.command().as_deref(), Some("git log '--format=%h %s'"));
    }

    #[test]
    fn generic_minimal_describes_large_values_and_masks_secrets() {
        let args = Args::parse(&format!(
            r#"{{"user_id": "mia_li_3668", "content": "{}", "password": "hunter2", "n": 3}}"#,
            "x\\n".repeat(300)
        ));
        let min = generic_minimal(&args);
        assert_eq!(min["user_id"], "mia_li_3668");
        assert_eq!(min["content"], "<600 chars, 300 lines>");
        assert_eq!(min["password"], "***");
        assert_eq!(min["n"], 3);
    }

    #[test]
    fn parses_browsergym_actions() {
        assert_eq!(
            parse_call_text("fill('224', 'Service Desk')"),
            Some(("fill", vec!["224".to_owned(), "Service Desk".to_owned()]))
        );
        assert_eq!(
            parse_call_text(r#"goto("https://www.apple.com")"#),
            Some(("goto", vec!["https://www.apple.com".to_owned()]))
        );
        assert_eq!(parse_call_text("new_tab()"), Some(("new_tab", vec![])));
        assert_eq!(parse_call_text("not a call"), None);
    }
}
