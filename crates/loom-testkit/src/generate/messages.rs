//! Anthropic Messages: the conversation's skeleton by Anthropic's rules (user first; every
//! `tool_use` of an assistant message answered by a `tool_result` at the start of the next user
//! message; ids unique in the request; with thinking on, an assistant turn that calls tools opens
//! with its thinking), every block from [`OpenApi::anthropic`]'s schema for its type.

use serde_json::{json, Map, Value};

use super::{bulk, Generated, Walker};
use crate::OpenApi;

const MODELS: &[&str] = &[
    "claude-sonnet-4-5",
    "claude-opus-4-1",
    "claude-haiku-4-5",
    "claude-3-5-haiku-latest",
    "claude-sonnet-4-20250514",
];

/// Blocks a user message may hold besides tool results.
const USER_BLOCKS: &[&str] = &[
    "TextBlockParam",
    "TextBlockParam",
    "ImageBlockParam",
    "DocumentBlockParam",
    "SearchResultBlockParam",
];

pub(super) fn generate(api: &OpenApi, seed: u64) -> Generated {
    let mut w = api.walker(seed);
    let skip = [
        "messages",
        "model",
        "max_tokens",
        "tools",
        "tool_choice",
        "thinking",
        "temperature",
        "top_k",
        "top_p",
    ];
    let mut obj = match w.component_without("MessageCreateParams", &skip) {
        Value::Object(o) => o,
        _ => Map::new(),
    };
    obj.insert("model".into(), Value::from(*w.rng.pick(MODELS)));
    let thinking = match w.rng.below(10) {
        0..=2 => {
            let budget = w.rng.range(1024, 4096);
            obj.insert(
                "thinking".into(),
                json!({"type": "enabled", "budget_tokens": budget}),
            );
            obj.insert(
                "max_tokens".into(),
                Value::from(budget + w.rng.range(1, 4096)),
            );
            w.cover("messages: thinking enabled");
            true
        }
        3 => {
            obj.insert("thinking".into(), json!({"type": "adaptive"}));
            obj.insert("max_tokens".into(), Value::from(w.rng.range(1024, 16000)));
            w.cover("messages: thinking adaptive");
            true
        }
        other => {
            if other == 4 {
                obj.insert("thinking".into(), json!({"type": "disabled"}));
            }
            // `max_tokens: 0` warms the prompt cache without a reply (the SDK's own note).
            let max = if w.rng.chance(0.02) {
                w.cover("messages: max_tokens 0");
                0
            } else {
                w.rng.range(1, 8192)
            };
            obj.insert("max_tokens".into(), Value::from(max));
            // Sampling parameters: the API takes them only without thinking.
            for key in ["temperature", "top_k", "top_p"] {
                if w.rng.chance(0.3) {
                    let v = match key {
                        "top_k" => Value::from(w.rng.range(1, 100)),
                        _ => json!(w.rng.range(0, 10) as f64 / 10.0),
                    };
                    obj.insert(key.into(), v);
                }
            }
            false
        }
    };
    let names = tools(&mut w, &mut obj, thinking);
    let messages = conversation(&mut w, &names, thinking);
    obj.insert("messages".into(), Value::Array(messages));
    let mut body = Value::Object(obj);
    breakpoints(&mut body, &mut 0, &mut None);
    Generated {
        body,
        covered: w.covered().clone(),
    }
}

/// The tools (client tools with their input schemas, server tools now and then) and the tool
/// choice, written into `obj`; returns the client tools' names.
fn tools(w: &mut Walker<'_>, obj: &mut Map<String, Value>, thinking: bool) -> Vec<String> {
    if w.rng.chance(0.2) {
        return Vec::new();
    }
    let mut names = Vec::new();
    let mut list = Vec::new();
    for i in 0..w.rng.range(1, 4) {
        let mut tool = if w.rng.chance(0.75) {
            w.component("ToolParam")
        } else {
            w.component("ToolUnionParam")
        };
        if tool.get("input_schema").is_some() {
            let name = format!("{}{i}", w.ident());
            tool["name"] = Value::from(name.clone());
            tool["input_schema"] = super::chat::parameters(w);
            names.push(name);
        } else {
            w.cover("messages: server tool");
        }
        // One of each server tool: its name is fixed.
        let dup = tool.get("input_schema").is_none()
            && list
                .iter()
                .any(|t: &Value| t.get("name") == tool.get("name"));
        if !dup {
            list.push(tool);
        }
    }
    obj.insert("tools".into(), Value::Array(list));
    if w.rng.chance(0.4) {
        let mut choice = w.component("ToolChoiceParam");
        let ty = choice.get("type").and_then(Value::as_str).unwrap_or("auto");
        // With thinking on, the API forces no tool (only `auto` and `none`).
        if thinking && matches!(ty, "any" | "tool") {
            choice = json!({"type": "auto"});
        } else if ty == "tool" {
            match names.first() {
                Some(n) => choice["name"] = Value::from(n.clone()),
                None => choice = json!({"type": "auto"}),
            }
        }
        obj.insert("tool_choice".into(), choice);
    }
    names
}

/// Tool use ids in Anthropic's style, unique in the request (Anthropic refuses a repeated one,
/// so `reuse_ids` does not apply here).
#[derive(Debug)]
struct Ids {
    made: usize,
}

impl Ids {
    fn next(&mut self) -> String {
        self.made += 1;
        format!(
            "toolu_{:020x}",
            (self.made as u128).wrapping_mul(0x9e37_79b9)
        )
    }
}

fn conversation(w: &mut Walker<'_>, tools: &[String], thinking: bool) -> Vec<Value> {
    let mut ids = Ids { made: 0 };
    let mut out = vec![user(w, Vec::new())];
    let turns = w.rng.range(1, 6);
    // The results the next user message opens with.
    let mut pending: Vec<Value> = Vec::new();
    for _ in 0..turns {
        match w.rng.below(20) {
            0..=10 => {
                let (message, results) = calls(w, tools, thinking, &mut ids);
                if !pending.is_empty() {
                    out.push(user(w, std::mem::take(&mut pending)));
                }
                out.push(message);
                pending = results;
            }
            11 | 12 => {
                flush(w, &mut out, &mut pending);
                out.push(server_tool(w, thinking));
                out.push(user(w, Vec::new()));
            }
            13 => {
                // Two user messages in a row: the API joins them.
                flush(w, &mut out, &mut pending);
                out.push(user(w, Vec::new()));
                w.cover("messages: consecutive user messages");
            }
            14 if !thinking => {
                // A `system` message among the others (a beta Claude Code uses).
                flush(w, &mut out, &mut pending);
                let content = match w.rng.chance(0.5) {
                    true => Value::from(w.words(2, 12)),
                    false => json!([w.component("TextBlockParam")]),
                };
                out.push(json!({"role": "system", "content": content}));
                out.push(user(w, Vec::new()));
                w.cover("messages: system message");
            }
            _ => {
                flush(w, &mut out, &mut pending);
                out.push(assistant_text(w, thinking));
                out.push(user(w, Vec::new()));
            }
        }
    }
    if !pending.is_empty() {
        // The conversation ends with the results: the model answers them.
        out.push(user(w, std::mem::take(&mut pending)));
    } else if !thinking && w.rng.chance(0.1) {
        // A prefill: the reply continues the assistant's words (no trailing whitespace).
        if out.last().and_then(|m| m.get("role")) == Some(&Value::from("assistant")) {
            out.push(user(w, Vec::new()));
        }
        out.push(json!({"role": "assistant", "content": w.words(1, 5).trim_end()}));
        w.cover("messages: assistant prefill");
    } else if out.last().and_then(|m| m.get("role")) != Some(&Value::from("user")) {
        out.push(user(w, Vec::new()));
    }
    out
}

/// The user message that opens with `pending` results, if any.
fn flush(w: &mut Walker<'_>, out: &mut Vec<Value>, pending: &mut Vec<Value>) {
    if !pending.is_empty() {
        out.push(user(w, std::mem::take(pending)));
    }
}

/// A user message: `results` first, then content of the description's own blocks (or a string
/// when there are no results).
fn user(w: &mut Walker<'_>, results: Vec<Value>) -> Value {
    if results.is_empty() && w.rng.chance(0.4) {
        return json!({"role": "user", "content": w.words(1, 20)});
    }
    let mut blocks = results;
    let extra = if blocks.is_empty() {
        w.rng.range(1, 3)
    } else {
        w.rng.range(0, 1)
    };
    for _ in 0..extra {
        let kind = *w.rng.pick(USER_BLOCKS);
        let block = w.component(kind);
        w.cover(format!("messages: user {kind}"));
        blocks.push(block);
    }
    json!({"role": "user", "content": blocks})
}

/// Thinking blocks (and now and then a redacted one) to open an assistant message with.
fn thoughts(w: &mut Walker<'_>) -> Vec<Value> {
    let mut out = vec![w.component("ThinkingBlockParam")];
    if w.rng.chance(0.2) {
        out.push(w.component("RedactedThinkingBlockParam"));
        w.cover("messages: redacted thinking");
    }
    out
}

/// An assistant message that calls 1–3 tools (parallel when more than one), and the results
/// that answer them, in any order.
fn calls(
    w: &mut Walker<'_>,
    tools: &[String],
    thinking: bool,
    ids: &mut Ids,
) -> (Value, Vec<Value>) {
    let mut blocks = Vec::new();
    if thinking || w.rng.chance(0.15) {
        blocks.extend(thoughts(w));
    }
    if w.rng.chance(0.5) {
        blocks.push(w.component("TextBlockParam"));
    }
    let n = if w.rng.chance(0.6) {
        1
    } else {
        w.rng.range(2, 3)
    };
    if n > 1 {
        w.cover("messages: parallel tool use");
    }
    let mut results = Vec::new();
    for _ in 0..n {
        let id = ids.next();
        let mut call = w.component("ToolUseBlockParam");
        call["id"] = Value::from(id.clone());
        call["name"] = Value::from(match tools.is_empty() {
            true => w.ident(),
            false => w.rng.pick(tools).clone(),
        });
        call["input"] = json!({"path": format!("src/{}.rs", w.ident())});
        blocks.push(call);
        let mut result = w.component("ToolResultBlockParam");
        result["tool_use_id"] = Value::from(id);
        if w.rng.chance(0.4) {
            result["content"] = Value::from(bulk(w, 100, 800));
        }
        if result.get("content").is_some_and(Value::is_array) {
            w.cover("messages: tool result as blocks");
        }
        results.push(result);
    }
    if results.len() > 1 && w.rng.chance(0.3) {
        w.rng.shuffle(&mut results);
        w.cover("messages: results out of order");
    }
    (json!({"role": "assistant", "content": blocks}), results)
}

/// An assistant message that used a server tool: its call and result blocks in the message, then
/// text (with citations, now and then).
fn server_tool(w: &mut Walker<'_>, thinking: bool) -> Value {
    let mut blocks = Vec::new();
    if thinking {
        blocks.extend(thoughts(w));
    }
    let id = format!("srvtoolu_{:016x}", w.rng.next_u64());
    let mut call = w.component("ServerToolUseBlockParam");
    call["id"] = Value::from(id.clone());
    call["name"] = Value::from("web_search");
    call["input"] = json!({"query": w.words(1, 4)});
    let mut result = w.component("WebSearchToolResultBlockParam");
    result["tool_use_id"] = Value::from(id);
    blocks.extend([call, result, w.component("TextBlockParam")]);
    w.cover("messages: server tool use");
    json!({"role": "assistant", "content": blocks})
}

/// An assistant message of text: a string, or blocks (after its thinking when thinking is on),
/// now and then long.
fn assistant_text(w: &mut Walker<'_>, thinking: bool) -> Value {
    if !thinking && w.rng.chance(0.3) {
        return json!({"role": "assistant", "content": w.words(1, 30)});
    }
    let mut blocks = Vec::new();
    if thinking || w.rng.chance(0.1) {
        blocks.extend(thoughts(w));
    }
    let mut text = w.component("TextBlockParam");
    if w.rng.chance(0.25) {
        text["text"] = Value::from(bulk(w, 100, 600));
    }
    blocks.push(text);
    json!({"role": "assistant", "content": blocks})
}

/// The API takes at most this many `cache_control` breakpoints in a request.
const MAX_BREAKPOINTS: usize = 4;

/// Keeps the first [`MAX_BREAKPOINTS`] breakpoints, all with the first one's `ttl` (the API wants
/// longer-lived entries before shorter ones; one `ttl` keeps it simple), and drops the rest.
fn breakpoints(v: &mut Value, seen: &mut usize, ttl: &mut Option<Option<Value>>) {
    match v {
        Value::Object(obj) => {
            if obj.get("cache_control").is_some_and(|c| !c.is_null()) {
                if *seen >= MAX_BREAKPOINTS {
                    obj.remove("cache_control");
                } else {
                    *seen += 1;
                    if let Some(Value::Object(c)) = obj.get_mut("cache_control") {
                        match ttl {
                            None => *ttl = Some(c.get("ttl").cloned()),
                            Some(None) => {
                                c.remove("ttl");
                            }
                            Some(Some(first)) => {
                                c.insert("ttl".into(), first.clone());
                            }
                        }
                    }
                }
            }
            for (key, child) in obj.iter_mut() {
                if key != "cache_control" {
                    breakpoints(child, seen, ttl);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                breakpoints(item, seen, ttl);
            }
        }
        _ => {}
    }
}
