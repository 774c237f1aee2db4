//! The estimate a request is budgeted with against an independent count of its body
//! (`loom-tokens`' counting rules per provider). OpenAI formats are checked on every call of
//! every replay (`replay.rs`) and pass; Anthropic's two gaps are pinned here.

use anyhow::{ensure, Result};
use loom_core::render::{Format, Tier};

use super::log::find;
use super::replay::{measured, replay};
use super::traces::{meter, BROWSERGYM, FIREACT, MINISWE, TAU};

/// Anthropic adds a tool-use system prompt to every request that has tools (346 tokens with
/// `tool_choice` auto, per its pricing page; `loom-tokens` counts it). The pipeline budgets the
/// tools as their definitions' JSON only, and its fixed Anthropic overhead is
/// `REPLY_PRIMING + 16` whatever the tools, so on every request with tools the estimate falls
/// short by about 330 tokens (tau-bench: the receipt's tools tier is 155 tokens, the tools cost
/// 480).
#[test]
fn anthropic_estimate_covers_the_tool_use_prompt() -> Result<()> {
    let meter = meter();
    for case in [TAU, MINISWE, BROWSERGYM, FIREACT] {
        let session = find(case.file, case.id)?;
        let r = replay(&session, Format::ANTHROPIC, case.budget, &meter)?;
        let mut body = r.last.body();
        let with = measured(Format::ANTHROPIC, &body, &meter)?.unwrap_or_default();
        if let Some(map) = body.as_object_mut() {
            map.remove("tools");
        }
        let without = measured(Format::ANTHROPIC, &body, &meter)?.unwrap_or_default();
        let tier = r
            .last
            .receipt
            .tiers
            .get(&Tier::Tools)
            .copied()
            .unwrap_or_default();
        // The 16 tokens of slack the Anthropic overhead carries may go to the tools.
        ensure!(
            tier + 16 >= with - without,
            "{}: the tools cost {} tokens, the receipt budgets {tier} (+16)",
            case.id,
            with - without
        );
    }
    Ok(())
}

/// A `tool_use` block's `input` is an object, and the pipeline meters wire values by their
/// string leaves: the input's values are counted, its keys, braces, quotes and escape sequences
/// are not, though the model reads the input as JSON. On the mini-SWE-agent replay (heredoc
/// commands full of quotes and newlines) the final request's inputs are 756 tokens as leaves and
/// 912 as JSON text; with no tools in the request (so the gap above plays no part) the body
/// still counts 29 tokens over the estimate.
#[test]
fn anthropic_estimate_bounds_the_count_without_tools() -> Result<()> {
    let meter = meter();
    for case in [TAU, MINISWE, BROWSERGYM, FIREACT] {
        let mut session = find(case.file, case.id)?;
        session.tools.clear();
        let r = replay(&session, Format::ANTHROPIC, case.budget, &meter)?;
        let n = measured(Format::ANTHROPIC, &r.last.body(), &meter)?.unwrap_or_default();
        let estimate = r.last.receipt.estimate;
        ensure!(
            n <= estimate,
            "{}: counted {n}, estimated {estimate}",
            case.id
        );
    }
    Ok(())
}
