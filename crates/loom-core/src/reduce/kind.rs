//! The tool-kind mapping: which reducer a tool's results get.
//!
//! Agents name the same action differently (`execute_bash`, `bash`, `Bash`, `shell`), and one
//! name can mean two things (`goto` navigates in BrowserGym and scrolls the file viewer in
//! SWE-agent). A kind is chosen, in order, by: the user's exact names, the user's patterns (in
//! the order written), the built-in aliases of common frameworks (which may look at the call's
//! arguments), and SWE-agent's habit of naming a shell action after its program (`ls` with
//! `{"command": "ls -a"}`). Names are compared whole — never by substring, so `thread:spawn` is
//! not a file tool because it contains `read`.

use std::collections::BTreeMap;

use crate::error::{LogError, Result};
use crate::step::ToolKind;

use super::args::Args;
use super::cmdline::basename;

/// Parses a kind as written in configuration: `read_file`, `shell`, … or `custom:<name>`.
pub(crate) fn parse_kind(text: &str) -> Option<ToolKind> {
    Some(match text {
        "read_file" => ToolKind::ReadFile,
        "write_file" => ToolKind::WriteFile,
        "list_dir" => ToolKind::ListDir,
        "grep" => ToolKind::Grep,
        "web_search" => ToolKind::WebSearch,
        "navigate" => ToolKind::Navigate,
        "browser_action" => ToolKind::BrowserAction,
        "shell" => ToolKind::Shell,
        "unknown" | "generic" => ToolKind::Unknown,
        other => {
            let name = other.strip_prefix("custom:")?;
            if name.is_empty() {
                return None;
            }
            ToolKind::Custom(name.to_owned())
        }
    })
}

/// The names [`parse_kind`] accepts, for error messages.
pub(crate) const KIND_NAMES: &str =
    "read_file, write_file, list_dir, grep, web_search, navigate, browser_action, shell, unknown, custom:<name>";

/// One user rule: a kind, optionally refined by the value of one argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    /// The kind when no argument value matches.
    pub(crate) kind: ToolKind,
    /// `(argument, value → kind)`: e.g. `command`, `view → read_file`.
    pub(crate) by_arg: Option<(String, BTreeMap<String, ToolKind>)>,
}

impl Rule {
    fn apply(&self, args: &Args) -> ToolKind {
        if let Some((arg, kinds)) = &self.by_arg {
            if let Some(kind) = args.str(&[arg]).and_then(|v| kinds.get(v)) {
                return kind.clone();
            }
        }
        self.kind.clone()
    }
}

/// A whole-name pattern: `*` matches any run of characters, `?` exactly one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pattern(String);

impl Pattern {
    pub(crate) fn new(text: &str) -> Result<Self> {
        if text.is_empty() {
            return Err(LogError::invalid("pattern", "must not be empty"));
        }
        if text.chars().all(|c| c == '*') {
            return Err(LogError::invalid(
                "pattern",
                format!("`{text}` would match every tool; map tools by name or a narrower pattern"),
            ));
        }
        Ok(Self(text.to_owned()))
    }

    /// Whether the whole of `name` matches.
    pub(crate) fn matches(&self, name: &str) -> bool {
        glob(self.0.as_bytes(), name.as_bytes())
    }
}

/// Iterative wildcard matching with backtracking to the last `*` (linear in practice).
fn glob(pat: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pat.len() && (pat[p] == b'?' || pat[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pat.len() && pat[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pat[p..].iter().all(|&b| b == b'*')
}

/// Maps tool names (and, where it matters, their arguments) to kinds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolKinds {
    exact: BTreeMap<String, Rule>,
    patterns: Vec<(Pattern, Rule)>,
}

impl ToolKinds {
    /// The built-in aliases only.
    pub fn builtin() -> Self {
        Self::default()
    }

    pub(crate) fn add_exact(&mut self, name: String, rule: Rule) {
        self.exact.insert(name, rule);
    }

    pub(crate) fn add_pattern(&mut self, pattern: Pattern, rule: Rule) {
        self.patterns.push((pattern, rule));
    }

    /// The kind of a call to `name` with these raw JSON arguments.
    pub fn kind_of(&self, name: &str, arguments: &str) -> ToolKind {
        self.resolve(name, &Args::parse(arguments))
    }

    pub(crate) fn resolve(&self, name: &str, args: &Args) -> ToolKind {
        if let Some(rule) = self.exact.get(name) {
            return rule.apply(args);
        }
        if let Some((_, rule)) = self.patterns.iter().find(|(p, _)| p.matches(name)) {
            return rule.apply(args);
        }
        if let Some(kind) = builtin(name, args) {
            return kind;
        }
        if names_its_program(name, args) {
            return ToolKind::Shell;
        }
        ToolKind::Unknown
    }
}

/// SWE-agent records a shell action under its program's name: tool `ls`, command `ls -a`.
fn names_its_program(name: &str, args: &Args) -> bool {
    let Some(command) = args.str(&["command"]) else {
        return false;
    };
    let first = command.split_whitespace().next().unwrap_or("");
    !first.is_empty() && basename(first) == basename(name)
}

/// Editor tools whose `command` argument says whether they read or write.
fn editor_kind(args: &Args) -> ToolKind {
    match args.str(&["command"]) {
        Some("view") => ToolKind::ReadFile,
        // Text-mode SWE-agent passes the whole action line: `open file.py 10`.
        Some(line) if line.starts_with("open ") || line.starts_with("goto ") => ToolKind::ReadFile,
        _ => ToolKind::WriteFile,
    }
}

/// The built-in aliases of common agent frameworks.
fn builtin(name: &str, args: &Args) -> Option<ToolKind> {
    use ToolKind::*;
    Some(match name {
        // Seeds, generic names, Codex and OpenAI Agents SDK file tools.
        "fs:read_file" | "fs__read_file" | "read_file" | "view_file" | "open_file" | "cat_file"
        | "read" => ReadFile,
        "fs:write_file" | "fs__write_file" | "write_file" | "create_file" | "edit_file"
        | "write" | "apply_patch" | "replace_in_file" | "write_to_file" => WriteFile,
        "fs:list_dir" | "fs__list_dir" | "list_dir" | "list_directory" | "list_files" | "glob"
        | "file_glob" => ListDir,
        "fs:grep" | "fs__grep" | "grep" | "grep_files" | "search_files" | "grep_search"
        | "ripgrep" | "codebase_search" => Grep,
        "web:search" | "web__search" | "web_search" | "web_search_preview" | "search_web"
        | "google_search" | "bing_search" | "brave_search" | "tavily_search"
        | "duckduckgo_search" | "file_search" | "search" | "lookup" => WebSearch,
        "browser:navigate" | "browser__navigate" | "navigate" | "fetch" | "fetch_url"
        | "web_fetch" | "web_read" | "open_url" | "visit" | "browse" | "read_url" => Navigate,
        "system:shell" | "system__shell" | "shell" | "bash" | "sh" | "terminal"
        | "run_shell_command" | "run_command" | "execute_command" | "run_terminal_cmd"
        | "local_shell" | "exec" | "exec_command" | "container.exec" | "unified_exec"
        | "code_interpreter" => Shell,
        // OpenHands.
        "execute_bash" | "execute_ipython_cell" | "execute_powershell" => Shell,
        "str_replace_editor" | "str_replace_based_edit_tool" | "text_editor" => editor_kind(args),
        "browser" => BrowserAction,
        // SWE-agent's file viewer, editor and search commands.
        "open" | "scroll_up" | "scroll_down" | "filemap" => ReadFile,
        "create" | "edit" | "insert" | "append" | "edit_linting" => WriteFile,
        "find_file" => ListDir,
        "search_dir" | "search_file" => Grep,
        // Claude Code.
        "Read" | "NotebookRead" => ReadFile,
        "Write" | "Edit" | "MultiEdit" | "NotebookEdit" => WriteFile,
        "Grep" => Grep,
        "Glob" | "LS" => ListDir,
        "Bash" | "BashOutput" => Shell,
        "WebFetch" => Navigate,
        "WebSearch" => WebSearch,
        // BrowserGym (and `goto`, shared with SWE-agent's viewer: decided by the arguments).
        "goto" => {
            if args.get(&["line_number", "line"]).is_some()
                || args
                    .str(&["command"])
                    .is_some_and(|c| c.starts_with("goto "))
            {
                ReadFile
            } else {
                Navigate
            }
        }
        "go_back"
        | "go_forward"
        | "new_tab"
        | "tab_close"
        | "tab_focus"
        | "click"
        | "dblclick"
        | "hover"
        | "fill"
        | "clear"
        | "select_option"
        | "press"
        | "focus"
        | "scroll"
        | "drag_and_drop"
        | "upload_file"
        | "mouse_move"
        | "mouse_click"
        | "mouse_dblclick"
        | "mouse_down"
        | "mouse_up"
        | "mouse_drag_and_drop"
        | "mouse_upload_file"
        | "keyboard_press"
        | "keyboard_type"
        | "keyboard_down"
        | "keyboard_up"
        | "keyboard_insert_text"
        | "send_msg_to_user"
        | "report_infeasible"
        | "noop"
        | "computer"
        | "computer_use_preview" => BrowserAction,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(kinds: &ToolKinds, name: &str, args: &str) -> ToolKind {
        kinds.kind_of(name, args)
    }

    #[test]
    fn builtin_aliases_cover_the_frameworks() {
        let k = ToolKinds::builtin();
        assert_eq!(
            kind(&k, "execute_bash", r#"{"command":"ls"}"#),
            ToolKind::Shell
        );
        assert_eq!(
            kind(&k, "Read", r#"{"file_path":"/a"}"#),
            ToolKind::ReadFile
        );
        assert_eq!(kind(&k, "Glob", "{}"), ToolKind::ListDir);
        assert_eq!(kind(&k, "apply_patch", "{}"), ToolKind::WriteFile);
        assert_eq!(
            kind(&k, "click", r#"{"action":"click('a1')"}"#),
            ToolKind::BrowserAction
        );
        assert_eq!(kind(&k, "get_reservation_details", "{}"), ToolKind::Unknown);
    }

    #[test]
    fn editor_commands_and_goto_look_at_arguments() {
        let k = ToolKinds::builtin();
        let view = r#"{"command":"view","path":"/a.py"}"#;
        assert_eq!(kind(&k, "str_replace_editor", view), ToolKind::ReadFile);
        let edit = r#"{"command":"str_replace","path":"/a.py"}"#;
        assert_eq!(kind(&k, "str_replace_editor", edit), ToolKind::WriteFile);
        assert_eq!(
            kind(&k, "goto", r#"{"action":"goto(\"https://a.b\")"}"#),
            ToolKind::Navigate
        );
        assert_eq!(
            kind(&k, "goto", r#"{"line_number":100}"#),
            ToolKind::ReadFile
        );
    }

    #[test]
    fn swe_agent_program_named_actions_are_shell() {
        let k = ToolKinds::builtin();
        assert_eq!(
            kind(&k, "tshark", r#"{"command":"tshark -r a.pcap"}"#),
            ToolKind::Shell
        );
        assert_eq!(
            kind(&k, "./rock", r#"{"command":"./rock"}"#),
            ToolKind::Shell
        );
        assert_eq!(kind(&k, "tshark", r#"{"command":"ls"}"#), ToolKind::Unknown);
    }

    #[test]
    fn names_are_never_matched_by_substring() {
        let k = ToolKinds::builtin();
        assert_eq!(kind(&k, "thread:spawn", "{}"), ToolKind::Unknown);
        assert_eq!(kind(&k, "read_file_v2", "{}"), ToolKind::Unknown);
        assert_eq!(kind(&k, "my_bash", "{}"), ToolKind::Unknown);
    }

    #[test]
    fn patterns_match_whole_names() {
        let p = Pattern::new("mcp__fs__read*").unwrap();
        assert!(p.matches("mcp__fs__read_text_file"));
        assert!(!p.matches("x_mcp__fs__read"));
        let q = Pattern::new("tool_?").unwrap();
        assert!(q.matches("tool_a") && !q.matches("tool_ab"));
        assert!(Pattern::new("**").is_err());
        assert!(glob(b"a*b*c", b"aXXbYYc") && !glob(b"a*b*c", b"aXXbYY"));
    }
}
