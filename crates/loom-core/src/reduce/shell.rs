//! The shell reducer (seed rule `system:shell`), and its sub-reducers for commands that read,
//! write, list or search.
//!
//! Agents with only a shell (mini-swe-agent, SWE-agent, OpenHands, Codex) read files with `cat`
//! or `nl | sed -n`, search with `grep`, list with `ls` and write with `cat <<EOF > f`. Such a step
//! is reduced as what it did — a file read keeps its path and range — while keeping the command
//! and its exit code. Anything else keeps the command, exit code and line count, the test summary
//! or the first line on success, and the error line (the tail of stderr) on failure.

use crate::step::ToolKind;

use super::cmdline::{CommandLine, Simple};
use super::files::{one_line_command, read_outcome, ReadSpec};
use super::find::{grep_outcome, list_outcome, parse_listing, parse_matches, GrepMode};
use super::text::{self, human_size, plural, Line};
use super::{Input, Outcome};

/// Programs that only filter or trim what a read or search printed.
const FILTERS: &[&str] = &[
    "head", "tail", "sed", "nl", "cut", "sort", "uniq", "less", "more", "cat",
];
/// Programs that search file contents.
const GREPS: &[&str] = &["grep", "egrep", "fgrep", "rg", "ag", "ack"];

/// Reduces a shell call.
pub(crate) fn reduce(input: &Input<'_>) -> Outcome {
    let Some(command) = input.args.command().or_else(|| {
        // Malformed JSON arguments: the raw text is the best account of the command there is.
        input.args.malformed().then(|| input.args.raw().to_owned())
    }) else {
        return run(input, "", None);
    };
    let line = CommandLine::parse(&command);
    if let Some((pipeline, more)) = line.main_pipeline() {
        if !more {
            if let Some(out) = specific(input, &command, &pipeline) {
                return out;
            }
        } else if let Some(out) = write_then_run(input, &command, &line) {
            return out;
        }
    }
    let program = line
        .main_pipeline()
        .and_then(|(p, _)| p.first().and_then(|s| s.program()).map(str::to_owned));
    run(input, &command, program.as_deref())
}

/// A command that reads, writes, lists or searches, reduced as that.
fn specific(input: &Input<'_>, command: &str, pipeline: &[&Simple]) -> Option<Outcome> {
    let first = pipeline.first()?;
    let prog = first.program()?;
    let rest_are_filters = pipeline[1..]
        .iter()
        .all(|s| s.program().is_some_and(|p| FILTERS.contains(&p)) && s.stdout_file().is_none());
    // Writes: `cat <<EOF > f`, `tee f <<EOF`, `echo … > f`, `sed -i … f`.
    if pipeline.len() == 1 {
        if let Some(out) = write(input, command, first, prog) {
            return Some(out);
        }
    }
    if pipeline.iter().any(|s| s.stdout_file().is_some()) {
        return None;
    }
    // `ls | grep x`, `find . | grep x`: a listing, filtered.
    let last_is_grep = pipeline.len() > 1
        && pipeline.last().is_some_and(|s| is_grep(s))
        && pipeline[1..pipeline.len() - 1]
            .iter()
            .all(|s| s.program().is_some_and(|p| FILTERS.contains(&p)));
    match prog {
        // `cat f | grep x`: a search of f.
        "cat" if pipeline.len() > 1 && is_grep(pipeline[1]) => {
            let path = single_file(first, prog)?;
            let (pattern, _, mode) = grep_args(pipeline[1]);
            let after = &pipeline[2..];
            if mode.context
                || mode.counts
                || !after
                    .iter()
                    .all(|s| s.program().is_some_and(|p| FILTERS.contains(&p)))
            {
                return None;
            }
            let mut matches = parse_matches(input.env.body.as_ref(), mode);
            if matches.files.is_empty() {
                matches.files.push((path, matches.unnamed));
                matches.unnamed = 0;
            }
            Some(grep_outcome(
                input,
                pattern,
                Some(path),
                Some(command),
                &matches,
            ))
        }
        "cat" | "head" | "tail" | "nl" | "sed" if rest_are_filters => {
            let path = single_file(first, prog)?;
            let range = pipeline
                .iter()
                .find_map(|s| sed_range(s))
                .or_else(|| head_range(first, prog));
            let spec = ReadSpec {
                path: Some(path.to_owned()),
                range,
                command: Some(command),
            };
            Some(read_outcome(input, spec))
        }
        "ls" | "tree" if rest_are_filters || last_is_grep => {
            let path = first
                .args()
                .iter()
                .find(|a| !a.starts_with('-'))
                .map(String::as_str);
            let one_per_line = first.args().iter().any(|a| {
                a.starts_with('-') && !a.starts_with("--") && (a.contains('l') || a.contains('1'))
            });
            let listing = parse_listing(input.env.body.as_ref(), prog == "ls" && !one_per_line);
            Some(list_outcome(
                input,
                path.or(Some(".")),
                None,
                Some(command),
                &listing,
            ))
        }
        "find"
            if !first
                .args()
                .iter()
                .any(|a| matches!(a.as_str(), "-exec" | "-delete" | "-execdir")) =>
        {
            let args = first.args();
            let path = args
                .first()
                .filter(|a| !a.starts_with('-'))
                .map(String::as_str);
            let pattern = args
                .iter()
                .position(|a| matches!(a.as_str(), "-name" | "-iname" | "-path" | "-wholename"))
                .and_then(|i| args.get(i + 1))
                .map(String::as_str);
            if !rest_are_filters && !last_is_grep {
                return None;
            }
            let listing = parse_listing(input.env.body.as_ref(), false);
            Some(list_outcome(
                input,
                path,
                pattern.or(Some("*")),
                Some(command),
                &listing,
            ))
        }
        _ if is_grep(first) && rest_are_filters => {
            let (pattern, paths, mode) = grep_args(first);
            let mut matches = parse_matches(input.env.body.as_ref(), mode);
            // A search of one file prints no file names: its matches are that file's.
            if let [only] = paths.as_slice() {
                if matches.files.is_empty() && matches.unnamed > 0 && !is_dir_like(only) {
                    matches.files.push((only, matches.unnamed));
                    matches.unnamed = 0;
                }
            }
            let path = paths.first().copied();
            Some(grep_outcome(input, pattern, path, Some(command), &matches))
        }
        _ => None,
    }
}

fn is_grep(s: &Simple) -> bool {
    match s.program() {
        Some("git") => s.args().first().is_some_and(|a| a == "grep"),
        Some(p) => GREPS.contains(&p),
        None => false,
    }
}

fn is_dir_like(path: &str) -> bool {
    path == "." || path.ends_with('/') || !path.rsplit('/').next().unwrap_or(path).contains('.')
}

/// The file a reading command reads, when it reads exactly one.
fn single_file<'a>(s: &'a Simple, prog: &str) -> Option<&'a str> {
    let mut operands = Vec::new();
    let args = s.args();
    let mut i = 0;
    let mut script_seen = false;
    while i < args.len() {
        let a = args[i].as_str();
        if matches!(prog, "head" | "tail") && matches!(a, "-n" | "-c") {
            i += 2;
            continue;
        }
        if prog == "sed" && a == "-e" {
            script_seen = true;
            i += 2;
            continue;
        }
        if a.starts_with('-') && a.len() > 1 {
            i += 1;
            continue;
        }
        // sed's first operand is its script.
        if prog == "sed" && !script_seen {
            script_seen = true;
            i += 1;
            continue;
        }
        operands.push(a);
        i += 1;
    }
    if s.heredoc_bytes.is_some() {
        return None;
    }
    match operands.as_slice() {
        [one] if *one != "-" => Some(one),
        _ => None,
    }
}

/// `sed -n '600,650p'` → lines 600 to 650; `sed -n '12p'` → line 12.
fn sed_range(s: &Simple) -> Option<(u64, Option<u64>)> {
    if s.program() != Some("sed") || !s.args().iter().any(|a| a == "-n") {
        return None;
    }
    let script = s.args().iter().find(|a| !a.starts_with('-'))?;
    let body = script.strip_suffix('p')?;
    let (a, b) = body.split_once(',').unwrap_or((body, body));
    let a = a.trim().parse().ok()?;
    let b = if b.trim() == "$" {
        None
    } else {
        Some(b.trim().parse().ok()?)
    };
    Some((a, b))
}

/// `head -n 40 f` → lines 1 to 40.
fn head_range(s: &Simple, prog: &str) -> Option<(u64, Option<u64>)> {
    if prog != "head" {
        return None;
    }
    let args = s.args();
    let n = args
        .iter()
        .position(|a| a == "-n")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .or_else(|| args.iter().find_map(|a| a.strip_prefix('-')?.parse().ok()))
        .unwrap_or(10);
    Some((1, Some(n)))
}

/// Pattern, paths and output mode of a grep-like command.
fn grep_args(s: &Simple) -> (Option<&str>, Vec<&str>, GrepMode) {
    let mut args: &[String] = s.args();
    if s.program() == Some("git") {
        args = &args[1..];
    }
    let mut mode = GrepMode::default();
    let mut pattern = None;
    let mut operands = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let takes_value = matches!(
            a,
            "-e" | "-f"
                | "-A"
                | "-B"
                | "-C"
                | "-m"
                | "-g"
                | "-t"
                | "--include"
                | "--exclude"
                | "--glob"
                | "--type"
                | "--max-count"
                | "--context"
        );
        if a == "--" {
            operands.extend(args[i + 1..].iter().map(String::as_str));
            break;
        }
        if a.starts_with('-') && a.len() > 1 {
            let short = !a.starts_with("--");
            if a == "-l"
                || a == "--files-with-matches"
                || (short && a.contains('l') && !takes_value)
            {
                mode.files_only = true;
            }
            if a == "-c" || a == "--count" || (short && a.contains('c') && !takes_value) {
                mode.counts = true;
            }
            if matches!(a, "-A" | "-B" | "-C" | "--context")
                || a.starts_with("-A")
                || a.starts_with("-B")
                || a.starts_with("-C")
            {
                mode.context = true;
            }
            if a == "-e" {
                pattern = args.get(i + 1).map(String::as_str);
            }
            i += if takes_value { 2 } else { 1 };
            continue;
        }
        operands.push(a);
        i += 1;
    }
    if pattern.is_none() && !operands.is_empty() {
        pattern = Some(operands.remove(0));
    }
    (pattern, operands, mode)
}

/// `cat <<EOF > f`, `tee f <<EOF`, `echo … > f`, `printf … > f`, `sed -i … f`.
fn write(input: &Input<'_>, command: &str, s: &Simple, prog: &str) -> Option<Outcome> {
    let (path, bytes, lines, verb) = match prog {
        "cat" | "tee" if s.heredoc_bytes.is_some() => {
            let path = s.stdout_file().or_else(|| {
                s.args()
                    .iter()
                    .find(|a| !a.starts_with('-'))
                    .map(String::as_str)
            })?;
            (path, s.heredoc_bytes, Some(s.heredoc_lines), "Wrote ")
        }
        "echo" | "printf" => {
            let path = s.stdout_file()?;
            let written: usize = s
                .args()
                .iter()
                .filter(|a| !a.starts_with('-'))
                .map(|a| a.len() + 1)
                .sum();
            (path, Some(written as u64), None, "Wrote ")
        }
        "sed" if s.args().iter().any(|a| a.starts_with("-i")) => {
            let path = s.args().iter().rev().find(|a| !a.starts_with('-'))?;
            (path.as_str(), None, None, "Edited ")
        }
        _ => return None,
    };
    // A target with spaces or newlines is a misparse of a broken command: describe it as a run.
    if path.is_empty() || path.contains(char::is_whitespace) {
        return None;
    }
    let mut out = Outcome::new(ToolKind::WriteFile, String::new())
        .arg("path", Some(path))
        .arg("command", Some(&one_line_command(command)));
    if let Some(code) = input.env.exit_code {
        out = out.fact("exit_code", code);
    }
    let body = input.env.body.as_ref();
    let mut line = Line::new(input.max);
    if input.is_error || input.env.exit_code.is_some_and(|c| c != 0) {
        let why = text::error_line(body)
            .or_else(|| text::last_meaningful(body))
            .unwrap_or("failed");
        line.lit("Write to ")
            .text_upto(path, input.max / 2)
            .lit(" failed");
        if let Some(code) = input.env.exit_code {
            line.lit(&format!(" (exit {code})"));
        }
        line.tail(": ", why, 8);
        out.observation = line.finish();
        return Some(out.failed(format!("exit {}: {why}", input.env.exit_code.unwrap_or(1))));
    }
    line.lit(verb).text_upto(path, input.max / 2);
    let mut details = Vec::new();
    if let Some(lines) = lines {
        details.push(plural(lines, "line", "lines"));
    }
    if let Some(bytes) = bytes {
        details.push(human_size(bytes));
        out = out.fact("bytes_written", bytes).fact("bytes", bytes);
    }
    if prog == "sed" {
        details.push("sed -i".to_owned());
    }
    if !details.is_empty() {
        line.lit(" (").lit(&details.join(", ")).lit(")");
    }
    out.observation = line.finish();
    Some(out)
}

/// `cat <<EOF > x.py … EOF` followed by `python x.py`: the output is the run's, so the step is a
/// run, but the observation also says what was written.
fn write_then_run(input: &Input<'_>, command: &str, line: &CommandLine) -> Option<Outcome> {
    let pipelines = line.pipelines();
    let first = pipelines.first()?.first()?;
    let prog = first.program()?;
    if !(matches!(prog, "cat" | "tee")
        && first.heredoc_bytes.is_some()
        && first.stdout_file().is_some())
    {
        return None;
    }
    let next = pipelines
        .get(1)
        .and_then(|p| p.first())
        .and_then(|s| s.program())
        .map(str::to_owned);
    // Show what ran, not the here-document: `python3 x.py` after writing x.py.
    let ran: Vec<String> = pipelines[1..]
        .iter()
        .map(|p| {
            p.iter()
                .map(|s| s.words.join(" "))
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .collect();
    let path = first.stdout_file().unwrap_or("");
    let shown = format!("{} (after writing {path})", ran.join(" && "));
    let mut out = run(input, &shown, next.as_deref());
    out.minimal_args.insert(
        "command".into(),
        super::args::short(&one_line_command(command)),
    );
    out.facts.insert("wrote".into(), path.into());
    Some(out)
}

/// Any other command: exit code, line count, and the line that matters.
fn run(input: &Input<'_>, command: &str, program: Option<&str>) -> Outcome {
    let env = &input.env;
    let body = env.body.as_ref();
    let shown = one_line_command(command);
    let mut out = Outcome::new(ToolKind::Shell, String::new()).arg(
        "command",
        Some(&shown).filter(|s| !s.is_empty()).map(String::as_str),
    );
    let code = env.exit_code;
    if let Some(code) = code {
        out = out.fact("exit_code", code);
    }
    let lines = text::line_count(body);
    out = out.fact("lines", lines);
    if let Some(elided) = env.elided_chars {
        out = out.fact("elided_chars", elided);
    }
    // `diff` and `cmp` exit 1 when the inputs differ: an answer, not a failure.
    let differ_ok = matches!(program, Some("diff" | "cmp")) && code == Some(1);
    let failed = input.is_error
        || env.timed_out
        || (code.is_some_and(|c| c != 0) && !differ_ok)
        || (code.is_none() && crashed(body));
    let mut line = Line::new(input.max);
    if !shown.is_empty() {
        // The command may take at most about half the line: the result matters more.
        let room = (input.max / 2).max(20);
        line.lit("`").lit(&text::piece(&shown, room)).lit("` ");
    }
    if env.timed_out {
        line.lit("timed out");
        out.observation = line.finish();
        return out.failed("timed out");
    }
    match code {
        Some(c) => line.lit(&format!("exit {c}, ")),
        None => line.lit(""),
    };
    if lines == 0 {
        line.lit("no output");
    } else {
        line.lit(&plural(lines, "line", "lines"));
    }
    if let Some(elided) = env.elided_chars {
        line.opt(" ", &format!("({elided} chars elided by the agent)"));
    }
    let stderr = env.stderr.as_deref();
    if failed {
        let why = stderr
            .and_then(|e| text::error_line(e).or_else(|| text::last_meaningful(e)))
            .or_else(|| text::error_line(body))
            .or_else(|| text::last_meaningful(body));
        let summary = test_summary(body);
        // With a test summary, the first failing test says more than the summary's own line.
        let why = match &summary {
            Some(s) => first_failure(body).or(why.filter(|w| !s.contains(w))),
            None => why,
        };
        if let Some(s) = &summary {
            line.tail(": ", s, 8);
        }
        if let Some(why) = why {
            line.tail(if summary.is_some() { "; " } else { ": " }, why, 8);
        }
        out.observation = line.finish();
        let error = match (code, why) {
            (Some(c), Some(why)) => format!("exit {c}: {why}"),
            (Some(c), None) => format!("exit {c}"),
            (None, Some(why)) => why.to_owned(),
            (None, None) => "failed".to_owned(),
        };
        return out.failed(error);
    }
    if let Some(diff) = diff_summary(body) {
        line.tail(": ", &diff, 8);
    } else if let Some(summary) = test_summary(body) {
        line.tail(": ", &summary, 8);
    } else if let Some(key) = key_line(body) {
        line.tail(": ", key, 4);
    }
    out.observation = line.finish();
    out
}

/// Output that ends in a crash even though no exit code was reported.
fn crashed(body: &str) -> bool {
    let tail_start = text::floor_char_boundary(body, body.len().saturating_sub(8192));
    let tail = &body[tail_start..];
    tail.contains("Traceback (most recent call last):")
        || text::last_meaningful(body).is_some_and(|l| {
            l.ends_with(": command not found") || l.ends_with("No such file or directory")
        })
}

/// The line that says most about a successful run: the only line, a closing verdict, or the
/// first line.
fn key_line(body: &str) -> Option<&str> {
    let first = text::first_meaningful(body)?;
    if text::meaningful_count(body, 2) <= 1 {
        return Some(first);
    }
    let last = text::last_meaningful(body)?;
    let verdict = [
        "Successfully",
        "Success",
        "Done",
        "Finished",
        "All ",
        "OK",
        "PASS",
        "Installed",
        "Created",
        "Saved",
        "Wrote",
        "Updated",
    ];
    if verdict.iter().any(|v| last.starts_with(v)) {
        return Some(last);
    }
    Some(first)
}

/// A test runner's summary: pytest's `== 3 passed, 1 failed in 2.1s ==`, unittest's
/// `Ran 12 tests` followed by `OK` or `FAILED (failures=1)`.
fn test_summary(body: &str) -> Option<String> {
    let start = text::floor_char_boundary(body, body.len().saturating_sub(16 * 1024));
    let tail: Vec<&str> = text::lines(&body[start..]).map(str::trim).collect();
    for (i, l) in tail.iter().enumerate().rev() {
        if l.starts_with('=')
            && [" passed", " failed", " error", "no tests ran"]
                .iter()
                .any(|w| l.contains(w))
        {
            return Some(l.trim_matches(|c| c == '=' || c == ' ').to_owned());
        }
        if *l == "OK" || l.starts_with("OK (") || l.starts_with("FAILED (") {
            let ran = tail[..i]
                .iter()
                .rev()
                .take(5)
                .find(|p| p.starts_with("Ran ") && p.contains(" test"));
            return Some(match ran {
                Some(ran) => format!("{}: {l}", ran.split(" in ").next().unwrap_or(ran)),
                None => (*l).to_owned(),
            });
        }
    }
    None
}

/// The first failing test: unittest's `FAIL: test_x (mod.Case)` / `ERROR: …`, pytest's
/// `FAILED path::test - Error`.
fn first_failure(body: &str) -> Option<&str> {
    text::lines(body).map(str::trim).find(|l| {
        l.starts_with("FAIL: ")
            || l.starts_with("ERROR: ")
            || (l.starts_with("FAILED ") && l.contains("::"))
    })
}

/// `git diff` output: files changed and lines added and removed.
fn diff_summary(body: &str) -> Option<String> {
    if !body.trim_start().starts_with("diff --git ") {
        return None;
    }
    let mut files = Vec::new();
    let (mut add, mut del) = (0u64, 0u64);
    for l in text::lines(body) {
        if let Some(rest) = l.strip_prefix("diff --git a/") {
            files.push(rest.split(" b/").next().unwrap_or(rest));
        } else if l.starts_with('+') && !l.starts_with("+++") {
            add += 1;
        } else if l.starts_with('-') && !l.starts_with("---") {
            del += 1;
        }
    }
    Some(format!(
        "diff of {} (+{add} -{del}): {}",
        plural(files.len() as u64, "file", "files"),
        files.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_summaries() {
        let py = "collected 3 items\n\nt.py ..F\n==== 1 failed, 2 passed in 0.12s ====\n";
        assert_eq!(
            test_summary(py).as_deref(),
            Some("1 failed, 2 passed in 0.12s")
        );
        let ut = "....\n----\nRan 4 tests in 0.010s\n\nOK\n";
        assert_eq!(test_summary(ut).as_deref(), Some("Ran 4 tests: OK"));
        assert_eq!(test_summary("hello\n"), None);
    }

    #[test]
    fn grep_arguments() {
        let line = CommandLine::parse("grep -rn --include=*.py \"def foo\" src tests");
        let (pattern, paths, mode) = grep_args(&line.parts[0].0);
        assert_eq!(pattern, Some("def foo"));
        assert_eq!(paths, ["src", "tests"]);
        assert!(!mode.files_only && !mode.counts);
        let line = CommandLine::parse("grep -l -e foo .");
        let (pattern, paths, mode) = grep_args(&line.parts[0].0);
        assert_eq!(
            (pattern, paths.as_slice(), mode.files_only),
            (Some("foo"), &["."][..], true)
        );
    }

    #[test]
    fn ranges() {
        let line = CommandLine::parse("nl -ba a.py | sed -n '600,650p'");
        assert_eq!(sed_range(&line.parts[1].0), Some((600, Some(650))));
        let line = CommandLine::parse("head -n 40 a.py");
        assert_eq!(head_range(&line.parts[0].0, "head"), Some((1, Some(40))));
    }
}
