//! Prints the step observation of every tool result in a trace file (OpenAI Chat JSONL), to
//! eyeball what reduction keeps: `cargo run -p loom-core --example observe -- FILE [TOOL]`.

use std::io::Write;

use loom_core::{ContentStats, ReduceConfig, ResultInput, StepContext};

#[path = "support/trace_results.rs"]
mod trace_results;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: observe FILE [TOOL]")?;
    let only = args.next();
    let config = ReduceConfig::default();
    let text = std::fs::read_to_string(path)?;
    let mut out = std::io::stdout().lock();
    for traj in trace_results::trajectories(&text)? {
        let mut number = 0;
        for result in &traj.results {
            {
                let (id, content, call) = (
                    result.call_id.as_str(),
                    result.content.as_str(),
                    result.call.as_ref(),
                );
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
                    traj.id,
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
