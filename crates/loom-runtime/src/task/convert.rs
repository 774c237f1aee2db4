//! Seed 002's MessageConverter: task records to messages.
//!
//! | action | message |
//! |---|---|
//! | `execute` | user message with `parameters.content` |
//! | `node.thinking` | assistant message with `parameters.content` |
//! | `node.tool_call` | assistant message holding the call, paired with its result's observation ([`ToolResults::Observe`], Loom's default); or the seed's text `[Calling name(args)]` ([`ToolResults::Omit`]) |
//! | `node.tool_result` | rendered inside its call's message as the step observation plus a reference (`task <id>`); the seed omits it ([`ToolResults::Omit`]) |
//! | `node.message` | not here: direct messages are selected separately |
//!
//! A call and its result are one message, so no truncation can orphan either. A result is paired
//! with the call named by its `tool_call_id` (or `call_id`) parameter, or else with the earliest
//! unanswered earlier call of the same tool. A result with no call is kept as a user-side note,
//! never dropped silently.

use std::collections::BTreeMap;

use loom_core::render::{Msg, RenderedCall, ResultForm};
use loom_core::{ContentStats, MessageContent, ReduceConfig, ResultInput, StepContext, ToolCall};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::item::{action, TaskItem};
use super::{DropReason, Dropped};

/// What happens to tool results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolResults {
    /// Rendered as the step's one-line observation plus a reference to the record (Loom).
    #[default]
    Observe,
    /// Left out, and calls rendered as text (seed 002's rule).
    Omit,
}

/// A message and the records it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvertedMsg {
    /// The message.
    pub msg: Msg,
    /// Task ids of the records it renders (a call and its result together).
    pub items: Vec<String>,
}

/// Task records to messages (see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct MessageConverter {
    /// What happens to tool results.
    pub tool_results: ToolResults,
    /// The reducers that compute observations from raw results.
    pub reduce: ReduceConfig,
}

fn call_id(item: &TaskItem) -> Option<&str> {
    item.str_param("tool_call_id")
        .or_else(|| item.str_param("call_id"))
}

fn tool_name(item: &TaskItem) -> &str {
    item.str_param("tool_name").unwrap_or("tool")
}

/// The call's arguments as JSON text: `parameters.arguments` (or `args`), else the parameters
/// that are not bookkeeping.
fn arguments(item: &TaskItem) -> String {
    match item
        .parameters
        .get("arguments")
        .or_else(|| item.parameters.get("args"))
    {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => {
            let rest: BTreeMap<&String, &Value> = item
                .parameters
                .iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "tool_name" | "tool_call_id" | "call_id" | "content"
                    )
                })
                .collect();
            serde_json::to_string(&rest).unwrap_or_else(|_| "{}".into())
        }
    }
}

/// The seed's call text: `[Calling read_file(path="a.txt")]`.
fn calling_text(item: &TaskItem) -> String {
    let args = match serde_json::from_str::<Value>(&arguments(item)) {
        Ok(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", "),
        _ => arguments(item),
    };
    let args: String = args.chars().take(200).collect();
    format!("[Calling {}({args})]", tool_name(item))
}

fn is_error(item: &TaskItem) -> bool {
    item.parameters.get("is_error").and_then(Value::as_bool) == Some(true)
        || item.parameters.get("success").and_then(Value::as_bool) == Some(false)
}

/// The raw output of a result record, as the tool produced it.
fn raw_output(item: &TaskItem) -> String {
    for key in ["content", "result", "output"] {
        match item.parameters.get(key) {
            Some(Value::String(s)) => return s.clone(),
            Some(Value::Null) | None => {}
            Some(v) => return v.to_string(),
        }
    }
    String::new()
}

impl MessageConverter {
    /// The observation text of a result: its `observation` parameter, or the reducers' line for
    /// its raw output; always with the reference to the record.
    fn observation(&self, result: &TaskItem, call: Option<&ToolCall>, number: u32) -> String {
        let reference = result
            .str_param("outcome_ref")
            .map_or_else(|| format!("task {}", result.task_id), str::to_owned);
        let observation = match result.str_param("observation") {
            Some(o) => o.to_owned(),
            None => {
                let raw = raw_output(result);
                let stats = ContentStats::of(raw.as_bytes());
                let input = ResultInput {
                    call,
                    call_id: call.map_or(result.task_id.as_str(), |c| c.id.as_str()),
                    tool_name: tool_name(result),
                    content: raw.as_bytes(),
                    is_error: is_error(result),
                    stats: &stats,
                };
                let ctx = StepContext {
                    number,
                    call_seq: 0,
                    result_seq: 0,
                    timestamp_ms: result.created_ms,
                };
                self.reduce.reduce(&input, &ctx).step.observation
            }
        };
        format!("{observation} (See {reference})")
    }

    /// Converts records (in the order given) to messages; reports what it left out.
    pub fn convert(&self, items: &[&TaskItem], dropped: &mut Vec<Dropped>) -> Vec<ConvertedMsg> {
        // Pair results with calls first, so a call's message holds its result wherever the
        // result sits in the list.
        let mut result_of: BTreeMap<usize, usize> = BTreeMap::new();
        let mut paired_results: Vec<bool> = vec![false; items.len()];
        for (ri, r) in items.iter().enumerate() {
            if r.action != action::TOOL_RESULT {
                continue;
            }
            let call = items[..ri].iter().enumerate().position(|(ci, c)| {
                c.action == action::TOOL_CALL
                    && !result_of.contains_key(&ci)
                    && match call_id(r) {
                        Some(id) => call_id(c).unwrap_or(c.task_id.as_str()) == id,
                        None => tool_name(c) == tool_name(r),
                    }
            });
            if let Some(ci) = call {
                result_of.insert(ci, ri);
                paired_results[ri] = true;
            }
        }

        let mut out = Vec::new();
        let mut results_seen = 0u32;
        for (i, item) in items.iter().enumerate() {
            let text = |m: Msg| ConvertedMsg {
                msg: m,
                items: vec![item.task_id.clone()],
            };
            let content = item.content().filter(|c| !c.trim().is_empty());
            match item.action.as_str() {
                action::EXECUTE | action::THINKING => {
                    let Some(c) = content else {
                        dropped.push(Dropped {
                            item: item.task_id.clone(),
                            reason: DropReason::NoContent,
                        });
                        continue;
                    };
                    let c = MessageContent::Text(c.to_owned());
                    out.push(text(if item.action == action::EXECUTE {
                        Msg::User {
                            content: c,
                            name: None,
                        }
                    } else {
                        Msg::Assistant {
                            content: Some(c),
                            reasoning: None,
                            name: None,
                            native: None,
                            calls: Vec::new(),
                        }
                    }));
                }
                action::TOOL_CALL if self.tool_results == ToolResults::Omit => {
                    out.push(text(Msg::Assistant {
                        content: Some(MessageContent::Text(calling_text(item))),
                        reasoning: None,
                        name: None,
                        native: None,
                        calls: Vec::new(),
                    }));
                }
                action::TOOL_CALL => {
                    let call = ToolCall {
                        id: call_id(item).unwrap_or(&item.task_id).to_owned(),
                        name: tool_name(item).to_owned(),
                        arguments: arguments(item),
                    };
                    let mut ids = vec![item.task_id.clone()];
                    let (content, is_error, form) = match result_of.get(&i) {
                        Some(&ri) => {
                            results_seen += 1;
                            ids.push(items[ri].task_id.clone());
                            (
                                self.observation(items[ri], Some(&call), results_seen),
                                is_error(items[ri]),
                                ResultForm::Stubbed,
                            )
                        }
                        None => (
                            "[no result was recorded for this call]".to_owned(),
                            false,
                            ResultForm::Missing,
                        ),
                    };
                    out.push(ConvertedMsg {
                        msg: Msg::Assistant {
                            content: None,
                            reasoning: None,
                            name: None,
                            native: None,
                            calls: vec![RenderedCall {
                                call,
                                content: MessageContent::Text(content),
                                is_error,
                                form,
                            }],
                        },
                        items: ids,
                    });
                }
                action::TOOL_RESULT if self.tool_results == ToolResults::Omit => {
                    dropped.push(Dropped {
                        item: item.task_id.clone(),
                        reason: DropReason::Omitted,
                    });
                }
                action::TOOL_RESULT if paired_results[i] => {}
                action::TOOL_RESULT => {
                    results_seen += 1;
                    let obs = self.observation(item, None, results_seen);
                    out.push(text(Msg::User {
                        content: MessageContent::Text(format!(
                            "[result of {} with no recorded call] {obs}",
                            tool_name(item)
                        )),
                        name: None,
                    }));
                }
                _ => dropped.push(Dropped {
                    item: item.task_id.clone(),
                    reason: DropReason::UnknownAction,
                }),
            }
        }
        out
    }
}
