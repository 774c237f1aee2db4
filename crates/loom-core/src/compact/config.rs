//! How much of a step history stays in full, how much becomes one-line summaries, and when that
//! happens: the seed's `CompactionConfig`, its tuning presets, its auto-tune, and its triggers.
//!
//! Seed 003 gives the four knobs and their defaults; seed 001 gives the triggers (a step
//! threshold, a token budget, a check after every tool call). The edge-case rule for very long
//! tasks and the cache-stable options are Loom's own, with the seed's numbers as defaults.

use serde::{Deserialize, Serialize};

use crate::error::{LogError, Result};

/// The seed's compaction knobs plus Loom's triggers, long-task rule and cache-stable options.
///
/// Deserializes from a policy file with every field optional (defaults below) and unknown fields
/// rejected, then [`CompactionConfig::validate`] checks the combination once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompactionConfig {
    /// Steps at the end of the history kept in full.
    pub recent_window: usize,
    /// Most steps the compact tier may cover; older steps are dropped (and counted).
    ///
    /// The seed's code applied this to summary lines after grouping, so one group of 12 steps
    /// counted as one and the dropped count came out in groups. Here it counts steps, and so
    /// does the dropped count.
    pub max_compact_steps: usize,
    /// Consecutive steps of one category become one summary line.
    pub group_similar: bool,
    /// Failed steps are never dropped: each stays visible with its error.
    pub preserve_failures: bool,
    /// When compaction runs at all.
    pub trigger: Trigger,
    /// The seed's rule for very long tasks.
    pub long_task: LongTask,
    /// Hysteresis of the cache-stable mode.
    pub stable: StableOptions,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self {
            recent_window: 5,
            max_compact_steps: 20,
            group_similar: true,
            preserve_failures: true,
            trigger: Trigger::default(),
            long_task: LongTask::default(),
            stable: StableOptions::default(),
        }
    }
}

/// When compaction runs (seed 001, "Compaction Triggers").
///
/// The third trigger of the seed, "after every tool call", is how the cache-stable compactor is
/// meant to be driven: its `advance` is cheap enough to call after each step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Trigger {
    /// Compaction starts once the history holds more than this many steps.
    pub step_threshold: usize,
    /// Compaction also starts once the steps kept in full cost more than this many tokens;
    /// `None` turns the token trigger off.
    pub token_budget: Option<u64>,
}

impl Default for Trigger {
    fn default() -> Self {
        Self {
            step_threshold: 5,
            token_budget: Some(2000),
        }
    }
}

/// Seed 003, "Very Long Task": beyond `threshold` steps only the last `window` are considered,
/// `recent` of them in full and the rest compact; everything older is counted as omitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LongTask {
    /// Histories longer than this many steps are long tasks.
    pub threshold: usize,
    /// How many of the newest steps a long task considers.
    pub window: usize,
    /// At most this many of them stay in full (fewer if `recent_window` is smaller).
    pub recent: usize,
}

impl Default for LongTask {
    fn default() -> Self {
        Self {
            threshold: 100,
            window: 30,
            recent: 3,
        }
    }
}

/// Hysteresis of the cache-stable compactor: how far the history may grow between compaction
/// points, and how far the compact tier is cut back when it overflows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StableOptions {
    /// Steps that may pile up in full beyond `recent_window` before the next compaction point.
    /// Larger values mean fewer prefix rewrites and longer requests between them.
    pub chunk: usize,
    /// When the compact tier overflows `max_compact_steps`, whole oldest groups are dropped
    /// until it covers at most this percentage of it, so that the next few compaction points
    /// only append instead of each dropping a little from the front.
    pub drop_to_percent: u8,
}

impl Default for StableOptions {
    fn default() -> Self {
        Self {
            chunk: 5,
            drop_to_percent: 75,
        }
    }
}

impl CompactionConfig {
    /// The configuration of a named preset.
    pub fn preset(preset: Preset) -> Self {
        let (recent_window, max_compact_steps, group_similar) = match preset {
            Preset::InteractiveChat => (5, 20, true),
            Preset::LongResearch => (3, 10, true),
            Preset::CodeAnalysis => (5, 15, true),
            Preset::Debugging => (7, 10, false),
        };
        Self {
            recent_window,
            max_compact_steps,
            group_similar,
            ..Self::default()
        }
    }

    /// Checks the combination of fields once, so the compactors can rely on it.
    pub fn validate(&self) -> Result<()> {
        if self.long_task.window == 0 {
            return Err(LogError::invalid(
                "compaction.long_task.window",
                "must be at least 1: a long task has to keep some steps",
            ));
        }
        if self.long_task.recent > self.long_task.window {
            return Err(LogError::invalid(
                "compaction.long_task.recent",
                format!(
                    "{} recent steps do not fit in a window of {}",
                    self.long_task.recent, self.long_task.window
                ),
            ));
        }
        if self.stable.chunk == 0 {
            return Err(LogError::invalid(
                "compaction.stable.chunk",
                "must be at least 1, or every step would be a compaction point",
            ));
        }
        if self.stable.drop_to_percent > 100 {
            return Err(LogError::invalid(
                "compaction.stable.drop_to_percent",
                format!("{} is not a percentage", self.stable.drop_to_percent),
            ));
        }
        Ok(())
    }

    /// The recent window and compact capacity that apply to a history of `len` steps, with an
    /// optional cap on the total number of steps shown (the seed's `max_steps`).
    pub(crate) fn limits(&self, len: usize, max_steps: Option<usize>) -> Limits {
        if len > self.long_task.threshold {
            let window = max_steps.map_or(self.long_task.window, |m| m.min(self.long_task.window));
            let recent = self.recent_window.min(self.long_task.recent).min(window);
            Limits {
                recent,
                compact: window - recent,
                long_task: true,
            }
        } else {
            let total = max_steps.unwrap_or(self.recent_window + self.max_compact_steps);
            let recent = self.recent_window.min(total);
            Limits {
                recent,
                compact: total - recent,
                long_task: false,
            }
        }
    }
}

/// What a compactor may keep for a history of a given length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Steps kept in full.
    pub(crate) recent: usize,
    /// Most steps the compact tier covers.
    pub(crate) compact: usize,
    /// Whether the long-task rule applied.
    pub(crate) long_task: bool,
}

/// The seed's tuning table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// More context for natural conversation (the defaults).
    InteractiveChat,
    /// Aggressive compression for 50+ step tasks.
    LongResearch,
    /// More detail kept for cross-file references.
    CodeAnalysis,
    /// No grouping, to see the exact execution order.
    Debugging,
}

impl Preset {
    /// Every preset, in the seed's table order.
    pub const ALL: [Preset; 4] = [
        Preset::InteractiveChat,
        Preset::LongResearch,
        Preset::CodeAnalysis,
        Preset::Debugging,
    ];

    /// The kebab-case name used on the command line and in policy files.
    pub fn name(self) -> &'static str {
        match self {
            Self::InteractiveChat => "interactive-chat",
            Self::LongResearch => "long-research",
            Self::CodeAnalysis => "code-analysis",
            Self::Debugging => "debugging",
        }
    }

    /// Looks a preset up by its kebab-case name.
    pub fn from_name(name: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| {
                let known: Vec<&str> = Self::ALL.iter().map(|p| p.name()).collect();
                LogError::invalid(
                    "preset",
                    format!("unknown preset `{name}`; known: {}", known.join(", ")),
                )
            })
    }
}

/// The seed's adaptive compaction: picks a preset from the task text.
///
/// The seed's auto-tune returned `recent_window = 7, group_similar = false` for debugging tasks
/// but kept the default `max_compact_steps`, which disagrees with its own tuning table (10); the
/// table wins here so that a preset and its auto-tuned twin are the same configuration.
pub fn auto_tune(task: &str) -> Option<Preset> {
    let task = task.to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| task.contains(w));
    if has(&["debug", "error"]) {
        Some(Preset::Debugging)
    } else if has(&["research", "analyze", "analyse"]) {
        Some(Preset::LongResearch)
    } else {
        None
    }
}

/// [`auto_tune`] as a configuration: the matching preset, or the defaults.
pub fn auto_tune_config(task: &str) -> CompactionConfig {
    auto_tune(task).map_or_else(CompactionConfig::default, CompactionConfig::preset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_seeds() {
        let c = CompactionConfig::default();
        assert_eq!(c.recent_window, 5);
        assert_eq!(c.max_compact_steps, 20);
        assert!(c.group_similar);
        assert!(c.preserve_failures);
        assert_eq!(c.trigger.step_threshold, 5);
        assert_eq!(c.trigger.token_budget, Some(2000));
        assert_eq!(c, CompactionConfig::preset(Preset::InteractiveChat));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn presets_follow_the_tuning_table() {
        let table = [
            (Preset::InteractiveChat, 5, 20, true),
            (Preset::LongResearch, 3, 10, true),
            (Preset::CodeAnalysis, 5, 15, true),
            (Preset::Debugging, 7, 10, false),
        ];
        for (preset, recent, max, group) in table {
            let c = CompactionConfig::preset(preset);
            assert_eq!(
                (c.recent_window, c.max_compact_steps, c.group_similar),
                (recent, max, group),
                "{}",
                preset.name()
            );
            assert_eq!(Preset::from_name(preset.name()).ok(), Some(preset));
        }
        assert!(Preset::from_name("fast").is_err());
    }

    #[test]
    fn auto_tune_reads_the_task() {
        assert_eq!(
            auto_tune("Debug the failing parser test"),
            Some(Preset::Debugging)
        );
        assert_eq!(
            auto_tune("Why does this ERROR happen?"),
            Some(Preset::Debugging)
        );
        assert_eq!(
            auto_tune("Research Bitcoin price predictions for 2025"),
            Some(Preset::LongResearch)
        );
        assert_eq!(auto_tune("Book a flight to Boston"), None);
        assert_eq!(
            auto_tune_config("book a flight"),
            CompactionConfig::default()
        );
        assert_eq!(auto_tune_config("analyze logs").recent_window, 3);
    }

    #[test]
    fn long_tasks_consider_thirty_steps_three_in_full() {
        let c = CompactionConfig::default();
        let l = c.limits(101, None);
        assert_eq!((l.recent, l.compact, l.long_task), (3, 27, true));
        let l = c.limits(100, None);
        assert_eq!((l.recent, l.compact, l.long_task), (5, 20, false));
        let l = c.limits(20, Some(15));
        assert_eq!((l.recent, l.compact), (5, 10));
        let l = c.limits(20, Some(2));
        assert_eq!((l.recent, l.compact), (2, 0));
    }

    #[test]
    fn bad_combinations_are_named() {
        let mut c = CompactionConfig::default();
        c.long_task.recent = 40;
        let err = c
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("compaction.long_task.recent"), "{err}");
        let mut c = CompactionConfig::default();
        c.stable.chunk = 0;
        assert!(c.validate().is_err());
    }

    #[test]
    fn parses_partial_policy_and_rejects_unknown_fields() {
        let c: CompactionConfig = serde_json::from_str(r#"{"recent_window": 3}"#)
            .unwrap_or_else(|e| panic!("partial config: {e}"));
        assert_eq!(c.recent_window, 3);
        assert_eq!(c.max_compact_steps, 20);
        assert!(serde_json::from_str::<CompactionConfig>(r#"{"recent": 3}"#).is_err());
    }
}
