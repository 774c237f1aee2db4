//! Real trajectories from `../shared/traces`, reduced to steps the way ingest reduces them.
//!
//! Shared by the compaction tests and the `compact_savings` example (which includes this file by
//! path), so both measure the same steps.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context as _, Result};
use loom_core::{ContentStats, ReduceConfig, ResultInput, Step, StepContext, ToolCall};
use serde_json::Value;

/// The shared traces folder, relative to this crate.
pub(crate) fn traces_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/traces"
    ))
}

/// One tool call and its result, as the ReAct prompt shows it, with the step it reduces to.
#[derive(Debug, Clone)]
pub(crate) struct Turn {
    /// The assistant text before the call.
    pub(crate) thought: String,
    /// Tool name.
    pub(crate) action: String,
    /// Raw JSON arguments.
    pub(crate) arguments: String,
    /// The tool's full output.
    pub(crate) output: String,
    /// The reduced step.
    pub(crate) step: Step,
}

/// A trajectory: its tool turns.
#[derive(Debug, Clone)]
pub(crate) struct Trajectory {
    /// The trace's id.
    pub(crate) id: String,
    /// Every tool call that has a result, in order.
    pub(crate) turns: Vec<Turn>,
}

impl Trajectory {
    /// The reduced steps.
    pub(crate) fn steps(&self) -> Vec<Step> {
        self.turns.iter().map(|t| t.step.clone()).collect()
    }
}

fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Every trajectory of one trace file, reduced with the default reduction settings.
pub(crate) fn load(file: &str) -> Result<Vec<Trajectory>> {
    let path = traces_dir().join(file);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let reduce = ReduceConfig::default();
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let v: Value = serde_json::from_str(line).with_context(|| format!("{file}:{}", n + 1))?;
        let messages = v["messages"].as_array().cloned().unwrap_or_default();
        let mut calls: BTreeMap<String, (ToolCall, String, u64)> = BTreeMap::new();
        let mut turns = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let seq = i as u64 + 1;
            match m["role"].as_str() {
                Some("assistant") => {
                    let thought = text_of(m.get("content"));
                    for c in m["tool_calls"].as_array().into_iter().flatten() {
                        let call = ToolCall {
                            id: c["id"].as_str().unwrap_or_default().to_owned(),
                            name: c["function"]["name"]
                                .as_str()
                                .unwrap_or_default()
                                .to_owned(),
                            arguments: c["function"]["arguments"]
                                .as_str()
                                .unwrap_or_default()
                                .to_owned(),
                        };
                        calls.insert(call.id.clone(), (call, thought.clone(), seq));
                    }
                }
                Some("tool") => {
                    let id = m["tool_call_id"].as_str().unwrap_or_default();
                    let Some((call, thought, call_seq)) = calls.remove(id) else {
                        continue;
                    };
                    let output = text_of(m.get("content"));
                    let stats = ContentStats::of(output.as_bytes());
                    let number = turns.len() as u32 + 1;
                    let reduction = reduce.reduce(
                        &ResultInput {
                            call: Some(&call),
                            call_id: id,
                            tool_name: &call.name,
                            content: output.as_bytes(),
                            is_error: false,
                            stats: &stats,
                        },
                        &StepContext {
                            number,
                            call_seq,
                            result_seq: seq,
                            timestamp_ms: 0,
                        },
                    );
                    turns.push(Turn {
                        thought,
                        action: call.name.clone(),
                        arguments: call.arguments.clone(),
                        output,
                        step: reduction.step,
                    });
                }
                _ => {}
            }
        }
        out.push(Trajectory {
            id: v["id"].as_str().unwrap_or_default().to_owned(),
            turns,
        });
    }
    Ok(out)
}

/// Every trajectory of every trace file, in file-name order.
pub(crate) fn load_all() -> Result<Vec<Trajectory>> {
    let mut files: Vec<String> = std::fs::read_dir(traces_dir())?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".jsonl"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        out.extend(load(&f)?);
    }
    Ok(out)
}
