//! One rule: a token prefix, flag vetoes, an optional argument check for built-ins, and the
//! check of its examples at load.

use super::split::{self, Word};
use super::Verdict;
use crate::error::{Error, Result};

/// One token of a prefix: a word, or any of several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TokenPattern {
    One(String),
    AnyOf(Vec<String>),
}

impl TokenPattern {
    fn accepts(&self, word: &str) -> bool {
        match self {
            Self::One(w) => w == word,
            Self::AnyOf(words) => words.iter().any(|w| w == word),
        }
    }
}

/// Argument checks that a prefix and vetoes cannot express, for built-in rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    None,
    /// At most this many arguments that are not flags (`uniq IN OUT` writes OUT).
    MaxOperands(usize),
    /// No arguments at all.
    NoArgs,
    /// Every argument is one of these flags.
    OnlyFlags(&'static [&'static str]),
    /// `sed` scripts that only print, delete from the output or substitute (no `w`, `e`, `r`).
    SedScript,
}

#[derive(Debug, Clone)]
pub(crate) struct Rule {
    pub(crate) name: String,
    pub(crate) verdict: Verdict,
    pub(crate) prefix: Vec<TokenPattern>,
    /// Flags that take a command out of this rule: `-X` also matches clustered (`-nX`) and
    /// attached (`-Xvalue`) forms, `--long` also `--long=value`, `pre*` any word starting `pre`,
    /// anything else the exact word.
    pub(crate) veto: Vec<String>,
    pub(crate) check: Check,
    pub(crate) reason: Option<String>,
}

/// Whether a rule applies to a simple command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Matched {
    No,
    Yes,
    /// The prefix matches but a vetoed flag or a failed check takes it out, for this reason.
    Vetoed(String),
}

impl Rule {
    pub(crate) fn matches(&self, words: &[Word]) -> Matched {
        if words.len() < self.prefix.len()
            || !self
                .prefix
                .iter()
                .zip(words)
                .all(|(pattern, word)| !word.expands && pattern.accepts(&word.text))
        {
            return Matched::No;
        }
        let args = &words[self.prefix.len()..];
        let guarded = !self.veto.is_empty() || self.check != Check::None;
        if guarded {
            if let Some(word) = args.iter().find(|w| w.expands) {
                return Matched::Vetoed(format!(
                    "`{}` may expand into flags this rule vetoes",
                    word.text
                ));
            }
        }
        for word in args {
            if let Some(flag) = self.veto.iter().find(|flag| vetoes(flag, &word.text)) {
                return Matched::Vetoed(format!("flag `{flag}` is vetoed by `{}`", self.name));
            }
        }
        match self.check_args(args) {
            Ok(()) => Matched::Yes,
            Err(why) => Matched::Vetoed(why),
        }
    }

    fn check_args(&self, args: &[Word]) -> std::result::Result<(), String> {
        match self.check {
            Check::None => Ok(()),
            Check::NoArgs if args.is_empty() => Ok(()),
            Check::NoArgs => Err(format!("`{}` takes no arguments here", self.name)),
            Check::MaxOperands(max) => {
                let operands = args.iter().filter(|w| !w.text.starts_with('-')).count();
                if operands <= max {
                    Ok(())
                } else {
                    Err(format!(
                        "more than {max} operands (the last may be written)"
                    ))
                }
            }
            Check::OnlyFlags(allowed) => {
                match args.iter().find(|w| !allowed.contains(&w.text.as_str())) {
                    None => Ok(()),
                    Some(word) => Err(format!("`{}` is not a listing flag", word.text)),
                }
            }
            Check::SedScript => sed_scripts(args),
        }
    }

    /// Each `matches` example must be one simple command this rule matches; no `not_match`
    /// example may be.
    pub(crate) fn check_examples(&self, matches: &[String], not_match: &[String]) -> Result<()> {
        let fail = |example: &str, reason: String| Error::PolicyRule {
            rule: self.name.clone(),
            reason: format!("example `{example}` {reason}"),
        };
        for example in matches {
            let split = split::split(example);
            if let Some(concern) = split.concerns.first() {
                return Err(fail(example, format!("under `match` has {concern}")));
            }
            let [words] = split.commands.as_slice() else {
                return Err(fail(
                    example,
                    "under `match` is not one simple command".into(),
                ));
            };
            match self.matches(words) {
                Matched::Yes => {}
                Matched::No => return Err(fail(example, "under `match` does not match".into())),
                Matched::Vetoed(why) => {
                    return Err(fail(example, format!("under `match` is vetoed: {why}")))
                }
            }
        }
        for example in not_match {
            let split = split::split(example);
            if split
                .commands
                .iter()
                .any(|words| self.matches(words) == Matched::Yes)
            {
                return Err(fail(example, "under `not_match` matches".into()));
            }
        }
        Ok(())
    }
}

fn vetoes(flag: &str, word: &str) -> bool {
    if let Some(stem) = flag.strip_suffix('*') {
        return word.starts_with(stem);
    }
    if flag.starts_with("--") {
        return word == flag
            || word
                .strip_prefix(flag)
                .is_some_and(|rest| rest.starts_with('='));
    }
    let mut chars = flag.chars();
    if let (Some('-'), Some(letter), None) = (chars.next(), chars.next(), chars.next()) {
        // A short flag: alone, with an attached value, or inside a cluster of short flags.
        return word.starts_with('-')
            && !word.starts_with("--")
            && word[1..]
                .chars()
                .take_while(char::is_ascii_alphabetic)
                .any(|c| c == letter);
    }
    word == flag
}

/// The scripts of a `sed` command must only print or substitute; a script file (`-f`) cannot be
/// seen and is refused.
fn sed_scripts(args: &[Word]) -> std::result::Result<(), String> {
    let mut scripts = Vec::new();
    let mut explicit = false;
    let mut operands = Vec::new();
    let mut iter = args.iter();
    while let Some(word) = iter.next() {
        let text = word.text.as_str();
        if text == "-e" || text == "--expression" {
            explicit = true;
            match iter.next() {
                Some(script) => scripts.push(script.text.as_str()),
                None => return Err("`-e` without a script".into()),
            }
        } else if let Some(script) = text.strip_prefix("--expression=") {
            explicit = true;
            scripts.push(script);
        } else if text == "-f" || text.starts_with("--file") {
            return Err("a script file cannot be checked".into());
        } else if !text.starts_with('-') || text == "-" {
            operands.push(text);
        }
    }
    if !explicit {
        match operands.first() {
            Some(script) => scripts.push(script),
            None => return Err("no script".into()),
        }
    }
    for script in scripts {
        if !sed_script_is_safe(script) {
            return Err(format!(
                "sed script `{script}` may write files or run commands; only line selection, \
                 printing and substitution run unasked"
            ));
        }
    }
    Ok(())
}

fn sed_script_is_safe(script: &str) -> bool {
    let chars: Vec<char> = script.chars().collect();
    let mut i = 0;
    let skip_blanks = |i: &mut usize| {
        while chars
            .get(*i)
            .is_some_and(|c| c.is_whitespace() || *c == ';')
        {
            *i += 1;
        }
    };
    loop {
        skip_blanks(&mut i);
        if i >= chars.len() {
            return true;
        }
        // Up to two addresses: a line number, `$`, or `/regex/`.
        for n in 0..2 {
            if n == 1 {
                if chars.get(i) != Some(&',') {
                    break;
                }
                i += 1;
            }
            match chars.get(i) {
                Some(c) if c.is_ascii_digit() => {
                    while chars.get(i).is_some_and(char::is_ascii_digit) {
                        i += 1;
                    }
                }
                Some('$') => i += 1,
                Some('/') => match delimited(&chars, i + 1, '/') {
                    Some(end) => i = end,
                    None => return false,
                },
                _ => {}
            }
        }
        if chars.get(i) == Some(&'!') {
            i += 1;
        }
        match chars.get(i) {
            Some(
                'p' | 'd' | '=' | 'q' | 'Q' | 'n' | 'N' | 'P' | 'D' | 'l' | 'g' | 'G' | 'h' | 'H'
                | 'x',
            ) => i += 1,
            Some('s') => {
                let Some(&delim) = chars.get(i + 1) else {
                    return false;
                };
                if delim == '\\' || delim == '\n' {
                    return false;
                }
                let Some(mid) = delimited(&chars, i + 2, delim) else {
                    return false;
                };
                let Some(end) = delimited(&chars, mid, delim) else {
                    return false;
                };
                i = end;
                while chars.get(i).is_some_and(|c| {
                    matches!(c, 'g' | 'p' | 'i' | 'I' | 'm' | 'M') || c.is_ascii_digit()
                }) {
                    i += 1;
                }
            }
            _ => return false,
        }
        // A command ends at `;`, a newline or the end; anything else is more than we judge.
        while chars.get(i).is_some_and(|c| *c == ' ' || *c == '\t') {
            i += 1;
        }
        match chars.get(i) {
            None | Some(';' | '\n') => {}
            Some(_) => return false,
        }
    }
}

/// The index just past the next unescaped `delim` from `start`.
fn delimited(chars: &[char], start: usize, delim: char) -> Option<usize> {
    let mut i = start;
    while let Some(&c) = chars.get(i) {
        if c == '\\' {
            i += 2;
            continue;
        }
        if c == delim {
            return Some(i + 1);
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_flags_veto_in_clusters_and_attached_forms() {
        assert!(vetoes("-i", "-i"));
        assert!(vetoes("-i", "-i.bak"));
        assert!(vetoes("-i", "-ni"));
        assert!(!vetoes("-i", "--in-place"));
        assert!(!vetoes("-i", "file-i"));
        assert!(vetoes("--in-place", "--in-place=.bak"));
        assert!(!vetoes("--pre", "--pretty"));
        assert!(vetoes("-fprint*", "-fprint0"));
        assert!(vetoes("-exec", "-exec"));
        assert!(!vetoes("-exec", "-executable"));
    }

    #[test]
    fn sed_scripts_that_only_print_or_substitute_are_safe() {
        for script in [
            "1,10p",
            "$p",
            "/foo/,/bar/p",
            "s/a/b/g",
            "s|x|y|",
            "10q",
            "s/w/e/; 3p",
            "/x/!d",
        ] {
            assert!(sed_script_is_safe(script), "{script}");
        }
        for script in [
            "w out",
            "s/a/b/w out",
            "s/a/b/e",
            "1r /etc/passwd",
            "e ls",
            "s/a/b",
            "{p}",
            "1,5p x",
        ] {
            assert!(!sed_script_is_safe(script), "{script}");
        }
    }
}
