//! The knowledge base's chunker: a file cut on its own structure, each chunk with the line
//! range it came from, so that a hit points back to `file:from-to`.
//!
//! - **Markdown** (`.md`, `.markdown`): one chunk per section (a heading and what follows it up
//!   to the next heading of any level); headings inside code fences are not headings.
//! - **Code** (common source extensions): top-level items — a new item starts at a line that
//!   is not indented, not a closing bracket, and follows a blank line (so a doc comment or an
//!   attribute stays with its item); small neighbours are merged.
//! - **JSON** (`.json`): one chunk per top-level key of an object (the whole value when the
//!   document is not an object).
//! - **Text** (anything else): blank-line blocks, small neighbours merged.
//!
//! A chunk longer than [`MAX_CHUNK_BYTES`] is cut at line boundaries, so none is unbounded.

use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};

/// Neighbouring blocks are merged while they stay within this many bytes.
pub const TARGET_CHUNK_BYTES: usize = 1_500;

/// No chunk is longer than this (a longer block is cut at line boundaries).
pub const MAX_CHUNK_BYTES: usize = 4_000;

/// How a file is chunked, from its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// Sections under headings.
    Markdown,
    /// Top-level items.
    Code,
    /// Top-level keys.
    Json,
    /// Blank-line blocks.
    Text,
}

const CODE_EXTENSIONS: &[&str] = &[
    "c", "cc", "cpp", "cs", "go", "h", "hpp", "java", "js", "jsx", "kt", "lua", "php", "py", "rb",
    "rs", "scala", "sh", "sql", "swift", "toml", "ts", "tsx", "yaml", "yml",
];

impl FileKind {
    /// The kind of a file named `path`.
    pub fn of(path: &str) -> Self {
        let ext = path
            .rsplit_once('.')
            .map(|(_, e)| e.to_ascii_lowercase())
            .unwrap_or_default();
        match ext.as_str() {
            "md" | "markdown" => Self::Markdown,
            "json" => Self::Json,
            e if CODE_EXTENSIONS.contains(&e) => Self::Code,
            _ => Self::Text,
        }
    }

    /// The name used in storage and output.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Markdown => "markdown",
            Self::Code => "code",
            Self::Json => "json",
            Self::Text => "text",
        }
    }
}

/// One chunk of a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// First line, 1-based.
    pub from_line: u32,
    /// Last line, inclusive.
    pub to_line: u32,
    /// The section heading (Markdown) or key (JSON) it belongs to, when there is one.
    pub heading: Option<String>,
    /// The text, as the file has it.
    pub text: String,
}

/// A run of lines `[from, to)` (0-based indexes into the file's lines) with its heading.
#[derive(Debug, Clone)]
struct Block {
    from: usize,
    to: usize,
    heading: Option<String>,
}

/// Cuts `text` (the content of the file at `path`) into chunks; a `.json` file that is not
/// valid JSON is refused, with the line where it breaks.
pub fn chunk(path: &str, text: &str) -> Result<Vec<Chunk>> {
    let lines: Vec<&str> = text.lines().collect();
    let kind = FileKind::of(path);
    let blocks = match kind {
        FileKind::Markdown => markdown(&lines),
        FileKind::Code => merge(&lines, code(&lines)),
        FileKind::Json => json(path, text, &lines)?,
        FileKind::Text => merge(&lines, paragraphs(&lines)),
    };
    let mut out = Vec::new();
    for b in blocks {
        for (from, to) in cut(&lines, b.from, b.to) {
            let body = lines[from..to].join("\n");
            if body.trim().is_empty() {
                continue;
            }
            out.push(Chunk {
                from_line: line_no(from + 1),
                to_line: line_no(to),
                heading: b.heading.clone(),
                text: body,
            });
        }
    }
    Ok(out)
}

fn line_no(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Sections: a heading line starts one; text before the first heading is its own.
fn markdown(lines: &[&str]) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut start = 0;
    let mut heading = None;
    let mut fence = false;
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            fence = !fence;
            continue;
        }
        if fence || !is_heading(line) {
            continue;
        }
        if i > start {
            blocks.push(Block {
                from: start,
                to: i,
                heading: heading.take(),
            });
        }
        start = i;
        heading = Some(line.trim_start_matches('#').trim().to_owned());
    }
    blocks.push(Block {
        from: start,
        to: lines.len(),
        heading,
    });
    blocks
}

fn is_heading(line: &str) -> bool {
    let hashes = line.chars().take_while(|c| *c == '#').count();
    (1..=6).contains(&hashes) && line[hashes..].starts_with(' ')
}

/// Top-level items of source code.
fn code(lines: &[&str]) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut start = 0;
    for i in 1..lines.len() {
        let line = lines[i];
        let starts_item = !line.trim().is_empty()
            && !line.starts_with(char::is_whitespace)
            && !line.starts_with(['}', ')', ']'])
            && lines[i - 1].trim().is_empty();
        if starts_item && i > start {
            blocks.push(Block {
                from: start,
                to: i,
                heading: None,
            });
            start = i;
        }
    }
    blocks.push(Block {
        from: start,
        to: lines.len(),
        heading: None,
    });
    blocks
}

/// Blank-line blocks.
fn paragraphs(lines: &[&str]) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut start = None;
    for (i, line) in lines.iter().enumerate() {
        match (line.trim().is_empty(), start) {
            (true, Some(s)) => {
                blocks.push(Block {
                    from: s,
                    to: i,
                    heading: None,
                });
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        blocks.push(Block {
            from: s,
            to: lines.len(),
            heading: None,
        });
    }
    blocks
}

/// Merges neighbouring blocks while they fit in [`TARGET_CHUNK_BYTES`].
fn merge(lines: &[&str], blocks: Vec<Block>) -> Vec<Block> {
    let size = |b: &Block| {
        lines[b.from..b.to]
            .iter()
            .map(|l| l.len() + 1)
            .sum::<usize>()
    };
    let mut out: Vec<Block> = Vec::new();
    for b in blocks {
        match out.last_mut() {
            Some(last) if size(last) + size(&b) <= TARGET_CHUNK_BYTES => last.to = b.to,
            _ => out.push(b),
        }
    }
    out
}

/// Cuts lines `[from, to)` into runs of at most [`MAX_CHUNK_BYTES`] (a single longer line is
/// its own run).
fn cut(lines: &[&str], from: usize, to: usize) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut start = from;
    let mut bytes = 0;
    for (i, line) in lines.iter().enumerate().take(to).skip(from) {
        let n = line.len() + 1;
        if bytes + n > MAX_CHUNK_BYTES && i > start {
            runs.push((start, i));
            start = i;
            bytes = 0;
        }
        bytes += n;
    }
    if start < to {
        runs.push((start, to));
    }
    runs
}

/// One block per top-level key of a JSON object, found by scanning the text (strings and
/// nesting respected), so each keeps its lines.
fn json(path: &str, text: &str, lines: &[&str]) -> Result<Vec<Block>> {
    if let Err(e) = serde_json::from_str::<serde_json::Value>(text) {
        return Err(MemoryError::InvalidInput {
            field: "file",
            reason: format!("{path} is not valid JSON (line {}: {e})", e.line()),
        });
    }
    let whole = vec![Block {
        from: 0,
        to: lines.len(),
        heading: None,
    }];
    if !text.trim_start().starts_with('{') {
        return Ok(whole);
    }
    // (line index, key) of each top-level key.
    let mut keys: Vec<(usize, String)> = Vec::new();
    let (mut depth, mut line) = (0usize, 0usize);
    let mut chars = text.chars().peekable();
    let mut expect_key = false;
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            '{' | '[' => {
                depth += 1;
                expect_key = depth == 1 && c == '{';
            }
            '}' | ']' => depth = depth.saturating_sub(1),
            ',' if depth == 1 => expect_key = true,
            '"' => {
                let mut s = String::new();
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            if let Some(n) = chars.next() {
                                s.push(n);
                            }
                        }
                        '"' => break,
                        '\n' => {
                            line += 1;
                            s.push(c);
                        }
                        _ => s.push(c),
                    }
                }
                if depth == 1 && expect_key {
                    keys.push((line, s));
                    expect_key = false;
                }
            }
            _ => {}
        }
    }
    if keys.is_empty() {
        return Ok(whole);
    }
    let mut blocks = Vec::new();
    for (i, (at, key)) in keys.iter().enumerate() {
        let to = keys.get(i + 1).map_or(lines.len(), |(next, _)| *next);
        // Two keys on one line share it: the first takes the line.
        if to <= *at {
            continue;
        }
        blocks.push(Block {
            from: *at,
            to,
            heading: Some(key.clone()),
        });
    }
    Ok(blocks)
}

/// What adding one file did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KbAdded {
    /// The file, as stored.
    pub path: String,
    /// How it was chunked.
    pub kind: FileKind,
    /// Its chunks now.
    pub chunks: usize,
    /// Chunks of an earlier version that were replaced.
    pub replaced: usize,
    /// The same content was already stored: nothing changed.
    pub unchanged: bool,
}

/// A file of the knowledge base.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KbFile {
    /// The file, as stored.
    pub path: String,
    /// How it was chunked.
    pub kind: String,
    /// Its chunks.
    pub chunks: usize,
    /// Their tokens together.
    pub tokens: u64,
    /// When it was (last) added, UTC milliseconds.
    pub added_ms: i64,
}

/// One knowledge-base search result, with its provenance: the file and line range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KbHit {
    /// The file.
    pub path: String,
    /// First line, 1-based.
    pub from_line: u32,
    /// Last line, inclusive.
    pub to_line: u32,
    /// The section heading or JSON key, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heading: Option<String>,
    /// The chunk's text.
    pub text: String,
    /// Its exact token count.
    pub tokens: u64,
    /// BM25 relevance, higher is better.
    pub score: f64,
}

/// A chunk with its token count, as the knowledge base stores it.
pub type CountedChunk = (Chunk, u64);

/// The chunks of the file `path` with content `text`, each with its token count by
/// `tokenizer` (counted before a backend's transaction, so that it holds the database for SQL
/// only).
pub(crate) fn counted_chunks(
    path: &str,
    text: &str,
    tokenizer: &loom_tokens::Tokenizer,
) -> Result<Vec<(Chunk, u64)>> {
    use loom_tokens::CountTokens as _;
    Ok(chunk(path, text)?
        .into_iter()
        .map(|c| {
            let n = tokenizer.count(&c.text);
            (c, n)
        })
        .collect())
}

/// The best of `hits` (best first) that fit: at most `limit`, their tokens summing to at most
/// `budget`. Greedy: a chunk that does not fit in what is left is skipped, never cut, and a
/// smaller one after it may still fit.
pub(crate) fn pack(hits: impl IntoIterator<Item = KbHit>, budget: u64, limit: usize) -> Vec<KbHit> {
    let mut left = budget;
    let mut out = Vec::new();
    for hit in hits {
        if out.len() >= limit || left == 0 {
            break;
        }
        if hit.tokens > left {
            continue;
        }
        left -= hit.tokens;
        out.push(hit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_is_cut_at_headings_outside_fences() {
        let text = "intro\n\n# One\nalpha\n```\n# not a heading\n```\n## Two\nbeta\n";
        let chunks = chunk("a.md", text).unwrap();
        let ranges: Vec<(u32, u32, Option<&str>)> = chunks
            .iter()
            .map(|c| (c.from_line, c.to_line, c.heading.as_deref()))
            .collect();
        assert_eq!(
            ranges,
            [(1, 2, None), (3, 7, Some("One")), (8, 9, Some("Two"))]
        );
        assert!(chunks[1].text.contains("# not a heading"));
    }

    #[test]
    fn json_is_cut_at_top_level_keys_with_their_lines() {
        let text =
            "{\n  \"name\": \"loom\",\n  \"deps\": {\n    \"a\": 1\n  },\n  \"x\": [1, 2]\n}\n";
        let chunks = chunk("p.json", text).unwrap();
        let keys: Vec<(&str, u32, u32)> = chunks
            .iter()
            .map(|c| (c.heading.as_deref().unwrap(), c.from_line, c.to_line))
            .collect();
        assert_eq!(keys, [("name", 2, 2), ("deps", 3, 5), ("x", 6, 7)]);
        let bad = chunk("p.json", "{\"a\": }").unwrap_err();
        assert!(
            bad.to_string().contains("p.json is not valid JSON"),
            "{bad}"
        );
    }

    #[test]
    fn code_is_cut_at_top_level_items_and_long_blocks_are_bounded() {
        let big = "x".repeat(TARGET_CHUNK_BYTES);
        let text =
            format!("/// Doc.\nfn a() {{\n    1\n}}\n\nfn b() {{\n    // {big}\n\n    2\n}}\n");
        let chunks = chunk("m.rs", &text).unwrap();
        assert_eq!(chunks.len(), 2, "{chunks:?}");
        assert_eq!((chunks[0].from_line, chunks[0].to_line), (1, 5));
        assert_eq!((chunks[1].from_line, chunks[1].to_line), (6, 10));
        let long = "word ".repeat(3_000);
        let chunks = chunk("t.txt", &format!("{long}\n{long}\n")).unwrap();
        // A line longer than the bound is a chunk of its own, never cut inside.
        assert!(chunks.iter().all(|c| c.from_line == c.to_line));
        assert_eq!(chunks.len(), 2);
    }

    #[test]
    fn text_blocks_are_merged_up_to_the_target() {
        let text = "one\ntwo\n\nthree\n\n\nfour\n";
        let chunks = chunk("notes.txt", text).unwrap();
        assert_eq!(chunks.len(), 1);
        assert_eq!((chunks[0].from_line, chunks[0].to_line), (1, 7));
    }
}
