//! How a render names where a left-out original can be read again (DESIGN.md, principle 3:
//! everything a render leaves out stays recoverable).
//!
//! A stub, an elided output, a diff, a folded group, an omitted run of steps and a summary each
//! name their original. How they name it depends on what the model can do with the name:
//! - [`RecallRefs::See`]: `(See outputs/shell_017.log)`, `(See seq 8)` — for a person with
//!   `loom recall` or the HTTP API;
//! - [`RecallRefs::Tool`]: `(loom_recall ref=outputs/shell_017.log)`, `loom_recall ref=seq:12-19`
//!   — the model has the `loom_recall` tool (the proxy in fit mode, `loom run`, `loom.wrap`);
//! - [`RecallRefs::Files`]: an offloaded output by its absolute path under a folder the agent can
//!   read with its own file tool, everything else as with `Tool`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::event::Seq;

/// The name of the recall tool, in every front end.
pub const RECALL_TOOL: &str = "loom_recall";

/// How references are written in a render.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode", deny_unknown_fields)]
pub enum RecallRefs {
    /// `(See <ref>)`: a reference for `loom recall` or the API.
    #[default]
    See,
    /// `(loom_recall ref=<ref>)`: a call of the recall tool.
    Tool,
    /// Offloaded outputs by their path under `dir`; the rest as with `Tool`.
    Files {
        /// The session's folder of offloaded outputs (absolute).
        dir: PathBuf,
    },
}

/// Where an original left out of a render is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locator<'a> {
    /// An offloaded output, by its alias (`outputs/shell_017.log`) or address (`sha256:…`).
    Output(&'a str),
    /// One event of the log.
    Seq(Seq),
    /// Events `from..=to` of the log.
    Span(Seq, Seq),
}

impl RecallRefs {
    /// Whether this is the default ([`RecallRefs::See`]): a policy leaves it out of its JSON, so
    /// the versions of policies written before it existed do not change.
    pub fn is_see(&self) -> bool {
        *self == Self::See
    }

    /// Whether the render's references are calls of the recall tool (the tool must be offered).
    pub fn uses_tool(&self) -> bool {
        !self.is_see()
    }

    /// The reference as the model should use it: `outputs/x.log`, `seq 8`; `loom_recall
    /// ref=outputs/x.log`, `loom_recall ref=seq:12-19`; or an absolute path.
    pub fn name(&self, at: Locator<'_>) -> String {
        match (self, at) {
            (Self::See, Locator::Output(r)) => r.to_owned(),
            (Self::See, Locator::Seq(n)) => format!("seq {n}"),
            (Self::See, Locator::Span(a, b)) => format!("seqs {a}-{b}"),
            (Self::Files { dir }, Locator::Output(r)) if !r.starts_with("sha256:") => {
                dir.join(r).display().to_string()
            }
            (_, at) => format!("{RECALL_TOOL} ref={}", tool_ref(at)),
        }
    }

    /// The reference in parentheses, as a stub ends: `(See outputs/x.log)`,
    /// `(loom_recall ref=seq:8)`, `(See /abs/outputs/x.log)`.
    pub fn cite(&self, at: Locator<'_>) -> String {
        let name = self.name(at);
        if name.starts_with(RECALL_TOOL) {
            format!("({name})")
        } else {
            format!("(See {name})")
        }
    }

    /// ` (loom_recall ref=seq:a-b)` after a folded group or message, with the tool; nothing
    /// without it (the line's own step ids are the reference there).
    pub fn suffix(&self, at: Locator<'_>) -> String {
        if self.uses_tool() {
            format!(" {}", self.cite(at))
        } else {
            String::new()
        }
    }
}

/// A reference as the recall tool takes it: `outputs/x.log`, `seq:8`, `seq:12-19`.
pub fn tool_ref(at: Locator<'_>) -> String {
    match at {
        Locator::Output(r) => r.to_owned(),
        Locator::Seq(n) => format!("seq:{n}"),
        Locator::Span(a, b) if a == b => format!("seq:{a}"),
        Locator::Span(a, b) => format!("seq:{a}-{b}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_names_each_locator() {
        let out = Locator::Output("outputs/shell_017.log");
        assert_eq!(RecallRefs::See.cite(out), "(See outputs/shell_017.log)");
        assert_eq!(RecallRefs::See.cite(Locator::Seq(8)), "(See seq 8)");
        assert_eq!(
            RecallRefs::Tool.cite(out),
            "(loom_recall ref=outputs/shell_017.log)"
        );
        assert_eq!(
            RecallRefs::Tool.name(Locator::Span(12, 19)),
            "loom_recall ref=seq:12-19"
        );
        assert_eq!(
            RecallRefs::Tool.name(Locator::Span(4, 4)),
            "loom_recall ref=seq:4"
        );
        let files = RecallRefs::Files {
            dir: PathBuf::from("/work/recall/s1"),
        };
        assert_eq!(
            files.cite(out),
            "(See /work/recall/s1/outputs/shell_017.log)"
        );
        assert_eq!(files.cite(Locator::Seq(3)), "(loom_recall ref=seq:3)");
        assert_eq!(RecallRefs::See.suffix(Locator::Span(1, 2)), "");
        assert_eq!(
            RecallRefs::Tool.suffix(Locator::Span(1, 2)),
            " (loom_recall ref=seq:1-2)"
        );
    }
}
