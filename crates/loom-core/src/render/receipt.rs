//! Receipts: what every model call was sent, and what happened to each event.
//!
//! A receipt is how "the agent forgot" is told apart from "the agent ignored" (DESIGN.md,
//! principle 8): every seq of the log is accounted for as verbatim, stubbed, elided, grouped
//! (folded into the compact block), summarised or dropped.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::layout::SummaryView;
use super::policy::{Budget, Tier};
use super::projection::{Projection, UnitBody};
use super::request::ResultForm;
use super::state::{CompactionState, CutRule, PointRecord};
use super::{layout::form_of, RenderInput};
use crate::event::Seq;

/// An inclusive run of seqs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeqRange {
    /// First seq.
    pub from: Seq,
    /// Last seq.
    pub to: Seq,
}

impl SeqRange {
    /// Whether `seq` lies in the range.
    pub fn contains(&self, seq: Seq) -> bool {
        self.from <= seq && seq <= self.to
    }
}

/// Compresses sorted seqs into runs.
fn ranges(mut seqs: Vec<Seq>) -> Vec<SeqRange> {
    seqs.sort_unstable();
    seqs.dedup();
    let mut out: Vec<SeqRange> = Vec::new();
    for s in seqs {
        match out.last_mut() {
            Some(r) if r.to + 1 == s => r.to = s,
            _ => out.push(SeqRange { from: s, to: s }),
        }
    }
    out
}

/// Sorts runs and joins those that overlap or touch.
fn merge(mut runs: Vec<SeqRange>) -> Vec<SeqRange> {
    runs.sort_unstable_by_key(|r| r.from);
    let mut out: Vec<SeqRange> = Vec::with_capacity(runs.len());
    for r in runs {
        match out.last_mut() {
            Some(last) if r.from <= last.to.saturating_add(1) => last.to = last.to.max(r.to),
            _ => out.push(r),
        }
    }
    out
}

/// Injected content accounted for in a receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Injected {
    /// The hook.
    pub hook: String,
    /// Its tokens.
    pub tokens: u64,
}

/// The `model_calls` record of one render. What the provider reports afterwards (its actual
/// usage) is stored beside it, on the store's model call, since a receipt is fixed at render
/// time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    /// Model the request was rendered for.
    pub model: String,
    /// Output format.
    pub format: String,
    /// The token counter used.
    pub tokenizer: String,
    /// Version (content hash) of the policy.
    pub policy_version: String,
    /// Last seq of the log rendered.
    pub at_seq: Seq,
    /// Budget arithmetic.
    pub budget: Budget,
    /// Estimated tokens of the whole request.
    pub estimate: u64,
    /// Tokens per tier.
    pub tiers: BTreeMap<Tier, u64>,
    /// Two tiers split further: `tool_results` by the form each result was sent in, `summary`
    /// into the summary and the compact lines. Absent in receipts written before it existed.
    #[serde(default, skip_serializing_if = "Parts::is_empty")]
    pub parts: Parts,
    /// Seqs sent as they are in the log.
    pub verbatim: Vec<SeqRange>,
    /// Result seqs sent as observation + reference.
    pub stubbed: Vec<SeqRange>,
    /// Result seqs sent as head + tail + reference.
    pub elided: Vec<SeqRange>,
    /// Assistant turns sent without their text (calls and arguments kept).
    #[serde(default)]
    pub thinned: Vec<SeqRange>,
    /// Browser pages sent as their line diff against an earlier page sent whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diffed: Vec<SeqRange>,
    /// The rule that took each stubbed result and thinned turn of this request.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rules: BTreeMap<Seq, CutRule>,
    /// Seqs folded into compact lines.
    pub grouped: Vec<SeqRange>,
    /// Seqs covered by the summary.
    pub summarized: Vec<SeqRange>,
    /// Seqs not represented at all (omitted lines, other agents' or expired messages, unpaired
    /// results) — still in the log.
    pub dropped: Vec<SeqRange>,
    /// Seqs the client itself replaced (it compacted its history or moved context it rebuilds;
    /// with the records of those rewrites): left out as the client left them out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaced: Vec<SeqRange>,
    /// Version of the summary applied.
    pub summary_version: Option<u32>,
    /// SHA-256 of the stable prefix's wire form (tools + prefix messages).
    pub prefix_hash: String,
    /// The compaction point that fired for this render, if one did.
    pub compaction: Option<PointRecord>,
    /// Compaction points so far in this session.
    pub points: u32,
    /// Injected content per hook.
    pub injected: Vec<Injected>,
}

/// Tokens of the `tool_results` and `summary` tiers by what they are made of; each tier is the
/// sum of its parts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Parts {
    /// `tool_results`: the assistant turns themselves (their text and calls, and the
    /// placeholder of a call without a result), without the results.
    pub turns: u64,
    /// `tool_results`: results sent whole.
    pub verbatim: u64,
    /// `tool_results`: results sent as their step's observation and a reference.
    pub stubbed: u64,
    /// `tool_results`: results sent as head and tail with a reference.
    pub elided: u64,
    /// `tool_results`: browser pages sent as a diff against an earlier page.
    pub diffed: u64,
    /// `summary`: the summary's text within the compact block.
    pub summary: u64,
    /// `summary`: the rest of the compact block (its lines for the folded events, and framing).
    pub compact: u64,
}

impl Parts {
    /// Whether no part holds a token.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl Receipt {
    /// The receipt's lists of seqs by fate, with their names, in the order they are shown.
    pub fn lists(&self) -> [(&'static str, &[SeqRange]); 9] {
        let [a, b, c, d, e, f, g, h, i] = Self::FATES;
        [
            (a, &self.verbatim),
            (b, &self.stubbed),
            (c, &self.elided),
            (d, &self.thinned),
            (e, &self.diffed),
            (f, &self.grouped),
            (g, &self.summarized),
            (h, &self.dropped),
            (i, &self.replaced),
        ]
    }

    /// The names of [`Self::lists`], in their order: the receipt's JSON fields, for readers of
    /// stored receipts that do not build a `Receipt`.
    pub const FATES: [&'static str; 9] = [
        "verbatim",
        "stubbed",
        "elided",
        "thinned",
        "diffed",
        "grouped",
        "summarized",
        "dropped",
        "replaced",
    ];

    /// Checks that every seq of the log up to `at_seq` is in exactly one list; returns the
    /// first that is not, with how many lists hold it (a range outside the log counts as the
    /// seq `at_seq + 1` held once).
    pub fn unaccounted(&self) -> Option<(Seq, usize)> {
        let mut count = vec![0usize; usize::try_from(self.at_seq).unwrap_or(0) + 2];
        for (_, list) in self.lists() {
            for r in list {
                if r.from < 1 || r.from > r.to || r.to > self.at_seq {
                    return Some((self.at_seq + 1, 1));
                }
                for seq in r.from..=r.to {
                    count[seq as usize] += 1;
                }
            }
        }
        (1..=self.at_seq)
            .map(|seq| (seq, count[seq as usize]))
            .find(|(_, n)| *n != 1)
    }

    /// What happened to `seq` in this render.
    pub fn fate(&self, seq: Seq) -> &'static str {
        for (name, list) in self.lists() {
            if list.iter().any(|r| r.contains(seq)) {
                return name;
            }
        }
        if seq > self.at_seq {
            "not yet in the log"
        } else {
            "not rendered"
        }
    }
}

pub(crate) struct ReceiptInput<'a, 'i> {
    pub(crate) input: &'a RenderInput<'i>,
    pub(crate) proj: &'a Projection,
    pub(crate) state: &'a CompactionState,
    pub(crate) summary: Option<&'a SummaryView>,
    pub(crate) budget: Budget,
    pub(crate) tiers: BTreeMap<Tier, u64>,
    pub(crate) parts: Parts,
    pub(crate) estimate: u64,
    pub(crate) injected: Vec<Injected>,
    pub(crate) fired: Option<PointRecord>,
    pub(crate) at_seq: Seq,
    /// What happened to the folded units (see [`folded`]).
    pub(crate) folded: &'a Folded,
    /// SHA-256 of the stable prefix's wire form.
    pub(crate) prefix_hash: String,
    /// The policy's version.
    pub(crate) policy_version: String,
}

/// The fates of the folded units: a function of the compact block (its boundary, summary and
/// omitted lines), so it is computed once per block, not once per call.
#[derive(Debug, Clone, Default)]
pub(crate) struct Folded {
    grouped: Vec<SeqRange>,
    summarized: Vec<SeqRange>,
    dropped: Vec<SeqRange>,
}

/// The fates of the units before unit `tail` that are not kept in place.
pub(crate) fn folded(
    proj: &Projection,
    tail: usize,
    summary: Option<&SummaryView>,
    omitted: &[Seq],
) -> Folded {
    let summarized_to = summary.map_or(0, |s| s.to_seq);
    let (mut grouped, mut summarized, mut dropped) = (vec![], vec![], vec![]);
    for (i, unit) in proj.units[..tail].iter().enumerate() {
        if proj.is_kept(i) {
            continue;
        }
        // Omitted seqs come in log order, so a binary search finds them.
        let list = if unit.seq <= summarized_to {
            &mut summarized
        } else if omitted.binary_search(&unit.seq).is_ok() {
            &mut dropped
        } else {
            &mut grouped
        };
        list.push(unit.seq);
        if let UnitBody::Turn(turn) = &unit.body {
            list.extend(
                turn.calls
                    .iter()
                    .filter_map(|p| p.result.as_ref().map(|r| r.seq)),
            );
        }
    }
    Folded {
        grouped: ranges(grouped),
        summarized: ranges(summarized),
        dropped: ranges(dropped),
    }
}

pub(crate) fn build(r: ReceiptInput<'_, '_>) -> Receipt {
    let (proj, state) = (r.proj, r.state);
    let (mut verbatim, mut stubbed, mut elided, mut thinned) = (vec![], vec![], vec![], vec![]);
    let mut diffed = vec![];
    let tail = proj.first_at(state.boundary);
    let in_place = proj
        .kept_before(tail)
        .iter()
        .copied()
        .chain(tail..proj.units.len());
    for i in in_place {
        let unit = &proj.units[i];
        if state.thinned.contains(&unit.seq) {
            thinned.push(unit.seq);
        } else if state.elided.contains(&unit.seq) {
            elided.push(unit.seq);
        } else {
            verbatim.push(unit.seq);
        }
        if let UnitBody::Turn(turn) = &unit.body {
            for p in &turn.calls {
                let Some(res) = &p.result else { continue };
                match form_of(p, state) {
                    ResultForm::Verbatim | ResultForm::Missing => verbatim.push(res.seq),
                    ResultForm::Stubbed => stubbed.push(res.seq),
                    ResultForm::Elided => elided.push(res.seq),
                    ResultForm::Diff => diffed.push(res.seq),
                }
            }
        }
    }
    let mut dropped = ranges(
        proj.unpaired
            .iter()
            .chain(&proj.filtered)
            .copied()
            .collect(),
    );
    dropped.extend_from_slice(&r.folded.dropped);
    let dropped = merge(dropped);
    Receipt {
        model: r.input.model.to_owned(),
        format: r.input.format.as_str().to_owned(),
        tokenizer: r.input.meter.name().to_owned(),
        policy_version: r.policy_version,
        at_seq: r.at_seq,
        budget: r.budget,
        estimate: r.estimate,
        tiers: r.tiers,
        parts: r.parts,
        verbatim: ranges(verbatim),
        stubbed: ranges(stubbed),
        elided: ranges(elided),
        thinned: ranges(thinned),
        diffed: ranges(diffed),
        rules: state
            .rules
            .range(state.boundary..)
            .filter(|(seq, _)| state.stubbed.contains(seq) || state.thinned.contains(seq))
            .map(|(&seq, &rule)| (seq, rule))
            .collect(),
        grouped: r.folded.grouped.clone(),
        summarized: r.folded.summarized.clone(),
        dropped,
        replaced: ranges(proj.replaced.clone()),
        summary_version: r.summary.map(|s| s.version),
        prefix_hash: r.prefix_hash,
        compaction: r.fired,
        points: state.points,
        injected: r.injected,
    }
}
