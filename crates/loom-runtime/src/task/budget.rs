//! Budget shares of a task context, exactly as configured.
//!
//! The base is what remains of `max_tokens` after the system reserve (always set aside in full,
//! whatever the system prompt uses), the request overhead and the current task. Each category
//! gets `floor(base × share)` tokens — never a renormalised share: shares summing over 1.0 are an
//! error naming the field that crossed it, and tokens a category leaves unused are not handed to
//! another. Minimum item counts may go past a category's share, but only into tokens no share
//! claimed, so the total never exceeds `max_tokens`.

use serde::{Deserialize, Serialize};

use crate::error::{Result, RuntimeError};

/// Shares of the base, per category.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Shares {
    /// L1 memory (the conversation so far). Default: 0.6.
    pub memory: f64,
    /// Direct messages for this agent. Default: 0.1.
    pub direct_messages: f64,
    /// Knowledge-base snippets. Default: 0.2.
    pub knowledge: f64,
}

impl Default for Shares {
    fn default() -> Self {
        Self {
            memory: 0.6,
            direct_messages: 0.1,
            knowledge: 0.2,
        }
    }
}

/// Items kept per category even past its share, while unclaimed tokens remain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MinItems {
    /// Default: 0.
    pub memory: usize,
    /// Default: 1 (seed 002: at least one direct message is kept).
    pub direct_messages: usize,
    /// Default: 0.
    pub knowledge: usize,
}

impl Default for MinItems {
    fn default() -> Self {
        Self {
            memory: 0,
            direct_messages: 1,
            knowledge: 0,
        }
    }
}

/// How `max_tokens` was divided for one context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// The hard limit.
    pub max_tokens: u64,
    /// Set aside for the system message.
    pub system_reserve: u64,
    /// What the system message uses of it.
    pub system_tokens: u64,
    /// Request framing and tool definitions.
    pub overhead: u64,
    /// The current task's message.
    pub task_tokens: u64,
    /// What the shares divide.
    pub base: u64,
    /// `floor(base × shares.memory)`.
    pub memory: u64,
    /// `floor(base × shares.direct_messages)`.
    pub direct_messages: u64,
    /// `floor(base × shares.knowledge)`.
    pub knowledge: u64,
}

/// Checks shares: each in [0, 1], their sum at most 1.0 (no renormalisation).
pub(crate) fn validate_shares(shares: &Shares) -> Result<()> {
    let fields = [
        ("memory", shares.memory),
        ("direct_messages", shares.direct_messages),
        ("knowledge", shares.knowledge),
    ];
    let mut sum = 0.0;
    for (name, share) in fields {
        if !(share.is_finite() && (0.0..=1.0).contains(&share)) {
            return Err(RuntimeError::config(
                format!("shares.{name}"),
                format!("{share} is not in [0, 1]"),
            ));
        }
        sum += share;
        // A small tolerance for decimal shares like 0.7 + 0.2 + 0.1.
        if sum > 1.0 + 1e-9 {
            let parts: Vec<String> = fields.iter().map(|(n, s)| format!("{n} {s}")).collect();
            return Err(RuntimeError::config(
                format!("shares.{name}"),
                format!(
                    "shares sum to {} ({}), over 1.0; they are used as given, never renormalised",
                    fields.iter().map(|(_, s)| s).sum::<f64>(),
                    parts.join(" + ")
                ),
            ));
        }
    }
    Ok(())
}

/// Divides `max_tokens` (see the module documentation).
pub(crate) fn allocate(
    task: &str,
    max_tokens: u64,
    system_reserve: u64,
    shares: &Shares,
    system_tokens: u64,
    overhead: u64,
    task_tokens: u64,
) -> Result<Allocation> {
    if system_tokens > system_reserve {
        return Err(RuntimeError::config(
            "system_reserve",
            format!("the system prompt needs {system_tokens} tokens, over the reserve of {system_reserve}"),
        ));
    }
    let fixed = system_reserve + overhead + task_tokens;
    if fixed > max_tokens {
        return Err(RuntimeError::DoesNotFit {
            task: task.to_owned(),
            reason: format!(
                "system reserve {system_reserve} + overhead {overhead} + current task \
                 {task_tokens} = {fixed} tokens, over max_tokens {max_tokens}"
            ),
        });
    }
    let base = max_tokens - fixed;
    let share = |s: f64| (base as f64 * s).floor() as u64;
    Ok(Allocation {
        max_tokens,
        system_reserve,
        system_tokens,
        overhead,
        task_tokens,
        base,
        memory: share(shares.memory),
        direct_messages: share(shares.direct_messages),
        knowledge: share(shares.knowledge),
    })
}
