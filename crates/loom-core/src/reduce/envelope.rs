//! The wrappers agent frameworks put around a command's output, and what they say.
//!
//! Each framework reports the exit code its own way, and some add a footer of state to every
//! result. The reducers look at the output inside the wrapper, with the exit code read from it:
//!
//! - mini-swe-agent: `<returncode>1</returncode>\n<output>…</output>`, or, when it clipped a long
//!   output itself, `<warning>…</warning><output_head>…</output_head><elided_chars>N</elided_chars>
//!   <output_tail>…</output_tail>`;
//! - SWE-agent: a footer `(Open file: …)\n(Current directory: …)\nbash-$`, an
//!   `EXECUTION TIMED OUT` line, and sometimes `///PROCESS-DONE:0:PROCESS-DONE///`;
//! - OpenHands: `[The command completed with exit code 1.]` and `[Current working directory: …]`;
//! - Codex: `Exit code: 1\nWall time: …\nOutput:\n…`, or JSON `{"output", "metadata": {"exit_code"}}`;
//! - Claude Code: a leading `Exit code 1` line on failures;
//! - the seeds' own shape: JSON `{"stdout", "stderr", "exit_code"}`.

use std::borrow::Cow;

/// A tool output with its wrapper taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Envelope<'a> {
    /// The output itself (stdout and stderr as the framework merged them).
    pub(crate) body: Cow<'a, str>,
    /// Standard error, when the framework kept it apart.
    pub(crate) stderr: Option<Cow<'a, str>>,
    /// The exit code, when the output says it.
    pub(crate) exit_code: Option<i64>,
    /// Characters the framework itself cut out of the output before the agent saw it.
    pub(crate) elided_chars: Option<u64>,
    /// The command ran out of time.
    pub(crate) timed_out: bool,
    /// The file open in the agent's viewer (SWE-agent), when given.
    pub(crate) open_file: Option<&'a str>,
}

impl<'a> Envelope<'a> {
    /// Takes the wrapper off `text`. Text with no known wrapper is its own body.
    pub(crate) fn parse(text: &'a str) -> Self {
        let mut env = Self {
            body: Cow::Borrowed(text),
            stderr: None,
            exit_code: None,
            elided_chars: None,
            timed_out: false,
            open_file: None,
        };
        if text.starts_with("<returncode>") {
            env.parse_miniswe(text);
        } else if text.starts_with('{') {
            env.parse_json(text);
        } else if let Some(rest) = text.strip_prefix("Exit code: ") {
            env.parse_codex(rest);
        } else if let Some(rest) = text.strip_prefix("Exit code ") {
            let (first, body) = rest.split_once('\n').unwrap_or((rest, ""));
            if let Ok(code) = first.trim().parse() {
                env.exit_code = Some(code);
                env.body = Cow::Borrowed(body);
            }
        }
        if env.body.contains('\x1b') {
            env.body = Cow::Owned(strip_ansi(&env.body));
        }
        env.strip_sweagent_footer();
        env.strip_openhands_footer();
        env.read_process_done();
        // SWE-agent's way of saying the output was empty.
        if env.body.trim() == "Your command ran successfully and did not produce any output." {
            env.body = Cow::Borrowed("");
        }
        if env.body.trim_end().ends_with("EXECUTION TIMED OUT") {
            env.timed_out = true;
        }
        env
    }

    fn parse_miniswe(&mut self, text: &'a str) {
        let Some(rest) = text.strip_prefix("<returncode>") else {
            return;
        };
        let Some((code, rest)) = rest.split_once("</returncode>") else {
            return;
        };
        self.exit_code = code.trim().parse().ok();
        let rest = rest.trim_start_matches('\n');
        if let Some(inner) = between(rest, "<output>", "</output>") {
            self.body = Cow::Borrowed(inner.strip_prefix('\n').unwrap_or(inner));
            return;
        }
        // The clipped form: keep head and tail, and say how much was cut.
        let head = between(rest, "<output_head>", "</output_head>");
        let tail = between(rest, "<output_tail>", "</output_tail>");
        self.elided_chars = between(rest, "<elided_chars>", "</elided_chars>")
            .and_then(|n| n.split_whitespace().next()?.parse().ok());
        if head.is_some() || tail.is_some() {
            let head = head.unwrap_or("").trim_matches('\n');
            let tail = tail.unwrap_or("").trim_matches('\n');
            self.body = Cow::Owned(format!("{head}\n{tail}"));
        } else {
            self.body = Cow::Borrowed(rest);
        }
    }

    fn parse_json(&mut self, text: &'a str) {
        // Only small wrappers are worth parsing here; large JSON is data, not a wrapper. A
        // wrapper names its exit code, so JSON without such a key is not parsed twice.
        let names_code = [
            "\"exit_code\"",
            "\"returncode\"",
            "\"exitCode\"",
            "\"return_code\"",
        ]
        .iter()
        .any(|k| text.contains(k));
        if text.len() > 4 * 1024 * 1024 || !names_code {
            return;
        }
        let Ok(serde_json::Value::Object(obj)) = serde_json::from_str::<serde_json::Value>(text)
        else {
            return;
        };
        let code = ["exit_code", "returncode", "exitCode", "return_code"]
            .iter()
            .find_map(|k| obj.get(*k).and_then(serde_json::Value::as_i64))
            .or_else(|| {
                obj.get("metadata")
                    .and_then(|m| m.get("exit_code"))
                    .and_then(serde_json::Value::as_i64)
            });
        let body = ["stdout", "output"]
            .iter()
            .find_map(|k| obj.get(*k).and_then(serde_json::Value::as_str));
        // Without both an exit code and an output this is a tool's JSON result, not a wrapper.
        let (Some(code), Some(body)) = (code, body) else {
            return;
        };
        self.exit_code = Some(code);
        self.body = Cow::Owned(body.to_owned());
        self.stderr = obj
            .get("stderr")
            .and_then(serde_json::Value::as_str)
            .filter(|s| !s.is_empty())
            .map(|s| Cow::Owned(s.to_owned()));
        self.timed_out = obj.get("timed_out").and_then(serde_json::Value::as_bool) == Some(true);
    }

    fn parse_codex(&mut self, rest: &'a str) {
        let (first, after) = rest.split_once('\n').unwrap_or((rest, ""));
        let Ok(code) = first.trim().parse() else {
            return;
        };
        self.exit_code = Some(code);
        let body = match after.find("Output:\n") {
            Some(i) => &after[i + "Output:\n".len()..],
            None => after,
        };
        self.body = Cow::Borrowed(body);
    }

    fn strip_sweagent_footer(&mut self) {
        let Cow::Borrowed(body) = self.body else {
            return;
        };
        let trimmed = body.trim_end();
        let Some(rest) = trimmed.strip_suffix("bash-$") else {
            return;
        };
        let rest = rest.trim_end();
        let Some(start) = rest.rfind("(Open file: ") else {
            return;
        };
        let footer = &rest[start..];
        if !footer.contains("(Current directory: ") {
            return;
        }
        self.open_file = between(footer, "(Open file: ", ")").filter(|f| *f != "n/a");
        self.body = Cow::Borrowed(rest[..start].trim_end_matches(['\n', '\r']));
    }

    fn strip_openhands_footer(&mut self) {
        const DONE: &str = "[The command completed with exit code ";
        let body = self.body.as_ref();
        let Some(at) = body.rfind(DONE) else {
            return;
        };
        let code = body[at + DONE.len()..]
            .split(|c: char| !c.is_ascii_digit() && c != '-')
            .next()
            .and_then(|n| n.parse().ok());
        if code.is_none() {
            return;
        }
        self.exit_code = code;
        let kept = body[..at].trim_end().to_owned();
        self.body = Cow::Owned(kept);
    }

    fn read_process_done(&mut self) {
        const MARK: &str = "///PROCESS-DONE:";
        let body = self.body.as_ref();
        let Some(at) = body.rfind(MARK) else {
            return;
        };
        let after = &body[at + MARK.len()..];
        let Some((code, _)) = after.split_once(':') else {
            return;
        };
        if let Ok(code) = code.parse() {
            self.exit_code.get_or_insert(code);
            let end = after
                .find("PROCESS-DONE///")
                .map_or(body.len(), |i| at + MARK.len() + i + 15);
            let kept = format!("{}{}", &body[..at], &body[end..]);
            self.body = Cow::Owned(kept);
        }
    }
}

/// Removes terminal escape sequences (colours from pytest, git, ls), which carry no meaning for
/// an agent and would hide the lines the reducers look for.
pub(crate) fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        match chars.next() {
            // CSI: parameters and intermediates, then one final byte.
            Some('[') => {
                while let Some(&n) = chars.peek() {
                    chars.next();
                    if ('\x40'..='\x7e').contains(&n) {
                        break;
                    }
                }
            }
            // OSC: up to BEL or ST.
            Some(']') => {
                while let Some(n) = chars.next() {
                    if n == '\x07' || (n == '\x1b' && chars.peek() == Some(&'\\')) {
                        if n == '\x1b' {
                            chars.next();
                        }
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The text between the first `open` and the following `close`.
fn between<'t>(text: &'t str, open: &str, close: &str) -> Option<&'t str> {
    let start = text.find(open)? + open.len();
    let len = text[start..].find(close)?;
    Some(&text[start..start + len])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn miniswe_return_codes() {
        let env = Envelope::parse("<returncode>1</returncode>\n<output>\nboom\n</output>");
        assert_eq!(env.exit_code, Some(1));
        assert_eq!(env.body, "boom\n");
        let env = Envelope::parse("<returncode>0</returncode>\n<output>\n</output>");
        assert_eq!(env.body, "");
    }

    #[test]
    fn miniswe_clipped_output_keeps_head_tail_and_elision() {
        let text = "<returncode>1</returncode>\n<warning>\ntoo long\n</warning><output_head>\nfirst\n</output_head>\n<elided_chars>\n1234 characters elided\n</elided_chars>\n<output_tail>\nlast\n</output_tail>";
        let env = Envelope::parse(text);
        assert_eq!(env.exit_code, Some(1));
        assert_eq!(env.elided_chars, Some(1234));
        assert_eq!(env.body, "first\nlast");
    }

    #[test]
    fn sweagent_footer_and_process_done() {
        let text = "8.2\n(Open file: /repo/x.py)\n(Current directory: /repo)\nbash-$";
        let env = Envelope::parse(text);
        assert_eq!(env.body, "8.2");
        assert_eq!(env.open_file, Some("/repo/x.py"));
        let text = "EOY XF.///PROCESS-DONE:0:PROCESS-DONE///\n(Open file: n/a)\n(Current directory: /x)\nbash-$";
        let env = Envelope::parse(text);
        assert_eq!(env.exit_code, Some(0));
        assert_eq!(env.body, "EOY XF.");
        assert_eq!(env.open_file, None);
        let env = Envelope::parse(
            "\nEXECUTION TIMED OUT\n(Open file: n/a)\n(Current directory: /x)\nbash-$",
        );
        assert!(env.timed_out);
    }

    #[test]
    fn terminal_colours_are_removed() {
        let text = "<returncode>0</returncode>\n<output>\n\x1b[32m=== \x1b[1m2 passed\x1b[0m in 0.1s ===\x1b[0m\n</output>";
        assert_eq!(Envelope::parse(text).body, "=== 2 passed in 0.1s ===\n");
    }

    #[test]
    fn openhands_codex_claude_and_json_wrappers() {
        let env = Envelope::parse(
            "out\n[The command completed with exit code 2.]\n[Current working directory: /w]",
        );
        assert_eq!((env.exit_code, env.body.as_ref()), (Some(2), "out"));
        let env = Envelope::parse("Exit code: 0\nWall time: 0.1 seconds\nOutput:\nhello\n");
        assert_eq!((env.exit_code, env.body.as_ref()), (Some(0), "hello\n"));
        let env = Envelope::parse("Exit code 127\nbash: foo: command not found");
        assert_eq!(
            (env.exit_code, env.body.as_ref()),
            (Some(127), "bash: foo: command not found")
        );
        let env = Envelope::parse(r#"{"stdout": "a\n", "stderr": "warn", "exit_code": 3}"#);
        assert_eq!(env.exit_code, Some(3));
        assert_eq!(env.stderr.as_deref(), Some("warn"));
        let env = Envelope::parse(r#"{"reservation_id": "X", "status": 1}"#);
        assert_eq!(env.exit_code, None);
    }
}
