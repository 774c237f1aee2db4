//! The deterministic summarizer: no model, the same text for the same input, in the compact
//! block's style (one line per step with its observation and reference, user messages as short
//! snippets). The default in tests and replay, and the fallback when no model is configured.
//!
//! It extends the previous summary section by section: the goal carries over, progress lines are
//! appended (the oldest non-failure lines are dropped past a cap and counted), open items are
//! recomputed from the chunk, and identifiers later events still use are listed if no line
//! already carries them.

use std::collections::BTreeSet;

use super::ident::identifiers;
use super::{EntryKind, Summarizer, SummaryRequest};
use crate::error::Result;

/// Marks a failed step in a progress line (never dropped by the cap).
const FAILED: &str = "✗";

/// See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeterministicSummarizer {
    /// Most progress lines kept; older non-failure lines are counted as omitted.
    pub max_progress_lines: usize,
    /// Longest goal snippet, in characters.
    pub goal_chars: usize,
}

impl Default for DeterministicSummarizer {
    fn default() -> Self {
        Self {
            max_progress_lines: 30,
            goal_chars: 300,
        }
    }
}

/// The previous summary, split at its `#` headings (lower-cased names).
#[derive(Debug, Default)]
struct Parsed {
    sections: Vec<(String, Vec<String>)>,
}

impl Parsed {
    fn parse(text: &str) -> Self {
        let mut p = Self::default();
        for line in text.lines() {
            let trimmed = line.trim();
            if trimmed.starts_with('#') {
                let name = trimmed.trim_start_matches('#').trim().to_lowercase();
                p.sections.push((name, Vec::new()));
            } else if let Some((_, body)) = p.sections.last_mut() {
                if !trimmed.is_empty() {
                    body.push(trimmed.to_owned());
                }
            }
        }
        p
    }

    fn get(&self, name: &str) -> &[String] {
        self.sections
            .iter()
            .find(|(n, _)| n == name)
            .map_or(&[], |(_, b)| b.as_slice())
    }
}

/// `(N earlier entries omitted; ...)` → N.
fn omitted_count(line: &str) -> Option<u64> {
    line.strip_prefix('(')?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
        .filter(|_| line.contains("earlier entries omitted"))
}

fn snippet(text: &str, max: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= max {
        return line;
    }
    let mut s: String = line.chars().take(max).collect();
    s.push('…');
    s
}

impl Summarizer for DeterministicSummarizer {
    fn name(&self) -> &str {
        "deterministic"
    }

    fn summarize(&self, req: &SummaryRequest) -> Result<String> {
        let prev = req
            .previous
            .as_ref()
            .map(|p| Parsed::parse(&p.content))
            .unwrap_or_default();

        let goal = match prev.get("goal") {
            [] => req.task.as_deref().map_or_else(
                || "(no task statement recorded)".to_owned(),
                |t| snippet(t, self.goal_chars),
            ),
            lines => lines.join("\n"),
        };

        let mut omitted = 0u64;
        let mut progress: Vec<String> = Vec::new();
        for line in prev.get("progress") {
            match omitted_count(line) {
                Some(n) => omitted += n,
                None => progress.push(line.clone()),
            }
        }
        for e in &req.entries {
            let what = match e.kind {
                EntryKind::Step => e.brief.clone(),
                EntryKind::User => format!("user: {}", e.brief),
                EntryKind::Assistant => format!("assistant: {}", e.brief),
                EntryKind::Note => format!("note: {}", e.brief),
            };
            progress.push(format!("- [seq {}] {what}", e.seq));
        }
        while progress.len() > self.max_progress_lines {
            let Some(i) = progress.iter().position(|l| !l.contains(FAILED)) else {
                break;
            };
            progress.remove(i);
            omitted += 1;
        }

        let mut open: Vec<String> = Vec::new();
        match req.entries.iter().rev().find(|e| e.kind == EntryKind::User) {
            Some(u) => open.push(format!("- latest request (seq {}): {}", u.seq, u.brief)),
            None => open.extend(
                prev.get("open items")
                    .iter()
                    .filter(|l| l.starts_with("- latest request"))
                    .cloned(),
            ),
        }
        let failed: Vec<String> = req
            .entries
            .iter()
            .filter(|e| e.failed)
            .map(|e| format!("seq {}", e.seq))
            .collect();
        if !failed.is_empty() {
            open.push(format!("- failures to revisit: {}", failed.join(", ")));
        }
        let so_far = format!("{goal}\n{}\n{}", progress.join("\n"), open.join("\n"));
        let present: BTreeSet<String> = identifiers(&so_far).into_iter().collect();
        let missing: Vec<&str> = req
            .must_keep
            .iter()
            .filter(|id| !present.contains(*id))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            open.push(format!(
                "- identifiers in use later: {}",
                missing.join(", ")
            ));
        }
        if open.is_empty() {
            open.push("- none recorded".to_owned());
        }

        let mut out = Vec::new();
        for section in &req.sections {
            let body = match section.to_lowercase().as_str() {
                "goal" => goal.clone(),
                "progress" => {
                    let mut lines = Vec::new();
                    if omitted > 0 {
                        lines.push(format!(
                            "({omitted} earlier entries omitted; all are recoverable from the log)"
                        ));
                    }
                    lines.extend(progress.iter().cloned());
                    if lines.is_empty() {
                        lines.push("- (nothing yet)".to_owned());
                    }
                    lines.join("\n")
                }
                "open items" => open.join("\n"),
                _ => "- (nothing recorded)".to_owned(),
            };
            out.push(format!("## {section}\n{body}"));
        }
        if !missing.is_empty()
            && !req
                .sections
                .iter()
                .any(|s| s.eq_ignore_ascii_case("open items"))
        {
            out.push(format!("Identifiers in use later: {}", missing.join(", ")));
        }
        Ok(out.join("\n\n"))
    }
}
