//! Synthetic steps for the compactor's unit tests: a step of each kind with a fixed observation.

use std::collections::BTreeMap;

use crate::stats::ContentStats;
use crate::step::{Step, ToolKind};

fn tool_name(kind: &ToolKind) -> String {
    match kind {
        ToolKind::ReadFile => "read_file".into(),
        ToolKind::WriteFile => "write_file".into(),
        ToolKind::ListDir => "list_dir".into(),
        ToolKind::Grep => "grep".into(),
        ToolKind::WebSearch => "web_search".into(),
        ToolKind::Navigate => "navigate".into(),
        ToolKind::BrowserAction => "click".into(),
        ToolKind::Shell => "shell".into(),
        ToolKind::Custom(name) => name.clone(),
        ToolKind::Unknown => "unknown_tool".into(),
    }
}

fn observation(kind: &ToolKind) -> &'static str {
    match kind {
        ToolKind::ReadFile | ToolKind::WriteFile | ToolKind::ListDir => "touched a file",
        ToolKind::Grep | ToolKind::WebSearch => "searched",
        ToolKind::Navigate | ToolKind::BrowserAction => "visited a page",
        ToolKind::Shell => "ran a command",
        ToolKind::Custom(_) | ToolKind::Unknown => "did something",
    }
}

/// A successful step `step_{n:03}` of `kind` with a 200-byte output.
pub(crate) fn step(n: usize, kind: ToolKind) -> Step {
    sized(n, kind, 200)
}

/// A successful step whose original output had `bytes` bytes.
pub(crate) fn sized(n: usize, kind: ToolKind, bytes: usize) -> Step {
    Step {
        id: format!("step_{n:03}"),
        call_id: format!("call_{n}"),
        call_seq: 2 * n as u64,
        result_seq: 2 * n as u64 + 1,
        tool_name: tool_name(&kind),
        observation: observation(&kind).into(),
        kind,
        minimal_args: BTreeMap::new(),
        outcome_ref: None,
        blob: None,
        success: true,
        error: None,
        timestamp_ms: 1_700_000_000_000 + n as i64,
        stats: ContentStats::of(&vec![b'x'; bytes]),
        results: None,
        facts: BTreeMap::new(),
    }
}

/// A failed step with `error`.
pub(crate) fn failed(n: usize, kind: ToolKind, error: &str) -> Step {
    Step {
        success: false,
        error: Some(error.into()),
        ..step(n, kind)
    }
}
