//! Direct messages for this agent (seed 002's Direct Message Protocol): filtered by target,
//! session and TTL, ordered by priority then recency, and only then limited.
//!
//! The seed's code took the "recent N" before sorting, so a high-priority message outside the
//! first N was lost; here the limit applies to the sorted list.

use serde_json::Value;

use super::item::{action, TaskItem};
use super::{DropReason, Dropped};
use loom_core::DEFAULT_PRIORITY;

/// Who the messages are for, and when.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Audience<'a> {
    pub(crate) agent: &'a str,
    pub(crate) node_id: Option<&'a str>,
    pub(crate) session: Option<&'a str>,
    pub(crate) now_ms: i64,
    pub(crate) limit: usize,
}

/// Whether a message's TTL has passed at `now_ms`; an error names a malformed `ttl_seconds`.
pub(crate) fn expired(item: &TaskItem, now_ms: i64) -> Result<bool, String> {
    let ttl = match item.parameters.get("ttl_seconds") {
        None | Some(Value::Null) => return Ok(false),
        Some(v) => v
            .as_f64()
            .filter(|t| t.is_finite() && *t >= 0.0)
            .ok_or_else(|| format!("{v} is not a non-negative number of seconds"))?,
    };
    let ttl_ms = (ttl * 1000.0).min(i64::MAX as f64) as i64;
    Ok(item.created_ms.saturating_add(ttl_ms) <= now_ms)
}

/// A message's priority; an error names a malformed one.
pub(crate) fn priority(item: &TaskItem) -> Result<f64, String> {
    match item.parameters.get("priority") {
        None | Some(Value::Null) => Ok(DEFAULT_PRIORITY),
        Some(v) => v
            .as_f64()
            .filter(|p| (0.0..=1.0).contains(p))
            .ok_or_else(|| format!("{v} is not a number in 0.0..=1.0")),
    }
}

/// The text injected for a message.
pub(crate) fn injected_text(item: &TaskItem, priority: f64) -> String {
    format!(
        "[direct message from {} to {}, priority {priority}]\n{}",
        item.source_agent.as_deref().unwrap_or("unknown"),
        item.target_agent.as_deref().unwrap_or("unknown"),
        item.content().unwrap_or_default()
    )
}

/// The messages for `who`, best first, at most `who.limit`; everything left out is reported.
pub(crate) fn select<'a>(
    items: &[&'a TaskItem],
    who: &Audience<'_>,
    dropped: &mut Vec<Dropped>,
) -> Vec<(&'a TaskItem, f64)> {
    let mut drop = |item: &TaskItem, reason: DropReason| {
        dropped.push(Dropped {
            item: item.task_id.clone(),
            reason,
        });
    };
    let mut kept: Vec<(&TaskItem, f64)> = Vec::new();
    for &item in items {
        if item.action != action::MESSAGE {
            continue;
        }
        let for_us = item.target_agent.as_deref() == Some(who.agent)
            || item
                .str_param("target_node_id")
                .is_some_and(|node| node == who.agent || who.node_id == Some(node));
        if !for_us {
            drop(item, DropReason::OtherTarget);
            continue;
        }
        if let Some(session) = who.session {
            if item.session_id.as_deref() != Some(session) {
                drop(item, DropReason::OtherSession);
                continue;
            }
        }
        match expired(item, who.now_ms) {
            Ok(true) => {
                drop(item, DropReason::Expired);
                continue;
            }
            Ok(false) => {}
            Err(reason) => {
                drop(
                    item,
                    DropReason::Invalid {
                        field: "parameters.ttl_seconds".into(),
                        reason,
                    },
                );
                continue;
            }
        }
        let p = match priority(item) {
            Ok(p) => p,
            Err(reason) => {
                drop(
                    item,
                    DropReason::Invalid {
                        field: "parameters.priority".into(),
                        reason,
                    },
                );
                continue;
            }
        };
        if item.content().is_none_or(|c| c.trim().is_empty()) {
            drop(item, DropReason::NoContent);
            continue;
        }
        kept.push((item, p));
    }
    // Priority first, then the newest; the id makes the order total.
    kept.sort_by(|(a, pa), (b, pb)| {
        pb.total_cmp(pa)
            .then(b.created_ms.cmp(&a.created_ms))
            .then_with(|| a.task_id.cmp(&b.task_id))
    });
    for (item, _) in kept.iter().skip(who.limit) {
        drop(item, DropReason::OverLimit);
    }
    kept.truncate(who.limit);
    kept
}
