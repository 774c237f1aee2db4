//! The byte source under the JSON parser: buffered, UTF-8 checked, and counting lines.
//!
//! serde_json reads a `Read` one byte at a time and reports positions relative to where each
//! deserializer started. Records are parsed one top-level value at a time, so this reader keeps
//! the file-wide line (shared with the parse context through [`Tracker`]) and checks UTF-8 as
//! chunks arrive, so a bad byte is reported with its exact offset instead of as a vague string
//! error at the end of a long value.

use std::cell::Cell;
use std::io::{self, Read};

/// Size of each read from the underlying source.
const CHUNK: usize = 64 * 1024;

/// Position shared between the reader and the visitors that want to know where they are.
#[derive(Debug)]
pub(crate) struct Tracker {
    /// 1-based line of the next byte to be handed to the parser.
    line: Cell<u64>,
}

impl Tracker {
    pub(crate) fn new() -> Self {
        Self { line: Cell::new(1) }
    }

    /// The line of the next byte the parser will see.
    pub(crate) fn line(&self) -> u64 {
        self.line.get()
    }

    /// Moves to `line`: a parser handed one line of a file at a time says where it is.
    pub(crate) fn set_line(&self, line: u64) {
        self.line.set(line);
    }
}

/// Marks an I/O error as "the bytes are not UTF-8", so the caller can report the offset.
#[derive(Debug)]
pub(crate) struct NotUtf8 {
    pub(crate) offset: u64,
}

impl std::fmt::Display for NotUtf8 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid UTF-8 at byte offset {}", self.offset)
    }
}

impl std::error::Error for NotUtf8 {}

/// A buffered reader that validates UTF-8 and counts lines.
#[derive(Debug)]
pub(crate) struct Input<'t, R> {
    inner: R,
    tracker: &'t Tracker,
    buf: Vec<u8>,
    /// Next byte to serve.
    pos: usize,
    /// Bytes before `servable` are checked UTF-8; bytes from `servable` to `len` are the start of
    /// a character split across reads, kept back until the rest arrives.
    servable: usize,
    len: usize,
    /// File offset of `buf[0]`.
    base: u64,
    /// Offset of an invalid byte found in the buffer, reported once `pos` reaches `servable`.
    bad_at: Option<u64>,
    eof: bool,
    started: bool,
}

impl<'t, R: Read> Input<'t, R> {
    pub(crate) fn new(inner: R, tracker: &'t Tracker) -> Self {
        Self {
            inner,
            tracker,
            buf: vec![0; CHUNK],
            pos: 0,
            servable: 0,
            len: 0,
            base: 0,
            bad_at: None,
            eof: false,
            started: false,
        }
    }

    /// Makes at least one servable byte available unless the input is exhausted.
    fn fill(&mut self) -> io::Result<()> {
        while self.pos == self.servable {
            if let Some(offset) = self.bad_at {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    NotUtf8 { offset },
                ));
            }
            if self.eof {
                if self.servable < self.len {
                    // The input ends inside a multi-byte character.
                    let offset = self.base + self.servable as u64;
                    self.bad_at = Some(offset);
                    continue;
                }
                return Ok(());
            }
            // Keep the held-back partial character at the front of the buffer.
            let keep = self.len - self.servable;
            self.buf.copy_within(self.servable..self.len, 0);
            self.base += self.servable as u64;
            self.pos = 0;
            self.servable = 0;
            self.len = keep;
            let n = loop {
                match self.inner.read(&mut self.buf[keep..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            };
            if n == 0 {
                self.eof = true;
                continue;
            }
            self.len += n;
            // A partial mark is an incomplete character, so it is held back until it is whole.
            if !self.started && (self.len >= 3 || self.buf[0] != 0xEF) {
                self.started = true;
                if self.buf[..self.len].starts_with(b"\xEF\xBB\xBF") {
                    // A byte-order mark is not JSON, but editors write it; skip it.
                    self.pos = 3;
                }
            }
            match std::str::from_utf8(&self.buf[self.pos..self.len]) {
                Ok(_) => self.servable = self.len,
                Err(e) => {
                    self.servable = self.pos + e.valid_up_to();
                    if e.error_len().is_some() {
                        self.bad_at = Some(self.base + self.servable as u64);
                    }
                }
            }
        }
        Ok(())
    }

    /// Skips whitespace and returns the next byte without consuming it, or `None` at the end.
    pub(crate) fn peek_non_ws(&mut self) -> io::Result<Option<u8>> {
        loop {
            self.fill()?;
            if self.pos == self.servable {
                return Ok(None);
            }
            let b = self.buf[self.pos];
            match b {
                b'\n' => {
                    self.tracker.line.set(self.tracker.line.get() + 1);
                    self.pos += 1;
                }
                b' ' | b'\t' | b'\r' => self.pos += 1,
                _ => return Ok(Some(b)),
            }
        }
    }
}

impl<R: Read> Read for Input<'_, R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        // serde_json reads one byte per call; keep that path short.
        if let ([slot], true) = (&mut *out, self.pos < self.servable) {
            let b = self.buf[self.pos];
            *slot = b;
            self.pos += 1;
            if b == b'\n' {
                self.tracker.line.set(self.tracker.line.get() + 1);
            }
            return Ok(1);
        }
        if out.is_empty() {
            return Ok(0);
        }
        self.fill()?;
        let n = out.len().min(self.servable - self.pos);
        let chunk = &self.buf[self.pos..self.pos + n];
        out[..n].copy_from_slice(chunk);
        let newlines = chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        if newlines > 0 {
            self.tracker.line.set(self.tracker.line.get() + newlines);
        }
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hands out its bytes a few at a time, to split characters across reads.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.1.min(out.len()).min(self.0.len());
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn read_all(bytes: &[u8], step: usize) -> io::Result<Vec<u8>> {
        let tracker = Tracker::new();
        let mut input = Input::new(Trickle(bytes, step), &tracker);
        let mut out = Vec::new();
        input.read_to_end(&mut out)?;
        Ok(out)
    }

    fn bad_offset(e: &io::Error) -> Option<u64> {
        e.get_ref()?.downcast_ref::<NotUtf8>().map(|n| n.offset)
    }

    #[test]
    fn passes_utf8_through_even_when_split() {
        let text = "héllo ✓ wörld\n".repeat(10);
        for step in [1, 2, 3, 5, 64] {
            assert_eq!(read_all(text.as_bytes(), step).unwrap(), text.as_bytes());
        }
    }

    #[test]
    fn reports_the_offset_of_the_first_bad_byte() {
        let mut bytes = b"{\"a\": \"ok".to_vec();
        bytes.push(0xff);
        bytes.extend_from_slice(b"\"}");
        for step in [1, 4, 100] {
            let e = read_all(&bytes, step).unwrap_err();
            assert_eq!(bad_offset(&e), Some(9), "step {step}");
        }
        let truncated = [b'a', 0xe2, 0x82];
        assert_eq!(bad_offset(&read_all(&truncated, 1).unwrap_err()), Some(1));
    }

    #[test]
    fn skips_a_byte_order_mark_and_counts_lines() {
        let tracker = Tracker::new();
        let mut input = Input::new(Trickle(b"\xEF\xBB\xBF\n\n  {}", 1), &tracker);
        assert_eq!(input.peek_non_ws().unwrap(), Some(b'{'));
        assert_eq!(tracker.line(), 3);
        let mut rest = String::new();
        input.read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "{}");
    }
}
