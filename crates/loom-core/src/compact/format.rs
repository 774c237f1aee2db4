//! What the model reads: the seed's `format_for_prompt` text and its ReAct prompt
//! (`build_react_prompt`), for both compactors.
//!
//! Both layouts end with the newest step, so when the cache-stable compactor takes no compaction
//! point the next call's text is this call's text plus the new step at the end.

use std::fmt::Write as _;

use super::config::CompactionConfig;
use super::group::{self, CompactBlock};
use super::seed::{compact, should_compact, CompactedHistory};
use super::stable::{CompactionState, StableHistory};
use crate::step::{CompactStep, Step};

const COMPACT_HEADER: &str = "Previous actions (summarized):";
const RECENT_HEADER: &str = "Recent actions:";

fn line(cs: &CompactStep) -> String {
    format!("[{}] {}", cs.id, cs.summary)
}

fn omitted_line(count: usize) -> String {
    format!("... ({count} earlier steps omitted)")
}

/// A recent step as the seed shows it: `[step_018] ✓ <observation>`. A failed step also shows
/// its error when the observation does not already say it.
pub(crate) fn recent_line(step: &Step) -> String {
    let status = if step.success { "✓" } else { "✗" };
    let mut out = format!("[{}] {status} {}", step.id, step.observation);
    if let Some(error) = step.error.as_deref() {
        let error = group::one_line(error);
        if !step.success && !error.is_empty() && !says(&step.observation, &error) {
            let _ = write!(out, ": {error}");
        }
    }
    out
}

/// Whether `observation` already carries `error`: the whole of it, or its message after a
/// leading label such as `exit 127: ` (reducers put the exit code in the observation their own
/// way, `exit 127, 1 line: ...`), or at least the head of a long message (observations are cut
/// to a length limit, errors less so).
fn says(observation: &str, error: &str) -> bool {
    /// Characters of a message's head that identify it.
    const HEAD: usize = 40;
    let message = error.split_once(": ").map_or(error, |(_, m)| m);
    [error, message].into_iter().any(|text| {
        let head = match text.char_indices().nth(HEAD) {
            Some((i, _)) => &text[..i],
            None => text,
        };
        head.chars().count() >= 8 && observation.contains(head)
    })
}

/// The seed's compact-tier lines: preserved failures and blocks, then the omitted count.
fn seed_compact_lines(history: &CompactedHistory<'_>) -> Vec<String> {
    let mut lines: Vec<String> = history.compact_lines().into_iter().map(line).collect();
    if history.omitted.count > 0 {
        lines.push(omitted_line(history.omitted.count));
    }
    lines
}

/// The stable compact-tier lines: the omitted count first (it is part of the dropped front and
/// changes only when blocks are dropped), then preserved failures, then blocks.
pub(crate) fn stable_compact_lines(state: &CompactionState) -> Vec<String> {
    let mut lines = Vec::new();
    if state.omitted.count > 0 {
        lines.push(omitted_line(state.omitted.count));
    }
    lines.extend(state.omitted.failures.iter().map(line));
    lines.extend(state.blocks.iter().flat_map(CompactBlock::lines).map(line));
    lines
}

fn layout(compact_lines: &[String], recent: &[Step]) -> String {
    let mut lines: Vec<String> = Vec::new();
    if !compact_lines.is_empty() {
        lines.push(COMPACT_HEADER.to_owned());
        lines.extend(compact_lines.iter().map(|l| format!("  {l}")));
        lines.push(String::new());
    }
    if !recent.is_empty() {
        lines.push(RECENT_HEADER.to_owned());
        lines.extend(recent.iter().map(|s| format!("  {}", recent_line(s))));
        lines.push(String::new());
    }
    lines.join("\n")
}

/// The seed's `format_for_prompt`: "Previous actions (summarized):" with one indented line per
/// compact entry and the omitted count after them, a blank line, then "Recent actions:" with a
/// check mark per step.
///
/// One change from the seed: when everything older than the recent steps was dropped, the
/// omitted count is still shown under its header, where the seed printed nothing.
pub fn format_for_prompt(history: &CompactedHistory<'_>) -> String {
    layout(&seed_compact_lines(history), history.recent)
}

/// The same layout for the cache-stable compactor, with the omitted count at the top of the
/// compact tier: the stable prefix, then the recent steps.
pub(crate) fn format_stable(history: &StableHistory<'_>) -> String {
    let mut out = stable_prefix(&history.prefix_lines());
    push_recent(&mut out, history.recent());
    out
}

/// The compact tier of the stable layout, blank line included; empty before the first point.
///
/// It ends with the blank line that separates it from the recent steps even when there are
/// none, so that it is a prefix of every rendering until the next compaction point.
pub(crate) fn stable_prefix(lines: &[String]) -> String {
    if lines.is_empty() {
        return String::new();
    }
    let mut out = format!("{COMPACT_HEADER}\n");
    for l in lines {
        out.push_str("  ");
        out.push_str(l);
        out.push('\n');
    }
    out.push('\n');
    out
}

/// Appends the recent tier of the stable layout.
pub(crate) fn push_recent(out: &mut String, recent: &[Step]) {
    if recent.is_empty() {
        return;
    }
    out.push_str(RECENT_HEADER);
    out.push('\n');
    for s in recent {
        out.push_str("  ");
        out.push_str(&recent_line(s));
        out.push('\n');
    }
}

/// The fixed parts of a ReAct prompt, in the seed's order.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReactPrompt<'a> {
    /// The system prompt.
    pub system: &'a str,
    /// The task.
    pub goal: &'a str,
    /// The description of the available tools.
    pub tools: &'a str,
}

/// One step of a ReAct trajectory: the model's thought and action, the full observation, and the
/// step it was reduced to.
#[derive(Debug, Clone, Copy)]
pub struct ReactStep<'a> {
    /// The reasoning before the action.
    pub thought: &'a str,
    /// The tool called.
    pub action: &'a str,
    /// The call's arguments, as the raw JSON text the model produced (shown in full steps; the
    /// compacted prompt shows the step's minimal arguments instead).
    pub arguments: &'a str,
    /// The tool's full output.
    pub output: &'a str,
    /// The reduced step.
    pub step: &'a Step,
}

/// The seed's `build_react_prompt`: system prompt, goal and tools, then either every step in
/// full (below the trigger, or without a configuration) or the compacted history followed by the
/// recent steps as Thought / Action / Observation, where an offloaded result reads
/// `Observation: (See <outcome_ref>)`.
///
/// The seed overwrote its compactor's configuration inside this function with
/// `recent_window = 3, max_compact_steps = 10`, the long-research preset; here the caller's
/// configuration applies, so pass that preset to reproduce the seed.
pub fn build_react_prompt(
    prompt: &ReactPrompt<'_>,
    steps: &[ReactStep<'_>],
    config: Option<&CompactionConfig>,
) -> String {
    let reduced: Vec<Step> = steps.iter().map(|s| s.step.clone()).collect();
    let Some(config) = config.filter(|c| should_compact(&reduced, c, None).is_some()) else {
        let mut parts = vec![
            prompt.system.to_owned(),
            prompt.goal.to_owned(),
            prompt.tools.to_owned(),
        ];
        parts.extend(
            steps
                .iter()
                .enumerate()
                .map(|(i, s)| format_full_step(i + 1, s)),
        );
        return parts.join("\n");
    };
    let history = compact(&reduced, config, None);
    let compact_lines = seed_compact_lines(&history);
    react_layout(prompt, &compact_lines, steps, history.recent.len())
}

/// [`build_react_prompt`] for the cache-stable compactor: the same layout, with the closed
/// blocks of `history` as the compact part, so that between compaction points the prompt only
/// grows at its end. `steps` must be the steps `history` was made from, in order.
pub fn build_react_prompt_stable(
    prompt: &ReactPrompt<'_>,
    steps: &[ReactStep<'_>],
    history: &StableHistory<'_>,
) -> String {
    react_layout(
        prompt,
        &history.prefix_lines(),
        steps,
        history.recent().len(),
    )
}

fn react_layout(
    prompt: &ReactPrompt<'_>,
    compact_lines: &[String],
    steps: &[ReactStep<'_>],
    recent: usize,
) -> String {
    let mut parts = vec![
        prompt.system.to_owned(),
        prompt.goal.to_owned(),
        prompt.tools.to_owned(),
    ];
    if !compact_lines.is_empty() {
        parts.push(format!("\n{COMPACT_HEADER}"));
        parts.extend(compact_lines.iter().map(|l| format!("  {l}")));
    }
    let first_recent = steps.len() - recent.min(steps.len());
    if recent > 0 {
        parts.push("\nRecent steps (detailed):".to_owned());
        for (i, s) in steps.iter().enumerate().skip(first_recent) {
            parts.push(format!("\nThought {}: {}", i + 1, s.thought));
            parts.push(format!("Action: {}({})", s.action, action_args(s)));
            parts.push(match &s.step.outcome_ref {
                Some(r) => format!("Observation: (See {r})"),
                None => format!("Observation: {}", s.output),
            });
        }
    }
    parts.join("\n")
}

/// The arguments a recent step's `Action:` shows: the step's minimal arguments when the reducer
/// kept any, else the raw ones.
///
/// The seed printed the raw arguments, so a write of 4 KB put its whole content back into the
/// compacted history; its own reduction rules (seed 000) say a write's content is never kept in
/// history, and the minimal arguments are what remains of them.
fn action_args(step: &ReactStep<'_>) -> String {
    if step.step.minimal_args.is_empty() {
        return step.arguments.to_owned();
    }
    serde_json::to_string(&step.step.minimal_args).unwrap_or_else(|_| step.arguments.to_owned())
}

/// A step in full, as in the seed's "Without Compaction" example.
pub fn format_full_step(number: usize, step: &ReactStep<'_>) -> String {
    let tool = serde_json::to_string(step.action).unwrap_or_default();
    let args = if step.arguments.trim().is_empty() {
        "{}"
    } else {
        step.arguments
    };
    format!(
        "\nStep {number}:\nThought: {}\nAction: {{\"tool\": {tool}, \"args\": {args}}}\nObservation: {}",
        step.thought, step.output
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compact::testing::{failed, sized, step};
    use crate::step::ToolKind;

    #[test]
    fn format_for_prompt_matches_the_seed_layout() {
        // The seed's example output, rebuilt from steps: 4 old listings (dropped), 5 reads,
        // 5 searches, 3 commands of which one failed, then 3 recent steps.
        let mut steps: Vec<Step> = (1..=4).map(|i| step(i, ToolKind::ListDir)).collect();
        for (i, b) in [2600, 2500, 2400, 2500, 2595].into_iter().enumerate() {
            steps.push(sized(i + 5, ToolKind::ReadFile, b));
        }
        for (i, r) in [15, 14, 14, 15, 15].into_iter().enumerate() {
            let mut s = step(i + 10, ToolKind::WebSearch);
            s.results = Some(r);
            steps.push(s);
        }
        steps.push(step(15, ToolKind::Shell));
        steps.push(failed(16, ToolKind::Shell, "exit 1"));
        steps.push(step(17, ToolKind::Shell));
        let mut tail = vec![
            sized(18, ToolKind::ReadFile, 2150),
            step(19, ToolKind::WebSearch),
            step(20, ToolKind::Navigate),
        ];
        tail[0].observation = "Read analysis.py (2.1KB, Python)".into();
        tail[1].observation = "Searched 'error handling patterns' → 12 results".into();
        tail[2].observation = "Visited best-practices.md (5KB text)".into();
        steps.extend(tail);
        let config = CompactionConfig {
            recent_window: 3,
            max_compact_steps: 13,
            ..CompactionConfig::default()
        };
        let text = compact(&steps, &config, None).format_for_prompt();
        assert_eq!(
            text,
            "Previous actions (summarized):
  [step_005..009] 5 file operations (12.3KB total)
  [step_010..014] 5 searches (73 results)
  [step_015..017] 3 commands executed (1 failed)
  [step_016] ✗ shell failed: exit 1
  ... (4 earlier steps omitted)

Recent actions:
  [step_018] ✓ Read analysis.py (2.1KB, Python)
  [step_019] ✓ Searched 'error handling patterns' → 12 results
  [step_020] ✓ Visited best-practices.md (5KB text)
"
        );
    }

    #[test]
    fn a_recent_failure_does_not_repeat_its_error() {
        let mut s = failed(
            3,
            ToolKind::Shell,
            "exit 127: bash: line 1: pytest: command not found",
        );
        s.observation = "`pytest` exit 127, 1 line: bash: line 1: pytest: command not found".into();
        assert_eq!(recent_line(&s), format!("[step_003] ✗ {}", s.observation));
        let long = "Your proposed edit has introduced new syntax error(s). Please read this error message carefully and then retry editing the file.";
        let mut s = failed(4, ToolKind::WriteFile, long);
        s.observation = format!("Write to a.py failed: {}…", &long[..90]);
        assert_eq!(recent_line(&s), format!("[step_004] ✗ {}", s.observation));
        let s = failed(5, ToolKind::Shell, "exit 1: AssertionError");
        assert_eq!(
            recent_line(&s),
            "[step_005] ✗ ran a command: exit 1: AssertionError"
        );
    }

    #[test]
    fn empty_history_formats_to_nothing() {
        let h = compact(&[], &CompactionConfig::default(), None);
        assert_eq!(format_for_prompt(&h), "");
    }

    fn react<'a>(steps: &'a [Step], outputs: &'a [String]) -> Vec<ReactStep<'a>> {
        steps
            .iter()
            .zip(outputs)
            .map(|(s, o)| ReactStep {
                thought: "Next I look at it.",
                action: &s.tool_name,
                arguments: r#"{"path": "a.txt"}"#,
                output: o,
                step: s,
            })
            .collect()
    }

    #[test]
    fn react_prompt_below_the_threshold_is_in_full() {
        let steps: Vec<Step> = (1..=2).map(|i| step(i, ToolKind::ReadFile)).collect();
        let outputs = vec!["alpha".to_owned(), "beta".to_owned()];
        let prompt = ReactPrompt {
            system: "SYS",
            goal: "GOAL",
            tools: "TOOLS",
        };
        let text = build_react_prompt(
            &prompt,
            &react(&steps, &outputs),
            Some(&CompactionConfig::default()),
        );
        assert_eq!(
            text,
            "SYS\nGOAL\nTOOLS\n\nStep 1:\nThought: Next I look at it.\nAction: {\"tool\": \"read_file\", \"args\": {\"path\": \"a.txt\"}}\nObservation: alpha\n\nStep 2:\nThought: Next I look at it.\nAction: {\"tool\": \"read_file\", \"args\": {\"path\": \"a.txt\"}}\nObservation: beta"
        );
    }

    #[test]
    fn react_prompt_points_at_offloaded_results() {
        let mut steps: Vec<Step> = (1..=8).map(|i| step(i, ToolKind::ReadFile)).collect();
        steps[7].outcome_ref = Some("outputs/file_008.txt".into());
        steps[7]
            .minimal_args
            .insert("path".into(), "big.txt".into());
        let outputs: Vec<String> = (1..=8).map(|i| format!("content {i}")).collect();
        let prompt = ReactPrompt {
            system: "SYS",
            goal: "GOAL",
            tools: "TOOLS",
        };
        let config = CompactionConfig::preset(super::super::Preset::LongResearch);
        let text = build_react_prompt(&prompt, &react(&steps, &outputs), Some(&config));
        assert!(text.contains(
            "\nPrevious actions (summarized):\n  [step_001..005] 5 file operations (1.0KB total)\n"
        ), "{text}");
        assert!(text.contains("\nRecent steps (detailed):\n\nThought 6: Next I look at it.\nAction: read_file({\"path\": \"a.txt\"})\nObservation: content 6\n"), "{text}");
        assert!(text.ends_with("Thought 8: Next I look at it.\nAction: read_file({\"path\":\"big.txt\"})\nObservation: (See outputs/file_008.txt)"), "{text}");
    }
}
