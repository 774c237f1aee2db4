//! Reducers for listings and content searches (seed rule `fs:list_dir`, and grep-like tools).
//!
//! A listing keeps its path and counts (files, directories) and as many names as fit; a search
//! keeps its pattern, the number of matches and the paths that matched — the next thing an agent
//! usually does is open one of them.

use std::collections::BTreeMap;

use crate::step::ToolKind;

use super::text::{self, plural, Line};
use super::{Input, Outcome};

/// Entries of a listing, as far as the output tells them apart.
#[derive(Debug, Default)]
pub(crate) struct Listing<'a> {
    pub(crate) names: Vec<&'a str>,
    pub(crate) dirs: Option<u64>,
    /// A count the tool printed itself (`Found 12 matches`), which wins over counted lines.
    pub(crate) stated: Option<u64>,
}

/// A tool that lists a directory or globs paths (`LS`, `Glob`, `list_dir`, SWE-agent
/// `find_file`).
pub(crate) fn list(input: &Input<'_>) -> Outcome {
    let args = &input.args;
    let path = args
        .str(&[
            "path",
            "dir_path",
            "directory",
            "dir",
            "relative_workspace_path",
            "target_directory",
        ])
        .or_else(|| {
            args.str(&["command"])
                .and_then(|c| c.split_whitespace().nth(2))
        });
    let pattern = args
        .str(&["pattern", "file_name", "glob", "name"])
        .or_else(|| {
            args.str(&["command"])
                .and_then(|c| c.split_whitespace().nth(1))
        })
        .map(|p| p.trim_matches('"'));
    let listing = parse_listing(input.env.body.as_ref(), false);
    list_outcome(input, path, pattern, None, &listing)
}

/// The observation of a listing, whichever tool or command made it.
pub(crate) fn list_outcome(
    input: &Input<'_>,
    path: Option<&str>,
    pattern: Option<&str>,
    command: Option<&str>,
    listing: &Listing<'_>,
) -> Outcome {
    let body = input.env.body.as_ref();
    let mut out = Outcome::new(ToolKind::ListDir, String::new())
        .arg("path", path)
        .arg("pattern", pattern)
        .arg(
            "command",
            command.map(super::files::one_line_command).as_deref(),
        );
    if let Some(code) = input.env.exit_code {
        out = out.fact("exit_code", code);
    }
    let shown = path.unwrap_or(".");
    let failed_exit = input.env.exit_code.is_some_and(|c| c != 0) && listing.names.is_empty();
    if input.is_error || failed_exit {
        let why = text::error_line(body)
            .or_else(|| text::last_meaningful(body))
            .unwrap_or("failed");
        let mut line = Line::new(input.max);
        line.lit("Listing ")
            .text_upto(shown, input.max / 2)
            .lit(" failed");
        line.tail(": ", why, 8);
        out.observation = line.finish();
        return out.failed(why.to_owned());
    }
    let count = listing.stated.unwrap_or(listing.names.len() as u64);
    out.results = Some(count);
    let mut line = Line::new(input.max);
    match pattern {
        Some(p) => {
            line.lit("Found ")
                .lit(&plural(count, "path", "paths"))
                .lit(" matching '")
                .text_upto(p, input.max / 3)
                .lit("'");
            if path.is_some() {
                line.lit(" in ").text_upto(shown, input.max / 3);
            }
        }
        None => {
            line.lit("Listed ")
                .text_upto(shown, input.max / 2)
                .lit(": ")
                .lit(&plural(count, "entry", "entries"));
            if let Some(dirs) = listing.dirs {
                let files = count.saturating_sub(dirs);
                line.lit(&format!(" ({files} files, {dirs} dirs)"));
                out = out.fact("dirs", dirs).fact("files", files);
            }
        }
    }
    let mut sep = ": ";
    for (i, name) in listing.names.iter().enumerate() {
        if !line.opt(sep, name) {
            let left = listing.names.len() - i;
            line.opt(", ", &format!("+{left} more"));
            break;
        }
        sep = ", ";
    }
    out.observation = line.finish();
    out
}

/// Reads names out of the listing formats agents see: `ls` (plain, `-F`, `-l`), `find`, glob
/// results, Claude Code's `LS` tree, OpenHands' directory view, SWE-agent's `find_file`.
pub(crate) fn parse_listing(body: &str, columns: bool) -> Listing<'_> {
    let mut listing = Listing::default();
    let mut dirs = 0u64;
    let mut typed = false;
    for raw in text::lines(body) {
        let line = raw.trim_end();
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed == "." || trimmed == ".." {
            continue;
        }
        if let Some(n) = stated_count(trimmed) {
            listing.stated = Some(n);
            continue;
        }
        if trimmed.starts_with("total ")
            || trimmed.starts_with("Here's the files and directories")
            || trimmed.starts_with("NOTE:")
            || trimmed.starts_with("There are more than")
            || trimmed.starts_with("End of matches")
            || trimmed.starts_with("(Results are truncated")
        {
            continue;
        }
        // `ls -l`: permissions first, name last.
        let long = trimmed.len() > 10
            && matches!(
                trimmed.as_bytes()[0],
                b'd' | b'-' | b'l' | b'c' | b'b' | b'p' | b's'
            )
            && trimmed.as_bytes()[1..10]
                .iter()
                .all(|b| b"rwxstST-".contains(b));
        let name = if long {
            typed = true;
            let name = trimmed.split_whitespace().nth(8).map_or(trimmed, |_| {
                // Names may hold spaces: take everything after the eighth field.
                let mut rest = trimmed;
                for _ in 0..8 {
                    rest = rest.trim_start();
                    rest = rest.find(char::is_whitespace).map_or("", |i| &rest[i..]);
                }
                rest.trim()
            });
            if name == "." || name == ".." {
                continue;
            }
            if trimmed.starts_with('d') {
                dirs += 1;
            }
            name
        } else if columns && trimmed.contains(char::is_whitespace) {
            // `ls` printing several names per line.
            for name in trimmed.split_whitespace() {
                if name.ends_with('/') {
                    typed = true;
                    dirs += 1;
                }
                listing.names.push(name);
            }
            continue;
        } else {
            // Claude Code's tree: `- name/`.
            let name = trimmed.strip_prefix("- ").unwrap_or(trimmed);
            if name.ends_with('/') {
                typed = true;
                dirs += 1;
            }
            name
        };
        listing.names.push(name);
    }
    if typed {
        listing.dirs = Some(dirs);
    }
    listing
}

/// `Found 3 matches for "x" in /dir:` (SWE-agent) or `Found 3 files` (Claude Code); `No matches
/// found` and `No files found` are zero.
fn stated_count(line: &str) -> Option<u64> {
    if line.starts_with("No matches found") || line.starts_with("No files found") {
        return Some(0);
    }
    let rest = line.strip_prefix("Found ")?;
    let (n, after) = rest.split_once(' ')?;
    let n = n.parse().ok()?;
    (after.starts_with("match") || after.starts_with("file") || after.starts_with("result"))
        .then_some(n)
}

/// Matches of a content search, by file.
#[derive(Debug, Default)]
pub(crate) struct Matches<'a> {
    /// Match count per file, in first-seen order.
    pub(crate) files: Vec<(&'a str, u64)>,
    /// Matches whose file is not named (a single-file grep, or bare lines).
    pub(crate) unnamed: u64,
    /// Line numbers of the first matches, when the output gives them and names at most one file.
    pub(crate) lines: Vec<u64>,
    /// The total the tool printed itself, when it did.
    pub(crate) stated: Option<u64>,
    /// The text of the first match, without its location.
    pub(crate) first_text: Option<&'a str>,
}

/// Most line numbers kept for an observation.
const MAX_LINE_NUMBERS: usize = 12;

impl Matches<'_> {
    pub(crate) fn total(&self) -> u64 {
        self.stated
            .unwrap_or_else(|| self.unnamed + self.files.iter().map(|(_, n)| n).sum::<u64>())
    }

    fn note_line(&mut self, n: Option<u64>) {
        if let Some(n) = n {
            if self.lines.len() < MAX_LINE_NUMBERS {
                self.lines.push(n);
            }
        }
    }
}

/// How a search's output lines are to be read.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GrepMode {
    /// `-l`: every line is a file name.
    pub(crate) files_only: bool,
    /// `-c`: lines are `file:count`.
    pub(crate) counts: bool,
    /// `-A/-B/-C`: lines without `:` after the location are context, not matches.
    pub(crate) context: bool,
}

/// A content search tool (`Grep`, `grep_files`, SWE-agent `search_dir`/`search_file`).
pub(crate) fn grep(input: &Input<'_>) -> Outcome {
    let args = &input.args;
    let command_words: Vec<&str> = args
        .str(&["command"])
        .map(|c| c.split_whitespace().map(|w| w.trim_matches('"')).collect())
        .unwrap_or_default();
    let pattern = args
        .str(&["pattern", "query", "regex", "search_term", "search", "term"])
        .or_else(|| command_words.get(1).copied());
    let path = args
        .str(&["path", "dir", "directory", "file", "include", "glob"])
        .or_else(|| command_words.get(2).copied());
    let mode = GrepMode {
        files_only: args.str(&["output_mode"]) == Some("files_with_matches"),
        counts: args.str(&["output_mode"]) == Some("count"),
        context: args.get(&["-A", "-B", "-C", "context"]).is_some(),
    };
    let matches = parse_matches(input.env.body.as_ref(), mode);
    grep_outcome(input, pattern, path, None, &matches)
}

/// The observation of a content search, whichever tool or command made it.
pub(crate) fn grep_outcome(
    input: &Input<'_>,
    pattern: Option<&str>,
    path: Option<&str>,
    command: Option<&str>,
    matches: &Matches<'_>,
) -> Outcome {
    let body = input.env.body.as_ref();
    let mut out = Outcome::new(ToolKind::Grep, String::new())
        .arg("pattern", pattern)
        .arg("path", path)
        .arg(
            "command",
            command.map(super::files::one_line_command).as_deref(),
        );
    let code = input.env.exit_code;
    if let Some(code) = code {
        out = out.fact("exit_code", code);
    }
    let total = matches.total();
    // grep exits 1 for "no match": a finding, not a failure. 2 and up are errors.
    let failed = input.is_error || code.is_some_and(|c| c >= 2);
    let mut line = Line::new(input.max);
    line.lit("Searched '")
        .text_upto(pattern.unwrap_or("?"), input.max / 3)
        .lit("'");
    if let Some(p) = path {
        line.opt(" in ", p);
    }
    if failed {
        let why = text::error_line(body)
            .or_else(|| text::last_meaningful(body))
            .unwrap_or("failed");
        line.lit(" failed");
        if let Some(c) = code.filter(|c| *c != 0) {
            line.lit(&format!(" (exit {c})"));
        }
        line.tail(": ", why, 8);
        out.observation = line.finish();
        return out.failed(why.to_owned());
    }
    out.results = Some(total);
    if total == 0 {
        line.lit(": no matches");
        out.observation = line.finish();
        return out;
    }
    line.lit(": ").lit(&plural(total, "match", "matches"));
    let single_text = (total == 1)
        .then_some(matches.first_text)
        .flatten()
        .filter(|t| !t.trim().is_empty());
    // One file: where in it is what the agent reads next.
    let one_file = matches.files.len() <= 1 && (matches.files.is_empty() || matches.unnamed == 0);
    if one_file && !matches.lines.is_empty() {
        if let [(file, _)] = matches.files.as_slice() {
            if path != Some(*file) {
                line.opt(" in ", file);
            }
        }
        let word = if matches.lines.len() == 1 {
            " at line "
        } else {
            " at lines "
        };
        let mut sep = word;
        for (i, n) in matches.lines.iter().enumerate() {
            if !line.opt(sep, &n.to_string()) {
                break;
            }
            sep = ", ";
            if i + 1 == matches.lines.len() && (matches.lines.len() as u64) < total {
                line.opt(", ", "…");
            }
        }
        if let Some(t) = single_text {
            line.tail(": ", t.trim(), 12);
        }
        out.observation = line.finish();
        return out;
    }
    if let [(file, _)] = matches.files.as_slice() {
        if path == Some(*file) {
            if let Some(t) = single_text {
                line.tail(": ", t.trim(), 12);
            }
            out.observation = line.finish();
            return out;
        }
    }
    if !matches.files.is_empty() {
        line.lit(&format!(
            " in {}",
            plural(matches.files.len() as u64, "file", "files")
        ));
        out = out.fact("files", matches.files.len() as u64);
    }
    // The paths are what the agent opens next: as many as fit, busiest first.
    let mut files = matches.files.clone();
    files.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let mut sep = ": ";
    for (i, (file, n)) in files.iter().enumerate() {
        let label = if *n > 1 {
            format!("{file} ({n})")
        } else {
            (*file).to_owned()
        };
        if !line.opt(sep, &label) {
            line.opt(", ", &format!("+{} more", files.len() - i));
            break;
        }
        sep = ", ";
    }
    out.observation = line.finish();
    out
}

/// Reads matches out of grep-like output: `path:line:text`, `path:text`, `line:text`, bare
/// paths (`-l`), `path:count` (`-c`), and SWE-agent's `Found N matches` summaries.
pub(crate) fn parse_matches(body: &str, mode: GrepMode) -> Matches<'_> {
    let mut m = Matches::default();
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for raw in text::lines(body) {
        let line = raw.trim_end();
        if line.is_empty() || line == "--" || line.starts_with("End of matches") {
            continue;
        }
        if let Some(n) = stated_count(line) {
            m.stated = Some(n);
            continue;
        }
        // SWE-agent search_dir: `/repo/a.py (3 matches)`.
        if let Some((file, n)) = swe_file_count(line) {
            bump(&mut m, &mut index, file, n);
            continue;
        }
        // SWE-agent search_file: `Line 12: text`.
        if let Some((n, rest)) = line.strip_prefix("Line ").and_then(|r| {
            let (n, rest) = r.split_once(':')?;
            Some((n.trim().parse().ok()?, rest))
        }) {
            m.unnamed += 1;
            m.note_line(Some(n));
            m.first_text.get_or_insert(rest);
            continue;
        }
        if mode.files_only {
            bump(&mut m, &mut index, line.trim(), 1);
            continue;
        }
        match locate(line) {
            Some(Located::InFile {
                file,
                count,
                line: at,
                text,
            }) => {
                let n = if mode.counts { count.unwrap_or(1) } else { 1 };
                if !(mode.counts && n == 0) {
                    bump(&mut m, &mut index, file, n);
                    m.note_line(at);
                    if !mode.counts {
                        m.first_text.get_or_insert(text);
                    }
                }
            }
            Some(Located::Context) => {}
            Some(Located::LineOnly(n, text)) => {
                m.unnamed += 1;
                m.note_line(Some(n));
                m.first_text.get_or_insert(text);
            }
            None if mode.context => {}
            None if looks_like_path(line) => bump(&mut m, &mut index, line.trim(), 1),
            None => {
                m.unnamed += 1;
                m.first_text.get_or_insert(line);
            }
        }
    }
    m
}

fn bump<'a>(m: &mut Matches<'a>, index: &mut BTreeMap<&'a str, usize>, file: &'a str, n: u64) {
    match index.get(file) {
        Some(&i) => m.files[i].1 += n,
        None => {
            index.insert(file, m.files.len());
            m.files.push((file, n));
        }
    }
}

enum Located<'a> {
    /// `file:12:text`, `file:text` or (`-c`) `file:3`.
    InFile {
        file: &'a str,
        count: Option<u64>,
        line: Option<u64>,
        text: &'a str,
    },
    /// `file-12-text`: a context line.
    Context,
    /// `12:text`: a match in the one file searched, at that line.
    LineOnly(u64, &'a str),
}

fn locate(line: &str) -> Option<Located<'_>> {
    let digits = line.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0 && line.as_bytes().get(digits) == Some(&b':') {
        return line[..digits]
            .parse()
            .ok()
            .map(|n| Located::LineOnly(n, &line[digits + 1..]));
    }
    if digits > 0 && line.as_bytes().get(digits) == Some(&b'-') {
        return Some(Located::Context);
    }
    let colon = line.find(':')?;
    let file = &line[..colon];
    if !looks_like_path(file) {
        return None;
    }
    let rest = &line[colon + 1..];
    let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let whole = !n.is_empty() && rest.len() == n.len();
    let count = if whole { n.parse().ok() } else { None };
    let numbered = !n.is_empty() && rest[n.len()..].starts_with(':');
    let at = if numbered { n.parse().ok() } else { None };
    let text = if numbered { &rest[n.len() + 1..] } else { rest };
    Some(Located::InFile {
        file,
        count,
        line: at,
        text,
    })
}

/// Whether a string reads as a file path: no spaces, and a slash or a dot-extension.
fn looks_like_path(s: &str) -> bool {
    let s = s.trim();
    !s.is_empty()
        && s.len() < 512
        && !s.contains(char::is_whitespace)
        && !s.starts_with("http")
        && (s.contains('/')
            || s.rsplit_once('.').is_some_and(|(stem, ext)| {
                !stem.is_empty()
                    && !ext.is_empty()
                    && ext.len() <= 8
                    && ext.bytes().all(|b| b.is_ascii_alphanumeric())
            }))
}

fn swe_file_count(line: &str) -> Option<(&str, u64)> {
    let rest = line
        .strip_suffix(" matches)")
        .or_else(|| line.strip_suffix(" match)"))?;
    let open = rest.rfind(" (")?;
    let n = rest[open + 2..].parse().ok()?;
    Some((&rest[..open], n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_formats() {
        let l = parse_listing("total 8\ndrwxr-xr-x 2 root root 4096 Oct 24  2024 .\ndrwxr-xr-x 2 root root 4096 Oct 24  2024 src\n-rw-r--r-- 1 root root 12 Oct 24 10:01 my file.txt\n", false);
        assert_eq!(l.names, ["src", "my file.txt"]);
        assert_eq!(l.dirs, Some(1));
        let l = parse_listing("docs/\nsetup.py\ntests/\n", false);
        assert_eq!((l.names.len(), l.dirs), (3, Some(2)));
        let l = parse_listing("a\nb\n", false);
        assert_eq!((l.names.len(), l.dirs), (2, None));
        let l = parse_listing(
            "Found 1 matches for \"x.py\" in /r:\n/r/tests/x.py\n",
            false,
        );
        assert_eq!(
            (l.stated, l.names.as_slice()),
            (Some(1), &["/r/tests/x.py"][..])
        );
    }

    #[test]
    fn match_formats() {
        let m = parse_matches("a.py:1:x\na.py:7:y\nsrc/b.rs:3:z\n", GrepMode::default());
        assert_eq!(m.files, [("a.py", 2), ("src/b.rs", 1)]);
        assert_eq!(m.total(), 3);
        let m = parse_matches("670:            arrays.append(x)\n", GrepMode::default());
        assert_eq!((m.unnamed, m.files.len()), (1, 0));
        let m = parse_matches(
            "Found 2 files\nsrc/a.rs\nsrc/b.rs\n",
            GrepMode {
                files_only: true,
                ..GrepMode::default()
            },
        );
        assert_eq!(m.files.len(), 2);
        assert_eq!(m.total(), 2);
        let m = parse_matches(
            "a.py:3\nb.py:0\n",
            GrepMode {
                counts: true,
                ..GrepMode::default()
            },
        );
        assert_eq!(m.files, [("a.py", 3)]);
        let m = parse_matches("Found 4 matches for \"x\" in /r:\n/r/a.py (3 matches)\n/r/b.py (1 matches)\nEnd of matches for \"x\" in /r\n", GrepMode::default());
        assert_eq!((m.total(), m.files.len()), (4, 2));
    }
}
