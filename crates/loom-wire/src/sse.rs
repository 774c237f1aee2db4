//! An incremental Server-Sent Events parser (the WHATWG `text/event-stream` rules).
//!
//! The proxy hands the upstream's bytes to the client untouched and, on the side, feeds the same
//! chunks here; chunks split lines, `\r\n` pairs and UTF-8 code points anywhere, so the parser
//! keeps the unfinished line as bytes and decodes a line only once it is complete (line ends are
//! ASCII and never occur inside a multi-byte sequence).

/// One dispatched event: its `event:` name, if any, and its `data:` lines joined by `\n`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field; `None` when absent or empty (the spec's default type, `message`).
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`, without the final newline.
    pub data: String,
}

/// Turns a byte stream into [`SseEvent`]s, whatever the chunk boundaries.
///
/// `id:` and `retry:` are read and ignored: the proxy never reconnects (a provider reply cannot
/// be resumed), so neither matters here.
#[derive(Debug, Default)]
pub struct SseParser {
    /// The current, unterminated line, as raw bytes.
    line: Vec<u8>,
    /// The previous chunk ended with `\r`: a `\n` opening the next one belongs to that line end.
    after_cr: bool,
    /// No line has been completed yet (a leading byte-order mark is stripped from the first).
    first_line: bool,
    /// The `event:` field of the event being built.
    event: String,
    /// The `data:` lines of the event being built, each followed by `\n`.
    data: String,
}

const BOM: &[u8] = "\u{feff}".as_bytes();

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self {
            first_line: true,
            ..Self::default()
        }
    }

    /// Feeds the next chunk; returns the events it completed, in order.
    pub fn push(&mut self, mut bytes: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        // An empty chunk must not forget a pending `\r`: the `\n` may still come.
        if bytes.is_empty() {
            return out;
        }
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while let Some(end) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&bytes[..end]);
            let line = std::mem::take(&mut self.line);
            if let Some(event) = self.process_line(&line) {
                out.push(event);
            }
            // Reuse the allocation for the next line.
            self.line = line;
            self.line.clear();
            let crlf = bytes[end] == b'\r';
            bytes = &bytes[end + 1..];
            if crlf {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        self.line.extend_from_slice(bytes);
        out
    }

    /// Ends the stream; returns the last event if the stream stopped after its final field line
    /// but before the blank line that would have dispatched it.
    ///
    /// The spec discards such an event; some servers close the stream right after their last
    /// `data:` line, and dropping a complete `message_stop` or `[DONE]` would make a finished
    /// reply look cut short. An unterminated last line is still discarded: it may be a fragment.
    pub fn finish(&mut self) -> Vec<SseEvent> {
        self.line.clear();
        self.after_cr = false;
        let event = self.dispatch();
        self.first_line = true;
        event.into_iter().collect()
    }

    fn process_line(&mut self, line: &[u8]) -> Option<SseEvent> {
        let line = if std::mem::take(&mut self.first_line) {
            line.strip_prefix(BOM).unwrap_or(line)
        } else {
            line
        };
        if line.is_empty() {
            return self.dispatch();
        }
        if line.first() == Some(&b':') {
            return None;
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"event" => {
                self.event = String::from_utf8_lossy(value).into_owned();
            }
            b"data" => {
                self.data.push_str(&String::from_utf8_lossy(value));
                self.data.push('\n');
            }
            // `id` and `retry` only matter to a client that reconnects; other names are ignored
            // by the spec.
            _ => {}
        }
        None
    }

    /// Dispatches the event being built, if it has data; resets it either way (spec: an event
    /// with an empty data buffer is not dispatched).
    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.event);
        let mut data = std::mem::take(&mut self.data);
        if data.is_empty() {
            return None;
        }
        data.pop();
        Some(SseEvent {
            event: (!event.is_empty()).then_some(event),
            data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_owned),
            data: data.to_owned(),
        }
    }

    fn whole(input: &[u8]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = p.push(input);
        out.extend(p.finish());
        out
    }

    /// Every split point, and every byte on its own, must give the events of the whole stream.
    fn assert_split_invariant(input: &[u8]) -> Vec<SseEvent> {
        let expected = whole(input);
        for cut in 0..=input.len() {
            let mut p = SseParser::new();
            let mut got = p.push(&input[..cut]);
            got.extend(p.push(&input[cut..]));
            got.extend(p.finish());
            assert_eq!(got, expected, "split at byte {cut}");
        }
        for cut in 0..=input.len() {
            let mut p = SseParser::new();
            let mut got = p.push(&input[..cut]);
            got.extend(p.push(b""));
            got.extend(p.push(&input[cut..]));
            got.extend(p.finish());
            assert_eq!(
                got, expected,
                "split at byte {cut} with an empty chunk between"
            );
        }
        let mut p = SseParser::new();
        let mut got = Vec::new();
        for b in input {
            got.extend(p.push(std::slice::from_ref(b)));
        }
        got.extend(p.finish());
        assert_eq!(got, expected, "one byte at a time");
        expected
    }

    #[test]
    fn fields_comments_and_multi_line_data() {
        let input = b": keep-alive\nevent: message_start\ndata: {\"a\":1}\n\n\
                      data: first\ndata:second\nid: 7\nretry: 100\n\n\
                      data\n\nevent: x\n\n";
        let got = assert_split_invariant(input);
        assert_eq!(
            got,
            vec![
                ev(Some("message_start"), "{\"a\":1}"),
                ev(None, "first\nsecond"),
                // A bare `data` line is a field with an empty value: one empty data line.
                ev(None, ""),
            ]
        );
    }

    #[test]
    fn all_three_line_ends_and_a_split_code_point() {
        let input =
            "data: a\r\n\r\ndata: b\r\rdata: c\n\ndata: é漢🦀\r\ndata: d\r\n\r\n".as_bytes();
        let got = assert_split_invariant(input);
        assert_eq!(
            got,
            vec![
                ev(None, "a"),
                ev(None, "b"),
                ev(None, "c"),
                ev(None, "é漢🦀\nd")
            ]
        );
    }

    #[test]
    fn leading_bom_is_stripped_once() {
        let mut input = BOM.to_vec();
        input.extend_from_slice(b"data: x\n\n");
        input.extend_from_slice(BOM);
        input.extend_from_slice(b"data: y\n\n");
        let got = assert_split_invariant(&input);
        // The second BOM starts a line whose field name is not `data`: ignored, per the spec.
        assert_eq!(got, vec![ev(None, "x")]);
    }

    #[test]
    fn an_event_missing_only_its_blank_line_is_dispatched_at_the_end() {
        let got = assert_split_invariant(b"data: [DONE]\n");
        assert_eq!(got, vec![ev(None, "[DONE]")]);
    }

    #[test]
    fn an_unterminated_last_line_is_discarded() {
        let got = assert_split_invariant(b"data: one\n\ndata: {\"cho");
        assert_eq!(got, vec![ev(None, "one")]);
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        let got = assert_split_invariant(b"data: \xff\xfe ok\n\n");
        assert_eq!(got, vec![ev(None, "\u{fffd}\u{fffd} ok")]);
    }
}
