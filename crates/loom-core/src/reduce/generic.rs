//! The reducer for tools Loom has no rule for, and for binary output.
//!
//! It says what was called (`get_reservation_details(JG7FMM)`) and what came back: for JSON, its
//! shape with the values an agent refers to next (ids first, then short values, list lengths and
//! the ids in lists); for text, the only line or the line count and the first line. Binary output
//! is described by size and type, never shown.

use serde_json::Value;

use crate::step::ToolKind;

use super::args::{self, Args};
use super::text::{self, human_size, plural, sniff_binary, Line};
use super::{Input, Outcome};

/// Largest JSON output parsed to describe its shape; larger ones are described as text.
const MAX_JSON_BYTES: usize = 8 * 1024 * 1024;
/// Longest scalar shown whole inside a JSON description, in characters.
const MAX_SCALAR_CHARS: usize = 48;

/// A tool with no specific reducer.
pub(crate) fn reduce(kind: ToolKind, input: &Input<'_>) -> Outcome {
    let body = input.env.body.as_ref();
    let mut out = Outcome::new(kind, String::new());
    out.minimal_args = args::generic_minimal(&input.args);
    if let Some(code) = input.env.exit_code {
        out = out.fact("exit_code", code);
    }
    let mut line = Line::new(input.max);
    line.lit(&call_text(input.tool_name, &input.args, input.max / 3));
    let trimmed = body.trim();
    if trimmed.is_empty() {
        line.lit(" → no output");
        out.observation = line.finish();
        if input.is_error {
            return out.failed("failed with no output");
        }
        return out;
    }
    let json = (trimmed.len() <= MAX_JSON_BYTES
        && (trimmed.starts_with('{') || trimmed.starts_with('[')))
    .then(|| serde_json::from_str::<Value>(trimmed).ok())
    .flatten();
    if let Some(value) = json {
        let error = json_error(&value);
        line.lit(" → ");
        if let Value::Array(items) = &value {
            out.results = Some(items.len() as u64);
        }
        describe(&mut line, &value);
        out.observation = line.finish();
        if input.is_error || error.is_some() {
            let why = error.unwrap_or_else(|| text::piece(trimmed, 200));
            return out.failed(why);
        }
        return out;
    }
    let first = text::first_meaningful(body).unwrap_or("");
    let lower = first.to_ascii_lowercase();
    let says_error = lower.starts_with("error")
        || lower.starts_with("exception")
        || lower.contains("generated an exception");
    let failed = input.is_error || says_error || input.env.exit_code.is_some_and(|c| c != 0);
    line.lit(" → ");
    let single = text::meaningful_count(body, 2) <= 1;
    if single {
        line.text(first);
    } else {
        let lines = text::line_count(body);
        line.lit(&format!(
            "{}, {}",
            plural(lines, "line", "lines"),
            human_size(body.len() as u64)
        ));
        let key = if failed {
            text::error_line(body).unwrap_or(first)
        } else {
            first
        };
        line.tail(": ", key, 8);
    }
    out.observation = line.finish();
    if failed {
        let why = if single {
            first
        } else {
            text::error_line(body).unwrap_or(first)
        };
        return out.failed(why.to_owned());
    }
    out
}

/// `name(value)` for one argument, `name(k=v, …)` for several, within `room` characters.
pub(crate) fn call_text(name: &str, args: &Args, room: usize) -> String {
    let parts: Vec<String> = match args.object() {
        Some(obj) if obj.len() == 1 => obj.values().map(short_value).collect(),
        Some(obj) => {
            let mut keys: Vec<&String> = obj.keys().collect();
            keys.sort();
            keys.into_iter()
                .map(|k| format!("{k}={}", short_value(&obj[k])))
                .collect()
        }
        None if args.malformed() => vec![format!(
            "{}…",
            text::piece(args.raw(), 24).trim_end_matches('…')
        )],
        None => Vec::new(),
    };
    let inner = text::piece(&parts.join(", "), room.max(16));
    format!("{}({inner})", text::piece(name, 64))
}

fn short_value(v: &Value) -> String {
    match v {
        Value::String(s) => text::piece(s, 40),
        Value::Array(items) => format!("[{}]", items.len()),
        Value::Object(obj) => format!("{{{}}}", obj.len()),
        other => other.to_string(),
    }
}

/// An `error` the JSON itself reports.
fn json_error(value: &Value) -> Option<String> {
    let obj = value.as_object()?;
    match obj.get("error")? {
        Value::Null | Value::Bool(false) => None,
        Value::String(s) if s.is_empty() => None,
        Value::String(s) => Some(s.clone()),
        Value::Object(e) => Some(
            e.get("message")
                .and_then(Value::as_str)
                .map_or_else(|| Value::Object(e.clone()).to_string(), str::to_owned),
        ),
        other => Some(other.to_string()),
    }
}

/// Whether a key names an identifier or a status an agent will refer to.
fn is_key_field(key: &str) -> bool {
    matches!(
        key,
        "id" | "name"
            | "title"
            | "status"
            | "state"
            | "error"
            | "message"
            | "type"
            | "code"
            | "result"
    ) || key.ends_with("_id")
        || key.ends_with("Id")
        || key.ends_with("_number")
        || key.ends_with("_name")
}

/// The field that names an element of a list of objects.
fn id_field(obj: &serde_json::Map<String, Value>) -> Option<&str> {
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort_unstable();
    let scalar = |k: &&str| matches!(obj.get(*k), Some(Value::String(_) | Value::Number(_)));
    ["id"]
        .into_iter()
        .find(|k| obj.contains_key(*k) && scalar(k))
        .or_else(|| {
            keys.iter()
                .copied()
                .filter(scalar)
                .find(|k| k.ends_with("_id") || k.ends_with("Id"))
        })
        .or_else(|| {
            keys.iter()
                .copied()
                .filter(scalar)
                .find(|k| k.ends_with("_number") || *k == "number")
        })
        .or_else(|| {
            keys.iter()
                .copied()
                .filter(scalar)
                .find(|k| matches!(*k, "name" | "title" | "key" | "code"))
        })
        .or_else(|| {
            keys.iter()
                .copied()
                .filter(scalar)
                .find(|k| k.ends_with("_name"))
        })
        .or_else(|| keys.iter().copied().find(scalar))
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(text::piece(s, MAX_SCALAR_CHARS)),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some("null".to_owned()),
        _ => None,
    }
}

/// The label of one list element: its id field's value, or its own value when scalar; a list of
/// objects inside the list (one-stop flights) joins its elements' labels with `+`.
fn element_label(v: &Value) -> Option<String> {
    match v {
        Value::Object(obj) => id_field(obj).and_then(|k| scalar_text(&obj[k])),
        Value::Array(items) => {
            let labels: Vec<String> = items.iter().filter_map(element_label).collect();
            (!labels.is_empty()).then(|| labels.join("+"))
        }
        other => scalar_text(other),
    }
}

/// Describes a JSON value on the line, most useful parts first, as far as it fits.
fn describe(line: &mut Line, value: &Value) {
    match value {
        Value::Array(items) => describe_list(line, None, items),
        Value::Object(obj) => {
            let mut keys: Vec<&String> = obj.keys().collect();
            keys.sort_by_cached_key(|k| (rank(k, &obj[k.as_str()]), k.as_str()));
            line.lit("{");
            let mut first = true;
            let mut shown = 0;
            for (i, key) in keys.iter().enumerate() {
                let part = field_text(key, &obj[key.as_str()]);
                // Keep room to say how many fields were left out, so the count is never lost.
                let last = i + 1 == keys.len();
                let reserve = if last { 1 } else { 12 };
                let sep = if first { "" } else { ", " };
                if part.chars().count() + sep.len() + reserve > line.room() || !line.opt(sep, &part)
                {
                    break;
                }
                first = false;
                shown += 1;
            }
            if shown < keys.len() {
                line.opt(
                    if first { "" } else { ", " },
                    &format!("+{} more", keys.len() - shown),
                );
            }
            line.lit("}");
        }
        other => {
            line.text(&scalar_text(other).unwrap_or_default());
        }
    }
}

/// Order of an object's fields in its description: ids and statuses, lists of ids, lists of
/// records (by their ids), short values, longer values, small objects, the rest.
fn rank(key: &str, v: &Value) -> u8 {
    // Lengths only: ranking must not mask or copy every value of a large object.
    let len = match v {
        Value::String(s) => Some(s.chars().count()),
        Value::Number(_) | Value::Bool(_) | Value::Null => Some(0),
        _ => None,
    };
    let scalar = len.is_some_and(|n| n <= MAX_SCALAR_CHARS);
    let short = len.is_some_and(|n| n <= 16);
    match v {
        _ if is_key_field(key) && scalar => 0,
        Value::Array(items) if items.iter().all(|i| !i.is_object() && !i.is_array()) => 1,
        Value::Array(_) => 2,
        Value::String(_) | Value::Number(_) | Value::Bool(_) if short => 3,
        Value::String(_) | Value::Number(_) | Value::Bool(_) if scalar => 4,
        Value::Object(o) if o.len() <= 3 => 5,
        _ => 6,
    }
}

fn field_text(key: &str, v: &Value) -> String {
    match v {
        Value::Array(items) => {
            let labels: Vec<String> = items.iter().take(8).filter_map(element_label).collect();
            if labels.is_empty() {
                format!("{key}: []")
            } else if labels.len() < items.len() {
                format!("{key}: [{} items: {}, …]", items.len(), labels.join(", "))
            } else {
                format!("{key}: [{}]", labels.join(", "))
            }
        }
        Value::Object(obj)
            if obj.len() <= 3 && obj.values().all(|v| !v.is_object() && !v.is_array()) =>
        {
            let mut keys: Vec<&String> = obj.keys().collect();
            keys.sort();
            let inner: Vec<String> = keys
                .iter()
                .filter_map(|k| Some(format!("{k}: {}", scalar_text(&obj[k.as_str()])?)))
                .collect();
            format!("{key}: {{{}}}", inner.join(", "))
        }
        // Larger objects are often keyed by id (`payment_methods: {credit_card_4421486: …}`).
        Value::Object(obj) => {
            let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
            keys.sort_unstable();
            let shown: Vec<String> = keys
                .iter()
                .take(6)
                .map(|k| text::piece(k, MAX_SCALAR_CHARS))
                .collect();
            let more = if keys.len() > shown.len() {
                ", …"
            } else {
                ""
            };
            format!("{key}: {{{}{more}}}", shown.join(", "))
        }
        Value::String(s) if s.chars().count() > MAX_SCALAR_CHARS => {
            format!("{key}: <{} chars>", s.chars().count())
        }
        other => format!("{key}: {}", scalar_text(other).unwrap_or_default()),
    }
}

fn describe_list(line: &mut Line, key: Option<&str>, items: &[Value]) {
    if let Some(k) = key {
        line.text(k).lit(": ");
    }
    line.lit(&format!("list of {}", items.len()));
    if items.iter().all(Value::is_array) && !items.is_empty() {
        line.lit(" lists");
    }
    // Name the elements by their id field, as many as fit.
    if let Some(Value::Object(obj)) = items
        .iter()
        .find(|i| i.is_object())
        .or_else(|| items.first().and_then(|i| i.as_array()?.first()))
    {
        if let Some(field) = id_field(obj) {
            line.opt(" ", &format!("({field})"));
        }
    }
    let mut sep = ": ";
    for (i, item) in items.iter().enumerate() {
        let Some(label) = element_label(item) else {
            continue;
        };
        if !line.opt(sep, &label) {
            line.opt(", ", &format!("+{} more", items.len() - i));
            break;
        }
        sep = ", ";
    }
}

/// Binary or non-UTF-8 output: size and type, and always offloaded.
pub(crate) fn binary(tool_name: &str, kind: ToolKind, bytes: &[u8], max: usize) -> Outcome {
    let (label, _) = sniff_binary(bytes);
    let mut line = Line::new(max);
    line.text(tool_name).lit(&format!(
        " → {label}, {} (binary, not shown)",
        human_size(bytes.len() as u64)
    ));
    Outcome::new(kind, line.finish()).fact("binary", label)
}
