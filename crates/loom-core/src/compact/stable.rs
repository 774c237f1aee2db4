//! The cache-stable compactor: the seed's three tiers, decided at compaction points and then left
//! alone, so that between points the rendered history only grows at its end.
//!
//! Seed 003 regroups the whole history on every call and prints the omitted count in front,
//! which rewrites the start of the prompt every turn and defeats the provider's prompt cache. Here
//! a [`CompactionState`] (a derived record, stored beside the log) says which steps are dropped,
//! which closed blocks cover the compact tier and where the recent tier starts. Blocks are closed
//! when formed and never grow: the next compaction point adds new blocks after them, so even a
//! compaction point leaves the text up to the end of the old blocks unchanged, unless it also
//! drops old blocks. The omitted count sits at the top of the compact tier and changes only when
//! blocks are dropped, which only happens at a compaction point.
//!
//! Compaction points use hysteresis: the recent tier may grow `stable.chunk` steps past
//! `recent_window` (or past the token budget) before a point cuts it back to `recent_window`, and an
//! overflowing compact tier is cut to `stable.drop_to_percent` of its capacity so that the next few
//! points only append.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::config::CompactionConfig;
use super::format;
use super::group::{self, CompactBlock};
use super::seed::{token_trigger, Omitted, StepTokens, TriggerReason};
use crate::error::{LogError, Result};
use crate::step::Step;

/// Where a history's compaction stands: the persisted, sticky decisions of the cache-stable
/// compactor. Steps `0..omitted.end` are dropped, `omitted.end..boundary` are covered by `blocks`,
/// and `boundary..` are recent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionState {
    /// The dropped front.
    pub omitted: Omitted,
    /// Closed blocks covering the compact tier, oldest first, contiguous.
    pub blocks: Vec<CompactBlock>,
    /// Index of the first recent step.
    pub boundary: usize,
    /// Compaction points taken so far.
    pub points: u64,
    /// Whether any step before `boundary` succeeded; the seed keeps every step of an all-failed
    /// history, and this saves rescanning the history at each point to know.
    pub any_success: bool,
}

/// What one compaction point did, for the receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionPoint {
    /// Why it fired.
    pub reason: TriggerReason,
    /// Steps newly turned into closed blocks.
    pub compacted: Range<usize>,
    /// Steps newly dropped (their failures kept as lines when preserved).
    pub dropped: Range<usize>,
    /// Whether the long-task rule applied.
    pub long_task: bool,
}

impl CompactionState {
    /// The state of a history nothing has been compacted in yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks that this state describes a prefix of `steps`: a state stored for another session,
    /// or for a history that was rebuilt differently, must not be applied silently.
    pub fn validate(&self, steps: &[Step]) -> Result<()> {
        if self.boundary > steps.len() {
            return Err(LogError::invalid(
                "compaction_state.boundary",
                format!(
                    "{} is past the end of a history of {} steps",
                    self.boundary,
                    steps.len()
                ),
            ));
        }
        let mut at = self.omitted.end;
        for (i, b) in self.blocks.iter().enumerate() {
            if b.start != at || b.end <= b.start || b.end > self.boundary {
                return Err(LogError::invalid(
                    format!("compaction_state.blocks[{i}]"),
                    format!(
                        "covers {}..{} but the blocks must continue at {at} and end by {}",
                        b.start, b.end, self.boundary
                    ),
                ));
            }
            for (field, idx, id) in [
                ("first_id", b.start, &b.first_id),
                ("last_id", b.end - 1, &b.last_id),
            ] {
                if steps[idx].id != *id {
                    return Err(LogError::invalid(
                        format!("compaction_state.blocks[{i}].{field}"),
                        format!("names `{id}` but step {idx} is `{}`", steps[idx].id),
                    ));
                }
            }
            at = b.end;
        }
        if at != self.boundary {
            return Err(LogError::invalid(
                "compaction_state.boundary",
                format!("is {} but the blocks end at {at}", self.boundary),
            ));
        }
        Ok(())
    }

    /// Takes a compaction point if one is due for `steps` (the whole history, oldest first),
    /// returning the new state and what the point did; `None` means nothing changes and the
    /// rendered history only grows at its end.
    ///
    /// Meant to be called after every tool call (seed 001's incremental trigger); its cost is
    /// proportional to the recent tier, the new blocks and the stored blocks, not to the
    /// history. A point fires when the history has more than `trigger.step_threshold` steps and
    /// the recent tier has grown `stable.chunk` steps past its window, or when the recent tier
    /// costs more than `trigger.token_budget` tokens by `tokens`. It then moves the boundary so
    /// that `recent_window` steps remain (3 for a long task), closes the steps it passed into
    /// blocks, and drops whole oldest blocks if the compact tier overflows.
    pub fn advance(
        &self,
        steps: &[Step],
        config: &CompactionConfig,
        tokens: Option<StepTokens<'_>>,
    ) -> Result<Option<(CompactionState, CompactionPoint)>> {
        self.validate(steps)?;
        let n = steps.len();
        let limits = config.limits(n, None);
        let target = n - limits.recent.min(n);
        if target <= self.boundary {
            // The recent tier is already as small as it may get: no point can change anything.
            return Ok(None);
        }
        let recent_len = n - self.boundary;
        let reason = if n > config.trigger.step_threshold
            && recent_len > limits.recent.saturating_add(config.stable.chunk)
        {
            Some(TriggerReason::StepThreshold {
                steps: n,
                threshold: config.trigger.step_threshold,
            })
        } else {
            // Only the token trigger can fire here: the step threshold is not reached, or the
            // recent tier is within its hysteresis band.
            token_trigger(steps, self.boundary, config.trigger.token_budget, tokens)
        };
        let Some(reason) = reason else {
            return Ok(None);
        };

        let mut next = self.clone();
        next.points += 1;
        let fresh = &steps[self.boundary..target];
        next.any_success |= fresh.iter().any(|s| s.success);
        next.blocks.extend(group::blocks(
            fresh,
            self.boundary,
            config.group_similar,
            config.preserve_failures,
        ));
        next.boundary = target;

        let dropped_from = next.omitted.end;
        let covered = next.boundary - next.omitted.end;
        // Seed: when every step failed, nothing is dropped.
        let all_failed = !next.any_success && steps[target..].iter().all(|s| !s.success);
        if covered > limits.compact && !all_failed {
            let keep = limits.compact * usize::from(config.stable.drop_to_percent) / 100;
            let mut covered = covered;
            let mut drop = 0;
            while covered > keep {
                let Some(b) = next.blocks.get(drop) else {
                    break;
                };
                covered -= b.len();
                drop += 1;
            }
            for b in next.blocks.drain(..drop) {
                next.omitted.absorb(b);
            }
        }
        let point = CompactionPoint {
            reason,
            compacted: self.boundary..target,
            dropped: dropped_from..next.omitted.end,
            long_task: limits.long_task,
        };
        Ok(Some((next, point)))
    }
}

/// A history as the cache-stable compactor shows it: the stored decisions applied to the steps.
#[derive(Debug, Clone, Copy)]
pub struct StableHistory<'a> {
    steps: &'a [Step],
    state: &'a CompactionState,
}

impl<'a> StableHistory<'a> {
    /// Applies `state` to `steps`, after checking that it belongs to them.
    pub fn new(steps: &'a [Step], state: &'a CompactionState) -> Result<Self> {
        state.validate(steps)?;
        Ok(Self { steps, state })
    }

    /// The steps kept in full, oldest first.
    pub fn recent(&self) -> &'a [Step] {
        &self.steps[self.state.boundary..]
    }

    /// The closed blocks of the compact tier.
    pub fn blocks(&self) -> &'a [CompactBlock] {
        &self.state.blocks
    }

    /// The dropped front.
    pub fn omitted(&self) -> &'a Omitted {
        &self.state.omitted
    }

    /// Indices of the steps not rendered in full (dropped or compacted): the render pipeline
    /// leaves their calls and results out of the request, together, so no pairing breaks.
    pub fn compacted_range(&self) -> Range<usize> {
        0..self.state.boundary
    }

    /// The compact tier's lines in order, without indentation: the omitted count (if any), the
    /// preserved failures of dropped steps, then each block's lines. This is the stable prefix:
    /// it changes only at compaction points.
    pub fn prefix_lines(&self) -> Vec<String> {
        super::format::stable_compact_lines(self.state)
    }

    /// The history in the seed's `format_for_prompt` layout, with the omitted count at the top of
    /// the compact tier.
    pub fn render(&self) -> String {
        super::format::format_stable(self)
    }
}

/// A cache-stable compactor for one agent's history, driven after every tool call.
///
/// It keeps the rendered compact tier between compaction points, so rendering a call costs the
/// recent steps plus a copy of that prefix, not a re-rendering of every preserved failure.
#[derive(Debug, Clone)]
pub struct StableCompactor {
    config: CompactionConfig,
    state: CompactionState,
    prefix: String,
}

impl StableCompactor {
    /// A compactor with nothing compacted yet.
    pub fn new(config: CompactionConfig) -> Result<Self> {
        Self::resume(config, CompactionState::new())
    }

    /// A compactor continuing from a stored state.
    pub fn resume(config: CompactionConfig, state: CompactionState) -> Result<Self> {
        config.validate()?;
        let prefix = format::stable_prefix(&format::stable_compact_lines(&state));
        Ok(Self {
            config,
            state,
            prefix,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &CompactionConfig {
        &self.config
    }

    /// The current state, to persist.
    pub fn state(&self) -> &CompactionState {
        &self.state
    }

    /// Takes a compaction point if one is due; see [`CompactionState::advance`].
    pub fn update(
        &mut self,
        steps: &[Step],
        tokens: Option<StepTokens<'_>>,
    ) -> Result<Option<CompactionPoint>> {
        Ok(self
            .state
            .advance(steps, &self.config, tokens)?
            .map(|(state, point)| {
                self.prefix = format::stable_prefix(&format::stable_compact_lines(&state));
                self.state = state;
                point
            }))
    }

    /// The history as text (as [`StableHistory::render`]), reusing the compact tier rendered at
    /// the last compaction point.
    pub fn render(&self, steps: &[Step]) -> Result<String> {
        let history = self.history(steps)?;
        let mut out = self.prefix.clone();
        format::push_recent(&mut out, history.recent());
        Ok(out)
    }

    /// The history as it is to be shown now.
    pub fn history<'a>(&'a self, steps: &'a [Step]) -> Result<StableHistory<'a>> {
        StableHistory::new(steps, &self.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compact::testing::{failed, step};
    use crate::step::ToolKind;

    fn kinds(i: usize) -> ToolKind {
        // Runs of mixed length so that groups form and break.
        match (i * 7 / 5) % 4 {
            0 => ToolKind::ReadFile,
            1 => ToolKind::Shell,
            2 => ToolKind::WebSearch,
            _ => ToolKind::Navigate,
        }
    }

    fn history(n: usize) -> Vec<Step> {
        (1..=n)
            .map(|i| {
                if i % 9 == 0 {
                    failed(i, kinds(i), &format!("exit {i}"))
                } else {
                    step(i, kinds(i))
                }
            })
            .collect()
    }

    /// Renders the history after every step, taking compaction points as they come; returns each
    /// rendering and whether a point fired just before it.
    fn replay(steps: &[Step], config: &CompactionConfig) -> Vec<(String, bool)> {
        let mut c = StableCompactor::new(config.clone()).unwrap_or_else(|e| panic!("{e}"));
        (1..=steps.len())
            .map(|n| {
                let point = c
                    .update(&steps[..n], None)
                    .unwrap_or_else(|e| panic!("{e}"))
                    .is_some();
                let text = c
                    .history(&steps[..n])
                    .unwrap_or_else(|e| panic!("{e}"))
                    .render();
                let memo = c.render(&steps[..n]).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(memo, text, "the kept prefix went stale");
                (text, point)
            })
            .collect()
    }

    #[test]
    fn between_points_each_call_extends_the_previous_bytes() {
        for config in [
            CompactionConfig::default(),
            CompactionConfig::preset(super::super::Preset::LongResearch),
            CompactionConfig::preset(super::super::Preset::Debugging),
        ] {
            let steps = history(140);
            let renders = replay(&steps, &config);
            let mut points = 0;
            for w in renders.windows(2) {
                let ((before, _), (after, point)) = (&w[0], &w[1]);
                if *point {
                    points += 1;
                } else {
                    assert!(
                        after.starts_with(before.as_str()),
                        "not a prefix extension:\n{before}\n---\n{after}"
                    );
                    assert!(after.len() > before.len());
                }
            }
            // Points are rare: one per `chunk` steps or so.
            assert!(points > 10 && points < 140 / 4, "{points} points");
        }
    }

    #[test]
    fn a_point_keeps_old_blocks_in_place_unless_it_drops() {
        let steps = history(60);
        let config = CompactionConfig {
            max_compact_steps: 1000,
            ..CompactionConfig::default()
        };
        let mut c = StableCompactor::new(config).unwrap_or_else(|e| panic!("{e}"));
        let mut last_prefix: Vec<String> = Vec::new();
        for n in 1..=steps.len() {
            if c.update(&steps[..n], None)
                .unwrap_or_else(|e| panic!("{e}"))
                .is_some()
            {
                let prefix = c
                    .history(&steps[..n])
                    .unwrap_or_else(|e| panic!("{e}"))
                    .prefix_lines();
                assert!(
                    prefix.starts_with(&last_prefix),
                    "{last_prefix:?}\n{prefix:?}"
                );
                last_prefix = prefix;
            }
        }
        assert!(!last_prefix.is_empty());
    }

    #[test]
    fn groups_never_grow_across_points() {
        let steps: Vec<Step> = (1..=30).map(|i| step(i, ToolKind::Shell)).collect();
        let mut c =
            StableCompactor::new(CompactionConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        let mut seen: Vec<CompactBlock> = Vec::new();
        for n in 1..=steps.len() {
            let _ = c.update(&steps[..n], None);
            let blocks = c.state().blocks.clone();
            for old in &seen {
                if let Some(now) = blocks.iter().find(|b| b.start == old.start) {
                    assert_eq!(now, old, "a closed block changed");
                }
            }
            seen = blocks;
        }
        // Same category throughout, yet several closed groups rather than one that grows.
        assert!(seen.len() > 1);
    }

    #[test]
    fn omitted_count_counts_steps_and_failures_survive() {
        let steps = history(200);
        let config = CompactionConfig::default();
        let mut c = StableCompactor::new(config).unwrap_or_else(|e| panic!("{e}"));
        for n in 1..=steps.len() {
            let _ = c.update(&steps[..n], None);
        }
        let h = c.history(&steps).unwrap_or_else(|e| panic!("{e}"));
        let s = c.state();
        let shown_in_blocks: usize = s.blocks.iter().map(CompactBlock::len).sum();
        assert_eq!(
            s.omitted.count + s.omitted.failures.len() + shown_in_blocks + h.recent().len(),
            200
        );
        // Every failure of the whole history is visible.
        let text = h.render();
        for f in steps.iter().filter(|s| !s.success) {
            assert!(text.contains(&format!("[{}] ✗", f.id)), "{} missing", f.id);
        }
        // A long task: at most 3 recent steps after a point, plus the chunk.
        assert!(h.recent().len() <= 3 + 5);
        assert!(text.contains(&format!(
            "  ... ({} earlier steps omitted)\n",
            s.omitted.count
        )));
    }

    #[test]
    fn nothing_happens_below_the_threshold() {
        let steps = history(5);
        let s = CompactionState::new();
        assert_eq!(
            s.advance(&steps, &CompactionConfig::default(), None).ok(),
            Some(None)
        );
    }

    #[test]
    fn token_budget_fires_a_point_once() {
        let steps = history(5);
        let config = CompactionConfig {
            recent_window: 2,
            ..CompactionConfig::default()
        };
        let heavy: StepTokens<'_> = &|_, _| 1000;
        let s = CompactionState::new();
        let (s, point) = s
            .advance(&steps, &config, Some(heavy))
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("no point"));
        assert!(matches!(point.reason, TriggerReason::TokenBudget { .. }));
        assert_eq!(point.compacted, 0..3);
        // The two recent steps alone still exceed the budget, but nothing more can be done:
        // no point, no rewrite.
        assert_eq!(s.advance(&steps, &config, Some(heavy)).ok(), Some(None));
    }

    #[test]
    fn all_failed_drops_nothing() {
        let steps: Vec<Step> = (1..=60)
            .map(|i| failed(i, ToolKind::Shell, &format!("exit {i}")))
            .collect();
        let config = CompactionConfig {
            preserve_failures: false,
            max_compact_steps: 5,
            ..CompactionConfig::default()
        };
        let mut c = StableCompactor::new(config).unwrap_or_else(|e| panic!("{e}"));
        for n in 1..=steps.len() {
            let _ = c.update(&steps[..n], None);
        }
        assert_eq!(c.state().omitted.end, 0);
    }

    #[test]
    fn a_foreign_state_is_refused() {
        let steps = history(30);
        let mut c =
            StableCompactor::new(CompactionConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        for n in 1..=steps.len() {
            let _ = c.update(&steps[..n], None);
        }
        let state = c.state().clone();
        assert!(StableHistory::new(&steps[..3], &state).is_err());
        let mut other = steps.clone();
        other[state.blocks[0].start].id = "step_999".into();
        let err = StableHistory::new(&other, &state)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("compaction_state.blocks[0].first_id"), "{err}");
        // Round trip through JSON, as the store keeps it.
        let json = serde_json::to_string(&state).unwrap_or_default();
        let back: CompactionState = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, state);
    }
}
