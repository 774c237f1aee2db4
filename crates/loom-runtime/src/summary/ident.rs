//! Identifiers: the words a summary must not lose — paths, ids, file names, URLs.
//!
//! An identifier is a token of letters, digits and `/ _ . - :` that holds a letter and at least
//! one of a digit, `/`, `_` or `.` (so `src/main.rs`, `step_003`, `PR-1234`, `v2.1`, and not
//! `the` or `42`). Sentence punctuation around it is trimmed. The check is on whole tokens, so
//! `a.py` is not found inside `data.py`.

use std::collections::BTreeSet;

use loom_core::{Event, EventBody, MessageContent, Seq, ToolOutput};

/// Tokens longer than this are data (base64, hashes in bulk), not names a summary should carry.
const MAX_LEN: usize = 200;

/// Abbreviations that look like identifiers.
const NOT_IDS: [&str; 4] = ["e.g", "i.e", "etc", "vs"];

fn is_token_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '/' | '_' | '.' | '-' | ':')
}

fn qualifies(token: &str) -> bool {
    token.len() >= 3
        && token.len() <= MAX_LEN
        && token.chars().any(char::is_alphabetic)
        && token
            .chars()
            .any(|c| c.is_ascii_digit() || matches!(c, '/' | '_' | '.'))
        && !NOT_IDS.contains(&token)
}

/// The identifiers of `text`, in order of first appearance, without repeats.
pub fn identifiers(text: &str) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for raw in text.split(|c: char| !is_token_char(c)) {
        let token = raw
            .trim_start_matches([':', '-'])
            .trim_end_matches(['.', ':', '-']);
        if qualifies(token) && seen.insert(token) {
            out.push(token.to_owned());
        }
    }
    out
}

fn content_text(c: &MessageContent) -> String {
    c.text().into_owned()
}

/// The text an event contributes for identifier matching (blob outputs are not in memory and
/// contribute nothing).
fn event_text(event: &Event) -> Vec<String> {
    match &event.body {
        EventBody::System { content } => vec![content_text(content)],
        EventBody::User { content, .. } => vec![content_text(content)],
        EventBody::Assistant {
            content,
            tool_calls,
            ..
        } => {
            let mut out: Vec<String> = content.iter().map(content_text).collect();
            out.extend(tool_calls.iter().map(|c| c.arguments.clone()));
            out
        }
        EventBody::ToolResult { content, .. } => match content {
            ToolOutput::Text(s) => vec![s.clone()],
            ToolOutput::Parts(parts) => vec![content_text(&MessageContent::Parts(parts.clone()))],
            ToolOutput::Blob(_) => Vec::new(),
        },
        EventBody::DirectMessage { content, .. } => vec![content.clone()],
        EventBody::Spawn { goal, .. } => vec![goal.clone()],
        EventBody::AgentResult { result, .. } => vec![result.clone()],
        EventBody::Pin { content, .. } => vec![content.clone()],
        // Records of the client: a repeat says what its origin said, counted there.
        EventBody::Rewrite { .. } | EventBody::Repeat { .. } | EventBody::Hidden { .. } => {
            Vec::new()
        }
    }
}

/// The identifiers mentioned by events after `after_seq`.
pub fn later_identifiers(events: &[Event], after_seq: Seq) -> BTreeSet<String> {
    events
        .iter()
        .filter(|e| e.seq > after_seq)
        .flat_map(event_text)
        .flat_map(|t| identifiers(&t))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_paths_ids_and_urls_but_not_words_or_numbers() {
        let ids = identifiers(
            "Read src/main.rs (42 lines). Then step_003 failed; see https://x.io/a?b, e.g. v2.1 \
             and /etc/hosts. The end.",
        );
        assert_eq!(
            ids,
            vec![
                "src/main.rs",
                "step_003",
                "https://x.io/a",
                "v2.1",
                "/etc/hosts"
            ]
        );
    }

    #[test]
    fn whole_tokens_only() {
        let ids = identifiers("data.py");
        assert!(!ids.contains(&"a.py".to_owned()));
        assert_eq!(ids, vec!["data.py"]);
    }
}
