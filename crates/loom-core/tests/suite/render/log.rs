//! Real trajectories as the log a live agent would have written: one event per message, tool
//! results paired with their calls, and the tools the agent was offered.
//!
//! The traces record no tool definitions, so each tool is given a definition inferred from the
//! calls the agent made (one property per argument name, typed by its first value): the bodies
//! then carry a `tools` section in every format, as a real request does.

use std::collections::BTreeMap;

use anyhow::{bail, Context as _, Result};
use loom_core::render::ToolSpec;
use loom_core::{
    ContentStats, Event, EventBody, Ledger, MessageContent, Seq, ToolCall, ToolOutput,
};
use serde_json::{json, Value};

use super::super::compact::trajectory::traces_dir;

/// One trajectory as a log.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// The trace's id.
    pub(crate) id: String,
    /// The log, seq 1.. in message order.
    pub(crate) events: Vec<Event>,
    /// Tool definitions inferred from the calls.
    pub(crate) tools: Vec<ToolSpec>,
}

fn content(v: Option<&Value>) -> Option<MessageContent> {
    match v {
        Some(Value::String(s)) => Some(MessageContent::Text(s.clone())),
        Some(Value::Array(parts)) => Some(MessageContent::Text(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
        )),
        _ => None,
    }
}

/// Converts one trace record. Call ids a trace reuses after their result came back become
/// `<id>_r<n>`, as the importer does (the log needs ids unique per session).
fn convert(record: &Value) -> Result<Session> {
    let id = record["id"].as_str().unwrap_or_default().to_owned();
    let messages = record["messages"].as_array().cloned().unwrap_or_default();
    let mut events = Vec::new();
    let mut ledger = Ledger::new();
    // Source id → log id and tool name, while the call waits for its result.
    let mut pending: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut used: BTreeMap<String, u32> = BTreeMap::new();
    let mut args: BTreeMap<String, BTreeMap<String, &'static str>> = BTreeMap::new();
    for (i, m) in messages.iter().enumerate() {
        let seq = i as Seq + 1;
        let text = || content(m.get("content")).unwrap_or_else(|| "".into());
        let body = match m["role"].as_str() {
            Some("system") => EventBody::System { content: text() },
            Some("user") => EventBody::User {
                content: text(),
                name: None,
            },
            Some("assistant") => {
                let mut tool_calls = Vec::new();
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    let source = c["id"].as_str().unwrap_or_default().to_owned();
                    let name = c["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    let arguments = c["function"]["arguments"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    if pending.contains_key(&source) {
                        bail!("{id}: call id {source} reused while pending");
                    }
                    let n = used.entry(source.clone()).or_default();
                    let log_id = if *n == 0 {
                        source.clone()
                    } else {
                        format!("{source}_r{n}")
                    };
                    *n += 1;
                    infer_arguments(args.entry(name.clone()).or_default(), &arguments);
                    pending.insert(source, (log_id.clone(), name.clone()));
                    tool_calls.push(ToolCall {
                        id: log_id,
                        name,
                        arguments,
                    });
                }
                EventBody::Assistant {
                    content: content(m.get("content")),
                    reasoning: None,
                    tool_calls,
                    name: None,
                    native: None,
                }
            }
            Some("tool") => {
                let source = m["tool_call_id"].as_str().unwrap_or_default();
                let Some((call_id, tool_name)) = pending.remove(source) else {
                    bail!("{id}: message {i} answers no pending call");
                };
                let output = content(m.get("content"))
                    .map(|c| c.text().into_owned())
                    .unwrap_or_default();
                EventBody::ToolResult {
                    call_id,
                    tool_name,
                    stats: ContentStats::of(output.as_bytes()),
                    content: ToolOutput::Text(output),
                    is_error: false,
                }
            }
            other => bail!("{id}: message {i} has role {other:?}"),
        };
        ledger
            .apply(seq, &body)
            .with_context(|| format!("{id}: message {i}"))?;
        events.push(Event {
            seq,
            ts_ms: 1_000 * seq as i64,
            body,
        });
    }
    let tools = args
        .into_iter()
        .map(|(name, props)| ToolSpec {
            description: format!("`{name}` (definition not recorded in the trace)"),
            parameters: json!({
                "type": "object",
                "properties": props
                    .into_iter()
                    .map(|(k, t)| (k, json!({"type": t})))
                    .collect::<serde_json::Map<_, _>>(),
            }),
            name,
        })
        .collect();
    Ok(Session { id, events, tools })
}

fn infer_arguments(props: &mut BTreeMap<String, &'static str>, arguments: &str) {
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(arguments) else {
        return;
    };
    for (k, v) in map {
        props.entry(k).or_insert(match v {
            Value::Bool(_) => "boolean",
            Value::Number(_) => "number",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
            Value::String(_) | Value::Null => "string",
        });
    }
}

/// The trajectory of `file` whose id ends in `id_suffix`.
pub(crate) fn find(file: &str, id_suffix: &str) -> Result<Session> {
    let path = traces_dir().join(file);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    for (n, line) in text.lines().enumerate() {
        let v: Value = serde_json::from_str(line).with_context(|| format!("{file}:{}", n + 1))?;
        if v["id"].as_str().is_some_and(|id| id.ends_with(id_suffix)) {
            return convert(&v);
        }
    }
    bail!("{file} has no trajectory ending in {id_suffix}")
}
