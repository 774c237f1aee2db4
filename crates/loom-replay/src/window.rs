//! The best-practice baseline: LangChain's
//! `trim_messages(strategy="last", start_on="human", include_system=True)`.
//!
//! Keep the system message, then the newest messages whose tokens fit the budget, then drop from
//! the oldest end until the window starts on a user message. Cutting only at user messages never
//! separates a call from its result, so this works on whole units exactly as LangChain works on
//! single messages: both end on the same user message.

use loom_core::render::{Msg, Piece};

/// The messages the window keeps: indices into the full history's messages.
pub fn trim_last(messages: &[Msg], pieces: &[Piece], budget: u64, overhead: u64) -> Vec<usize> {
    let system = matches!(messages.first(), Some(Msg::System(_)));
    let mut used = overhead;
    let mut kept: Vec<usize> = Vec::new();
    if system {
        used += pieces[0].tokens;
        kept.push(0);
    }
    let first = usize::from(system);
    // The newest messages that fit.
    let mut start = messages.len();
    for i in (first..messages.len()).rev() {
        if used + pieces[i].tokens > budget {
            break;
        }
        used += pieces[i].tokens;
        start = i;
    }
    // Then start on a user message.
    while start < messages.len() && !matches!(messages[start], Msg::User { .. }) {
        start += 1;
    }
    kept.extend(start..messages.len());
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use loom_core::MessageContent;

    fn user() -> Msg {
        Msg::User {
            content: MessageContent::Text("u".into()),
            name: None,
        }
    }

    fn asst() -> Msg {
        Msg::Assistant {
            content: None,
            reasoning: None,
            name: None,
            native: None,
            calls: Vec::new(),
        }
    }

    #[test]
    fn keeps_system_and_starts_on_a_user_message() {
        let msgs = vec![
            Msg::System(MessageContent::Text("s".into())),
            user(),
            asst(),
            user(),
            asst(),
            asst(),
        ];
        let pieces: Vec<Piece> = [5, 10, 10, 10, 10, 10]
            .iter()
            .map(|&t| Piece { key: 0, tokens: t })
            .collect();
        // 5 + 40 fits the last four; the window moves on to the user message at 3.
        assert_eq!(trim_last(&msgs, &pieces, 45, 0), vec![0, 3, 4, 5]);
        assert_eq!(trim_last(&msgs, &pieces, 100, 0), vec![0, 1, 2, 3, 4, 5]);
        // Nothing after the system message fits from a user message on.
        assert_eq!(trim_last(&msgs, &pieces, 20, 0), vec![0]);
    }
}
