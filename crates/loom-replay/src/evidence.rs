//! Evidence recall: did the request still hold what the agent went on to use?
//!
//! An identifier is a run of 6 or more characters of `[A-Za-z0-9_./:-]` that contains a digit,
//! `/`, `_` or `.` (paths, ids, versions, URLs). The evidence for call k is every identifier the
//! real assistant wrote in message k (text and call arguments) that had appeared earlier in a tool
//! result and never in a system or user message: what the agent could only have learned from its
//! tools. Recall is the share of that evidence present anywhere in the request's text.
//!
//! Browser agents act on page elements by short ids (`click('a324')`) that the identifier rule
//! is too coarse to see. An element id is a quoted argument of a call, up to 16 characters of
//! `[A-Za-z0-9_-]` with a digit, that a tool result showed in brackets (`[a324] button 'Submit'`,
//! as accessibility trees print them); its evidence is the bracketed form, so a request holds it
//! only if it still shows the element.

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

impl Seen {
    /// The element ids the calls' `arguments` act on that only tool output showed, bracketed.
    pub fn elements(&self, arguments: &[&str]) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for id in arguments.iter().flat_map(|a| quoted_ids(a)) {
            let shown = format!("[{id}]");
            if !out.contains(&shown)
                && memmem::find(self.tools.as_bytes(), shown.as_bytes()).is_some()
                && memmem::find(self.dialogue.as_bytes(), shown.as_bytes()).is_none()
            {
                out.push(shown);
            }
        }
        out
    }
}

/// Short quoted tokens in `text` that could name an element: `'a324'`, `"a324"`, `\"a324\"`.
fn quoted_ids(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let quote = bytes[i];
        if quote != b'\'' && quote != b'"' {
            i += 1;
            continue;
        }
        let start = i + 1;
        let mut end = start;
        while end < bytes.len()
            && end - start <= 16
            && (bytes[end].is_ascii_alphanumeric() || matches!(bytes[end], b'_' | b'-'))
        {
            end += 1;
        }
        // The closing quote, escaped or not.
        let closes = match bytes.get(end) {
            Some(&b) if b == quote => true,
            Some(b'\\') => bytes.get(end + 1) == Some(&quote),
            _ => false,
        };
        let token = &text[start..end];
        if closes && (1..=16).contains(&token.len()) && token.bytes().any(|b| b.is_ascii_digit()) {
            out.push(token);
            i = end + 1;
        } else {
            i = start;
        }
    }
    out
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
    fn element_ids_an_action_names_are_evidence_in_their_bracketed_form() {
        let mut seen = Seen::default();
        seen.dialogue("Goal: order it. [a12] link 'Home'");
        seen.tool("[a405] link 'iPad pro'\n[a271] combobox 'Quantity'\n[b9] button");
        let args = [
            r#"{"action": "click('a405')"}"#,
            r#"{"action": "select_option(\"a271\", '2')"}"#,
            r#"{"action": "click('a12')"}"#,
            r#"{"action": "fill('zz99', 'x')"}"#,
        ];
        assert_eq!(seen.elements(&args), vec!["[a405]", "[a271]"]);
        // `'2'` is an option, not an element the page showed in brackets; `a12` came from the
        // user; `zz99` was never shown.
        assert_eq!(
            quoted_ids("f('a1', \"b2\", 'long token', '')"),
            vec!["a1", "b2"]
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
