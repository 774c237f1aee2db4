//! Just enough of shell syntax to know what a command line does.
//!
//! Shell tools (`bash`, `execute_bash`, Codex `shell`) are used to read files (`cat`, `sed -n`,
//! `nl | sed`), search (`grep`, `rg`, `find`), list (`ls`) and write (`cat <<EOF > f`). The reducer
//! picks its sub-reducer from the program names of the parsed command — never from substrings of
//! the command text, so `echo "cat file"` is an `echo`.

/// How a simple command is joined to the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Join {
    /// `|`: the next command reads this one's output.
    Pipe,
    /// `&&`, `||`, `;`, `&` or a newline: the next command runs after (or beside) this one.
    List,
}

/// A redirection such as `> out.txt` or `2>&1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Redirect {
    /// The operator with its file descriptor: `>`, `>>`, `2>`, `<`, `&>`.
    pub(crate) op: String,
    /// The file or descriptor redirected to.
    pub(crate) target: String,
}

/// One simple command: words, redirections and here-documents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Simple {
    /// The words after quote removal.
    pub(crate) words: Vec<String>,
    /// Redirections in order.
    pub(crate) redirects: Vec<Redirect>,
    /// Bytes of here-document bodies fed to this command (`<<EOF`), if any.
    pub(crate) heredoc_bytes: Option<u64>,
    /// Lines of those bodies.
    pub(crate) heredoc_lines: u64,
}

/// Programs that run the command given as their arguments.
const WRAPPERS: &[&str] = &[
    "sudo", "env", "time", "nohup", "timeout", "nice", "stdbuf", "command", "exec",
];

impl Simple {
    /// Index of the word that names the program, after assignments and wrappers.
    fn program_index(&self) -> Option<usize> {
        let mut i = 0;
        while i < self.words.len() {
            let w = &self.words[i];
            let is_assignment = w.split_once('=').is_some_and(|(name, _)| {
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            });
            if is_assignment || w.starts_with('-') && i > 0 {
                i += 1;
                continue;
            }
            let base = basename(w);
            if WRAPPERS.contains(&base) {
                i += 1;
                // `timeout 30 cmd`: skip the duration too.
                if base == "timeout"
                    && self
                        .words
                        .get(i)
                        .is_some_and(|d| d.starts_with(|c: char| c.is_ascii_digit()))
                {
                    i += 1;
                }
                continue;
            }
            return Some(i);
        }
        None
    }

    /// The program's name without its directory (`/usr/bin/python3` → `python3`).
    pub(crate) fn program(&self) -> Option<&str> {
        self.program_index().map(|i| basename(&self.words[i]))
    }

    /// The words after the program.
    pub(crate) fn args(&self) -> &[String] {
        match self.program_index() {
            Some(i) => &self.words[i + 1..],
            None => &[],
        }
    }

    /// The file standard output is written to (`> f`, `>> f`, `&> f`), if any.
    pub(crate) fn stdout_file(&self) -> Option<&str> {
        self.redirects
            .iter()
            .rev()
            .find(|r| matches!(r.op.as_str(), ">" | ">>" | "1>" | "1>>" | "&>" | ">|"))
            .map(|r| r.target.as_str())
            .filter(|t| !t.starts_with('&') && *t != "/dev/null")
    }
}

/// `a/b/c` → `c`.
pub(crate) fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// A parsed command line: simple commands and how each joins the next.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CommandLine {
    /// The commands, each with the join that follows it (`None` for the last).
    pub(crate) parts: Vec<(Simple, Option<Join>)>,
}

impl CommandLine {
    /// Parses a command line; never fails (unbalanced quotes run to the end).
    pub(crate) fn parse(text: &str) -> Self {
        Parser::new(text).run()
    }

    /// The pipelines in order, each a list of simple commands.
    pub(crate) fn pipelines(&self) -> Vec<Vec<&Simple>> {
        let mut out = vec![Vec::new()];
        for (simple, join) in &self.parts {
            if let Some(last) = out.last_mut() {
                last.push(simple);
            }
            if join == &Some(Join::List) {
                out.push(Vec::new());
            }
        }
        out.retain(|p| !p.is_empty());
        out
    }

    /// The pipeline that does the work: the first one that is not bookkeeping (`cd`, `export`,
    /// `source`, activating an environment), and whether more pipelines follow it.
    pub(crate) fn main_pipeline(&self) -> Option<(Vec<&Simple>, bool)> {
        const SETUP: &[&str] = &[
            "cd", "export", "source", ".", "set", "unset", "pushd", "popd", "conda", "ulimit",
            "true",
        ];
        let pipelines = self.pipelines();
        let count = pipelines.len();
        for (i, p) in pipelines.into_iter().enumerate() {
            let setup = p.len() == 1 && p[0].program().is_none_or(|prog| SETUP.contains(&prog));
            if !setup || i + 1 == count {
                return Some((p, i + 1 < count));
            }
        }
        None
    }
}

struct Parser<'a> {
    chars: std::iter::Peekable<std::str::CharIndices<'a>>,
    text: &'a str,
    line: CommandLine,
    cur: Simple,
    word: String,
    in_word: bool,
    /// A redirection operator waiting for its target word.
    pending_redirect: Option<String>,
    /// Here-document delimiters to read after the current line: (delimiter, strip tabs).
    heredocs: Vec<(String, bool)>,
    /// Index into `line.parts` (or `usize::MAX` for `cur`) of the command that gets each body.
    heredoc_owner: Vec<usize>,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            chars: text.char_indices().peekable(),
            text,
            line: CommandLine::default(),
            cur: Simple::default(),
            word: String::new(),
            in_word: false,
            pending_redirect: None,
            heredocs: Vec::new(),
            heredoc_owner: Vec::new(),
        }
    }

    fn end_word(&mut self) {
        if !self.in_word {
            return;
        }
        let word = std::mem::take(&mut self.word);
        self.in_word = false;
        match self.pending_redirect.take() {
            Some(op) if op.starts_with("<<") && op != "<<<" => {
                self.heredocs.push((word.clone(), op == "<<-"));
                self.heredoc_owner.push(self.line.parts.len());
                self.cur.redirects.push(Redirect { op, target: word });
            }
            Some(op) => self.cur.redirects.push(Redirect { op, target: word }),
            None => self.cur.words.push(word),
        }
    }

    fn end_command(&mut self, join: Join) {
        self.end_word();
        if self.cur.words.is_empty() && self.cur.redirects.is_empty() {
            return;
        }
        let simple = std::mem::take(&mut self.cur);
        self.line.parts.push((simple, Some(join)));
    }

    fn push(&mut self, c: char) {
        self.word.push(c);
        self.in_word = true;
    }

    fn run(mut self) -> CommandLine {
        while let Some((i, c)) = self.chars.next() {
            match c {
                ' ' | '\t' => self.end_word(),
                '\n' => {
                    self.end_command(Join::List);
                    self.read_heredocs(i + 1);
                }
                '\\' => match self.chars.next() {
                    Some((_, '\n')) | None => {}
                    Some((_, n)) => self.push(n),
                },
                '\'' => {
                    self.in_word = true;
                    for (_, n) in self.chars.by_ref() {
                        if n == '\'' {
                            break;
                        }
                        self.word.push(n);
                    }
                }
                '"' => {
                    self.in_word = true;
                    while let Some((_, n)) = self.chars.next() {
                        match n {
                            '"' => break,
                            '\\' => {
                                if let Some((_, e)) = self.chars.next() {
                                    if !matches!(e, '"' | '\\' | '$' | '`') {
                                        self.word.push('\\');
                                    }
                                    self.word.push(e);
                                }
                            }
                            n => self.word.push(n),
                        }
                    }
                }
                '#' if !self.in_word => {
                    while self.chars.peek().is_some_and(|&(_, n)| n != '\n') {
                        self.chars.next();
                    }
                }
                '$' if self.chars.peek().is_some_and(|&(_, n)| n == '(') => {
                    self.push('$');
                    self.copy_balanced('(', ')');
                }
                '`' => {
                    self.push('`');
                    for (_, n) in self.chars.by_ref() {
                        self.word.push(n);
                        if n == '`' {
                            break;
                        }
                    }
                }
                '|' => {
                    if self.eat('|') {
                        self.end_command(Join::List);
                    } else {
                        self.eat('&');
                        self.end_command(Join::Pipe);
                    }
                }
                '&' => {
                    if self.eat('&') {
                        self.end_command(Join::List);
                    } else if self.eat('>') {
                        self.end_word();
                        let op = if self.eat('>') { "&>>" } else { "&>" };
                        self.pending_redirect = Some(op.to_owned());
                    } else {
                        self.end_command(Join::List);
                    }
                }
                ';' => self.end_command(Join::List),
                '(' | ')' | '{' | '}' if !self.in_word => self.end_word(),
                '>' | '<' => self.redirect(c),
                c => self.push(c),
            }
        }
        self.end_word();
        if !self.cur.words.is_empty() || !self.cur.redirects.is_empty() {
            let simple = std::mem::take(&mut self.cur);
            self.line.parts.push((simple, None));
        } else if let Some(last) = self.line.parts.last_mut() {
            last.1 = None;
        }
        self.line
    }

    fn eat(&mut self, want: char) -> bool {
        if self.chars.peek().is_some_and(|&(_, n)| n == want) {
            self.chars.next();
            true
        } else {
            false
        }
    }

    fn copy_balanced(&mut self, open: char, close: char) {
        let mut depth = 0usize;
        for (_, n) in self.chars.by_ref() {
            self.word.push(n);
            if n == open {
                depth += 1;
            } else if n == close {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    break;
                }
            }
        }
    }

    fn redirect(&mut self, c: char) {
        // A word of digits right before the operator is its file descriptor (`2>`).
        let fd = if self.in_word && self.word.bytes().all(|b| b.is_ascii_digit()) {
            let fd = std::mem::take(&mut self.word);
            self.in_word = false;
            fd
        } else {
            self.end_word();
            String::new()
        };
        let mut op = format!("{fd}{c}");
        if c == '<' && self.eat('<') {
            op.push('<');
            if self.eat('<') {
                op.push('<');
            } else if self.eat('-') {
                op.push('-');
            }
        } else if c == '>' && (self.eat('>') || self.eat('|')) {
            op.push('>');
        }
        if self.eat('&') {
            // `2>&1`: the target is a descriptor, read as the next word.
            op.push('&');
        }
        self.pending_redirect = Some(op);
    }

    /// Skips here-document bodies that start at byte `from`, charging them to their commands.
    fn read_heredocs(&mut self, from: usize) {
        if self.heredocs.is_empty() {
            return;
        }
        let docs = std::mem::take(&mut self.heredocs);
        let owners = std::mem::take(&mut self.heredoc_owner);
        let mut pos = from;
        for ((delim, strip_tabs), owner) in docs.into_iter().zip(owners) {
            let mut bytes = 0u64;
            let mut lines = 0u64;
            loop {
                if pos >= self.text.len() {
                    break;
                }
                let rest = &self.text[pos..];
                let (line, next) = match rest.find('\n') {
                    Some(n) => (&rest[..n], pos + n + 1),
                    None => (rest, self.text.len()),
                };
                pos = next;
                let check = if strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    line
                };
                if check == delim {
                    break;
                }
                bytes += line.len() as u64 + 1;
                lines += 1;
            }
            let target = if owner < self.line.parts.len() {
                &mut self.line.parts[owner].0
            } else {
                &mut self.cur
            };
            *target.heredoc_bytes.get_or_insert(0) += bytes;
            target.heredoc_lines += lines;
        }
        // Resume tokenising after the last body.
        while self.chars.peek().is_some_and(|&(i, _)| i < pos) {
            self.chars.next();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn programs(line: &CommandLine) -> Vec<&str> {
        line.parts.iter().filter_map(|(s, _)| s.program()).collect()
    }

    #[test]
    fn splits_pipelines_and_lists() {
        let line = CommandLine::parse("cd /testbed && nl -ba a.py | sed -n '10,20p'");
        assert_eq!(programs(&line), ["cd", "nl", "sed"]);
        let (main, more) = line.main_pipeline().unwrap();
        assert_eq!(main.len(), 2);
        assert!(!more);
        assert_eq!(main[1].args(), ["-n", "10,20p"]);
    }

    #[test]
    fn quoted_operators_are_words() {
        let line = CommandLine::parse(r#"echo "cat file | grep x" ; grep -n "a|b" 'x y.py'"#);
        assert_eq!(programs(&line), ["echo", "grep"]);
        assert_eq!(line.parts[1].0.args(), ["-n", "a|b", "x y.py"]);
    }

    #[test]
    fn heredocs_are_skipped_and_measured() {
        let cmd = "cat <<'EOF' > reproduce.py\nimport os\nprint(1)\nEOF\npython reproduce.py";
        let line = CommandLine::parse(cmd);
        assert_eq!(programs(&line), ["cat", "python"]);
        let cat = &line.parts[0].0;
        assert_eq!(cat.stdout_file(), Some("reproduce.py"));
        assert_eq!(cat.heredoc_bytes, Some(19));
        assert_eq!(cat.heredoc_lines, 2);
    }

    #[test]
    fn redirections_with_descriptors() {
        let line = CommandLine::parse("python x.py 2>&1 > out.log");
        let s = &line.parts[0].0;
        assert_eq!(s.words, ["python", "x.py"]);
        assert_eq!(s.stdout_file(), Some("out.log"));
        assert_eq!(s.redirects[0].op, "2>&");
    }

    #[test]
    fn wrappers_and_assignments_are_skipped() {
        let line = CommandLine::parse("PYTHONPATH=. timeout 60 /usr/bin/python3 -m pytest -q");
        assert_eq!(line.parts[0].0.program(), Some("python3"));
        assert_eq!(line.parts[0].0.args(), ["-m", "pytest", "-q"]);
    }

    #[test]
    fn unbalanced_quotes_do_not_panic() {
        let line = CommandLine::parse("echo 'unterminated");
        assert_eq!(line.parts[0].0.words, ["echo", "unterminated"]);
        let _ = CommandLine::parse("$(((");
        let _ = CommandLine::parse("cat <<EOF");
        let _ = CommandLine::parse("a 2>");
    }
}
