//! The text a snapshot shows: the call timeline, the final receipt's seq classification and the
//! final body, in a YAML-like outline of its JSON (keys in body order, single-line strings as
//! JSON, multi-line strings as indented blocks).
//!
//! Long texts are clipped so snapshots stay reviewable: a line keeps its first 200 characters, a
//! text its first 16 and last 4 lines (a compact block keeps all its lines: it is what the
//! review is about), each cut marked with what it left out. The ReAct prompt is shown message
//! by message, each clipped the same way.

use std::fmt::Write as _;

use anyhow::{ensure, Result};
use loom_core::render::{Format, SeqRange, COMPACT_HEADER};
use serde_json::Value;

use super::replay::Replay;

const LINE_CHARS: usize = 200;
const HEAD_LINES: usize = 16;
const TAIL_LINES: usize = 4;
const COMPACT_LINES: usize = 80;

fn clip_line(line: &str) -> String {
    let n = line.chars().count();
    if n <= LINE_CHARS {
        return line.to_owned();
    }
    let head: String = line.chars().take(LINE_CHARS).collect();
    format!("{head}…[+{} chars]", n - LINE_CHARS)
}

/// The lines a text is shown as.
fn clip(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.split('\n').collect();
    let (head, tail) = if text.starts_with(COMPACT_HEADER) {
        (COMPACT_LINES, 0)
    } else {
        (HEAD_LINES, TAIL_LINES)
    };
    if lines.len() <= head + tail {
        return lines.into_iter().map(clip_line).collect();
    }
    let mut out: Vec<String> = lines[..head].iter().map(|l| clip_line(l)).collect();
    out.push(format!("[… {} lines …]", lines.len() - head - tail));
    out.extend(lines[lines.len() - tail..].iter().map(|l| clip_line(l)));
    out
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => Value::String(clip_line(s)).to_string(),
        other => other.to_string(),
    }
}

fn is_block(v: &Value) -> bool {
    matches!(v, Value::String(s) if s.contains('\n'))
}

/// Writes `v` as the value of a key or list item whose line is already started (and ends in
/// `:` or `-`).
fn outline(out: &mut String, v: &Value, indent: usize) {
    let pad = " ".repeat(indent);
    match v {
        Value::String(s) if is_block(v) => {
            out.push_str(" |\n");
            for line in clip(s) {
                if line.is_empty() {
                    out.push('\n');
                } else {
                    let _ = writeln!(out, "{pad}{line}");
                }
            }
        }
        Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            for (k, x) in map {
                let _ = write!(out, "{pad}{k}:");
                outline(out, x, indent + 2);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            for x in items {
                let _ = write!(out, "{pad}-");
                match x {
                    // An item's map starts on the dash's line.
                    Value::Object(map) if !map.is_empty() => {
                        for (n, (k, y)) in map.iter().enumerate() {
                            if n == 0 {
                                let _ = write!(out, " {k}:");
                            } else {
                                let _ = write!(out, "{pad}  {k}:");
                            }
                            outline(out, y, indent + 4);
                        }
                    }
                    other => outline(out, other, indent + 2),
                }
            }
        }
        other => {
            out.push(' ');
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
}

fn ranges(list: &[SeqRange]) -> String {
    if list.is_empty() {
        return "-".to_owned();
    }
    list.iter()
        .map(|r| {
            if r.from == r.to {
                r.from.to_string()
            } else {
                format!("{}-{}", r.from, r.to)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The snapshot of one replay.
pub(crate) fn snapshot(id: &str, format: Format, budget: u64, replay: &Replay) -> Result<String> {
    let last = &replay.last;
    let receipt = &last.receipt;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# {id}\n# {}, hard budget {budget} tokens ({}), {} calls\n",
        format.as_str(),
        receipt.tokenizer,
        replay.calls.len()
    );
    out.push_str("## calls (last seq rendered: estimated tokens, messages, compaction point)\n\n");
    for c in &replay.calls {
        let _ = write!(
            out,
            "{:>4}: {:>6} tokens, {:>3} messages",
            c.at_seq, c.estimate, c.messages
        );
        if let Some(p) = &c.point {
            let _ = write!(
                out,
                "  <- point {} ({:?}: {} -> {}{})",
                c.points,
                p.reason,
                p.before,
                p.after,
                if p.ineffective { ", ineffective" } else { "" }
            );
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "\n## receipt of the final call (seqs 1..{})\n",
        receipt.at_seq
    );
    for (name, list) in receipt.lists() {
        // What a client replaced exists only behind the proxy; these logs have none.
        if name == "replaced" && list.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{name:<11} {}", ranges(list));
    }
    let _ = writeln!(
        out,
        "points      {}\nstable      {} of {} messages",
        receipt.points,
        last.request.stable_len,
        last.request.messages.len()
    );

    out.push_str("\n## body of the final call\n\n");
    let mut body = last.body();
    if format == Format::React {
        // Shown message by message; the prompt must be exactly their texts, joined.
        let mut pieces: Vec<String> = Vec::new();
        let tools = format.tools(&last.request);
        if !tools.is_empty() {
            let names: Vec<&str> = tools.iter().filter_map(Value::as_str).collect();
            pieces.push(format!("Tools:\n{}", names.join("\n")));
        }
        for m in &last.request.messages {
            for w in format.wire(m) {
                pieces.push(w.as_str().unwrap_or_default().to_owned());
            }
        }
        ensure!(
            body["prompt"].as_str() == Some(pieces.join("\n").as_str()),
            "the ReAct prompt is not its messages joined"
        );
        body["prompt"] = Value::Array(pieces.into_iter().map(Value::String).collect());
        out.push_str("(prompt: the messages' texts, joined by newlines)\n");
    }
    if let Value::Object(map) = &body {
        for (k, v) in map {
            let _ = write!(out, "{k}:");
            outline(&mut out, v, 2);
        }
    }
    Ok(out)
}
