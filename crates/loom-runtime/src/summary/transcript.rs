//! The bounded input of a summary: the log's units as transcript entries, cut into chunks at turn
//! boundaries.
//!
//! A tool result enters as its step's observation and reference (the line the compact block would
//! show), never as its raw output, and every text is cut to a bound, so a 50 KB result costs a
//! line. Chunks hold whole units (an assistant turn always with all its results) and end only
//! where every result of every covered turn has arrived, so a summary never covers half a pair.

use loom_core::render::{Paired, Projection, StepIndex, TokenMeter, Unit, UnitBody};
use loom_core::Seq;

use super::{Entry, EntryKind};

/// Bounds on transcript entries, in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryLimits {
    /// Longest entry text (messages, observations); longer text keeps its head and tail.
    pub text_chars: usize,
    /// Longest rendering of a call's arguments.
    pub args_chars: usize,
    /// Longest brief of a message.
    pub brief_chars: usize,
}

impl Default for EntryLimits {
    fn default() -> Self {
        Self {
            text_chars: 600,
            args_chars: 200,
            brief_chars: 100,
        }
    }
}

/// The next span to summarise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// First seq of the span.
    pub from_seq: Seq,
    /// Last seq; every result of every covered turn is at or before it.
    pub to_seq: Seq,
    /// The span's entries.
    pub entries: Vec<Entry>,
    /// Tokens of the entries' lines.
    pub tokens: u64,
    /// Whether the chunk stopped at the token cap (more is waiting) rather than at the limit.
    pub full: bool,
}

/// Whitespace runs (newlines included) as single spaces: one entry, one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` cut to `max` characters, keeping its head and tail around a marker.
fn bound(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_owned();
    }
    let head = max * 2 / 3;
    let tail = max - head;
    let head_s: String = text.chars().take(head).collect();
    let tail_s: String = text.chars().skip(n - tail).collect();
    format!("{head_s} […{} chars…] {tail_s}", n - head - tail)
}

/// The first `max` characters of `text`, with an ellipsis when cut.
fn snippet(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(max).collect();
    s.push('…');
    s
}

fn message(seq: Seq, kind: EntryKind, text: &str, limits: &EntryLimits) -> Entry {
    let line = one_line(text);
    Entry {
        seq,
        kind,
        text: bound(&line, limits.text_chars),
        brief: snippet(&line, limits.brief_chars),
        failed: false,
    }
}

fn step_entry(seq: Seq, paired: &Paired, steps: &StepIndex, limits: &EntryLimits) -> Entry {
    let step = steps.get(&paired.call.id);
    let failed = step.map_or_else(
        || paired.result.as_ref().is_some_and(|r| r.is_error),
        |s| !s.success,
    );
    let id = step.map_or_else(|| format!("call {}", paired.call.id), |s| s.id.clone());
    let args = match step {
        Some(s) if !s.minimal_args.is_empty() => {
            serde_json::to_string(&s.minimal_args).unwrap_or_default()
        }
        _ => one_line(&paired.call.arguments),
    };
    let mark = if failed { "✗ " } else { "" };
    let obs = bound(&one_line(&paired.observation(step)), limits.text_chars / 2);
    let reference = paired.reference(step);
    Entry {
        seq,
        kind: EntryKind::Step,
        text: format!(
            "{id} {mark}{}({}) → {obs} (See {reference})",
            paired.call.name,
            bound(&args, limits.args_chars)
        ),
        brief: format!("{id} {mark}{obs} (See {reference})"),
        failed,
    }
}

/// The entries of unit `index`: nothing for kept units, one per message, one per call.
pub(crate) fn unit_entries(
    proj: &Projection,
    index: usize,
    steps: &StepIndex,
    limits: &EntryLimits,
) -> Vec<Entry> {
    // The render keeps these verbatim in every request: a summary has nothing to add for them.
    if proj.is_kept(index) {
        return Vec::new();
    }
    let unit: &Unit = &proj.units[index];
    match &unit.body {
        UnitBody::System(_) | UnitBody::Pin { .. } => Vec::new(),
        UnitBody::User { content, .. } => {
            vec![message(unit.seq, EntryKind::User, &content.text(), limits)]
        }
        UnitBody::Note(text) => vec![message(unit.seq, EntryKind::Note, text, limits)],
        UnitBody::Turn(turn) => {
            let mut out = Vec::new();
            if let Some(c) = &turn.content {
                let text = c.text();
                if !text.trim().is_empty() {
                    out.push(message(unit.seq, EntryKind::Assistant, &text, limits));
                }
            }
            out.extend(
                turn.calls
                    .iter()
                    .map(|p| step_entry(unit.seq, p, steps, limits)),
            );
            out
        }
    }
}

fn result_seqs(unit: &Unit) -> impl Iterator<Item = Option<Seq>> + '_ {
    let calls = match &unit.body {
        UnitBody::Turn(turn) => turn.calls.as_slice(),
        _ => &[],
    };
    calls.iter().map(|p| p.result.as_ref().map(|r| r.seq))
}

/// The next chunk after `covered_to`, made of whole units before unit index `limit`, under `cap`
/// tokens; `None` when no complete unit is waiting.
///
/// A unit with a call still waiting for its result ends the search: it cannot be covered yet. A
/// single unit over the cap on its own keeps the entries that fit and a marker naming the rest.
pub fn next_chunk(
    proj: &Projection,
    steps: &StepIndex,
    covered_to: Seq,
    limit: usize,
    cap: u64,
    meter: &dyn TokenMeter,
    limits: &EntryLimits,
) -> Option<Chunk> {
    let start = proj.units.iter().position(|u| u.seq > covered_to)?;
    let mut entries: Vec<Entry> = Vec::new();
    let mut tokens = 0u64;
    let mut max_seq = covered_to;
    let mut best: Option<(Seq, usize, u64)> = None;
    let mut full = false;
    for i in start..limit.min(proj.units.len()) {
        let unit = &proj.units[i];
        let results: Vec<Option<Seq>> = result_seqs(unit).collect();
        if results.iter().any(Option::is_none) {
            break;
        }
        let mut unit_entries = unit_entries(proj, i, steps, limits);
        let mut unit_tokens: u64 = unit_entries.iter().map(|e| meter.count(&e.line())).sum();
        let mut last = false;
        if tokens + unit_tokens > cap {
            full = true;
            if best.is_some() || !entries.is_empty() {
                break;
            }
            // One unit alone is over the cap: keep what fits and say where the rest is.
            let marker = |n: usize| {
                message(
                    unit.seq,
                    EntryKind::Note,
                    &format!(
                        "[{n} more entries of this turn omitted; see the log at seq {}]",
                        unit.seq
                    ),
                    limits,
                )
            };
            let total = unit_entries.len();
            let marker_tokens = meter.count(&marker(total).line());
            let mut kept = Vec::new();
            let mut used = 0u64;
            for e in unit_entries.drain(..) {
                let t = meter.count(&e.line());
                if used + t + marker_tokens > cap {
                    break;
                }
                used += t;
                kept.push(e);
            }
            let dropped = total.saturating_sub(kept.len());
            kept.push(marker(dropped));
            unit_tokens = used + marker_tokens;
            unit_entries = kept;
            last = true;
        }
        tokens += unit_tokens;
        entries.extend(unit_entries);
        max_seq = max_seq.max(unit.seq);
        max_seq = max_seq.max(results.iter().flatten().copied().max().unwrap_or(0));
        let end = proj
            .units
            .get(i + 1)
            .map_or(max_seq, |next| next.seq.saturating_sub(1));
        if max_seq <= end {
            best = Some((end, entries.len(), tokens));
        }
        if last {
            break;
        }
    }
    let (to_seq, len, tokens) = best?;
    entries.truncate(len);
    Some(Chunk {
        from_seq: covered_to + 1,
        to_seq,
        entries,
        tokens,
        full,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_keeps_head_and_tail() {
        let text: String = "a".repeat(50) + &"b".repeat(50);
        let out = bound(&text, 30);
        assert!(out.starts_with(&"a".repeat(20)));
        assert!(out.ends_with(&"b".repeat(10)));
        assert!(out.contains("[…70 chars…]"));
        assert_eq!(bound("short", 30), "short");
    }
}
