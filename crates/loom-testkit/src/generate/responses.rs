//! OpenAI Responses: the input's skeleton by OpenAI's rules (every call item followed, later
//! in the input, by its output item with the same `call_id`; a reasoning item right before the
//! output item it belongs to), every item from the description's schema for its type.

use serde_json::{json, Value};

use super::chat::{args, parameters, Ids};
use super::{bulk, Generated, Options, Walker};
use crate::OpenApi;

const MODELS: &[&str] = &["gpt-4o", "gpt-4.1", "gpt-5", "o3", "o4-mini", "gpt-5-codex"];

/// Call items and the output items that answer them, as the description names their schemas.
const PAIRS: &[(&str, &str)] = &[
    ("ComputerToolCall", "ComputerCallOutputItemParam"),
    ("LocalShellToolCall", "LocalShellToolCallOutput"),
    (
        "FunctionShellCallItemParam",
        "FunctionShellCallOutputItemParam",
    ),
    (
        "ApplyPatchToolCallItemParam",
        "ApplyPatchToolCallOutputItemParam",
    ),
    ("ToolSearchCallItemParam", "ToolSearchOutputItemParam"),
    ("ProgramItemParam", "ProgramOutputItemParam"),
];

/// Items that stand alone: built-in tools the provider ran, references, compaction.
const ALONE: &[&str] = &[
    "WebSearchToolCall",
    "FileSearchToolCall",
    "ImageGenToolCall",
    "CodeInterpreterToolCall",
    "MCPToolCall",
    "MCPListTools",
    "ItemReferenceParam",
    "CompactionSummaryItemParam",
    "CompactionTriggerItemParam",
    "AdditionalToolsItemParam",
];

pub(super) fn generate(api: &OpenApi, seed: u64, options: Options) -> Generated {
    let mut w = api.walker(seed);
    let skip = [
        "input",
        "model",
        "tools",
        "tool_choice",
        "previous_response_id",
        "conversation",
        "prompt",
        "instructions",
        "parallel_tool_calls",
    ];
    let mut obj = match w.component_without("CreateResponse", &skip) {
        Value::Object(o) => o,
        _ => Default::default(),
    };
    let model = if w.rng.chance(0.1) {
        w.component("ModelIdsResponses")
    } else {
        Value::from(*w.rng.pick(MODELS))
    };
    obj.insert("model".into(), model);
    // What moves the conversation to the provider's side (and `fit` to `observe`): rare.
    if w.rng.chance(0.03) {
        obj.insert(
            "previous_response_id".into(),
            Value::from("resp_0123456789"),
        );
        w.cover("responses: previous_response_id");
    } else if w.rng.chance(0.02) {
        obj.insert("conversation".into(), Value::from("conv_0123456789"));
        w.cover("responses: conversation");
    }
    if w.rng.chance(0.03) {
        obj.insert("prompt".into(), w.component("Prompt"));
    }
    if w.rng.chance(0.4) {
        obj.insert("instructions".into(), Value::from(w.words(3, 40)));
        w.cover("responses: instructions");
    }
    let functions = tools(&mut w, &mut obj);
    if w.rng.chance(0.05) {
        obj.insert("input".into(), Value::from(w.words(1, 20)));
        w.cover("responses: input as a string");
    } else {
        let items = input(&mut w, &functions, options);
        obj.insert("input".into(), Value::Array(items));
    }
    Generated {
        body: Value::Object(obj),
        covered: w.covered().clone(),
    }
}

/// The tools, written into `obj`; returns the function tools' names.
fn tools(w: &mut Walker<'_>, obj: &mut serde_json::Map<String, Value>) -> Vec<String> {
    if w.rng.chance(0.2) {
        return Vec::new();
    }
    let mut names = Vec::new();
    let mut list = Vec::new();
    for i in 0..w.rng.range(1, 4) {
        let mut tool = if w.rng.chance(0.6) {
            w.component("FunctionTool")
        } else {
            w.component("Tool")
        };
        let name = format!("{}{i}", w.ident());
        match tool.get("type").and_then(Value::as_str) {
            Some("function") => {
                tool["name"] = Value::from(name.clone());
                if tool.get("parameters").is_some_and(Value::is_object) {
                    tool["parameters"] = parameters(w);
                }
                names.push(name);
            }
            Some("custom") => tool["name"] = Value::from(name),
            _ => {}
        }
        list.push(tool);
    }
    obj.insert("tools".into(), Value::Array(list));
    if w.rng.chance(0.5) {
        let mut choice = w.component("ToolChoiceParam");
        if choice.get("type").and_then(Value::as_str) == Some("function") {
            match names.first() {
                Some(n) => choice["name"] = Value::from(n.clone()),
                None => choice = Value::from("auto"),
            }
        }
        obj.insert("tool_choice".into(), choice);
    }
    if w.rng.chance(0.3) {
        obj.insert("parallel_tool_calls".into(), Value::Bool(w.rng.chance(0.5)));
    }
    names
}

fn input(w: &mut Walker<'_>, functions: &[String], options: Options) -> Vec<Value> {
    let mut ids = Ids::new(w, options.reuse_ids);
    if options.reuse_ids {
        w.cover("responses: reused call ids");
    }
    let mut out = Vec::new();
    for _ in 0..w.rng.range(0, 2) {
        let role = *w.rng.pick(&["system", "developer"]);
        out.push(message(w, role));
    }
    out.push(message(w, "user"));
    let turns = w.rng.range(1, 6);
    let mut last_outputs = false;
    for turn in 0..turns {
        last_outputs = false;
        match w.rng.below(20) {
            0..=9 => {
                function_calls(w, functions, &mut ids, turn, &mut out);
                last_outputs = true;
            }
            10 => {
                let id = ids.next(turn, 0, "custom");
                let mut call = item(w, "CustomToolCall");
                call["call_id"] = Value::from(id.clone());
                call["name"] = Value::from(w.ident());
                let mut output = item(w, "CustomToolCallOutput");
                output["call_id"] = Value::from(id);
                out.extend([call, output]);
                last_outputs = true;
                w.cover("responses: custom tool call");
            }
            11 | 12 => {
                let (call, output) = *w.rng.pick(PAIRS);
                let id = ids.next(turn, 0, "builtin");
                let mut c = item(w, call);
                let mut o = item(w, output);
                c["call_id"] = Value::from(id.clone());
                o["call_id"] = Value::from(id);
                out.extend([c, o]);
                last_outputs = true;
                w.cover(format!("responses: {call} and its output"));
            }
            13 => {
                let mut request = item(w, "MCPApprovalRequest");
                let id = format!("mcpr_{turn}");
                request["id"] = Value::from(id.clone());
                let mut response = item(w, "MCPApprovalResponse");
                response["approval_request_id"] = Value::from(id);
                out.extend([request, response]);
                w.cover("responses: MCP approval");
            }
            14 | 15 => {
                let kind = *w.rng.pick(ALONE);
                out.push(item(w, kind));
                w.cover(format!("responses: {kind}"));
            }
            _ => {
                if w.rng.chance(0.3) {
                    out.push(reasoning(w));
                }
                out.push(assistant(w));
                out.push(message(w, "user"));
            }
        }
    }
    if !last_outputs || w.rng.chance(0.6) {
        out.push(message(w, "user"));
    } else {
        w.cover("responses: ends with outputs");
    }
    out
}

/// An item of the description's schema `name`, with an id in the provider's form when it has
/// one (OpenAI checks an item id's prefix, which the description does not say).
fn item(w: &mut Walker<'_>, name: &str) -> Value {
    let mut v = w.component(name);
    let prefix = match v.get("type").and_then(Value::as_str) {
        Some("message") => "msg",
        Some("function_call") => "fc",
        Some("reasoning") => "rs",
        Some("computer_call" | "computer_call_output") => "cu",
        Some("web_search_call") => "ws",
        Some("file_search_call") => "fs",
        Some("image_generation_call") => "ig",
        Some("code_interpreter_call") => "ci",
        Some("custom_tool_call") => "ctc",
        Some(t) if t.starts_with("mcp") => "mcp",
        Some(t) if t.starts_with("local_shell") => "lsh",
        _ => "item",
    };
    if v.get("id").is_some_and(Value::is_string) {
        v["id"] = Value::from(format!("{prefix}_{:08x}", w.rng.next_u64() as u32));
    }
    v
}

/// A message with `role`: the short form (`EasyInputMessage`) or the item (`InputMessage`).
fn message(w: &mut Walker<'_>, role: &str) -> Value {
    let mut m = if w.rng.chance(0.5) {
        w.component("EasyInputMessage")
    } else {
        item(w, "InputMessage")
    };
    m["role"] = Value::from(role);
    m
}

/// An assistant message: the output item (with its id and status) or the short form.
fn assistant(w: &mut Walker<'_>) -> Value {
    if w.rng.chance(0.6) {
        let mut m = item(w, "OutputMessage");
        if w.rng.chance(0.25) {
            let text = bulk(w, 100, 600);
            m["content"] = json!([
                {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            ]);
        }
        m
    } else {
        let mut m = w.component("EasyInputMessage");
        m["role"] = Value::from("assistant");
        m
    }
}

fn reasoning(w: &mut Walker<'_>) -> Value {
    w.cover("responses: reasoning");
    item(w, "ReasoningItem")
}

/// 1–3 function calls (parallel when more than one), perhaps after a reasoning item, then their
/// outputs, in any order.
fn function_calls(
    w: &mut Walker<'_>,
    functions: &[String],
    ids: &mut Ids,
    turn: usize,
    out: &mut Vec<Value>,
) {
    if w.rng.chance(0.3) {
        out.push(reasoning(w));
    }
    let n = if w.rng.chance(0.6) {
        1
    } else {
        w.rng.range(2, 3)
    };
    if n > 1 {
        w.cover("responses: parallel calls");
    }
    let mut outputs = Vec::new();
    for i in 0..n {
        let name = match functions.is_empty() {
            true => w.ident(),
            false => w.rng.pick(functions).clone(),
        };
        let id = ids.next(turn, i, &name);
        let mut call = item(w, "FunctionToolCall");
        call["call_id"] = Value::from(id.clone());
        call["name"] = Value::from(name);
        call["arguments"] = Value::from(args(w));
        out.push(call);
        let mut output = item(w, "FunctionCallOutputItemParam");
        output["call_id"] = Value::from(id);
        if w.rng.chance(0.4) {
            output["output"] = Value::from(bulk(w, 100, 800));
        }
        if output.get("output").is_some_and(Value::is_array) {
            w.cover("responses: output as parts");
        }
        outputs.push(output);
    }
    if outputs.len() > 1 && w.rng.chance(0.3) {
        w.rng.shuffle(&mut outputs);
        w.cover("responses: outputs out of order");
    }
    out.extend(outputs);
}
