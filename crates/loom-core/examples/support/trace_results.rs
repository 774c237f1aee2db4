//! The tool results of OpenAI Chat JSONL trajectories, each with its call: the one walk the
//! reduction bench and examples share (included by `#[path]`; not an example of its own).

// Each includer reads the fields it needs; `expect` would fail in the ones that read them all.
#![allow(
    dead_code,
    reason = "each bench or example that includes this reads only some fields"
)]

use std::collections::BTreeMap;

use loom_core::ToolCall;

/// One tool result as the trace holds it.
pub(crate) struct TraceResult {
    /// The call it answers, when the trajectory made one with its id.
    pub(crate) call: Option<ToolCall>,
    /// The `tool_call_id` the result names.
    pub(crate) call_id: String,
    /// The result's text.
    pub(crate) content: String,
}

/// One trajectory: its id and its tool results in order.
pub(crate) struct Trajectory {
    /// The trajectory's `id`.
    pub(crate) id: String,
    /// Its tool results.
    pub(crate) results: Vec<TraceResult>,
}

/// Each trajectory (one JSONL line) of `text`.
pub(crate) fn trajectories(text: &str) -> Result<Vec<Trajectory>, serde_json::Error> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let traj: serde_json::Value = serde_json::from_str(line)?;
            let mut calls: BTreeMap<String, ToolCall> = BTreeMap::new();
            let mut out = Vec::new();
            for m in traj["messages"].as_array().into_iter().flatten() {
                for tc in m["tool_calls"].as_array().into_iter().flatten() {
                    let call = ToolCall {
                        id: tc["id"].as_str().unwrap_or("").to_owned(),
                        name: tc["function"]["name"].as_str().unwrap_or("").to_owned(),
                        arguments: tc["function"]["arguments"]
                            .as_str()
                            .unwrap_or("")
                            .to_owned(),
                    };
                    calls.insert(call.id.clone(), call);
                }
                if m["role"] == "tool" {
                    let call_id = m["tool_call_id"].as_str().unwrap_or("").to_owned();
                    out.push(TraceResult {
                        call: calls.get(&call_id).cloned(),
                        call_id,
                        content: m["content"].as_str().unwrap_or("").to_owned(),
                    });
                }
            }
            Ok(Trajectory {
                id: traj["id"].as_str().unwrap_or("").to_owned(),
                results: out,
            })
        })
        .collect()
}
