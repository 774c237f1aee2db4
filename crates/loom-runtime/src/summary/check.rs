//! Checks a summary must pass before it is stored; a failing one is discarded with the reason.
//!
//! 1. Not empty.
//! 2. Shorter, in tokens, than what it replaces: the previous summary plus the chunk's transcript
//!    (already reduced to observations, so this is the strict comparison).
//! 3. Every identifier the request lists in `must_keep` (from the covered span, mentioned by
//!    later events) is present as a whole token.
//! 4. Every required section is present as a heading line.

use std::collections::BTreeSet;

use loom_core::render::TokenMeter;
use serde::{Deserialize, Serialize};

use super::ident::identifiers;
use super::SummaryRequest;

/// Why a summary was discarded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "snake_case", tag = "reason")]
#[non_exhaustive]
pub enum Rejection {
    /// The output holds no text.
    #[error("the summary is empty")]
    Empty,
    /// The output is not shorter than what it replaces.
    #[error(
        "the summary has {output_tokens} tokens, not fewer than the {replaced_tokens} it replaces"
    )]
    NotShorter {
        /// Tokens of the output.
        output_tokens: u64,
        /// Tokens of the previous summary and the chunk.
        replaced_tokens: u64,
    },
    /// Identifiers later events use are missing.
    #[error("identifiers used by later events are missing: {}", missing.join(", "))]
    MissingIdentifiers {
        /// The identifiers, in the request's order.
        missing: Vec<String>,
    },
    /// Required sections are missing.
    #[error("required sections are missing: {}", missing.join(", "))]
    MissingSections {
        /// The sections, in the request's order.
        missing: Vec<String>,
    },
}

/// Whether `text` has a heading line for section `name`: `## Goal`, `**Goal**`, `Goal:`, any
/// case.
pub fn has_section(text: &str, name: &str) -> bool {
    let name = name.to_lowercase();
    text.lines().any(|line| {
        let head = line
            .trim()
            .trim_start_matches(['#', '*', '_'])
            .trim_start()
            .to_lowercase();
        let Some(rest) = head.strip_prefix(&name) else {
            return false;
        };
        if rest.chars().next().is_some_and(char::is_alphanumeric) {
            return false;
        }
        let after = rest.trim_start_matches(['*', '_']);
        line.trim_start().starts_with('#')
            || after.trim().is_empty()
            || after.trim_start().starts_with(':')
    })
}

/// Checks `output` against the request it answers.
pub fn check_summary(
    output: &str,
    request: &SummaryRequest,
    meter: &dyn TokenMeter,
) -> Result<(), Rejection> {
    if output.trim().is_empty() {
        return Err(Rejection::Empty);
    }
    let replaced_tokens = request
        .previous
        .as_ref()
        .map_or(0, |p| meter.count(&p.content))
        + meter.count(&request.transcript());
    let output_tokens = meter.count(output);
    if output_tokens >= replaced_tokens {
        return Err(Rejection::NotShorter {
            output_tokens,
            replaced_tokens,
        });
    }
    let present: BTreeSet<String> = identifiers(output).into_iter().collect();
    let missing: Vec<String> = request
        .must_keep
        .iter()
        .filter(|id| !present.contains(*id))
        .cloned()
        .collect();
    if !missing.is_empty() {
        return Err(Rejection::MissingIdentifiers { missing });
    }
    let missing: Vec<String> = request
        .sections
        .iter()
        .filter(|s| !has_section(output, s))
        .cloned()
        .collect();
    if !missing.is_empty() {
        return Err(Rejection::MissingSections { missing });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn section_headings_in_common_shapes() {
        assert!(has_section("## Goal\nfix it", "Goal"));
        assert!(has_section("**Open items:** none", "Open items"));
        assert!(has_section("progress: 3 steps", "Progress"));
        assert!(!has_section("We made progress today", "Progress"));
        assert!(!has_section("Goalkeeper", "Goal"));
        assert!(!has_section("## Goalkeeper", "Goal"));
        assert!(!has_section("Progress was slow", "Progress"));
    }
}
