//! Grouping: consecutive steps of one category become one line with computed totals, and every
//! failed step keeps a line of its own with its error.
//!
//! Categories come from each step's [`ToolKind`](crate::ToolKind) (the tool-kind mapping of the
//! reducers), never from substrings of tool names: the seeds' substring rules put `thread:spawn`
//! among file operations. Steps of no known category group only with steps of the same tool, as
//! the seed's code did by using the tool name as the category.

use std::fmt::Write as _;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::step::{Category, CompactStep, Step};

/// Longest error text a failure line carries, in characters. Errors are kept, but a failure line
/// must stay one line of reasonable size; the middle of a long error goes first because its head
/// names the error and its tail (the reducers keep the tail of stderr) says where it happened.
const MAX_ERROR_CHARS: usize = 240;

/// One entry of the compact tier: a single step or a group of consecutive steps, each failed step
/// with its own failure line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactBlock {
    /// Index of the block's first step in the history.
    pub start: usize,
    /// One past the index of its last step.
    pub end: usize,
    /// Id of its first step (checked against the history when a stored state is reused).
    pub first_id: String,
    /// Id of its last step.
    pub last_id: String,
    /// The summary line, e.g. `[step_001..005] 5 file operations (9.1KB total)`; `None` for a
    /// single failed step, whose failure line says everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<CompactStep>,
    /// `✗ <tool> failed: <error>` for each failed step of the block, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<CompactStep>,
    /// Whether the block is a group of more than one step.
    pub grouped: bool,
}

impl CompactBlock {
    /// How many steps the block covers.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Whether the block covers no step (never true for blocks the compactors make).
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// The step indices the block covers.
    pub fn range(&self) -> Range<usize> {
        self.start..self.end
    }

    /// The block's lines in order: the summary, then the failures.
    pub fn lines(&self) -> impl Iterator<Item = &CompactStep> {
        self.summary.iter().chain(self.failures.iter())
    }
}

/// How steps are put together: by category, and by tool name when the category is unknown.
#[derive(Debug, PartialEq, Eq)]
enum GroupKey<'a> {
    Known(Category),
    Tool(&'a str),
}

fn key(step: &Step) -> GroupKey<'_> {
    match step.kind.category() {
        Category::Other => GroupKey::Tool(&step.tool_name),
        known => GroupKey::Known(known),
    }
}

/// Whether any two neighbouring steps share a group key. The seed disables grouping for
/// sequences that alternate (file, search, file, ...): each step is different context.
pub(crate) fn has_consecutive_same_category(steps: &[Step]) -> bool {
    steps.windows(2).any(|w| key(&w[0]) == key(&w[1]))
}

/// Turns `steps` (which start at index `base` of the history) into closed blocks.
///
/// With `group` false, or when no two neighbours share a category, every step is its own block.
/// Failed steps get failure lines only when `preserve_failures` is on; otherwise their group
/// still counts them ("(1 failed)") and a single failed step shows its observation.
pub(crate) fn blocks(
    steps: &[Step],
    base: usize,
    group: bool,
    preserve_failures: bool,
) -> Vec<CompactBlock> {
    let group = group && has_consecutive_same_category(steps);
    let mut out = Vec::new();
    let mut start = 0;
    while start < steps.len() {
        let mut end = start + 1;
        if group {
            let k = key(&steps[start]);
            while end < steps.len() && key(&steps[end]) == k {
                end += 1;
            }
        }
        out.push(block(&steps[start..end], base + start, preserve_failures));
        start = end;
    }
    out
}

fn block(run: &[Step], start: usize, preserve_failures: bool) -> CompactBlock {
    let (first, last) = match (run.first(), run.last()) {
        (Some(f), Some(l)) => (f, l),
        _ => {
            return CompactBlock {
                start,
                end: start,
                first_id: String::new(),
                last_id: String::new(),
                summary: None,
                failures: Vec::new(),
                grouped: false,
            }
        }
    };
    let failures: Vec<CompactStep> = if preserve_failures {
        run.iter()
            .filter(|s| !s.success)
            .map(failure_line)
            .collect()
    } else {
        Vec::new()
    };
    let summary = if run.len() == 1 {
        if preserve_failures && !first.success {
            None
        } else {
            Some(CompactStep {
                id: first.id.clone(),
                summary: first.observation.clone(),
            })
        }
    } else {
        Some(CompactStep {
            id: group_id(&first.id, &last.id),
            summary: group_summary(run),
        })
    };
    CompactBlock {
        start,
        end: start + run.len(),
        first_id: first.id.clone(),
        last_id: last.id.clone(),
        summary,
        failures,
        grouped: run.len() > 1,
    }
}

/// `step_001..005`: the seed's short form when both ids are `step_` ids, else both ids in full.
pub(crate) fn group_id(first: &str, last: &str) -> String {
    match (first.strip_prefix("step_"), last.strip_prefix("step_")) {
        (Some(_), Some(tail)) => format!("{first}..{tail}"),
        _ => format!("{first}..{last}"),
    }
}

/// The seed's summary templates, with the totals computed rather than left out.
fn group_summary(run: &[Step]) -> String {
    let count = run.len();
    let failed = run.iter().filter(|s| !s.success).count();
    let bytes: u64 = run.iter().map(size_of).sum();
    let mut out = match run.first().map(|s| s.kind.category()) {
        Some(Category::File) => format!("{count} file operations ({} total)", size(bytes)),
        Some(Category::Shell) => format!("{count} commands executed"),
        Some(Category::Search) => {
            let known: Vec<u64> = run.iter().filter_map(|s| s.results).collect();
            let total: u64 = known.iter().sum();
            if known.is_empty() {
                format!("{count} searches")
            } else if known.len() < count {
                // Some reducers could not count their results: say the total is a floor.
                format!("{count} searches ({total}+ results)")
            } else {
                format!("{count} searches ({total} results)")
            }
        }
        Some(Category::Web) => format!("{count} web actions ({} total)", size(bytes)),
        Some(Category::Custom(name)) => format!("{count}x {name}"),
        Some(Category::Other) | None => {
            let tool = run.first().map_or("", |s| s.tool_name.as_str());
            format!("{count}x {tool}")
        }
    };
    if failed > 0 {
        let _ = write!(out, " ({failed} failed)");
    }
    out
}

/// The size a step stands for: what a write wrote (the `bytes_written` fact its reducer
/// records), else the size of the original output (a file read's content, a page).
fn size_of(step: &Step) -> u64 {
    step.facts
        .get("bytes_written")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(step.stats.bytes)
}

/// Sizes the way the seed writes them: `9.1KB`, and `MB` past a mebibyte.
pub(crate) fn size(bytes: u64) -> String {
    // Display only, rounded to one decimal: f64 holds every byte count below 2^53 exactly.
    let b = bytes as f64;
    if bytes >= 1024 * 1024 {
        format!("{:.1}MB", b / (1024.0 * 1024.0))
    } else {
        format!("{:.1}KB", b / 1024.0)
    }
}

/// The seed's failure line, `✗ <tool> failed: <error>`, on one line.
pub(crate) fn failure_line(step: &Step) -> CompactStep {
    let error = step
        .error
        .as_deref()
        .filter(|e| !e.trim().is_empty())
        .unwrap_or(&step.observation);
    CompactStep {
        id: step.id.clone(),
        summary: format!("✗ {} failed: {}", step.tool_name, one_line(error)),
    }
}

/// Collapses whitespace (newlines included) and shortens the middle of a long text.
pub(crate) fn one_line(text: &str) -> String {
    let flat: Vec<&str> = text.split_whitespace().collect();
    let flat = flat.join(" ");
    let chars = flat.chars().count();
    if chars <= MAX_ERROR_CHARS {
        return flat;
    }
    let keep = (MAX_ERROR_CHARS - 1) / 2;
    let head: String = flat.chars().take(keep).collect();
    let tail: String = flat.chars().skip(chars - keep).collect();
    format!("{head}…{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compact::testing::{failed, sized, step};
    use crate::step::ToolKind;

    #[test]
    fn seed_example_groups_with_totals() {
        // Sizes of the seed's "Before Grouping" example: 2.5, 1.2, 0.8, 3.1 and 1.5 KB.
        let mut steps: Vec<Step> = [2560, 1229, 819, 3174, 1536]
            .iter()
            .enumerate()
            .map(|(i, &b)| sized(i + 1, ToolKind::ReadFile, b))
            .collect();
        steps.push(step(6, ToolKind::Shell));
        steps.push(step(7, ToolKind::Shell));
        let mut search = step(8, ToolKind::WebSearch);
        search.results = Some(15);
        search.observation = "Searched 'Python best practices' → 15 results".into();
        steps.push(search);
        let lines: Vec<String> = blocks(&steps, 0, true, true)
            .iter()
            .flat_map(|b| b.lines().map(|l| format!("[{}] {}", l.id, l.summary)))
            .collect();
        assert_eq!(
            lines,
            [
                "[step_001..005] 5 file operations (9.1KB total)",
                "[step_006..007] 2 commands executed",
                "[step_008] Searched 'Python best practices' → 15 results",
            ]
        );
    }

    #[test]
    fn writes_count_what_they_wrote() {
        let mut steps = vec![
            sized(1, ToolKind::ReadFile, 2048),
            sized(2, ToolKind::WriteFile, 40),
        ];
        steps[1]
            .facts
            .insert("bytes_written".into(), serde_json::json!(3072));
        let b = blocks(&steps, 0, true, true);
        assert_eq!(
            b[0].summary.as_ref().map(|s| s.summary.as_str()),
            Some("2 file operations (5.0KB total)")
        );
    }

    #[test]
    fn search_results_are_summed_or_marked_as_a_floor() {
        let mut steps: Vec<Step> = (1..=3).map(|i| step(i, ToolKind::WebSearch)).collect();
        for (s, n) in steps.iter_mut().zip([10, 15, 48]) {
            s.results = Some(n);
        }
        let b = blocks(&steps, 0, true, true);
        assert_eq!(
            b[0].summary.as_ref().map(|s| s.summary.as_str()),
            Some("3 searches (73 results)")
        );
        steps[1].results = None;
        let b = blocks(&steps, 0, true, true);
        assert_eq!(
            b[0].summary.as_ref().map(|s| s.summary.as_str()),
            Some("3 searches (58+ results)")
        );
    }

    #[test]
    fn failures_are_counted_and_listed_with_their_error() {
        let steps = vec![
            step(11, ToolKind::Shell),
            failed(
                12,
                ToolKind::Shell,
                "exit 2: pytest: error: unrecognized arguments",
            ),
            step(13, ToolKind::Shell),
        ];
        let b = blocks(&steps, 10, true, true);
        assert_eq!(b.len(), 1);
        assert_eq!((b[0].start, b[0].end), (10, 13));
        let lines: Vec<String> = b[0]
            .lines()
            .map(|l| format!("[{}] {}", l.id, l.summary))
            .collect();
        assert_eq!(
            lines,
            [
                "[step_011..013] 3 commands executed (1 failed)",
                "[step_012] ✗ shell failed: exit 2: pytest: error: unrecognized arguments",
            ]
        );
        // Without preservation the count stays, the line goes.
        let b = blocks(&steps, 10, true, false);
        assert_eq!(b[0].lines().count(), 1);
    }

    #[test]
    fn alternating_categories_are_not_grouped() {
        let kinds = [ToolKind::ReadFile, ToolKind::WebSearch];
        let steps: Vec<Step> = (1..=6).map(|i| step(i, kinds[i % 2].clone())).collect();
        assert!(!has_consecutive_same_category(&steps));
        let b = blocks(&steps, 0, true, true);
        assert_eq!(b.len(), 6);
        assert!(b.iter().all(|b| !b.grouped));
    }

    #[test]
    fn unknown_tools_group_by_name_not_by_other() {
        let mut a = step(1, ToolKind::Unknown);
        a.tool_name = "get_reservation_details".into();
        let mut b = a.clone();
        b.id = "step_002".into();
        let mut c = a.clone();
        c.id = "step_003".into();
        c.tool_name = "search_direct_flight".into();
        let out = blocks(&[a, b, c], 0, true, true);
        assert_eq!(out.len(), 2);
        assert_eq!(
            out[0].summary.as_ref().map(|s| s.summary.as_str()),
            Some("2x get_reservation_details")
        );
    }

    #[test]
    fn long_errors_become_one_bounded_line() {
        let long = format!("Traceback:\n{}\nValueError: bad", "  frame\n".repeat(200));
        let line = one_line(&long);
        assert!(!line.contains('\n'));
        assert!(line.chars().count() <= MAX_ERROR_CHARS);
        assert!(line.starts_with("Traceback:"));
        assert!(line.ends_with("ValueError: bad"));
    }

    #[test]
    fn sizes_read_like_the_seed() {
        assert_eq!(size(9318), "9.1KB");
        assert_eq!(size(0), "0.0KB");
        assert_eq!(size(3 * 1024 * 1024 + 512 * 1024), "3.5MB");
        assert_eq!(group_id("step_001", "step_005"), "step_001..005");
        assert_eq!(group_id("a1", "a5"), "a1..a5");
    }
}
