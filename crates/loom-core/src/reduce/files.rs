//! Reducers for reading and writing files (seed rules `fs:read_file`, `fs:write_file`).
//!
//! A read keeps path, size, line count and type (the hash is in the step's stats); its content
//! goes to the blob store above the threshold. A write keeps path and how much was written, never
//! the content, which is on disk already.

use crate::step::ToolKind;

use super::args::Args;
use super::outline;
use super::text::{self, human_size, plural, Line};
use super::{Input, Outcome};

/// Argument names frameworks use for a file path.
pub(crate) const PATH_ARGS: &[&str] = &[
    "path",
    "file_path",
    "filepath",
    "filename",
    "file",
    "target_file",
    "absolute_path",
    "notebook_path",
    "file_name",
];

/// What is known about a read before looking at its output.
#[derive(Debug, Default)]
pub(crate) struct ReadSpec<'a> {
    pub(crate) path: Option<String>,
    /// First and last line asked for, when a range was.
    pub(crate) range: Option<(u64, Option<u64>)>,
    /// The shell command that read it, if one did.
    pub(crate) command: Option<&'a str>,
}

/// A tool that reads a file (`Read`, `read_file`, `str_replace_editor view`, SWE-agent `open`).
pub(crate) fn read(input: &Input<'_>) -> Outcome {
    let body = input.env.body.as_ref();
    // OpenHands' editor lists a directory when `view` is given one.
    if body.starts_with("Here's the files and directories") {
        return super::find::list(input);
    }
    let header = swe_header(body);
    let path = path_of(&input.args)
        .or_else(|| header.as_ref().map(|h| h.0.to_owned()))
        .or_else(|| input.env.open_file.map(str::to_owned));
    let spec = ReadSpec {
        path,
        range: range_of(&input.args),
        command: None,
    };
    read_outcome(input, spec)
}

/// The observation of a read, whichever tool or command did it.
pub(crate) fn read_outcome(input: &Input<'_>, spec: ReadSpec<'_>) -> Outcome {
    let body = input.env.body.as_ref();
    let shown = spec.path.as_deref().unwrap_or("file");
    let mut out = Outcome::new(ToolKind::ReadFile, String::new())
        .arg("path", spec.path.as_deref())
        .arg("command", spec.command.map(one_line_command).as_deref());
    if let Some((a, b)) = spec.range {
        out = out.fact("from_line", a);
        if let Some(b) = b {
            out = out.fact("to_line", b);
        }
    }
    if let Some(code) = input.env.exit_code {
        out = out.fact("exit_code", code);
    }
    if let Some(why) = read_failure(input, body) {
        let mut line = Line::new(input.max);
        line.lit("Read ")
            .text_upto(shown, input.max / 2)
            .lit(" failed");
        if let Some(code) = input.env.exit_code.filter(|c| *c != 0) {
            line.lit(&format!(" (exit {code})"));
        }
        line.tail(": ", why, 8);
        out.observation = line.finish();
        let error = match input.env.exit_code.filter(|c| *c != 0) {
            Some(code) => format!("exit {code}: {why}"),
            None => why.to_owned(),
        };
        return out.failed(error);
    }
    let mut line = Line::new(input.max);
    let header = swe_header(body);
    line.lit(if header.is_some() && spec.command.is_none() {
        "Opened "
    } else {
        "Read "
    });
    line.text_upto(shown, input.max / 2);
    if let Some((a, b)) = spec.range {
        match b {
            Some(b) => line.lit(&format!(" lines {a}-{b}")),
            None => line.lit(&format!(" from line {a}")),
        };
    }
    let lines = text::line_count(body);
    out = out.fact("bytes", body.len() as u64);
    let mut details = Vec::new();
    match header {
        // The viewer shows a window of a longer file: say which part, and how long the file is.
        Some((_, total)) => {
            details.push(format!("{total} lines total"));
            if let Some((a, b)) = numbered_window(body) {
                details.push(format!("showing {a}-{b}"));
            }
            out = out.fact("total_lines", total);
        }
        None => {
            details.push(human_size(body.len() as u64));
            details.push(plural(lines, "line", "lines"));
        }
    }
    details.push(file_type(spec.path.as_deref(), input).to_owned());
    if let Some(elided) = input.env.elided_chars {
        details.push(format!("{elided} chars elided by the agent"));
    }
    line.lit(" (").lit(&details.join(", ")).lit(")");
    let defined = outline::definitions(body);
    defines(&mut line, &defined);
    let used: Vec<&str> = outline::uses(body)
        .into_iter()
        .filter(|u| !defined.contains(u) && !spec.path.as_deref().is_some_and(|p| p.contains(u)))
        .collect();
    uses(&mut line, &used);
    out.observation = line.finish();
    out
}

/// Appends `; defines a, b, c +N more` with as many names as fit whole.
fn defines(line: &mut Line, names: &[&str]) {
    // Room kept for the count of the names that do not fit.
    const MORE: usize = " +999 more".len();
    let mut shown = 0;
    for (i, name) in names.iter().enumerate() {
        let sep = if i == 0 { "; defines " } else { ", " };
        let last = i + 1 == names.len();
        let need = sep.len() + name.chars().count() + if last { 0 } else { MORE };
        if need > line.room() || !line.opt(sep, name) {
            break;
        }
        shown += 1;
    }
    if shown > 0 && shown < names.len() {
        line.opt(" ", &format!("+{} more", names.len() - shown));
    }
}

/// Appends `; uses a.b, c.d` with as many of the names the code uses as fit whole, after its
/// definitions: the room the observation has left.
fn uses(line: &mut Line, names: &[&str]) {
    for (i, name) in names.iter().enumerate() {
        let sep = if i == 0 { "; uses " } else { ", " };
        if !line.opt(sep, name) {
            break;
        }
    }
}

/// Why a read failed, when it did: the error line of a short output or of a failed command.
fn read_failure<'a>(input: &Input<'a>, body: &'a str) -> Option<&'a str> {
    let failed_exit = input.env.exit_code.is_some_and(|c| c != 0);
    if input.is_error || failed_exit || input.env.timed_out {
        let why = text::error_line(body)
            .or_else(|| text::last_meaningful(body))
            .unwrap_or(if input.env.timed_out {
                "timed out"
            } else {
                "no output"
            });
        return Some(why);
    }
    // File content may well contain the word "Error"; only a short answer is read as one.
    if body.len() > 600 {
        return None;
    }
    let first = text::first_meaningful(body)?;
    let lower = first.to_ascii_lowercase();
    let failed = lower.starts_with("error")
        || lower.starts_with("file not found")
        || (lower.contains("does not exist") && text::meaningful_count(body, 3) <= 2)
        || lower.contains("no such file or directory");
    failed.then_some(first)
}

/// A type for people: the language from the extension, else the detected content type.
fn file_type(path: Option<&str>, input: &Input<'_>) -> &'static str {
    let ext = path
        .and_then(|p| p.rsplit('/').next())
        .and_then(|name| name.rsplit_once('.'))
        .map(|(_, ext)| ext.to_ascii_lowercase());
    let by_ext = match ext.as_deref() {
        Some("py") => "Python",
        Some("rs") => "Rust",
        Some("js" | "mjs" | "cjs") => "JavaScript",
        Some("ts" | "tsx") => "TypeScript",
        Some("go") => "Go",
        Some("java") => "Java",
        Some("c" | "h") => "C",
        Some("cc" | "cpp" | "hpp" | "cxx") => "C++",
        Some("rb") => "Ruby",
        Some("sh" | "bash") => "shell",
        Some("json") => "JSON",
        Some("yaml" | "yml") => "YAML",
        Some("toml") => "TOML",
        Some("md" | "rst" | "txt") => "text",
        Some("html" | "htm") => "HTML",
        Some("xml") => "XML",
        Some("csv") => "CSV",
        Some("cfg" | "ini") => "config",
        _ => "",
    };
    if !by_ext.is_empty() {
        return by_ext;
    }
    input.stats.content_type.as_str()
}

/// First and last line number of a numbered listing (`12:code`, `   12\tcode`, `12→code`).
fn numbered_window(body: &str) -> Option<(u64, u64)> {
    let mut first = None;
    let mut last = None;
    for (n, _) in text::lines(body).filter_map(text::line_number) {
        first.get_or_insert(n);
        last = Some(n);
    }
    Some((first?, last?))
}

/// SWE-agent's viewer header: `[File: /repo/a.py (10 lines total)]`.
pub(crate) fn swe_header(body: &str) -> Option<(&str, u64)> {
    let start = body.find("[File: ")?;
    // Only near the top (edits print a confirmation line first).
    if start > 400 {
        return None;
    }
    let rest = &body[start + "[File: ".len()..];
    let end = rest.find(" lines total)]")?;
    let inner = &rest[..end];
    let open = inner.rfind(" (")?;
    let total = inner[open + 2..].trim().parse().ok()?;
    Some((&inner[..open], total))
}

/// The file path argument, including SWE-agent's text form (`open chall.py 10`).
pub(crate) fn path_of(args: &Args) -> Option<String> {
    if let Some(p) = args.str(PATH_ARGS) {
        return Some(p.to_owned());
    }
    let command = args.str(&["command"])?;
    let first_line = command.lines().next()?;
    let mut words = first_line.split_whitespace();
    let verb = words.next()?;
    if matches!(
        verb,
        "open" | "create" | "goto" | "edit" | "insert" | "append"
    ) {
        return words
            .next()
            .filter(|w| !w.starts_with(|c: char| c.is_ascii_digit()))
            .map(|w| w.trim_matches('"').to_owned());
    }
    None
}

/// A requested line range: `offset`/`limit` (Claude Code), `view_range` (OpenHands),
/// `start_line`/`end_line`, `line_number` (SWE-agent `goto`).
fn range_of(args: &Args) -> Option<(u64, Option<u64>)> {
    if let Some(serde_json::Value::Array(r)) = args.get(&["view_range"]) {
        let a = r.first().and_then(serde_json::Value::as_i64)?;
        let b = r.get(1).and_then(serde_json::Value::as_i64);
        return Some((
            u64::try_from(a).ok()?,
            b.and_then(|b| u64::try_from(b).ok()),
        ));
    }
    if let Some(start) = args.int(&["start_line", "offset", "line_number", "line"]) {
        let start = u64::try_from(start).ok()?;
        let end = args
            .int(&["end_line"])
            .and_then(|e| u64::try_from(e).ok())
            .or_else(|| {
                let limit = u64::try_from(args.int(&["limit"])?).ok()?;
                Some((start + limit).saturating_sub(1))
            });
        return Some((start.max(1), end));
    }
    None
}

/// The first line of a command, for display (here-document bodies are not repeated).
pub(crate) fn one_line_command(command: &str) -> String {
    let mut lines = command
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    let first = lines.next().unwrap_or("").trim();
    if lines.next().is_some() {
        format!("{first} …")
    } else {
        first.to_owned()
    }
}

/// A tool that writes or edits a file.
pub(crate) fn write(input: &Input<'_>) -> Outcome {
    let body = input.env.body.as_ref();
    if is_patch_tool(input) {
        return patch(input);
    }
    let args = &input.args;
    let header = swe_header(body);
    let path = path_of(args)
        .or_else(|| header.as_ref().map(|h| h.0.to_owned()))
        .or_else(|| input.env.open_file.map(str::to_owned));
    let shown = path.as_deref().unwrap_or("file").to_owned();
    let mut out = Outcome::new(ToolKind::WriteFile, String::new()).arg("path", path.as_deref());
    if let Some(why) = write_failure(input, body) {
        let mut line = Line::new(input.max);
        line.lit("Write to ")
            .text_upto(&shown, input.max / 2)
            .lit(" failed");
        line.tail(": ", why, 8);
        out.observation = line.finish();
        return out.failed(why.to_owned());
    }
    let sub = args
        .str(&["command"])
        .map(|c| c.split_whitespace().next().unwrap_or(""));
    let mut line = Line::new(input.max);
    let content = args.str(&["content", "file_text", "contents", "text"]);
    match (input.tool_name, sub) {
        (_, Some("str_replace")) | ("Edit" | "replace_in_file", _) => {
            let old = args.str(&["old_str", "old_string"]).unwrap_or("");
            let new = args.str(&["new_str", "new_string"]).unwrap_or("");
            line.lit("Edited ").text(&shown).lit(&format!(
                ": replaced {} with {}",
                plural(text::line_count(old), "line", "lines"),
                text::line_count(new)
            ));
        }
        ("MultiEdit", _) => {
            let n = args
                .get(&["edits"])
                .and_then(serde_json::Value::as_array)
                .map_or(0, Vec::len);
            line.lit("Edited ")
                .text(&shown)
                .lit(&format!(": {}", plural(n as u64, "edit", "edits")));
        }
        (_, Some("insert")) | ("insert", _) => {
            let new = args.str(&["new_str", "text"]).unwrap_or("");
            line.lit(&format!(
                "Inserted {} into ",
                plural(text::line_count(new), "line", "lines")
            ));
            line.text(&shown);
            if let Some(at) = args.int(&["insert_line", "line"]) {
                line.lit(&format!(" at line {at}"));
            }
        }
        (_, Some("undo_edit")) => {
            line.lit("Undid the last edit to ").text(&shown);
        }
        ("edit", _) => sweagent_edit(&mut line, args, &shown, body),
        _ => match content {
            Some(content) => {
                let verb = if sub == Some("create") || input.tool_name == "create" {
                    "Created "
                } else {
                    "Wrote "
                };
                line.lit(verb).text(&shown).lit(&format!(
                    " ({}, {})",
                    plural(text::line_count(content), "line", "lines"),
                    human_size(content.len() as u64)
                ));
                out = out
                    .fact("bytes_written", content.len() as u64)
                    .fact("bytes", content.len() as u64);
            }
            None => {
                let verb = if sub == Some("create") || input.tool_name == "create" {
                    "Created "
                } else {
                    "Wrote "
                };
                line.lit(verb).text(&shown);
                if let Some(first) =
                    text::first_meaningful(body).filter(|f| !f.starts_with("[File: "))
                {
                    line.tail(": ", first, 12);
                }
            }
        },
    }
    if let Some((_, total)) = header {
        line.opt("; ", &format!("now {}", plural(total, "line", "lines")));
        out = out.fact("total_lines", total);
    }
    out.observation = line.finish();
    out
}

/// SWE-agent's `edit`: `edit 10:12\n…\nend_of_edit`, or `search`/`replace` arguments.
fn sweagent_edit(line: &mut Line, args: &Args, path: &str, body: &str) {
    line.lit("Edited ").text(path);
    if let Some(command) = args.str(&["command"]) {
        let first = command.lines().next().unwrap_or("");
        if let Some(range) = first.split_whitespace().nth(1) {
            line.lit(" lines ").text(&range.replace(':', "-"));
        }
        let new_lines = command.lines().count().saturating_sub(2);
        line.opt(", ", &plural(new_lines as u64, "new line", "new lines"));
    } else if let Some(first) = text::first_meaningful(body) {
        // "Replaced 1 occurrences. Please review the changes…": keep the first sentence.
        let sentence = first.split(". ").next().unwrap_or(first);
        line.tail(": ", sentence, 10);
    }
}

fn write_failure<'a>(input: &Input<'a>, body: &'a str) -> Option<&'a str> {
    let failed_exit = input.env.exit_code.is_some_and(|c| c != 0);
    let head = &body[..text::floor_char_boundary(body, 4096)];
    let first = text::first_meaningful(head);
    if input.is_error || failed_exit {
        return Some(text::error_line(head).or(first).unwrap_or("failed"));
    }
    let first = first?;
    let lower = first.to_ascii_lowercase();
    let failed = lower.starts_with("error")
        || lower.starts_with("no replacement was performed")
        || lower.starts_with("your proposed edit has introduced")
        || lower.contains("did not appear verbatim")
        || lower.starts_with("invalid");
    failed.then(|| {
        // Name the syntax error if the linter gave one (`E999 IndentationError: …`).
        text::lines(head)
            .map(|l| l.trim().trim_start_matches("- "))
            .find(|l| text::error_name(l).is_some())
            .unwrap_or(first)
    })
}

fn is_patch_tool(input: &Input<'_>) -> bool {
    input.tool_name == "apply_patch"
        || input
            .args
            .str(&["input", "patch"])
            .is_some_and(|p| p.trim_start().starts_with("*** Begin Patch"))
}

/// Codex `apply_patch`: `*** Begin Patch\n*** Update File: a.rs\n@@\n-old\n+new\n*** End Patch`.
fn patch(input: &Input<'_>) -> Outcome {
    let args = &input.args;
    let text_arg = args
        .str(&["input", "patch"])
        .map(str::to_owned)
        .or_else(|| {
            // Freeform tools send the patch itself as the argument text.
            (args.raw().trim_start().starts_with("*** Begin Patch")).then(|| args.raw().to_owned())
        });
    let patch = text_arg.unwrap_or_default();
    let mut files: Vec<(String, &str, u64, u64)> = Vec::new();
    for l in patch.lines() {
        let op = [
            ("*** Update File: ", "edited"),
            ("*** Add File: ", "new"),
            ("*** Delete File: ", "deleted"),
        ]
        .iter()
        .find_map(|(p, what)| {
            l.strip_prefix(p)
                .map(|rest| (rest.trim().to_owned(), *what))
        });
        if let Some((path, what)) = op {
            files.push((path, what, 0, 0));
        } else if let Some(last) = files.last_mut() {
            if l.starts_with('+') {
                last.2 += 1;
            } else if l.starts_with('-') {
                last.3 += 1;
            }
        }
    }
    let body = input.env.body.as_ref();
    let mut out = Outcome::new(ToolKind::WriteFile, String::new());
    if let Some((first, ..)) = files.first() {
        out = out.arg("path", Some(first));
    }
    out = out.fact("files", files.len() as u64);
    let mut line = Line::new(input.max);
    if let Some(why) = write_failure(input, body) {
        line.lit("Patch failed");
        line.tail(": ", why, 8);
        out.observation = line.finish();
        return out.failed(why.to_owned());
    }
    line.lit(&format!(
        "Patched {}",
        plural(files.len() as u64, "file", "files")
    ));
    let mut sep = ": ";
    for (path, what, add, del) in &files {
        let detail = match *what {
            "edited" => format!("{path} (+{add} -{del})"),
            other => format!("{path} ({other})"),
        };
        if !line.opt(sep, &detail) {
            line.opt(", ", "…");
            break;
        }
        sep = ", ";
    }
    out.observation = line.finish();
    out
}
