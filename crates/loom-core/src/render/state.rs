//! The sticky compaction decision: derived state, stored between renders.
//!
//! Between compaction points the decision is fixed, so each request only grows at its end and
//! the provider's prompt cache keeps hitting (DESIGN.md, principle 6).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::event::Seq;

/// Why a compaction point fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PointReason {
    /// The estimate crossed the high watermark.
    HighWatermark,
    /// The estimate crossed the hard total (after an ineffective pass had disarmed the watermark).
    HardTotal,
    /// A result over the oversized share had been answered; only it was stubbed.
    Oversized,
    /// Tool results exceeded their tier cap.
    TierCap,
}

/// The rule that stubbed a result or thinned a turn, as the receipt names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CutRule {
    /// Its tool's retention rule expired it.
    Retention,
    /// A later run of the identical call superseded it.
    Repeated,
    /// It was over the oversized share once answered.
    Oversized,
    /// A newer browser page superseded it.
    Superseded,
    /// A large output that says little per token: a listing, a search, a shell run's log, or a
    /// whole-file view the agent is not editing. Cut first at a point.
    LowDensity,
    /// An old turn's text, thinned after the low-density outputs.
    Thinned,
    /// Another result, oldest first.
    Oldest,
    /// A small code read or the latest view of a file the agent is editing, cut last.
    LastKept,
    /// A last resort, when even the free reducers left the request over the hard total.
    LastResort,
}

/// The record of one compaction point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointRecord {
    /// Last seq of the log when it fired.
    pub at_seq: Seq,
    /// Why it fired.
    pub reason: PointReason,
    /// Estimate before, in tokens.
    pub before: u64,
    /// Estimate after.
    pub after: u64,
    /// Whether the pass failed to reach the low watermark (the breaker).
    pub ineffective: bool,
}

/// The sticky compaction decision: derived state, stored between renders.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionState {
    /// Units opened before this seq are folded into the compact block (unless kept).
    pub boundary: Seq,
    /// Result seqs rendered as observation + reference.
    pub stubbed: BTreeSet<Seq>,
    /// Result seqs rendered as head + tail + reference.
    pub elided: BTreeSet<Seq>,
    /// Elided results that keep more than the policy's head and tail: the characters kept, split
    /// between head and tail in the policy's proportion. A last resort sizes the newest results
    /// so that the request lands at the low watermark instead of far below it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub elided_chars: BTreeMap<Seq, u32>,
    /// Browser pages (result seqs) rendered as their line diff against an earlier page sent
    /// whole (its result seq), which stays verbatim while they do.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub diffed: BTreeMap<Seq, Seq>,
    /// Assistant turns (by seq) sent without their text: the calls and their arguments stay.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub thinned: BTreeSet<Seq>,
    /// The rule that took each stubbed result and thinned turn in place.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rules: BTreeMap<Seq, CutRule>,
    /// The summary adopted at the last point: (version, to_seq).
    pub summary: Option<(u32, Seq)>,
    /// A tighter cap on compact-block lines than the policy's, set when even the folded history
    /// did not fit (failures are still never dropped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_lines: Option<u32>,
    /// The boundaries of earlier fold points, kept when steps are grouped (`group_steps`): the
    /// compact block groups steps only within the span between two of them, so a group is closed
    /// when its point forms it and the next point's block extends this one's.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub folds: BTreeSet<Seq>,
    /// How many points have fired.
    pub points: u32,
    /// The last point.
    pub last_point: Option<PointRecord>,
}

impl CompactionState {
    /// Records the rule that cut `seq`, unless an earlier one did.
    pub(crate) fn cut_by(&mut self, seq: Seq, rule: CutRule) {
        self.rules.entry(seq).or_insert(rule);
    }

    /// The head and tail an elided result at `seq` keeps, given the policy's.
    pub(crate) fn elision(&self, seq: Seq, head: usize, tail: usize) -> (usize, usize) {
        match self.elided_chars.get(&seq) {
            Some(&kept) if head + tail > 0 => {
                let kept = kept as usize;
                let h = kept * head / (head + tail);
                (h, kept - h)
            }
            _ => (head, tail),
        }
    }

    /// Lines the compact block may hold under this state, given the policy's cap.
    pub(crate) fn max_lines(&self, policy_max: usize) -> usize {
        self.block_lines
            .map_or(policy_max, |cap| policy_max.min(cap as usize))
    }

    /// Whether the breaker is tripped: the last pass could not reach the low watermark, so the
    /// next point waits for the hard total instead of rewriting the prefix every call.
    pub fn ineffective(&self) -> bool {
        self.last_point.as_ref().is_some_and(|p| p.ineffective)
    }
}
