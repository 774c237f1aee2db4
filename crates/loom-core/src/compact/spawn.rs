//! Cross-agent compaction (seed 003, P3): the small, explicit extract of a parent's steps that a
//! child agent may be spawned with.
//!
//! Isolation (seed 001 §3) gives a child its goal only; when the parent chooses to pass context,
//! it passes this extract and nothing else, so the child never sees the parent's full history.

use std::collections::BTreeSet;

use super::group;
use crate::step::{CompactStep, Step};

/// Words that say nothing about which steps matter for a goal.
const STOPWORDS: &[&str] = &[
    "about", "after", "all", "and", "any", "are", "but", "can", "does", "each", "for", "from",
    "has", "have", "how", "into", "its", "let", "make", "not", "now", "our", "should", "that",
    "the", "then", "there", "this", "use", "using", "was", "what", "when", "where", "which", "who",
    "why", "will", "with", "you", "your",
];

/// A child's view of its parent's steps: one line each, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnContext {
    /// One line per chosen step: its observation, or its failure line with the error.
    pub lines: Vec<CompactStep>,
    /// Steps the parent had.
    pub total: usize,
    /// Steps that matched the child's goal (all of them without a goal).
    pub relevant: usize,
}

impl SpawnContext {
    /// The extract as prompt text, saying how much of the parent's history it shows.
    pub fn render(&self) -> String {
        if self.lines.is_empty() {
            return String::new();
        }
        let mut out = format!(
            "Parent's actions ({} of {} steps):\n",
            self.lines.len(),
            self.total
        );
        for l in &self.lines {
            out.push_str(&format!("  [{}] {}\n", l.id, l.summary));
        }
        out
    }
}

/// The newest `max_steps` steps of the parent, each as one line; with `relevant_only` (the child's
/// goal), only steps whose tool, arguments or observation share a word with that goal.
///
/// Relevance is lexical and deterministic: words of three or more letters, lowercased, common
/// words left out; paths and identifiers are split at punctuation, so a goal naming
/// `parser.rs` matches a step that read `src/parser.rs`.
pub fn compact_for_spawn(
    steps: &[Step],
    max_steps: usize,
    relevant_only: Option<&str>,
) -> SpawnContext {
    let goal = relevant_only.map(words);
    let chosen: Vec<&Step> = steps
        .iter()
        .filter(|s| goal.as_ref().is_none_or(|g| is_relevant(s, g)))
        .collect();
    let relevant = chosen.len();
    let lines = chosen[relevant - max_steps.min(relevant)..]
        .iter()
        .map(|s| {
            if s.success {
                CompactStep {
                    id: s.id.clone(),
                    summary: s.observation.clone(),
                }
            } else {
                group::failure_line(s)
            }
        })
        .collect();
    SpawnContext {
        lines,
        total: steps.len(),
        relevant,
    }
}

fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3)
        .map(str::to_lowercase)
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .collect()
}

fn is_relevant(step: &Step, goal: &BTreeSet<String>) -> bool {
    if goal.is_empty() {
        return true;
    }
    let mut text = format!(
        "{} {} {} ",
        step.tool_name,
        step.observation,
        step.error.as_deref().unwrap_or_default()
    );
    for v in step.minimal_args.values() {
        match v {
            serde_json::Value::String(s) => text.push_str(s),
            other => text.push_str(&other.to_string()),
        }
        text.push(' ');
    }
    words(&text).iter().any(|w| goal.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compact::testing::{failed, step};
    use crate::step::ToolKind;

    fn parent() -> Vec<Step> {
        let mut steps: Vec<Step> = (1..=12).map(|i| step(i, ToolKind::ReadFile)).collect();
        steps[2]
            .minimal_args
            .insert("path".into(), "src/parser.rs".into());
        steps[2].observation = "Read src/parser.rs (12.1KB)".into();
        steps[6]
            .minimal_args
            .insert("path".into(), "src/lexer.rs".into());
        steps[9] = failed(10, ToolKind::Shell, "cargo test parser: 2 failed");
        steps
    }

    #[test]
    fn keeps_the_newest_steps_within_the_cap() {
        let ctx = compact_for_spawn(&parent(), 5, None);
        assert_eq!(ctx.lines.len(), 5);
        assert_eq!(ctx.lines[0].id, "step_008");
        assert_eq!(ctx.total, 12);
        assert!(ctx
            .render()
            .starts_with("Parent's actions (5 of 12 steps):\n  [step_008] "));
        assert!(ctx
            .render()
            .contains("[step_010] ✗ shell failed: cargo test parser: 2 failed"));
    }

    #[test]
    fn relevant_only_matches_goal_words() {
        let ctx = compact_for_spawn(&parent(), 5, Some("Fix the failing tests in parser.rs"));
        let ids: Vec<&str> = ctx.lines.iter().map(|l| l.id.as_str()).collect();
        assert_eq!(ids, ["step_003", "step_010"]);
        assert_eq!(ctx.relevant, 2);
        let none = compact_for_spawn(&parent(), 5, Some("book a flight"));
        assert!(none.lines.is_empty());
        assert_eq!(none.render(), "");
        assert!(compact_for_spawn(&parent(), 0, None).lines.is_empty());
    }
}
