//! What the render pipeline may do, and the budget arithmetic it works within.
//!
//! A [`Policy`] is plain data (parsed from TOML by the front ends); [`Budget`] is derived from it
//! once per render and threaded through the reducers. The budget is a value that can carry
//! per-tier caps (seed 004: "tool results ≤ 30% of the window") without changing the reducers'
//! signature.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::refs::RecallRefs;
use crate::error::LogError;

/// How long one tool's results stay verbatim in the rendered context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum Retention {
    /// Keep every result until the budget forces a change.
    Keep,
    /// Keep the last `n` results of this tool; older ones expire at the next compaction point.
    Count {
        /// Results kept.
        n: u32,
    },
    /// Keep results younger than `turns` model calls; older ones expire at the next point.
    Age {
        /// Model calls a result stays verbatim.
        turns: u32,
    },
    /// Never stub: the results are durable facts.
    NeverEvict,
}

/// Everything the render pipeline exposes. Defaults are documented on each field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    /// The model's context window in tokens. Default: 128,000.
    pub context_window: u64,
    /// Tokens kept free for the response. Default: 4,096.
    pub response_reserve: u64,
    /// Tokens kept free for per-turn injected content (hooks). Default: 0.
    pub injection_reserve: u64,
    /// Estimate, as a share of the compaction target, above which a compaction point fires.
    /// Default: 1.0 — a point fires only when the request would not fit the target: every point
    /// re-sends the tail after its first change uncached, so rarer points cost less (measured on
    /// the replay traces; docs/performance.md).
    pub high_watermark: f64,
    /// Share of the compaction target a compaction point cuts down to. Default: 0.5.
    pub low_watermark: f64,
    /// Retention applied to tools without a rule of their own. Default: keep.
    pub default_retention: Retention,
    /// Retention per tool name.
    pub retention: BTreeMap<String, Retention>,
    /// Model calls at the end whose results are never stubbed by a compaction point (only an
    /// over-budget newest result is ever reduced). Default: 2.
    pub protect_recent_turns: u32,
    /// Whether step compaction may fold old turns into the compact block. Default: true.
    pub step_compaction: bool,
    /// Most step lines the compact block holds; older ones are counted as omitted. Default: 40.
    pub max_compact_lines: u32,
    /// Whether the compact block groups consecutive folded steps of one category into one line
    /// with computed totals (`[step_004..007] 4 commands executed (1 failed)`), as the step
    /// compactor does. Groups are closed at the compaction point that forms them, and failures
    /// keep their own lines. Default: true (chosen by replay on the traces; docs/performance.md).
    pub group_steps: bool,
    /// Characters of an over-budget newest result kept at its head and at its tail.
    /// Default: 2,000 and 1,000.
    pub elide_head_chars: u32,
    /// See `elide_head_chars`.
    pub elide_tail_chars: u32,
    /// A result larger than this share of the compaction target is stubbed as soon as the model
    /// has answered it once (1.0 disables). Such a result cannot stay long anyway, and the change
    /// falls at the end of the previous request, so the cache loses almost nothing. Default: 0.25.
    pub oversized_share: f64,
    /// Whether a browser-state snapshot (a page) is stubbed once a newer one has been answered.
    /// Default: true.
    pub supersede_snapshots: bool,
    /// Whether a new page is sent as its line diff against the last page sent whole, while that
    /// page is still in the request verbatim; the page sent whole stays (byte-stable, cached)
    /// instead of being superseded, and a page whose diff is not smaller than
    /// `page_diff_share` of it is sent whole and becomes the new base. Default: true.
    pub page_diffs: bool,
    /// See `page_diffs`. Default: 0.5.
    pub page_diff_share: f64,
    /// Whether the output of a call the agent made before (same tool, same arguments: a test
    /// run again, a script rerun, a file shown again after an edit) is sent as its line diff
    /// against the earlier output, while that output is still in the request verbatim; the
    /// earlier output stays (byte-stable, cached). An output whose diff is not smaller than
    /// `output_diff_share` of it is sent whole. Default: true.
    pub output_diffs: bool,
    /// See `output_diffs`. Default: 0.5.
    pub output_diff_share: f64,
    /// Per-tier caps as shares of the compaction target. Only `tool_results` can be capped: when
    /// the results sent verbatim or stubbed exceed it, a compaction point stubs old results until
    /// they fit, so one fat result cannot starve the dialogue.
    pub tier_caps: BTreeMap<Tier, f64>,
    /// How a render names where a left-out original is: `See` (`(See outputs/x.log)`, for
    /// `loom recall`), `Tool` (`(loom_recall ref=outputs/x.log)`, when the model has the recall
    /// tool) or `Files` (offloaded outputs by their path under a folder). Left out of the
    /// policy's JSON when `See`, so older policies keep their versions.
    #[serde(skip_serializing_if = "RecallRefs::is_see")]
    pub recall: RecallRefs,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            context_window: 128_000,
            response_reserve: 4_096,
            injection_reserve: 0,
            high_watermark: 1.0,
            low_watermark: 0.5,
            default_retention: Retention::Keep,
            retention: BTreeMap::new(),
            protect_recent_turns: 2,
            step_compaction: true,
            max_compact_lines: 40,
            group_steps: true,
            elide_head_chars: 2_000,
            elide_tail_chars: 1_000,
            oversized_share: 0.25,
            supersede_snapshots: true,
            page_diffs: true,
            page_diff_share: 0.5,
            output_diffs: true,
            output_diff_share: 0.5,
            tier_caps: BTreeMap::new(),
            recall: RecallRefs::See,
        }
    }
}

/// The parts of a rendered request that the receipt accounts for separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// System prompt and system events.
    System,
    /// Tool definitions.
    Tools,
    /// Pinned content.
    Pins,
    /// The summary and compact block.
    Summary,
    /// User and assistant text.
    Dialogue,
    /// Tool calls and their results (verbatim or stubbed).
    ToolResults,
    /// Per-turn injected content.
    Injected,
    /// Per-request and per-message framing overhead.
    Overhead,
}

impl Tier {
    /// The snake_case name used in policies and receipts.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::Tools => "tools",
            Self::Pins => "pins",
            Self::Summary => "summary",
            Self::Dialogue => "dialogue",
            Self::ToolResults => "tool_results",
            Self::Injected => "injected",
            Self::Overhead => "overhead",
        }
    }
}

impl Policy {
    /// Checks the values are coherent; names the field that is not.
    pub fn validate(&self) -> Result<(), LogError> {
        let share = |field: &str, v: f64| {
            if v.is_finite() && v > 0.0 && v <= 1.0 {
                Ok(())
            } else {
                Err(LogError::invalid(field, format!("{v} is not in (0, 1]")))
            }
        };
        share("high_watermark", self.high_watermark)?;
        share("low_watermark", self.low_watermark)?;
        share("oversized_share", self.oversized_share)?;
        share("page_diff_share", self.page_diff_share)?;
        share("output_diff_share", self.output_diff_share)?;
        if self.low_watermark > self.high_watermark {
            return Err(LogError::invalid(
                "low_watermark",
                format!(
                    "{} is above high_watermark {}",
                    self.low_watermark, self.high_watermark
                ),
            ));
        }
        for (tier, cap) in &self.tier_caps {
            if *tier != Tier::ToolResults {
                return Err(LogError::invalid(
                    format!("tier_caps.{}", tier.as_str()),
                    "only `tool_results` can be capped",
                ));
            }
            share("tier_caps.tool_results", *cap)?;
        }
        if self.response_reserve.saturating_add(self.injection_reserve) >= self.context_window {
            return Err(LogError::invalid(
                "response_reserve",
                format!(
                    "response_reserve {} + injection_reserve {} leave nothing of context_window {}",
                    self.response_reserve, self.injection_reserve, self.context_window
                ),
            ));
        }
        Ok(())
    }

    /// The retention rule for a tool.
    pub fn retention_for(&self, tool: &str) -> Retention {
        self.retention
            .get(tool)
            .copied()
            .unwrap_or(self.default_retention)
    }

    /// A short, stable identifier of this policy's content (the first 16 hex digits of the
    /// SHA-256 of its canonical JSON), recorded in receipts.
    pub fn version(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        hex::encode(&Sha256::digest(&json)[..8])
    }

    /// The budget this policy gives.
    pub fn budget(&self) -> Budget {
        let hard_total = self.context_window.saturating_sub(self.response_reserve);
        let target = hard_total.saturating_sub(self.injection_reserve);
        let share = |v: f64| (target as f64 * v).floor() as u64;
        Budget {
            context_window: self.context_window,
            response_reserve: self.response_reserve,
            injection_reserve: self.injection_reserve,
            hard_total,
            target,
            oversized: share(self.oversized_share),
            high: share(self.high_watermark),
            low: share(self.low_watermark),
            tier_caps: self
                .tier_caps
                .iter()
                .map(|(tier, cap)| (*tier, share(*cap)))
                .collect(),
        }
    }
}

/// Budget arithmetic: hard total = window − response reserve; the compaction target = hard total
/// − injection reserve; the watermarks are shares of the target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    /// The model's window.
    pub context_window: u64,
    /// Kept for the response.
    pub response_reserve: u64,
    /// Kept for injected content.
    pub injection_reserve: u64,
    /// No request may exceed this.
    pub hard_total: u64,
    /// What compaction aims under.
    pub target: u64,
    /// Results above this many tokens are stubbed once the model has answered them.
    pub oversized: u64,
    /// A compaction point fires above this.
    pub high: u64,
    /// A compaction point cuts down to this.
    pub low: u64,
    /// Per-tier caps in tokens.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tier_caps: BTreeMap<Tier, u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_arithmetic() {
        let p = Policy {
            context_window: 16_000,
            response_reserve: 1_000,
            injection_reserve: 500,
            ..Policy::default()
        };
        let b = p.budget();
        assert_eq!(b.hard_total, 15_000);
        assert_eq!(b.target, 14_500);
        assert_eq!(b.high, 14_500);
        assert_eq!(b.low, 7_250);
    }

    #[test]
    fn validation_names_the_field() {
        let p = Policy {
            low_watermark: 0.9,
            high_watermark: 0.8,
            ..Policy::default()
        };
        let err = p.validate().unwrap_err();
        assert!(err.to_string().contains("low_watermark"), "{err}");
        let p = Policy {
            response_reserve: 200_000,
            ..Policy::default()
        };
        assert!(p
            .validate()
            .unwrap_err()
            .to_string()
            .contains("response_reserve"));
    }

    #[test]
    fn version_changes_with_content() {
        let a = Policy::default();
        let b = Policy {
            protect_recent_turns: 3,
            ..Policy::default()
        };
        assert_ne!(a.version(), b.version());
        assert_eq!(a.version(), Policy::default().version());
    }
}

#[cfg(test)]
mod doc_tests {
    use super::*;

    /// docs/policy.md documents every field with its default; this keeps the two in step.
    #[test]
    fn documented_defaults_match_the_code() {
        let doc = include_str!("../../../../docs/policy.md");
        let defaults = serde_json::to_value(Policy::default()).unwrap();
        for (field, value) in defaults.as_object().unwrap() {
            let row = doc
                .lines()
                .filter(|l| l.starts_with("| `"))
                .find(|l| {
                    l.starts_with(&format!("| `{field}`")) || l.contains(&format!(", `{field}`"))
                })
                .unwrap_or_else(|| panic!("docs/policy.md does not document `{field}`"));
            let shown = match value {
                serde_json::Value::Object(o) if o.contains_key("mode") => {
                    format!("mode = {}", o["mode"])
                }
                serde_json::Value::Object(_) => "none".to_owned(),
                other => other.to_string(),
            };
            assert!(
                row.contains(&shown),
                "`{field}` default {shown} is not in: {row}"
            );
        }
        let example = doc
            .split("```toml")
            .nth(1)
            .unwrap()
            .split("```")
            .next()
            .unwrap();
        let parsed: Policy = toml::from_str(example).unwrap();
        parsed.validate().unwrap();
    }
}
