//! Reduction throughput: MB of tool output reduced per second, on every tool result of the real
//! traces (`../shared/traces`) and on large synthetic outputs.
//!
//! `cargo bench -p loom-core --bench reduce`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use loom_core::{ContentStats, ReduceConfig, ResultInput, StepContext, ToolCall};

#[path = "../examples/support/trace_results.rs"]
mod trace_results;

const TRACES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces");

/// One tool result: its call, its output and the output's stats.
struct Sample {
    call: ToolCall,
    content: String,
    stats: ContentStats,
}

fn load(file: &str) -> Vec<Sample> {
    let path = format!("{TRACES}/{file}.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let trajectories = trace_results::trajectories(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    trajectories
        .into_iter()
        .flat_map(|t| t.results)
        .filter_map(|r| {
            let call = r.call?;
            let stats = ContentStats::of(r.content.as_bytes());
            Some(Sample {
                call,
                content: r.content,
                stats,
            })
        })
        .collect()
}

fn reduce_all(config: &ReduceConfig, samples: &[Sample]) -> usize {
    let mut offloaded = 0;
    for (i, s) in samples.iter().enumerate() {
        let input = ResultInput {
            call: Some(&s.call),
            call_id: &s.call.id,
            tool_name: &s.call.name,
            content: s.content.as_bytes(),
            is_error: false,
            stats: &s.stats,
        };
        let ctx = StepContext {
            number: u32::try_from(i + 1).unwrap_or(u32::MAX),
            call_seq: 1,
            result_seq: 2,
            timestamp_ms: 0,
        };
        offloaded += usize::from(config.reduce(&input, &ctx).offload.is_some());
    }
    offloaded
}

fn bytes(samples: &[Sample]) -> u64 {
    samples.iter().map(|s| s.content.len() as u64).sum()
}

fn traces(c: &mut Criterion) {
    let config = ReduceConfig::default();
    let files = [
        "miniswe_gemini3pro_swebv",
        "sweagent_traj",
        "tau_bench_airline_gpt4o",
        "browsergym_workarena_gpt4o",
        "fireact_hotpotqa__gpt35ft_run",
        "fireact_hotpotqa__gpt4_react_sft",
    ];
    let mut all = Vec::new();
    let mut group = c.benchmark_group("reduce/traces");
    for file in files {
        let samples = load(file);
        group.throughput(Throughput::Bytes(bytes(&samples)));
        group.bench_with_input(BenchmarkId::from_parameter(file), &samples, |b, s| {
            b.iter(|| reduce_all(&config, black_box(s)));
        });
        all.extend(samples);
    }
    group.throughput(Throughput::Bytes(bytes(&all)));
    group.bench_function("all", |b| b.iter(|| reduce_all(&config, black_box(&all))));
    // What ingest pays in total: the stats (SHA-256, lines, type) of the original, then reduction.
    group.bench_function("all_with_stats", |b| {
        b.iter(|| {
            let mut n = 0;
            for s in &all {
                n += ContentStats::of(black_box(s.content.as_bytes())).lines;
            }
            n + reduce_all(&config, black_box(&all)) as u64
        });
    });
    group.finish();
}

fn large(c: &mut Criterion) {
    let config = ReduceConfig::default();
    let log_line = "2024-05-20T10:00:00Z INFO worker-3 processed batch 1234 in 12ms (ok)\n";
    let shell = format!(
        "<returncode>1</returncode>\n<output>\n{}Traceback (most recent call last):\nValueError: boom\n</output>",
        log_line.repeat(16 * 1024 * 1024 / log_line.len())
    );
    let record = r#"{"flight_number": "HAT069", "origin": "JFK", "destination": "SEA", "status": "available", "prices": {"economy": 121}}"#;
    let json = format!(
        "[{}]",
        vec![record; 16 * 1024 * 1024 / record.len()].join(", ")
    );
    let grep_line = "src/module/file.py:1234:    value = compute(value, other)  # match\n";
    let grep = grep_line.repeat(16 * 1024 * 1024 / grep_line.len());
    let cases = [
        (
            "shell_16MB",
            "bash",
            r#"{"command": "python run.py"}"#,
            shell,
        ),
        ("json_16MB", "search_flights", r#"{"origin": "JFK"}"#, json),
        (
            "grep_16MB",
            "bash",
            r#"{"command": "grep -rn value src"}"#,
            grep,
        ),
    ];
    let mut group = c.benchmark_group("reduce/large");
    group.sample_size(10);
    for (name, tool, args, content) in cases {
        let sample = Sample {
            call: ToolCall {
                id: "c".into(),
                name: tool.into(),
                arguments: args.into(),
            },
            stats: ContentStats::of(content.as_bytes()),
            content,
        };
        group.throughput(Throughput::Bytes(sample.content.len() as u64));
        let samples = [sample];
        group.bench_function(name, |b| {
            b.iter(|| reduce_all(&config, black_box(&samples)))
        });
    }
    group.finish();
}

criterion_group!(benches, traces, large);
criterion_main!(benches);
