//! The built-in rules: common commands that only read, allowed unasked, each with the flags that
//! would make it write, run another program or reach out vetoed (a vetoed form prompts).
//!
//! A program is on this list only if no argument of it can write a file, run a program or open a
//! connection except through a vetoed flag or a failed check. `xargs`, `awk`, `env CMD`, `python`
//! and the like run programs, so they are not here.

use super::rule::{Check, Rule, TokenPattern};
use super::Verdict;

/// Programs allowed with any arguments.
const PLAIN: &[&str] = &[
    "ls",
    "cat",
    "head",
    "tail",
    "wc",
    "grep",
    "egrep",
    "fgrep",
    "pwd",
    "echo",
    "printf",
    "true",
    "false",
    "cd",
    "basename",
    "dirname",
    "realpath",
    "readlink",
    "stat",
    "du",
    "df",
    "cut",
    "tr",
    "nl",
    "tac",
    "rev",
    "fold",
    "paste",
    "comm",
    "join",
    "cmp",
    "diff",
    "od",
    "hexdump",
    "strings",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "base64",
    "seq",
    "which",
    "type",
    "whoami",
    "id",
    "uname",
    "test",
    "[",
    "jq",
    "column",
    "expand",
    "unexpand",
    "fmt",
];

/// Git subcommands that only read (their output-file flags vetoed below).
const GIT_READ: &[&str] = &[
    "status",
    "log",
    "diff",
    "show",
    "blame",
    "ls-files",
    "ls-tree",
    "rev-parse",
    "grep",
    "shortlog",
    "describe",
    "cat-file",
    "rev-list",
    "merge-base",
    "whatchanged",
];

/// Git flags that write a file or run a configured program.
const GIT_VETO: &[&str] = &[
    "--output",
    "--ext-diff",
    "--textconv",
    "-O",
    "--open-files-in-pager",
    "--exec",
];

fn rule(name: &str, prefix: Vec<TokenPattern>, veto: &[&str], check: Check) -> Rule {
    Rule {
        name: format!("builtin:{name}"),
        verdict: Verdict::Allow,
        prefix,
        veto: veto.iter().map(|v| (*v).to_owned()).collect(),
        check,
        reason: Some(format!("{name} only reads")),
    }
}

fn one(word: &str) -> TokenPattern {
    TokenPattern::One(word.to_owned())
}

fn any_of(words: &[&str]) -> TokenPattern {
    TokenPattern::AnyOf(words.iter().map(|w| (*w).to_owned()).collect())
}

/// The built-in rules, all `allow`.
pub(super) fn rules() -> Vec<Rule> {
    let mut rules: Vec<Rule> = PLAIN
        .iter()
        .map(|program| rule(program, vec![one(program)], &[], Check::None))
        .collect();
    rules.extend([
        rule(
            "find",
            vec![one("find")],
            &[
                "-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint*", "-fls",
            ],
            Check::None,
        ),
        rule(
            "rg",
            vec![one("rg")],
            &["--pre", "--pre-glob", "-z", "--search-zip"],
            Check::None,
        ),
        rule(
            "sed",
            vec![one("sed")],
            &["-i", "--in-place", "-s", "--separate"],
            Check::SedScript,
        ),
        rule(
            "sort",
            vec![one("sort")],
            &["-o", "--output", "--compress-program"],
            Check::None,
        ),
        rule("file", vec![one("file")], &["-C", "--compile"], Check::None),
        rule("uniq", vec![one("uniq")], &[], Check::MaxOperands(1)),
        rule("xxd", vec![one("xxd")], &[], Check::MaxOperands(1)),
        rule("tree", vec![one("tree")], &["-o"], Check::None),
        rule("date", vec![one("date")], &["-s", "--set"], Check::None),
        rule("env", vec![one("env")], &[], Check::NoArgs),
        rule("printenv", vec![one("printenv")], &[], Check::None),
        rule(
            "git",
            vec![one("git"), any_of(GIT_READ)],
            GIT_VETO,
            Check::None,
        ),
        rule(
            "git branch",
            vec![one("git"), one("branch")],
            &[],
            Check::OnlyFlags(&[
                "-a",
                "-r",
                "-v",
                "-vv",
                "-l",
                "--all",
                "--remotes",
                "--verbose",
                "--list",
                "--show-current",
                "--no-color",
            ]),
        ),
        rule(
            "git remote",
            vec![one("git"), one("remote")],
            &[],
            Check::OnlyFlags(&["-v", "--verbose"]),
        ),
        rule(
            "git stash list",
            vec![one("git"), one("stash"), one("list")],
            GIT_VETO,
            Check::None,
        ),
    ]);
    rules
}
