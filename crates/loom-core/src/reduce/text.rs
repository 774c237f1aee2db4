//! Text helpers shared by the reducers: the one-line observation builder, line picking, sizes.
//!
//! Every piece of tool output that enters an observation goes through [`Line`], which masks
//! secrets before it cuts anything (a secret cut in half would no longer be recognised), folds
//! the piece onto one line and keeps the whole within the configured length.

use super::secrets;

/// Longest stretch of a source line looked at for one piece; lines can be megabytes long.
const PIECE_WINDOW: usize = 1024;

/// How many lines at the end of an output are searched for its error line.
const TAIL_LINES: usize = 200;

/// Builds a one-line observation of at most `max` characters.
#[derive(Debug)]
pub(crate) struct Line {
    buf: String,
    chars: usize,
    max: usize,
}

impl Line {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            buf: String::new(),
            chars: 0,
            max: max.max(8),
        }
    }

    /// Characters still free.
    pub(crate) fn room(&self) -> usize {
        self.max.saturating_sub(self.chars)
    }

    /// Appends text Loom wrote itself (no masking needed), cut if it does not fit.
    pub(crate) fn lit(&mut self, s: &str) -> &mut Self {
        self.append(s);
        self
    }

    /// Appends a piece of tool output or arguments: masked, folded onto one line, cut to fit.
    pub(crate) fn text(&mut self, s: &str) -> &mut Self {
        let piece = piece(s, self.room());
        self.append(&piece);
        self
    }

    /// Appends `sep` and a piece only if both fit whole; says whether they did.
    pub(crate) fn opt(&mut self, sep: &str, s: &str) -> bool {
        let piece = piece(s, usize::MAX);
        let need = sep.chars().count() + piece.chars().count();
        if piece.is_empty() || need > self.room() {
            return false;
        }
        self.append(sep);
        self.append(&piece);
        true
    }

    /// Appends `sep` and as much of a piece as fits (with an ellipsis); skips it when less than
    /// `min` characters of it would show.
    pub(crate) fn tail(&mut self, sep: &str, s: &str, min: usize) -> bool {
        let sep_len = sep.chars().count();
        let room = self.room().saturating_sub(sep_len);
        if room < min.max(2) {
            return false;
        }
        let piece = piece(s, room);
        if piece.is_empty() {
            return false;
        }
        self.append(sep);
        self.append(&piece);
        true
    }

    /// Appends a piece of tool output or arguments, as [`Line::text`], but at most `max`
    /// characters of it, so that what follows still has room.
    pub(crate) fn text_upto(&mut self, s: &str, max: usize) -> &mut Self {
        let piece = piece(s, self.room().min(max));
        self.append(&piece);
        self
    }

    fn append(&mut self, s: &str) {
        if self.chars >= self.max {
            return;
        }
        let n = s.chars().count();
        if self.chars + n <= self.max {
            self.buf.push_str(s);
            self.chars += n;
            return;
        }
        let keep = self.max.saturating_sub(self.chars + 1);
        self.buf.extend(s.chars().take(keep));
        self.buf.push('…');
        self.chars = self.max;
    }

    pub(crate) fn finish(self) -> String {
        self.buf
    }
}

/// A numbered listing's line split into its number and its text (`  12\tcode`, `12:code`,
/// `12→code`, as `cat -n`, `nl`, grep and the agents' file viewers print them).
pub(crate) fn line_number(line: &str) -> Option<(u64, &str)> {
    let t = line.trim_start();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let sep = t[digits..].chars().next()?;
    if digits == 0 || !matches!(sep, ':' | '\t' | '→') {
        return None;
    }
    Some((t[..digits].parse().ok()?, &t[digits + sep.len_utf8()..]))
}

/// Masks, folds whitespace and cuts `s` to at most `max` characters (ellipsis included).
pub(crate) fn piece(s: &str, max: usize) -> String {
    // Look at a bounded window, ending on a space so that no token (maybe a secret) is split.
    let window = if s.len() > PIECE_WINDOW {
        let mut end = floor_char_boundary(s, PIECE_WINDOW);
        // Prefer ending on a space near the cut; a token longer than that is cut where it is.
        if let Some(space) = s[..end]
            .rfind(char::is_whitespace)
            .filter(|&i| i + 256 >= end)
        {
            end = space;
        }
        &s[..end]
    } else {
        s
    };
    let masked = secrets::mask(window);
    let mut folded = String::with_capacity(masked.len());
    for word in masked.split(|c: char| c.is_whitespace() || c.is_control()) {
        if word.is_empty() {
            continue;
        }
        if !folded.is_empty() {
            folded.push(' ');
        }
        folded.push_str(word);
    }
    let n = folded.chars().count();
    let cut = window.len() < s.len();
    if n <= max && !cut {
        return folded;
    }
    if max == 0 {
        return String::new();
    }
    let mut out: String = folded.chars().take(n.min(max - 1)).collect();
    out.push('…');
    out
}

/// The largest char boundary at or below `i`.
pub(crate) fn floor_char_boundary(s: &str, i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    let mut i = i;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Lines of `s` without their terminators (`\n` or `\r\n`).
pub(crate) fn lines(s: &str) -> impl DoubleEndedIterator<Item = &str> {
    s.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l))
}

/// Whether a line says something: not blank, not only fences, rules or prompts.
pub(crate) fn is_meaningful(line: &str) -> bool {
    let t = line.trim();
    !t.is_empty()
        && t != "bash-$"
        && !t.bytes().all(|b| {
            matches!(
                b,
                b'`' | b'-' | b'=' | b'_' | b'*' | b'#' | b'~' | b'.' | b' '
            )
        })
}

/// The first meaningful line.
pub(crate) fn first_meaningful(s: &str) -> Option<&str> {
    lines(s).find(|l| is_meaningful(l)).map(str::trim)
}

/// The last meaningful line.
pub(crate) fn last_meaningful(s: &str) -> Option<&str> {
    tail_lines(s).find(|l| is_meaningful(l)).map(str::trim)
}

/// Lines of the last part of `s`, newest first; bounded so a huge output costs no more.
fn tail_lines(s: &str) -> impl Iterator<Item = &str> {
    let start = s.len().saturating_sub(64 * 1024);
    let start = floor_char_boundary(s, start);
    lines(&s[start..]).rev().take(TAIL_LINES)
}

/// Number of meaningful lines, stopping once `cap` is passed.
pub(crate) fn meaningful_count(s: &str, cap: usize) -> usize {
    lines(s).filter(|l| is_meaningful(l)).take(cap + 1).count()
}

/// Line count as an editor shows it.
pub(crate) fn line_count(s: &str) -> u64 {
    if s.is_empty() {
        return 0;
    }
    let newlines = s.bytes().filter(|&b| b == b'\n').count() as u64;
    if s.ends_with('\n') {
        newlines
    } else {
        newlines + 1
    }
}

/// The line that best names a failure: the last one that reads like an error.
///
/// Python tracebacks end in `SomeError: message`; compilers and tools print `error: …` or
/// `fatal: …`; shells say `command not found` or `No such file or directory`.
pub(crate) fn error_line(s: &str) -> Option<&str> {
    tail_lines(s).find(|l| looks_like_error(l)).map(str::trim)
}

/// Whether a line reads like an error message.
pub(crate) fn looks_like_error(line: &str) -> bool {
    let t = line.trim();
    if t.is_empty() || t.len() > 2000 {
        return false;
    }
    let lower_start: String = t.chars().take(12).collect::<String>().to_ascii_lowercase();
    if lower_start.starts_with("error")
        || lower_start.starts_with("fatal:")
        || lower_start.starts_with("failed")
        || lower_start.starts_with("e   ")
    {
        return true;
    }
    if error_name(t).is_some() {
        return true;
    }
    [
        "No such file or directory",
        "command not found",
        "Permission denied",
        "not found",
        "EXECUTION TIMED OUT",
        "Traceback (most recent call last)",
    ]
    .iter()
    .any(|needle| t.contains(needle))
}

/// The first exception or error class name in a line (`ModuleNotFoundError`, `KeyError`,
/// `java.lang.NullPointerException`), when it is followed by `:` or ends the line.
pub(crate) fn error_name(line: &str) -> Option<&str> {
    let bytes = line.as_bytes();
    let mut start = None;
    for (i, &b) in bytes
        .iter()
        .enumerate()
        .chain(std::iter::once((bytes.len(), &b' ')))
    {
        let word = b.is_ascii_alphanumeric() || b == b'_' || b == b'.';
        match (word, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                let w = &line[s..i];
                let name = w.rsplit('.').next().unwrap_or(w);
                let named = ["Error", "Exception", "Exit", "Interrupt", "Warning"]
                    .iter()
                    .any(|suf| name.ends_with(suf) && name.len() > suf.len())
                    && name.starts_with(|c: char| c.is_ascii_uppercase());
                if named && (b == b':' || i == bytes.len() || line[i..].trim().is_empty()) {
                    return Some(w);
                }
                start = None;
            }
            _ => {}
        }
    }
    None
}

/// A size as people read it: `512 B`, `1.5 KB`, `44.9 KB`, `3.2 MB`.
pub(crate) fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KB", "MB", "GB", "TB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value >= 100.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `n thing` or `n things`.
pub(crate) fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// What binary bytes are, from their leading magic numbers: a label and a file extension.
pub(crate) fn sniff_binary(bytes: &[u8]) -> (&'static str, &'static str) {
    const MAGIC: &[(&[u8], &str, &str)] = &[
        (b"\x89PNG\r\n\x1a\n", "PNG image", "png"),
        (b"\xff\xd8\xff", "JPEG image", "jpg"),
        (b"GIF87a", "GIF image", "gif"),
        (b"GIF89a", "GIF image", "gif"),
        (b"%PDF-", "PDF document", "pdf"),
        (b"PK\x03\x04", "ZIP archive", "zip"),
        (b"\x1f\x8b", "gzip data", "gz"),
        (b"\x7fELF", "ELF executable", "bin"),
        (b"\0asm", "WebAssembly module", "wasm"),
        (b"SQLite format 3\0", "SQLite database", "sqlite"),
        (b"7z\xbc\xaf\x27\x1c", "7-Zip archive", "7z"),
        (b"MZ", "Windows executable", "exe"),
        (b"\xd4\xc3\xb2\xa1", "pcap capture", "pcap"),
        (b"\xa1\xb2\xc3\xd4", "pcap capture", "pcap"),
    ];
    for (magic, label, ext) in MAGIC {
        if bytes.starts_with(magic) {
            return (label, ext);
        }
    }
    if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        return ("WebP image", "webp");
    }
    ("binary data", "bin")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_keeps_within_limit_and_marks_cuts() {
        let mut line = Line::new(20);
        line.lit("Read ").text("a/very/long/path/to/some/file.py");
        let out = line.finish();
        assert_eq!(out.chars().count(), 20);
        assert!(out.ends_with('…'), "{out}");
    }

    #[test]
    fn optional_parts_only_when_whole() {
        let mut line = Line::new(16);
        line.lit("exit 0");
        assert!(line.opt(", ", "3 lines"));
        assert!(!line.opt(": ", "something long"));
        assert_eq!(line.finish(), "exit 0, 3 lines");
    }

    #[test]
    fn pieces_fold_whitespace_and_mask_before_cutting() {
        assert_eq!(piece("a\n\n  b\tc ", 50), "a b c");
        let secret = format!("key sk-{}", "a".repeat(40));
        assert_eq!(piece(&secret, 8), "key sk-…");
        assert_eq!(piece(&secret, 50), "key sk-***");
    }

    #[test]
    fn finds_error_lines_and_names() {
        let tb = "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n    import foo\nModuleNotFoundError: No module named 'foo'\n";
        assert_eq!(
            error_line(tb),
            Some("ModuleNotFoundError: No module named 'foo'")
        );
        assert_eq!(
            error_name("ModuleNotFoundError: No module"),
            Some("ModuleNotFoundError")
        );
        assert_eq!(
            error_name("raise django.core.exceptions.ValidationError"),
            Some("django.core.exceptions.ValidationError")
        );
        assert_eq!(error_name("an Error occurred"), None);
        assert_eq!(error_line("all good\nfine\n"), None);
    }

    #[test]
    fn sizes_read_like_the_seeds() {
        assert_eq!(human_size(512), "512 B");
        assert_eq!(human_size(1523), "1.5 KB");
        assert_eq!(human_size(45_977), "44.9 KB");
        assert_eq!(human_size(150 * 1024 * 1024), "150 MB");
    }

    #[test]
    fn sniffs_common_binaries() {
        assert_eq!(sniff_binary(b"\x89PNG\r\n\x1a\nrest").0, "PNG image");
        assert_eq!(sniff_binary(b"%PDF-1.7").1, "pdf");
        assert_eq!(sniff_binary(&[0xff, 0xfe, 0x00]).0, "binary data");
    }
}
