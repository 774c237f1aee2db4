//! A live agent's calls, replayed: for each assistant message m_k of a trajectory, the request
//! for call k is rendered from m_1..m_(k-1) with the compaction state the previous call left,
//! and checked as it would be sent.
//!
//! Checks on every call: the body is valid by its provider's rules, the estimate fits the hard
//! budget, every seq of the log is accounted for exactly once in the receipt, Anthropic's cache
//! breakpoints sit on the last block of the stable prefix and of the request, and between
//! compaction points the previous request is a prefix of this one.

use std::collections::HashMap;

use anyhow::{anyhow, bail, ensure, Context as _, Result};
use loom_core::render::{
    check_request, render, render_projection, Audience, CompactionState, CostMemo, Format, Msg,
    PointRecord, Policy, Projection, Receipt, RenderInput, Rendered, StepIndex,
};
use loom_core::Api;
use loom_core::{EventBody, Ingest, ReduceConfig, Seq};
use loom_tokens::{count_request, ImageRule, Tokenizer};
use serde_json::Value;

use super::log::Session;

/// What the timeline shows of one call.
#[derive(Debug, Clone)]
pub(crate) struct CallLine {
    /// Last seq the request covers.
    pub(crate) at_seq: Seq,
    /// Estimated tokens.
    pub(crate) estimate: u64,
    /// Neutral messages in the request.
    pub(crate) messages: usize,
    /// The compaction point that fired for this call.
    pub(crate) point: Option<PointRecord>,
    /// Points so far.
    pub(crate) points: u32,
}

/// The replay of one trajectory in one format.
#[derive(Debug)]
pub(crate) struct Replay {
    /// Every call, in order.
    pub(crate) calls: Vec<CallLine>,
    /// The final call's request.
    pub(crate) last: Rendered,
}

/// The model name put in bodies of `format`.
pub(crate) fn model_for(format: Format) -> &'static str {
    match format {
        Format::ANTHROPIC => "claude-sonnet-4-5",
        _ => "gpt-4o",
    }
}

/// The policy of a replay: defaults, with the hard total equal to `budget`.
pub(crate) fn policy_for(budget: u64) -> Policy {
    let policy = Policy::default();
    Policy {
        context_window: budget + policy.response_reserve,
        ..policy
    }
}

/// Replays `session` in `format` with a hard budget of `budget` tokens.
pub(crate) fn replay(
    session: &Session,
    format: Format,
    budget: u64,
    meter: &Tokenizer,
) -> Result<Replay> {
    let policy = policy_for(budget);
    let audience = Audience {
        agent: None,
        now_ms: 0,
    };
    let reduce = ReduceConfig::default();
    let events = &session.events;
    let mut steps: StepIndex = HashMap::new();
    let mut ingest = Ingest::new();
    let mut proj = Projection::default();
    let mut state = CompactionState::default();
    let mut memo = CostMemo::new();
    let mut lines = Vec::new();
    let mut last: Option<(Rendered, CompactionState)> = None;

    for (j, event) in events.iter().enumerate() {
        if j > 0 && matches!(event.body, EventBody::Assistant { .. }) {
            let input = RenderInput {
                events: &events[..j],
                steps: &steps,
                summaries: &[],
                policy: &policy,
                format,
                model: model_for(format),
                tools: &session.tools,
                injections: &[],
                audience: &audience,
                meter,
            };
            let r = render_projection(&input, &proj, &state, &mut memo)
                .with_context(|| format!("{} {format:?}: call at message {j}", session.id))?;
            check_call(&r, last.as_ref().map(|(p, _)| p), budget, meter)
                .with_context(|| format!("{} {format:?}: call at message {j}", session.id))?;
            lines.push(CallLine {
                at_seq: r.receipt.at_seq,
                estimate: r.receipt.estimate,
                messages: r.request.messages.len(),
                point: r.receipt.compaction.clone(),
                points: r.receipt.points,
            });
            let before = std::mem::replace(&mut state, r.state.clone());
            last = Some((r, before));
        }
        // Ingest, as a live agent's log grows: the projection and the step of each result.
        proj.push(event, &audience);
        let reduction = ingest.push(&reduce, event, None);
        if let EventBody::ToolResult { call_id, .. } = &event.body {
            let reduction = reduction
                .ok_or_else(|| anyhow!("{}: seq {} is not inline text", session.id, event.seq))?;
            steps.insert(call_id.clone(), reduction.step);
        }
    }
    let Some((last, before)) = last else {
        bail!("{}: no call to render", session.id);
    };

    // The final request again, from scratch (a fresh projection and memo, as after a restart):
    // the same inputs give the same bytes.
    let at = last.receipt.at_seq as usize;
    let input = RenderInput {
        events: &events[..at],
        steps: &steps,
        summaries: &[],
        policy: &policy,
        format,
        model: model_for(format),
        tools: &session.tools,
        injections: &[],
        audience: &audience,
        meter,
    };
    let again = render(&input, &before, &mut CostMemo::new())?;
    // Compared as the bytes sent.
    let (bytes, expected) = (again.body().to_string(), last.body().to_string());
    ensure!(
        bytes == expected && again.state == last.state,
        "{} {format:?}: re-rendering the final call from scratch changed it",
        session.id
    );
    Ok(Replay { calls: lines, last })
}

/// The request's tokens by `loom-tokens`' counting rules for its provider (`None` for ReAct,
/// which is plain text): an independent count of the exact body.
pub(crate) fn measured(format: Format, body: &Value, meter: &Tokenizer) -> Result<Option<u64>> {
    let wire = match format {
        Format::OPENAI_CHAT => Api::OpenaiChat,
        Format::OPENAI_RESPONSES => Api::OpenaiResponses,
        Format::ANTHROPIC => Api::Anthropic,
        _ => return Ok(None),
    };
    let images = ImageRule::OpenAiTile {
        base: 85,
        per_tile: 170,
    };
    Ok(Some(count_request(wire, body, meter, &images)?.total()))
}

/// The checks every call passes.
fn check_call(r: &Rendered, prev: Option<&Rendered>, budget: u64, meter: &Tokenizer) -> Result<()> {
    let body = r.body();
    check_request(r.format, &body).map_err(|v| anyhow!("invalid request: {v}"))?;
    let receipt = &r.receipt;
    ensure!(
        receipt.budget.hard_total == budget,
        "hard total {} is not the budget {budget}",
        receipt.budget.hard_total
    );
    ensure!(
        receipt.estimate <= receipt.budget.hard_total,
        "estimate {} over the hard total {}",
        receipt.estimate,
        receipt.budget.hard_total
    );
    // What the pipeline budgets bounds what the provider will count. (Anthropic is checked on its
    // own, in `estimate.rs`.)
    if matches!(r.format, Format::OPENAI_CHAT | Format::OPENAI_RESPONSES) {
        if let Some(n) = measured(r.format, &body, meter)? {
            ensure!(
                n <= receipt.estimate,
                "the body counts {n} tokens, over the estimate {}",
                receipt.estimate
            );
        }
    }
    check_accounting(receipt)?;
    if r.format == Format::ANTHROPIC {
        check_breakpoints(r, &body)?;
    }
    if let Some(prev) = prev {
        if receipt.compaction.is_none() {
            check_prefix(r.format, &prev.body(), &body)?;
        }
    }
    Ok(())
}

/// Every seq of the log up to `at_seq` is in exactly one list of the receipt.
fn check_accounting(receipt: &Receipt) -> Result<()> {
    match receipt.unaccounted() {
        Some((seq, n)) => bail!(
            "seq {seq} is in {n} lists of the receipt (log 1..{})",
            receipt.at_seq
        ),
        None => Ok(()),
    }
}

fn has_marker(block: &Value) -> bool {
    block.get("cache_control").is_some()
}

/// Anthropic: the system prompt is separate, and the cache breakpoints are exactly the last
/// block of the stable prefix and the last block of the request.
fn check_breakpoints(r: &Rendered, body: &Value) -> Result<()> {
    let msgs = &r.request.messages;
    let leading = msgs
        .iter()
        .take_while(|m| matches!(m, Msg::System(_)))
        .count();
    let system = body["system"].as_array().map_or(0, Vec::len);
    ensure!(
        system == leading,
        "{leading} leading system messages, {system} system blocks"
    );
    let wire = body["messages"]
        .as_array()
        .ok_or_else(|| anyhow!("no messages"))?;
    ensure!(
        wire.iter()
            .all(|m| m["role"] == "user" || m["role"] == "assistant"),
        "a message with a role other than user or assistant"
    );
    let opening = usize::from(
        msgs.get(leading)
            .is_some_and(|m| matches!(m, Msg::Assistant { .. })),
    );
    // (where, index): 's' for a system block, 'm' for the last block of a message.
    let mut expected = Vec::new();
    if r.request.stable_len > leading {
        let n: usize = msgs[leading..r.request.stable_len]
            .iter()
            .map(|m| Format::ANTHROPIC.wire(m).len())
            .sum();
        expected.push(('m', n + opening - 1));
    } else if system > 0 {
        expected.push(('s', system - 1));
    }
    if !wire.is_empty() && !expected.contains(&('m', wire.len() - 1)) {
        expected.push(('m', wire.len() - 1));
    }
    let mut found = Vec::new();
    for (i, b) in body["system"].as_array().into_iter().flatten().enumerate() {
        if has_marker(b) {
            found.push(('s', i));
        }
    }
    for (i, m) in wire.iter().enumerate() {
        let blocks = m["content"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        for (k, b) in blocks.iter().enumerate() {
            if has_marker(b) {
                ensure!(
                    k + 1 == blocks.len(),
                    "message {i}: a breakpoint not on the last block"
                );
                found.push(('m', i));
            }
        }
    }
    ensure!(
        found.len() <= 4,
        "{} cache breakpoints; Anthropic allows 4",
        found.len()
    );
    expected.sort_unstable();
    found.sort_unstable();
    ensure!(
        found == expected,
        "cache breakpoints at {found:?}, expected {expected:?} (stable_len {})",
        r.request.stable_len
    );
    Ok(())
}

/// `v` without Anthropic's `cache_control` markers (the tail breakpoint moves every call).
pub(crate) fn without_cache_control(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| k.as_str() != "cache_control")
                .map(|(k, x)| (k.clone(), without_cache_control(x)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_cache_control).collect()),
        other => other.clone(),
    }
}

/// The previous request is a prefix of this one: same model, tools and system; its messages
/// (its prompt, for ReAct) start this one's.
fn check_prefix(format: Format, prev: &Value, now: &Value) -> Result<()> {
    let (prev, now) = (without_cache_control(prev), without_cache_control(now));
    if format == Format::React {
        let (a, b) = (prev["prompt"].as_str(), now["prompt"].as_str());
        ensure!(
            a.zip(b).is_some_and(|(a, b)| b.starts_with(a)),
            "the previous prompt is not a prefix of this one without a compaction point"
        );
        return Ok(());
    }
    let key = if format == Format::OPENAI_RESPONSES {
        "input"
    } else {
        "messages"
    };
    for fixed in ["model", "tools", "system", "max_tokens"] {
        ensure!(
            prev.get(fixed) == now.get(fixed),
            "`{fixed}` changed without a compaction point"
        );
    }
    let (a, b) = match (prev[key].as_array(), now[key].as_array()) {
        (Some(a), Some(b)) => (a, b),
        _ => bail!("`{key}` is not an array"),
    };
    ensure!(
        b.len() >= a.len(),
        "`{key}` shrank without a compaction point"
    );
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        ensure!(x == y, "`{key}[{i}]` changed without a compaction point");
    }
    Ok(())
}
