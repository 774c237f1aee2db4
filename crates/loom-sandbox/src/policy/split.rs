//! Splits a shell command line into simple commands (at `;`, `&&`, `||`, `|` and newlines) and
//! lists what it cannot judge safely.
//!
//! This is not a shell: it reads words, quotes and operators the way POSIX `sh` does, and
//! anything whose effect depends on run-time expansion or the shell's own features (command or
//! process substitution, parameter expansion, redirection to a file, subshells and groups,
//! heredocs, environment assignments, background jobs) is reported as a concern, which the policy
//! turns into `prompt`. The text inside a command substitution is split too, so a forbidden
//! command hidden there is still forbidden.

/// One word of a simple command after quote removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word {
    pub(crate) text: String,
    /// Unquoted glob or brace characters: the shell may expand it into other words.
    pub(crate) expands: bool,
}

/// A command line, split.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Split {
    pub(crate) commands: Vec<Vec<Word>>,
    /// Why the line cannot be judged from its words alone (empty when it can).
    pub(crate) concerns: Vec<String>,
}

/// How deep command substitutions are followed before the line is simply judged unclear.
const MAX_DEPTH: usize = 8;

/// Splits `line`.
pub(crate) fn split(line: &str) -> Split {
    let chars: Vec<char> = line.chars().collect();
    let mut lexer = Lexer {
        chars: &chars,
        pos: 0,
        out: Split::default(),
        words: Vec::new(),
        word: None,
        depth: 0,
    };
    lexer.run();
    if lexer.pos < chars.len() {
        lexer.concern("an unbalanced `)`");
    }
    lexer.out
}

struct Lexer<'a> {
    chars: &'a [char],
    pos: usize,
    out: Split,
    words: Vec<Word>,
    /// The word being read, if one has started (an empty quoted word is still a word).
    word: Option<Word>,
    depth: usize,
}

impl Lexer<'_> {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn concern(&mut self, what: &str) {
        let what = what.to_owned();
        if !self.out.concerns.contains(&what) {
            self.out.concerns.push(what);
        }
    }

    fn push_char(&mut self, c: char) {
        self.word
            .get_or_insert_with(|| Word {
                text: String::new(),
                expands: false,
            })
            .text
            .push(c);
    }

    fn mark_expands(&mut self) {
        self.word
            .get_or_insert_with(|| Word {
                text: String::new(),
                expands: false,
            })
            .expands = true;
    }

    fn end_word(&mut self) {
        if let Some(word) = self.word.take() {
            self.words.push(word);
        }
    }

    fn end_command(&mut self) {
        self.end_word();
        let words = std::mem::take(&mut self.words);
        if words.is_empty() {
            return;
        }
        let assigns = words.iter().take_while(|w| is_assignment(&w.text)).count();
        if assigns > 0 {
            self.concern("an environment assignment");
        }
        let words: Vec<Word> = words.into_iter().skip(assigns).collect();
        if !words.is_empty() {
            self.out.commands.push(words);
        }
    }

    /// Reads until the end, or until an unmatched `)` (the end of a `$(…)`).
    fn run(&mut self) {
        let mut parens = 0usize;
        while let Some(c) = self.peek(0) {
            match c {
                ' ' | '\t' => {
                    self.end_word();
                    self.pos += 1;
                }
                '\n' | ';' => {
                    self.end_command();
                    self.pos += 1;
                }
                '#' if self.word.is_none() => {
                    while self.peek(0).is_some_and(|c| c != '\n') {
                        self.pos += 1;
                    }
                }
                '\\' => {
                    match self.peek(1) {
                        Some('\n') => {}
                        Some(next) => self.push_char(next),
                        None => self.concern("a trailing backslash"),
                    }
                    self.pos += 2;
                }
                '\'' => self.single_quoted(),
                '"' => self.double_quoted(),
                '`' => self.backticks(),
                '$' => self.dollar(),
                '&' | '|' => self.operator(c),
                '<' | '>' => self.redirection(),
                '(' => {
                    if self.word.is_none() {
                        self.concern("a subshell");
                    } else {
                        self.concern("a function definition or unusual syntax");
                    }
                    self.end_command();
                    parens += 1;
                    self.pos += 1;
                }
                ')' => {
                    if parens == 0 {
                        // The end of `$(…)`, or (at the top) an unbalanced `)` that `split`
                        // reports.
                        self.end_command();
                        return;
                    }
                    parens -= 1;
                    self.end_command();
                    self.pos += 1;
                }
                '{' | '}' if self.word.is_none() && self.peek(1).is_none_or(is_blank) => {
                    self.concern("a command group");
                    self.end_command();
                    self.pos += 1;
                }
                '*' | '?' | '[' | '{' => {
                    self.mark_expands();
                    self.push_char(c);
                    self.pos += 1;
                }
                _ => {
                    self.push_char(c);
                    self.pos += 1;
                }
            }
        }
        self.end_command();
    }

    fn single_quoted(&mut self) {
        self.pos += 1;
        self.mark_quoted();
        while let Some(c) = self.peek(0) {
            self.pos += 1;
            if c == '\'' {
                return;
            }
            self.push_char(c);
        }
        self.concern("an unterminated quote");
    }

    fn mark_quoted(&mut self) {
        self.word.get_or_insert_with(|| Word {
            text: String::new(),
            expands: false,
        });
    }

    fn double_quoted(&mut self) {
        self.pos += 1;
        self.mark_quoted();
        while let Some(c) = self.peek(0) {
            match c {
                '"' => {
                    self.pos += 1;
                    return;
                }
                '\\' => {
                    match self.peek(1) {
                        Some(next @ ('"' | '\\' | '$' | '`')) => self.push_char(next),
                        Some('\n') => {}
                        Some(next) => {
                            self.push_char('\\');
                            self.push_char(next);
                        }
                        None => {}
                    }
                    self.pos += 2;
                }
                '`' => self.backticks(),
                '$' => self.dollar(),
                _ => {
                    self.push_char(c);
                    self.pos += 1;
                }
            }
        }
        self.concern("an unterminated quote");
    }

    /// `$…`: a substitution, an expansion, or a literal dollar.
    fn dollar(&mut self) {
        match self.peek(1) {
            Some('(') if self.peek(2) == Some('(') => {
                self.concern("arithmetic expansion");
                self.pos += 2;
                self.nested();
            }
            Some('(') => {
                self.concern("command substitution");
                self.pos += 2;
                self.nested();
            }
            Some(c)
                if c == '{' || c == '_' || c.is_ascii_alphanumeric() || "@*#?$!-".contains(c) =>
            {
                self.concern("parameter expansion");
                self.mark_expands();
                self.push_char('$');
                self.pos += 1;
            }
            Some('\'') => {
                self.concern("ANSI-C quoting");
                self.push_char('$');
                self.pos += 1;
            }
            _ => {
                self.push_char('$');
                self.pos += 1;
            }
        }
    }

    /// Splits the text of `$(…)` on its own and adds its commands; stops after the `)`.
    fn nested(&mut self) {
        if self.depth >= MAX_DEPTH {
            self.concern("nesting too deep to follow");
        }
        let mut inner = Lexer {
            chars: self.chars,
            pos: self.pos,
            out: Split::default(),
            words: Vec::new(),
            word: None,
            depth: self.depth + 1,
        };
        if self.depth < MAX_DEPTH {
            inner.run();
        } else {
            inner.pos = self.chars.len();
        }
        if inner.peek(0) == Some(')') {
            inner.pos += 1;
        } else {
            self.concern("an unterminated substitution");
        }
        self.pos = inner.pos;
        self.out.commands.extend(inner.out.commands);
        for concern in inner.out.concerns {
            self.concern(&concern);
        }
        // The substitution's output becomes part of this word: unknown text.
        self.mark_expands();
    }

    fn backticks(&mut self) {
        self.concern("command substitution");
        self.pos += 1;
        let mut text = String::new();
        let mut closed = false;
        while let Some(c) = self.peek(0) {
            self.pos += 1;
            match c {
                '`' => {
                    closed = true;
                    break;
                }
                '\\' => {
                    if let Some(next) = self.peek(0) {
                        text.push(next);
                        self.pos += 1;
                    }
                }
                _ => text.push(c),
            }
        }
        if !closed {
            self.concern("an unterminated substitution");
        }
        if self.depth < MAX_DEPTH {
            let chars: Vec<char> = text.chars().collect();
            let mut inner = Lexer {
                chars: &chars,
                pos: 0,
                out: Split::default(),
                words: Vec::new(),
                word: None,
                depth: self.depth + 1,
            };
            inner.run();
            if inner.pos < chars.len() {
                self.concern("an unbalanced `)`");
            }
            self.out.commands.extend(inner.out.commands);
            for concern in inner.out.concerns {
                self.concern(&concern);
            }
        } else {
            self.concern("nesting too deep to follow");
        }
        self.mark_expands();
    }

    /// `&&`, `||`, `|`, `|&` separate commands; `&` alone runs in the background; `&>` redirects.
    fn operator(&mut self, c: char) {
        let next = self.peek(1);
        if c == '&' && next == Some('>') {
            self.redirection();
            return;
        }
        if next == Some(c) || (c == '|' && next == Some('&')) {
            self.pos += 2;
        } else {
            if c == '&' {
                self.concern("a background job");
            }
            self.pos += 1;
        }
        self.end_command();
    }

    /// A redirection: fd duplication, `/dev/null` and reading a file are fine; writing a file,
    /// heredocs and process substitution are concerns.
    fn redirection(&mut self) {
        // A word made only of digits right before the operator is the fd being redirected.
        if self
            .word
            .as_ref()
            .is_some_and(|w| !w.text.is_empty() && w.text.chars().all(|c| c.is_ascii_digit()))
        {
            self.word = None;
        }
        let mut op = String::new();
        while let Some(c) = self.peek(0).filter(|c| matches!(c, '<' | '>' | '&' | '|')) {
            if op.len() >= 3 {
                break;
            }
            op.push(c);
            self.pos += 1;
        }
        if self.peek(0) == Some('(') {
            self.concern("process substitution");
            self.pos += 1;
            self.nested();
            self.word = None;
            return;
        }
        if op.starts_with("<<") {
            self.concern(if op == "<<<" {
                "a here-string"
            } else {
                "a heredoc"
            });
        }
        while self.peek(0).is_some_and(is_blank) {
            self.pos += 1;
        }
        // The target is the next word, read with the same quoting rules.
        let saved = self.word.take();
        let mut target = String::new();
        let mut target_expands = false;
        while let Some(c) = self.peek(0) {
            if is_blank(c) || ";&|<>()\n".contains(c) {
                break;
            }
            match c {
                '\'' => self.single_quoted(),
                '"' => self.double_quoted(),
                '$' => self.dollar(),
                '`' => self.backticks(),
                _ => {
                    self.push_char(c);
                    self.pos += 1;
                }
            }
        }
        if let Some(word) = self.word.take() {
            target = word.text;
            target_expands = word.expands;
        }
        self.word = saved;
        let duplicates = op.ends_with('&') && (target == "-" || target.parse::<u32>().is_ok());
        let input = op == "<" || op == "<&";
        if op.starts_with("<<") {
            return;
        }
        if target.is_empty() && !target_expands {
            self.concern("a redirection without a target");
        } else if duplicates {
        } else if input && !target_expands {
            // Reading a file is what the read-only commands do anyway.
        } else if target != "/dev/null" || target_expands {
            self.concern("a redirection to a file");
        }
    }
}

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t' || c == '\n'
}

/// `NAME=value` before the program: an environment assignment.
fn is_assignment(word: &str) -> bool {
    let Some((name, _)) = word.split_once('=') else {
        return false;
    };
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<Vec<String>> {
        split(line)
            .commands
            .into_iter()
            .map(|c| c.into_iter().map(|w| w.text).collect())
            .collect()
    }

    #[test]
    fn operators_separate_simple_commands() {
        assert_eq!(
            words("ls -la && cat a.txt | wc -l; echo done || true\ngit status"),
            vec![
                vec!["ls", "-la"],
                vec!["cat", "a.txt"],
                vec!["wc", "-l"],
                vec!["echo", "done"],
                vec!["true"],
                vec!["git", "status"],
            ]
        );
        assert!(split("ls -la && cat a.txt | wc -l").concerns.is_empty());
    }

    #[test]
    fn quotes_are_removed_and_keep_operators_literal() {
        assert_eq!(
            words(r#"grep "a && b" 'c; d' e\ f "x\"y" ''"#),
            vec![vec!["grep", "a && b", "c; d", "e f", "x\"y", ""]]
        );
        assert!(split(r#"grep "a && b" 'c; d'"#).concerns.is_empty());
    }

    #[test]
    fn substitutions_are_concerns_and_their_commands_are_split() {
        let s = split("echo $(git push origin) `rm -rf x`");
        assert!(s.concerns.contains(&"command substitution".to_owned()));
        let programs: Vec<&str> = s.commands.iter().map(|c| c[0].text.as_str()).collect();
        assert_eq!(programs, vec!["git", "rm", "echo"]);
        let s = split("echo \"$(rm -rf y)\"");
        assert!(s.commands.iter().any(|c| c[0].text == "rm"));
    }

    #[test]
    fn redirections_to_files_are_concerns_but_dev_null_and_dups_are_not() {
        assert!(split("ls 2>/dev/null >/dev/null 2>&1").concerns.is_empty());
        assert!(split("grep x < input.txt").concerns.is_empty());
        assert_eq!(words("ls 2>/dev/null -l"), vec![vec!["ls", "-l"]]);
        for line in [
            "ls > out.txt",
            "ls >>out",
            "ls &> log",
            "cat <<EOF",
            "cat <<< hi",
            "diff <(ls) x",
        ] {
            assert!(!split(line).concerns.is_empty(), "{line}");
        }
    }

    #[test]
    fn shell_features_the_policy_cannot_judge_are_concerns() {
        for line in [
            "(cd x && rm y)",
            "{ ls; }",
            "FOO=1 ls",
            "ls $HOME",
            "ls ${X}",
            "sleep 5 &",
            "echo 'unterminated",
            "echo $((1+2))",
        ] {
            assert!(!split(line).concerns.is_empty(), "{line}");
        }
        for line in [
            "ls 'a$b'",
            "echo a=b",
            "grep 'x$' f",
            "echo $",
            "ls # a comment > x",
        ] {
            assert!(
                split(line).concerns.is_empty(),
                "{line}: {:?}",
                split(line).concerns
            );
        }
    }

    #[test]
    fn unquoted_globs_are_marked() {
        let s = split("ls *.rs 'q*' a{b,c}");
        let flags: Vec<bool> = s.commands[0].iter().map(|w| w.expands).collect();
        assert_eq!(flags, vec![false, true, false, true]);
    }
}
