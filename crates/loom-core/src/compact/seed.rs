//! The seed-faithful compactor: recomputes the three tiers from the whole history on every call,
//! as seed 003's `StepCompactor.compact` does, with the seed code's bugs fixed.
//!
//! Fixed here: `preserve_failures` is applied (a failed step is never dropped and always shows its
//! error); the omitted count counts steps, not groups; the edge cases the seed promises exist (all
//! steps failed, more than 100 steps, alternating categories). Because it regroups on every call,
//! its output's front changes from one call to the next; the render pipeline uses the
//! cache-stable compactor in [`stable`](super::stable) instead.

use serde::{Deserialize, Serialize};

use super::config::CompactionConfig;
use super::group::{self, CompactBlock};
use crate::step::{CompactStep, Step};

/// Steps at the front of the history that are in neither the compact tier nor the recent one.
///
/// Dropped steps stay recoverable from the log; only their count is shown, plus a failure line
/// for each failed one when failures are preserved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Omitted {
    /// Steps `0..end` of the history are dropped.
    pub end: usize,
    /// How many of them are not shown at all: `end` minus the preserved failures.
    pub count: usize,
    /// The failure lines of dropped failed steps, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<CompactStep>,
}

impl Omitted {
    /// Drops `steps`, which start at the current `end`, keeping failure lines if asked.
    pub(crate) fn extend(&mut self, steps: &[Step], preserve_failures: bool) {
        for s in steps {
            if preserve_failures && !s.success {
                self.failures.push(group::failure_line(s));
            } else {
                self.count += 1;
            }
        }
        self.end += steps.len();
    }

    /// Drops a closed block, whose failure lines (if it kept any) become preserved lines.
    pub(crate) fn absorb(&mut self, block: CompactBlock) {
        self.count += block.len() - block.failures.len();
        self.end = block.end;
        self.failures.extend(block.failures);
    }
}

/// Why compaction ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "trigger", rename_all = "snake_case")]
pub enum TriggerReason {
    /// The history held more steps than the threshold.
    StepThreshold {
        /// Steps counted.
        steps: usize,
        /// The configured threshold.
        threshold: usize,
    },
    /// The steps kept in full cost more tokens than the budget.
    TokenBudget {
        /// Tokens counted.
        tokens: u64,
        /// The configured budget.
        budget: u64,
    },
}

/// The token cost of a step kept in full, by its index in the history; precomputed counts fit
/// as `&|i, _| counts[i]`. Loom-core counts nothing itself: the caller brings the tokenizer.
pub type StepTokens<'a> = &'a dyn Fn(usize, &Step) -> u64;

/// Seed 001's triggers for a whole history: more steps than the threshold, or (when a counter is
/// given and a budget set) more tokens than the budget.
pub fn should_compact(
    steps: &[Step],
    config: &CompactionConfig,
    tokens: Option<StepTokens<'_>>,
) -> Option<TriggerReason> {
    let threshold = config.trigger.step_threshold;
    if steps.len() > threshold {
        return Some(TriggerReason::StepThreshold {
            steps: steps.len(),
            threshold,
        });
    }
    token_trigger(steps, 0, config.trigger.token_budget, tokens)
}

/// The token trigger over `steps[from..]`: fires when they cost more than `budget`.
pub(crate) fn token_trigger(
    steps: &[Step],
    from: usize,
    budget: Option<u64>,
    tokens: Option<StepTokens<'_>>,
) -> Option<TriggerReason> {
    let (Some(budget), Some(count)) = (budget, tokens) else {
        return None;
    };
    let tokens = steps
        .iter()
        .enumerate()
        .skip(from)
        .fold(0u64, |acc, (i, s)| acc.saturating_add(count(i, s)));
    (tokens > budget).then_some(TriggerReason::TokenBudget { tokens, budget })
}

/// The three tiers of a history: dropped (counted), compact (one line per step or group), recent
/// (in full).
#[derive(Debug, Clone, PartialEq)]
pub struct CompactedHistory<'a> {
    /// Steps kept in full, oldest first.
    pub recent: &'a [Step],
    /// The compact tier, oldest first.
    pub blocks: Vec<CompactBlock>,
    /// The dropped front of the history.
    pub omitted: Omitted,
    /// Steps in the history.
    pub total: usize,
    /// Whether any group was formed (false with grouping off, or when categories alternate).
    pub grouped: bool,
    /// Whether the long-task rule applied.
    pub long_task: bool,
}

impl CompactedHistory<'_> {
    /// How many steps the compact tier covers.
    pub fn compacted_steps(&self) -> usize {
        self.blocks.iter().map(CompactBlock::len).sum()
    }

    /// The compact tier's lines in the seed's order: preserved failures of dropped steps (oldest
    /// first), then each block's summary and failure lines.
    pub fn compact_lines(&self) -> Vec<&CompactStep> {
        self.omitted
            .failures
            .iter()
            .chain(self.blocks.iter().flat_map(CompactBlock::lines))
            .collect()
    }

    /// The seed's `format_for_prompt` text.
    pub fn format_for_prompt(&self) -> String {
        super::format::format_for_prompt(self)
    }
}

/// Compacts a whole history (oldest first) the way seed 003 describes.
///
/// `max_steps` caps the steps shown (recent plus compact); without it the cap is
/// `recent_window + max_compact_steps`. Rules, in order:
/// - at most `recent_window` newest steps stay in full (3 for a long task);
/// - a history of more than `long_task.threshold` steps considers only its newest
///   `long_task.window` steps; the rest are dropped;
/// - otherwise the compact tier covers the newest steps before the recent ones, up to the cap;
/// - if every step failed, nothing is dropped;
/// - dropped failed steps keep a failure line when `preserve_failures` is on.
pub fn compact<'a>(
    steps: &'a [Step],
    config: &CompactionConfig,
    max_steps: Option<usize>,
) -> CompactedHistory<'a> {
    let total = steps.len();
    let limits = config.limits(total, max_steps);
    let split = total - limits.recent.min(total);
    let all_failed = total > 0 && steps.iter().all(|s| !s.success);
    let keep_from = if all_failed {
        0
    } else {
        split.saturating_sub(limits.compact)
    };
    let mut omitted = Omitted::default();
    omitted.extend(&steps[..keep_from], config.preserve_failures);
    let blocks = group::blocks(
        &steps[keep_from..split],
        keep_from,
        config.group_similar,
        config.preserve_failures,
    );
    CompactedHistory {
        recent: &steps[split..],
        grouped: blocks.iter().any(|b| b.grouped),
        blocks,
        omitted,
        total,
        long_task: limits.long_task,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compact::testing::{failed, step};
    use crate::step::ToolKind;

    fn reads(n: usize) -> Vec<Step> {
        (1..=n).map(|i| step(i, ToolKind::ReadFile)).collect()
    }

    fn config(recent: usize) -> CompactionConfig {
        CompactionConfig {
            recent_window: recent,
            ..CompactionConfig::default()
        }
    }

    // Seed: test_compaction_splits_recent. The seed expects 7 compact steps; with grouping on
    // (its default) they are one group line covering 7 steps.
    #[test]
    fn compaction_splits_recent() {
        let steps = reads(10);
        let h = compact(&steps, &config(3), None);
        assert_eq!(h.recent.len(), 3);
        assert_eq!(h.recent[2].id, "step_010");
        assert_eq!(h.compacted_steps(), 7);
        assert_eq!(h.blocks.len(), 1);
        assert_eq!(h.omitted.count, 0);
        let h = compact(
            &steps,
            &CompactionConfig {
                group_similar: false,
                ..config(3)
            },
            None,
        );
        assert_eq!(h.compact_lines().len(), 7);
    }

    // Seed: test_grouping_file_operations.
    #[test]
    fn grouping_file_operations() {
        let steps = vec![
            step(1, ToolKind::ReadFile),
            step(2, ToolKind::ReadFile),
            step(3, ToolKind::WriteFile),
            step(4, ToolKind::Shell),
            step(5, ToolKind::ReadFile),
        ];
        let h = compact(&steps, &config(1), None);
        assert_eq!(h.recent.len(), 1);
        let lines = h.compact_lines();
        assert_eq!(lines.len(), 2);
        assert!(
            lines[0].summary.starts_with("3 file operations"),
            "{lines:?}"
        );
        assert_eq!(lines[0].id, "step_001..003");
    }

    #[test]
    fn few_steps_stay_recent() {
        let steps = reads(3);
        let h = compact(&steps, &config(5), None);
        assert_eq!(h.recent.len(), 3);
        assert!(h.blocks.is_empty());
        assert_eq!(compact(&[], &config(5), None).total, 0);
    }

    // The seed's code counted dropped groups: 30 old steps in 3 groups over a cap of 2 lines
    // reported "1 earlier steps omitted". Steps are counted here.
    #[test]
    fn dropped_count_counts_steps_under_grouping() {
        let mut steps = Vec::new();
        for i in 1..=40 {
            let kind = match (i - 1) / 10 {
                0 | 2 => ToolKind::ReadFile,
                1 => ToolKind::Shell,
                _ => ToolKind::WebSearch,
            };
            steps.push(step(i, kind));
        }
        let cfg = CompactionConfig {
            recent_window: 5,
            max_compact_steps: 10,
            ..CompactionConfig::default()
        };
        let h = compact(&steps, &cfg, None);
        assert_eq!(h.recent.len(), 5);
        assert_eq!(h.compacted_steps(), 10);
        assert_eq!(h.omitted.count, 25);
        assert_eq!(h.omitted.count + h.compacted_steps() + h.recent.len(), 40);
        assert!(h
            .format_for_prompt()
            .contains("  ... (25 earlier steps omitted)\n"));
    }

    // Seed: failures are never dropped, even if old. The seed's code never applied this.
    #[test]
    fn failures_are_never_dropped() {
        let mut steps = reads(30);
        steps[1] = failed(2, ToolKind::Shell, "exit 127: command not found: pytset");
        steps[20] = failed(21, ToolKind::ReadFile, "No such file: conf.toml");
        let cfg = CompactionConfig {
            recent_window: 3,
            max_compact_steps: 5,
            ..CompactionConfig::default()
        };
        let h = compact(&steps, &cfg, None);
        let text = h.format_for_prompt();
        assert!(
            text.contains("[step_002] ✗ shell failed: exit 127: command not found: pytset"),
            "{text}"
        );
        assert!(text.contains("[step_021] ✗ read_file failed: No such file: conf.toml"));
        // 22 dropped, two of them preserved failures.
        assert_eq!(h.omitted.end, 22);
        assert_eq!(h.omitted.count, 20);
        assert!(text.contains("(20 earlier steps omitted)"));

        let off = CompactionConfig {
            preserve_failures: false,
            ..cfg
        };
        let h = compact(&steps, &off, None);
        assert_eq!(h.omitted.count, 22);
        assert!(!h.format_for_prompt().contains("pytset"));
    }

    #[test]
    fn a_recent_failure_shows_its_error() {
        let steps = vec![
            step(1, ToolKind::ReadFile),
            failed(2, ToolKind::Shell, "exit 1: AssertionError"),
        ];
        let text = compact(&steps, &config(5), None).format_for_prompt();
        assert!(
            text.contains("  [step_002] ✗ ran a command: exit 1: AssertionError"),
            "{text}"
        );
    }

    // Seed edge case: all steps are failures, so nothing is dropped.
    #[test]
    fn all_failed_drops_nothing() {
        let steps: Vec<Step> = (1..=40)
            .map(|i| failed(i, ToolKind::Shell, &format!("exit {i}")))
            .collect();
        let cfg = CompactionConfig {
            preserve_failures: false,
            ..CompactionConfig::default()
        };
        let h = compact(&steps, &cfg, None);
        assert_eq!(h.omitted.end, 0);
        assert_eq!(h.omitted.count, 0);
        assert_eq!(h.compacted_steps() + h.recent.len(), 40);
    }

    // Seed edge case: more than 100 steps, only the last 30 are considered: 3 + 27.
    #[test]
    fn very_long_task_keeps_thirty() {
        let kinds = [ToolKind::ReadFile, ToolKind::Shell];
        let steps: Vec<Step> = (1..=150).map(|i| step(i, kinds[i % 2].clone())).collect();
        let h = compact(&steps, &CompactionConfig::default(), None);
        assert!(h.long_task);
        assert_eq!(h.recent.len(), 3);
        assert_eq!(h.recent[0].id, "step_148");
        assert_eq!(h.compacted_steps(), 27);
        assert_eq!(h.omitted.count, 120);
        // Exactly 100 steps is not a long task.
        let h = compact(&steps[..100], &CompactionConfig::default(), None);
        assert!(!h.long_task);
        assert_eq!(h.recent.len(), 5);
    }

    #[test]
    fn long_task_still_keeps_old_failures() {
        let mut steps: Vec<Step> = (1..=150).map(|i| step(i, ToolKind::Shell)).collect();
        steps[9] = failed(10, ToolKind::Shell, "exit 2");
        let h = compact(&steps, &CompactionConfig::default(), None);
        assert_eq!(h.omitted.count, 119);
        assert_eq!(h.omitted.failures.len(), 1);
        assert_eq!(h.omitted.failures[0].id, "step_010");
    }

    // Seed edge case: alternating categories are not grouped.
    #[test]
    fn alternating_categories_stay_apart() {
        let kinds = [ToolKind::ReadFile, ToolKind::WebSearch];
        let steps: Vec<Step> = (1..=12).map(|i| step(i, kinds[i % 2].clone())).collect();
        let h = compact(&steps, &config(3), None);
        assert!(!h.grouped);
        assert_eq!(h.blocks.len(), 9);
    }

    // Seed: test_max_steps_override.
    #[test]
    fn max_steps_caps_what_is_shown() {
        let steps: Vec<Step> = (1..=20).map(|i| step(i, ToolKind::Unknown)).collect();
        let cfg = CompactionConfig {
            recent_window: 2,
            max_compact_steps: 10,
            group_similar: false,
            ..CompactionConfig::default()
        };
        let h = compact(&steps, &cfg, None);
        assert_eq!(h.recent.len() + h.compacted_steps(), 12);
        let h = compact(&steps, &cfg, Some(5));
        assert_eq!(h.recent.len() + h.compacted_steps(), 5);
        assert_eq!(h.omitted.count, 15);
    }

    #[test]
    fn triggers() {
        let cfg = CompactionConfig::default();
        assert_eq!(should_compact(&reads(5), &cfg, None), None);
        assert_eq!(
            should_compact(&reads(6), &cfg, None),
            Some(TriggerReason::StepThreshold {
                steps: 6,
                threshold: 5
            })
        );
        let heavy: StepTokens<'_> = &|_, _| 700;
        assert_eq!(
            should_compact(&reads(3), &cfg, Some(heavy)),
            Some(TriggerReason::TokenBudget {
                tokens: 2100,
                budget: 2000
            })
        );
        let counts = [100u64, 100, 100];
        let precomputed: StepTokens<'_> = &|i, _| counts[i];
        assert_eq!(should_compact(&reads(3), &cfg, Some(precomputed)), None);
    }
}
