//! Evidence recall: did the request still hold what the agent went on to use?
//!
//! An identifier is a run of 6 or more characters of `[A-Za-z0-9_./:-]` that contains a digit,
//! `/`, `_` or `.` (paths, ids, versions, URLs). The evidence for call k is every identifier the
//! real assistant wrote in message k (text and call arguments) that had appeared earlier in a tool
//! result and never in a system or user message: what the agent could only have learned from its
//! tools. Recall is the share of that evidence present anywhere in the request's text.

use memchr::memmem;

/// Whether a byte may be part of an identifier.
fn ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'/' | b':' | b'-')
}

/// The identifiers in `text`, in order of first appearance, without repeats.
pub fn identifiers(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut out: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !ident_byte(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && ident_byte(bytes[i]) {
            i += 1;
        }
        let run = &text[start..i];
        let marked = run
            .bytes()
            .any(|b| b.is_ascii_digit() || matches!(b, b'/' | b'_' | b'.'));
        if run.len() >= 6 && marked && !out.contains(&run) {
            out.push(run);
        }
    }
    out
}

/// What a trajectory has shown so far, split by who said it.
#[derive(Debug, Default)]
pub struct Seen {
    tools: String,
    dialogue: String,
}

impl Seen {
    /// Records tool output.
    pub fn tool(&mut self, text: &str) {
        self.tools.push_str(text);
        self.tools.push('\u{0}');
    }

    /// Records system or user text.
    pub fn dialogue(&mut self, text: &str) {
        self.dialogue.push_str(text);
        self.dialogue.push('\u{0}');
    }

    /// The evidence in an assistant message: identifiers seen in tool output and never in
    /// system or user messages.
    pub fn evidence(&self, assistant_text: &str) -> Vec<String> {
        identifiers(assistant_text)
            .into_iter()
            .filter(|id| {
                memmem::find(self.tools.as_bytes(), id.as_bytes()).is_some()
                    && memmem::find(self.dialogue.as_bytes(), id.as_bytes()).is_none()
            })
            .map(str::to_owned)
            .collect()
    }
}

/// How many of `evidence` occur in any of `texts`.
pub(crate) fn hits<'t>(evidence: &[String], texts: impl Iterator<Item = &'t str> + Clone) -> u32 {
    evidence
        .iter()
        .filter(|id| {
            let finder = memmem::Finder::new(id.as_bytes());
            texts.clone().any(|t| finder.find(t.as_bytes()).is_some())
        })
        .count() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_follow_the_pattern() {
        assert_eq!(
            identifiers("open src/lib.rs at line 42, id ABC123, word simple, x.y, 2024-01-01"),
            vec!["src/lib.rs", "ABC123", "2024-01-01"]
        );
        assert_eq!(
            identifiers("pathlike/ trailing: a_b_c_d"),
            vec!["pathlike/", "a_b_c_d"]
        );
    }

    #[test]
    fn evidence_excludes_what_the_user_said() {
        let mut seen = Seen::default();
        seen.dialogue("fix bug in parser.py please");
        seen.tool("found parser.py and tests/test_parser.py:17");
        assert_eq!(
            seen.evidence("edit parser.py and tests/test_parser.py:17 now"),
            vec!["tests/test_parser.py:17".to_owned()]
        );
    }
}
