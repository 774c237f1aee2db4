//! The seed's ReAct text prompt: the conversation as Thought / Action / Observation lines.
//!
//! Sent as `{"model", "prompt"}`. A stubbed result shows its observation and
//! `(See <outcome_ref>)`, so the model knows where the full output is.

use serde_json::{json, Value};

use super::text_only;
use crate::render::request::{Msg, Request, ToolSpec};

pub(super) fn text(msg: &Msg) -> String {
    match msg {
        Msg::System(c) => text_only(c),
        Msg::User { content, .. } => format!("Question: {}", text_only(content)),
        Msg::Assistant { content, calls, .. } => {
            let mut out = String::new();
            if let Some(c) = content {
                let text = text_only(c);
                // Agents that write ReAct text label their thoughts already.
                let labelled = text
                    .get(..8)
                    .is_some_and(|head| head.eq_ignore_ascii_case("thought:"));
                if !labelled {
                    out.push_str("Thought: ");
                }
                out.push_str(&text);
            }
            for rc in calls {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(&format!(
                    "Action: {}[{}]\n",
                    rc.call.name, rc.call.arguments
                ));
                // A stubbed result's text already ends in `(See <outcome_ref>)`.
                out.push_str(&format!("Observation: {}", text_only(&rc.content)));
            }
            if out.is_empty() {
                out.push_str("Thought:");
            }
            out
        }
    }
}

pub(super) fn tools(tools: &[ToolSpec]) -> Vec<Value> {
    tools
        .iter()
        .map(|t| Value::String(format!("{}: {}", t.name, t.description)))
        .collect()
}

pub(super) fn body(req: &Request) -> Value {
    let mut parts: Vec<String> = Vec::new();
    if !req.tools.is_empty() {
        let names: Vec<String> = tools(&req.tools)
            .into_iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        parts.push(format!("Tools:\n{}", names.join("\n")));
    }
    parts.extend(req.messages.iter().map(text));
    json!({"model": req.model, "prompt": parts.join("\n")})
}
