//! Steps: what one tool call and its result amount to, reduced to what the agent needs next.
//!
//! A [`Step`] is derived from a tool call and its result in the log (seeds 000 and 001); it never
//! replaces them. Its `observation` is one truthful line computed from the original output, and
//! its `outcome_ref` names where the original bytes can be recovered exactly.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::event::{BlobRef, Seq};
use crate::stats::ContentStats;

/// What kind of tool a step came from; picks its reducer and its compaction group.
///
/// Kinds come from an explicit tool-kind mapping (built-in aliases plus user configuration), never
/// from substrings of tool names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// Reads a file.
    ReadFile,
    /// Writes or edits a file.
    WriteFile,
    /// Lists a directory or globs paths.
    ListDir,
    /// Searches file contents (grep-like).
    Grep,
    /// Searches the web.
    WebSearch,
    /// Fetches or navigates to a URL.
    Navigate,
    /// Interacts with a page (click, type, scroll).
    BrowserAction,
    /// Runs a shell command.
    Shell,
    /// A user-defined kind from configuration.
    Custom(String),
    /// No mapping matched.
    Unknown,
}

impl ToolKind {
    /// The default compaction category of this kind. User configuration may map tools to other
    /// categories; this is what applies when it does not.
    pub fn category(&self) -> Category {
        match self {
            Self::ReadFile | Self::WriteFile | Self::ListDir => Category::File,
            Self::Grep | Self::WebSearch => Category::Search,
            Self::Navigate | Self::BrowserAction => Category::Web,
            Self::Shell => Category::Shell,
            Self::Custom(name) => Category::Custom(name.clone()),
            Self::Unknown => Category::Other,
        }
    }
}

/// The compaction category of a kind: consecutive steps of one category form one group.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// File reads, writes, listings.
    File,
    /// Shell commands.
    Shell,
    /// Searches (web or content).
    Search,
    /// Web navigation and page interaction.
    Web,
    /// A user-defined category.
    Custom(String),
    /// Everything else.
    Other,
}

/// One reduced tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// `step_001`, numbered per session in the order results arrived.
    pub id: String,
    /// The call this step reduces.
    pub call_id: String,
    /// Seq of the assistant event that made the call.
    pub call_seq: Seq,
    /// Seq of the tool result.
    pub result_seq: Seq,
    /// Tool name exactly as the agent gave it.
    pub tool_name: String,
    /// The kind the tool-kind mapping chose.
    pub kind: ToolKind,
    /// The arguments that identify the action (path, command, query), without large content.
    pub minimal_args: BTreeMap<String, serde_json::Value>,
    /// One line saying what happened, computed from the original output.
    pub observation: String,
    /// Where the original output can be recovered (`outputs/shell_003.log`), when it was offloaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome_ref: Option<String>,
    /// The blob holding the original output, when it was offloaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<BlobRef>,
    /// Whether the call succeeded.
    pub success: bool,
    /// The error, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the result arrived, UTC milliseconds.
    pub timestamp_ms: i64,
    /// Stats of the original output.
    pub stats: ContentStats,
    /// How many results the original output held (search hits, grep matches, directory
    /// entries), when the tool's reducer can count them. Group summaries in compaction add these
    /// up ("5 searches (73 results)"), so a count the reducer does not know stays `None` rather
    /// than a guess.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results: Option<u64>,
    /// Figures the reducer read from the output that are not arguments (`exit_code`, `status`,
    /// `title`), so compact templates and later passes can use them without re-reading the
    /// original. Ordered, so a step's JSON is canonical.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub facts: BTreeMap<String, serde_json::Value>,
}

/// A step reduced to one line for prompt inclusion (seed 001).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactStep {
    /// The step's id.
    pub id: String,
    /// One-line summary, e.g. `Read config.json (1.2KB)`.
    pub summary: String,
}
