//! Prints the step observation of every tool result in a trace file (OpenAI Chat JSONL), to
//! eyeball what reduction keeps: `cargo run -p loom-core --example observe -- FILE [TOOL]`.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use loom_core::{ContentStats, ReduceConfig, ResultInput, StepContext, ToolCall};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: observe FILE [TOOL]")?;
    let only = args.next();
    let config = ReduceConfig::default();
    let file = std::io::BufReader::new(std::fs::File::open(path)?);
    let mut out = std::io::stdout().lock();
    for line in file.lines() {
        let traj: serde_json::Value = serde_json::from_str(&line?)?;
        let mut calls: BTreeMap<String, ToolCall> = BTreeMap::new();
        let mut number = 0;
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
                let id = m["tool_call_id"].as_str().unwrap_or("");
                let content = m["content"].as_str().unwrap_or("");
                let call = calls.get(id);
                if only
                    .as_deref()
                    .is_some_and(|t| call.is_none_or(|c| c.name != t))
                {
                    continue;
                }
                number += 1;
                let stats = ContentStats::of(content.as_bytes());
                let input = ResultInput {
                    call,
                    call_id: id,
                    tool_name: "",
                    content: content.as_bytes(),
                    is_error: false,
                    stats: &stats,
                };
                let ctx = StepContext {
                    number,
                    call_seq: 0,
                    result_seq: 0,
                    timestamp_ms: 0,
                };
                let r = config.reduce(&input, &ctx);
                writeln!(
                    out,
                    "{}\t{}\t{}\t{}\t{}\t{}",
                    traj["id"].as_str().unwrap_or(""),
                    number,
                    r.step.tool_name,
                    if r.step.success { "ok" } else { "FAIL" },
                    r.offload.as_deref().unwrap_or("-"),
                    r.step.observation
                )?;
            }
        }
    }
    Ok(())
}
