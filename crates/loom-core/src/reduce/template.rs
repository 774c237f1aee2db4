//! Compact templates: a step as one short line for the compacted part of a prompt (seeds 000,
//! 001 `TEMPLATES`), overridable per kind and per tool.
//!
//! A template names fields in braces: the step's minimal arguments (`{path}`, `{command}`,
//! `{query}`, `{url}`), the facts its reducer read (`{exit_code}`, `{status}`, `{title}`), and
//! `{id}`, `{tool_name}`, `{observation}`, `{size}`, `{bytes}`, `{lines}`, `{count}`, `{type}`.
//! Sizes are the reducer's `bytes` fact when it has one (the output inside its framework's
//! wrapper, or the bytes a write wrote), else the original output's.
//! A template whose field a step lacks falls back to the step's observation, so a summary never
//! shows an empty `()` or a literal `{path}`.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::step::{CompactStep, Step, ToolKind};

use super::text::{human_size, piece};

/// Longest compact summary, in characters.
const MAX_SUMMARY_CHARS: usize = 160;

/// Templates by kind and by tool name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Templates {
    by_kind: BTreeMap<ToolKind, String>,
    by_tool: BTreeMap<String, String>,
}

/// The seeds' templates, with Loom's additions for kinds the seeds did not have, each followed
/// by fallbacks for steps that lack a field. A step whose observation is its output verbatim
/// (a short one-line result) gets the call in front, since the output alone does not say what
/// was done.
fn default_templates(step: &Step) -> &'static [&'static str] {
    let verbatim = step.facts.get("verbatim") == Some(&Value::Bool(true));
    // Past the first template, a step falls back to its observation, which already names the
    // command, query or action.
    match &step.kind {
        ToolKind::ReadFile => &["Read {path} ({size})", "Read {path}"],
        ToolKind::WriteFile => &["Wrote {path} ({bytes} bytes)", "Wrote {path}"],
        ToolKind::ListDir => &["Listed {path} ({count} items)", "Listed {path}"],
        ToolKind::Grep => &["Searched '{pattern}' → {count} matches"],
        ToolKind::WebSearch if verbatim => &["Searched '{query}': {observation}"],
        ToolKind::WebSearch => &["Searched '{query}' → {count} results"],
        ToolKind::Navigate => &["Visited {url}"],
        ToolKind::BrowserAction => &["{action} on '{title}'"],
        ToolKind::Shell => &["Ran `{command}` (exit {exit_code})"],
        ToolKind::Custom(_) | ToolKind::Unknown if verbatim => {
            &["{tool_name}({args}) → {observation}"]
        }
        ToolKind::Custom(_) | ToolKind::Unknown => &["{observation}"],
    }
}

impl Templates {
    /// Sets the template of every tool of a kind.
    pub fn set_kind(&mut self, kind: ToolKind, template: String) {
        self.by_kind.insert(kind, template);
    }

    /// Sets the template of one tool (wins over its kind's).
    pub fn set_tool(&mut self, tool: String, template: String) {
        self.by_tool.insert(tool, template);
    }

    /// The step as one compact line.
    pub fn compact(&self, step: &Step) -> CompactStep {
        let user = self
            .by_tool
            .get(&step.tool_name)
            .or_else(|| self.by_kind.get(&step.kind));
        let mut summary = user
            .and_then(|t| fill(t, step))
            .or_else(|| default_templates(step).iter().find_map(|t| fill(t, step)))
            .unwrap_or_else(|| step.observation.clone());
        if !step.success && !summary.contains("fail") && !summary.contains("exit") {
            summary.push_str(" (failed)");
        }
        CompactStep {
            id: step.id.clone(),
            summary: piece(&summary, MAX_SUMMARY_CHARS),
        }
    }
}

/// Fills a template, or `None` when the step lacks one of its fields.
fn fill(template: &str, step: &Step) -> Option<String> {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        out.push_str(&rest[..open]);
        let c = rest.as_bytes()[open];
        let after = &rest[open + 1..];
        if after.as_bytes().first() == Some(&c) {
            // `{{` and `}}` are literal braces.
            out.push(char::from(c));
            rest = &after[1..];
            continue;
        }
        if c == b'}' {
            out.push('}');
            rest = after;
            continue;
        }
        let close = after.find('}')?;
        out.push_str(&field(&after[..close], step)?);
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Some(out)
}

fn field(name: &str, step: &Step) -> Option<String> {
    if let Some(v) = step.facts.get(name).or_else(|| step.minimal_args.get(name)) {
        return value_text(v);
    }
    Some(match name {
        "id" => step.id.clone(),
        "tool_name" | "tool" => step.tool_name.clone(),
        "observation" => step.observation.clone(),
        "size" => human_size(
            step.facts
                .get("bytes")
                .and_then(Value::as_u64)
                .unwrap_or(step.stats.bytes),
        ),
        "bytes" => step.stats.bytes.to_string(),
        "lines" => step.stats.lines.to_string(),
        "type" => step.stats.content_type.as_str().to_owned(),
        "count" => step.results?.to_string(),
        "error" => step.error.clone()?,
        "outcome_ref" => step.outcome_ref.clone()?,
        "args" => step
            .minimal_args
            .iter()
            .filter_map(|(k, v)| Some(format!("{k}={}", value_text(v)?)))
            .collect::<Vec<_>>()
            .join(", "),
        _ => return None,
    })
}

fn value_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::ContentStats;

    fn step(kind: ToolKind, args: &[(&str, Value)], facts: &[(&str, Value)]) -> Step {
        Step {
            id: "step_003".into(),
            call_id: "c3".into(),
            call_seq: 5,
            result_seq: 6,
            tool_name: "bash".into(),
            kind,
            minimal_args: args
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            observation: "obs".into(),
            outcome_ref: None,
            blob: None,
            success: true,
            error: None,
            timestamp_ms: 0,
            stats: ContentStats::of(&[b'x'; 1536]),
            results: Some(4),
            facts: facts
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        }
    }

    #[test]
    fn seed_templates_fill_from_args_facts_and_stats() {
        let t = Templates::default();
        let s = step(
            ToolKind::Shell,
            &[("command", "git log".into())],
            &[("exit_code", 0.into())],
        );
        assert_eq!(t.compact(&s).summary, "Ran `git log` (exit 0)");
        let s = step(ToolKind::ReadFile, &[("path", "config.json".into())], &[]);
        assert_eq!(t.compact(&s).summary, "Read config.json (1.5 KB)");
        let s = step(
            ToolKind::WebSearch,
            &[("query", "Bitcoin price".into())],
            &[],
        );
        assert_eq!(
            t.compact(&s).summary,
            "Searched 'Bitcoin price' → 4 results"
        );
    }

    #[test]
    fn missing_fields_fall_back_to_the_observation() {
        let t = Templates::default();
        let s = step(ToolKind::ReadFile, &[], &[]);
        assert_eq!(t.compact(&s).summary, "obs");
    }

    #[test]
    fn user_templates_win_and_escape_braces() {
        let mut t = Templates::default();
        t.set_kind(ToolKind::Shell, "$ {command} {{{exit_code}}}".into());
        let s = step(
            ToolKind::Shell,
            &[("command", "ls".into())],
            &[("exit_code", 2.into())],
        );
        assert_eq!(t.compact(&s).summary, "$ ls {2}");
        t.set_tool("bash".into(), "bash: {observation}".into());
        assert_eq!(t.compact(&s).summary, "bash: obs");
    }
}
