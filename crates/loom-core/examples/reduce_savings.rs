//! The seeds' savings table, measured: o200k tokens of every tool result in `../shared/traces`
//! against the tokens of its step observation (plus its ` [outputs/…]` reference when offloaded),
//! per source, per kind, and for the seeds' two scenarios.
//!
//! `cargo run --release -p loom-core --example reduce_savings`

#![expect(clippy::print_stdout, reason = "the table is this example's output")]

use std::collections::BTreeMap;

use loom_core::{ContentStats, ReduceConfig, ResultInput, StepContext, ToolKind};
use loom_tokens::Encoding;

#[path = "support/trace_results.rs"]
mod trace_results;

const TRACES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces");

#[derive(Default)]
struct Tally {
    results: u64,
    offloaded: u64,
    full: u64,
    reduced: u64,
}

impl Tally {
    fn add(&mut self, full: u64, reduced: u64, offloaded: bool) {
        self.results += 1;
        self.offloaded += u64::from(offloaded);
        self.full += full;
        self.reduced += reduced;
    }

    fn row(&self, name: &str) -> String {
        let saved = if self.full == 0 {
            0.0
        } else {
            100.0 * (1.0 - self.reduced as f64 / self.full as f64)
        };
        format!(
            "| {name} | {} | {} | {} | {} | {saved:.1}% |",
            self.results, self.offloaded, self.full, self.reduced
        )
    }
}

fn kind_name(kind: &ToolKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "custom".to_owned())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = ReduceConfig::default();
    let enc = Encoding::O200kBase;
    let files = [
        "miniswe_gemini3pro_swebv",
        "sweagent_traj",
        "tau_bench_airline_gpt4o",
        "browsergym_workarena_gpt4o",
        "fireact_hotpotqa__gpt35ft_run",
        "fireact_hotpotqa__gpt4_react_sft",
    ];
    let mut by_source: Vec<(String, Tally)> = Vec::new();
    let mut by_kind: BTreeMap<String, Tally> = BTreeMap::new();
    let mut reads_2kb = Tally::default();
    let mut searches = Tally::default();
    let mut big_searches = Tally::default();
    let mut total = Tally::default();
    for file in files {
        let text = std::fs::read_to_string(format!("{TRACES}/{file}.jsonl"))?;
        let mut tally = Tally::default();
        for traj in trace_results::trajectories(&text)? {
            let mut number = 0;
            for result in &traj.results {
                let Some(call) = &result.call else {
                    continue;
                };
                number += 1;
                let content = result.content.as_str();
                let stats = ContentStats::of(content.as_bytes());
                let input = ResultInput {
                    call: Some(call),
                    call_id: &call.id,
                    tool_name: &call.name,
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
                let shown = match &r.step.outcome_ref {
                    Some(alias) => format!("{} [{alias}]", r.step.observation),
                    None => r.step.observation.clone(),
                };
                let full = enc.count(content) as u64;
                let reduced = enc.count(&shown) as u64;
                let offloaded = r.offload.is_some();
                tally.add(full, reduced, offloaded);
                total.add(full, reduced, offloaded);
                by_kind
                    .entry(kind_name(&r.step.kind))
                    .or_default()
                    .add(full, reduced, offloaded);
                if r.step.kind == ToolKind::ReadFile && (1536..=2560).contains(&stats.bytes) {
                    reads_2kb.add(full, reduced, offloaded);
                }
                if matches!(r.step.kind, ToolKind::WebSearch | ToolKind::Grep) {
                    searches.add(full, reduced, offloaded);
                    if r.step.results.is_some_and(|n| n > 5) {
                        big_searches.add(full, reduced, offloaded);
                    }
                }
            }
        }
        by_source.push((file.to_owned(), tally));
    }
    println!(
        "| source | results | offloaded | tokens of results | tokens of observations | saved |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, t) in &by_source {
        println!("{}", t.row(name));
    }
    println!("{}", total.row("**all**"));
    println!();
    println!("| kind | results | offloaded | tokens of results | tokens of observations | saved |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, t) in &by_kind {
        println!("{}", t.row(name));
    }
    println!();
    println!("| seed scenario | results | offloaded | tokens of results | tokens of observations | saved |");
    println!("|---|---:|---:|---:|---:|---:|");
    println!("{}", reads_2kb.row("file reads of 1.5–2.5 KB (seed: 92%)"));
    println!("{}", searches.row("searches, web and grep (seed: 94%)"));
    println!("{}", big_searches.row("searches with more than 5 results"));
    Ok(())
}
