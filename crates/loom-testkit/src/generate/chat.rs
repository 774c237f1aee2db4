//! OpenAI Chat Completions: the conversation's skeleton by OpenAI's rules (an assistant's
//! `tool_calls` answered by `tool` messages right after it, one each, in any order), every
//! message from the description's schema for its role.

use serde_json::{json, Map, Value};

use super::{bulk, Generated, Options, Walker};
use crate::OpenApi;

/// Models Loom's registry knows, and the description's own list (through its schema) now and then.
const MODELS: &[&str] = &["gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-5", "o3", "o4-mini"];

pub(super) fn generate(api: &OpenApi, seed: u64, options: Options) -> Generated {
    let mut w = api.walker(seed);
    let skip = [
        "messages",
        "model",
        "tools",
        "tool_choice",
        "functions",
        "function_call",
        "parallel_tool_calls",
    ];
    let mut body = w.component_without("CreateChatCompletionRequest", &skip);
    let obj = body.as_object_mut().map(std::mem::take).unwrap_or_default();
    let mut obj = obj;
    let model = if w.rng.chance(0.1) {
        w.component("ModelIdsShared")
    } else {
        Value::from(*w.rng.pick(MODELS))
    };
    obj.insert("model".into(), model);
    let tools = tools(&mut w);
    let functions: Vec<String> = tools.functions.clone();
    if !tools.list.is_empty() {
        obj.insert("tools".into(), Value::Array(tools.list.clone()));
        if w.rng.chance(0.5) {
            obj.insert("tool_choice".into(), tool_choice(&mut w, &tools));
        }
        if w.rng.chance(0.3) {
            obj.insert("parallel_tool_calls".into(), Value::Bool(w.rng.chance(0.5)));
        }
    }
    if w.rng.chance(0.04) {
        // The deprecated `functions`, with the names the calls use.
        let mut f = w.component("ChatCompletionFunctions");
        if let Some(name) = functions.first() {
            f["name"] = Value::from(name.clone());
        } else {
            f["name"] = Value::from("legacy_fn");
        }
        obj.insert("functions".into(), json!([f]));
    }
    let messages = conversation(&mut w, &tools, options);
    obj.insert("messages".into(), Value::Array(messages));
    body = Value::Object(obj);
    Generated {
        body,
        covered: w.covered().clone(),
    }
}

/// The tools a request offers, and the names its calls use.
#[derive(Debug, Clone, Default)]
struct Tools {
    list: Vec<Value>,
    functions: Vec<String>,
    custom: Vec<String>,
}

fn tools(w: &mut Walker<'_>) -> Tools {
    let mut t = Tools::default();
    let n = if w.rng.chance(0.2) {
        0
    } else {
        w.rng.range(1, 4)
    };
    for i in 0..n {
        let name = format!("{}{i}", w.ident());
        if w.rng.chance(0.15) {
            let mut tool = w.component("CustomToolChatCompletions");
            tool["custom"]["name"] = Value::from(name.clone());
            t.custom.push(name);
            t.list.push(tool);
            w.cover("chat: custom tool");
        } else {
            let mut tool = w.component("ChatCompletionTool");
            tool["function"]["name"] = Value::from(name.clone());
            // A provider checks the parameters are a JSON Schema; the description leaves them free.
            if tool["function"].get("parameters").is_some() {
                tool["function"]["parameters"] = parameters(w);
            }
            t.functions.push(name);
            t.list.push(tool);
        }
    }
    t
}

/// A small JSON Schema for a function's parameters.
pub(super) fn parameters(w: &mut Walker<'_>) -> Value {
    let mut props = Map::new();
    for i in 0..w.rng.range(0, 3) {
        let ty = *w.rng.pick(&["string", "integer", "boolean"]);
        props.insert(
            format!("arg{i}"),
            json!({"type": ty, "description": w.words(2, 6)}),
        );
    }
    json!({"type": "object", "properties": props})
}

fn tool_choice(w: &mut Walker<'_>, tools: &Tools) -> Value {
    let mut choice = w.component("ChatCompletionToolChoiceOption");
    match choice.get("type").and_then(Value::as_str) {
        Some("function") => match tools.functions.first() {
            Some(name) => choice["function"]["name"] = Value::from(name.clone()),
            None => choice = Value::from("auto"),
        },
        Some("custom") => match tools.custom.first() {
            Some(name) => choice["custom"]["name"] = Value::from(name.clone()),
            None => choice = Value::from("auto"),
        },
        _ => {}
    }
    choice
}

/// Call ids: unique in the conversation, in the styles clients and servers use; with
/// `reuse_ids`, `call_<n>` restarting every turn.
#[derive(Debug)]
pub(super) struct Ids {
    reuse: bool,
    style: usize,
    made: usize,
}

impl Ids {
    pub(super) fn new(w: &mut Walker<'_>, reuse: bool) -> Self {
        Self {
            reuse,
            style: w.rng.below(4),
            made: 0,
        }
    }

    /// The id of call `index` of turn `turn`, for a tool named `name`.
    pub(super) fn next(&mut self, turn: usize, index: usize, name: &str) -> String {
        self.made += 1;
        if self.reuse {
            return format!("call_{index}");
        }
        match self.style {
            0 => format!("call_{turn}_{index}"),
            1 => format!(
                "call_{:024x}",
                (self.made as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ),
            // Some OpenAI-compatible servers (Kimi, vLLM's tool parsers) number them so.
            2 => format!("functions.{name}:{}", self.made - 1),
            _ => format!("tool_{}", self.made),
        }
    }
}

fn conversation(w: &mut Walker<'_>, tools: &Tools, options: Options) -> Vec<Value> {
    let mut ids = Ids::new(w, options.reuse_ids);
    if options.reuse_ids {
        w.cover("chat: reused call ids");
    }
    let mut out = Vec::new();
    for _ in 0..w.rng.range(0, 2) {
        out.push(instruction(w));
    }
    out.push(user(w));
    let turns = w.rng.range(1, 6);
    let mut last_calls = false;
    for turn in 0..turns {
        last_calls = false;
        match w.rng.below(20) {
            0..=11 => {
                calls(w, tools, &mut ids, turn, &mut out);
                last_calls = true;
            }
            12 | 13 => {
                out.push(assistant(w, Kind::Text));
                out.push(user(w));
            }
            14 => {
                out.push(assistant(w, Kind::Refusal));
                out.push(user(w));
            }
            15 => {
                out.push(assistant(w, Kind::Audio));
                out.push(user(w));
            }
            16 => {
                // The deprecated `function_call`, answered by a `function` message.
                let name = tools
                    .functions
                    .first()
                    .cloned()
                    .unwrap_or_else(|| w.ident());
                let mut m = assistant(w, Kind::Function);
                m["function_call"] = json!({"name": name, "arguments": args(w)});
                out.push(m);
                let mut f = w.component("ChatCompletionRequestFunctionMessage");
                f["name"] = Value::from(name);
                out.push(f);
                w.cover("chat: function message");
            }
            17 => {
                out.push(instruction(w));
                out.push(user(w));
                w.cover("chat: instruction mid-conversation");
            }
            _ => {
                // Two assistant messages in a row: text, then calls.
                out.push(assistant(w, Kind::Text));
                calls(w, tools, &mut ids, turn, &mut out);
                last_calls = true;
                w.cover("chat: consecutive assistant messages");
            }
        }
    }
    if !last_calls || w.rng.chance(0.6) {
        out.push(user(w));
    } else {
        w.cover("chat: ends with tool results");
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Calls,
    Refusal,
    Audio,
    Function,
}

/// An assistant message of the description's schema, shaped for `kind`.
fn assistant(w: &mut Walker<'_>, kind: Kind) -> Value {
    let mut m = w.component("ChatCompletionRequestAssistantMessage");
    let Some(obj) = m.as_object_mut() else {
        return m;
    };
    obj.remove("tool_calls");
    obj.remove("function_call");
    let no_content = obj.get("content").is_none_or(Value::is_null);
    match kind {
        Kind::Text if no_content => {
            obj.insert("content".into(), Value::from(w.words(1, 30)));
        }
        Kind::Refusal => {
            obj.insert("refusal".into(), Value::from(w.words(2, 10)));
            if w.rng.chance(0.5) {
                obj.insert("content".into(), Value::Null);
            }
            w.cover("chat: refusal");
        }
        Kind::Audio => {
            obj.insert(
                "audio".into(),
                json!({"id": format!("audio_{}", w.rng.below(1000))}),
            );
            if w.rng.chance(0.7) {
                obj.insert("content".into(), Value::Null);
            }
            w.cover("chat: audio reference");
        }
        Kind::Text | Kind::Calls | Kind::Function => {}
    }
    if kind == Kind::Text && w.rng.chance(0.25) {
        // Older turns carry the bulk a budget compacts.
        obj.insert("content".into(), Value::from(bulk(w, 100, 600)));
    }
    m
}

/// One assistant message with 1–3 calls (parallel when more than one), then a `tool` message
/// for each, in any order.
fn calls(w: &mut Walker<'_>, tools: &Tools, ids: &mut Ids, turn: usize, out: &mut Vec<Value>) {
    let n = if w.rng.chance(0.6) {
        1
    } else {
        w.rng.range(2, 3)
    };
    if n > 1 {
        w.cover("chat: parallel calls");
    }
    let mut list = Vec::new();
    for i in 0..n {
        let custom = !tools.custom.is_empty() && w.rng.chance(0.3);
        let call = if custom {
            let name = w.rng.pick(&tools.custom).clone();
            let mut c = w.component("ChatCompletionMessageCustomToolCall");
            c["id"] = Value::from(ids.next(turn, i, &name));
            c["custom"]["name"] = Value::from(name);
            w.cover("chat: custom tool call");
            c
        } else {
            let name = match tools.functions.is_empty() {
                true => w.ident(),
                false => w.rng.pick(&tools.functions).clone(),
            };
            let mut c = w.component("ChatCompletionMessageToolCall");
            c["id"] = Value::from(ids.next(turn, i, &name));
            c["function"]["name"] = Value::from(name);
            c["function"]["arguments"] = Value::from(args(w));
            c
        };
        list.push(call);
    }
    let mut m = assistant(w, Kind::Calls);
    let ids_made: Vec<String> = list
        .iter()
        .filter_map(|c| c.get("id").and_then(Value::as_str).map(str::to_owned))
        .collect();
    m["tool_calls"] = Value::Array(list);
    out.push(m);
    let mut results: Vec<Value> = ids_made.into_iter().map(|id| tool(w, id)).collect();
    if results.len() > 1 && w.rng.chance(0.3) {
        w.rng.shuffle(&mut results);
        w.cover("chat: results out of order");
    }
    out.extend(results);
}

/// A `tool` message answering `id`: a string or text parts, now and then long.
fn tool(w: &mut Walker<'_>, id: String) -> Value {
    let mut m = w.component("ChatCompletionRequestToolMessage");
    m["tool_call_id"] = Value::from(id);
    if w.rng.chance(0.4) {
        let text = bulk(w, 100, 800);
        match m.get_mut("content") {
            Some(Value::Array(parts)) if !parts.is_empty() => {
                parts[0]["text"] = Value::from(text);
            }
            _ => m["content"] = Value::from(text),
        }
    }
    if m.get("content").is_some_and(Value::is_array) {
        w.cover("chat: tool content as parts");
    }
    m
}

/// JSON arguments for a call; now and then a string that is not JSON, which the description
/// allows and models emit.
pub(super) fn args(w: &mut Walker<'_>) -> String {
    if w.rng.chance(0.03) {
        w.cover("arguments that are not JSON");
        return w.words(1, 4);
    }
    json!({"path": format!("src/{}.rs", w.ident()), "n": w.rng.below(100)}).to_string()
}

fn user(w: &mut Walker<'_>) -> Value {
    w.component("ChatCompletionRequestUserMessage")
}

/// A `system` or `developer` message.
fn instruction(w: &mut Walker<'_>) -> Value {
    if w.rng.chance(0.5) {
        w.component("ChatCompletionRequestSystemMessage")
    } else {
        w.component("ChatCompletionRequestDeveloperMessage")
    }
}
