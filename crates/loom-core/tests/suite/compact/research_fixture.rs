//! The 20-step research task of seed 003's "Real-World Example", as tool calls with synthetic
//! outputs reduced by the real reducers.
//!
//! The seed gives only the shape of the task (searches of 10-15 results, articles of several
//! thousand characters, analysis commands, file writes, a report); the outputs are generated
//! deterministically so the fixture is the same everywhere. Shared by the tests and the
//! `compact_savings` example (which includes this file by path).

use loom_core::{ContentStats, ReactStep, ReduceConfig, ResultInput, Step, StepContext, ToolCall};

const WORDS: &[&str] = &[
    "bitcoin",
    "price",
    "analysts",
    "expect",
    "halving",
    "supply",
    "demand",
    "institutional",
    "inflows",
    "volatility",
    "market",
    "cycle",
    "forecast",
    "resistance",
    "support",
    "level",
    "investors",
    "regulation",
    "adoption",
    "liquidity",
    "exchange",
    "reserves",
    "miners",
    "hash",
    "rate",
    "macro",
    "rates",
    "dollar",
    "treasury",
    "etf",
    "custody",
    "momentum",
    "bullish",
    "bearish",
    "conservative",
    "estimate",
    "target",
    "quarter",
    "rally",
    "correction",
];

/// A small deterministic generator, so the fixture is the same on every machine.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) as usize
    }

    fn prose(&mut self, words: usize) -> String {
        let mut out = String::new();
        for i in 0..words {
            let w = WORDS[self.next() % WORDS.len()];
            if i % 14 == 0 {
                if i > 0 {
                    out.push_str(". ");
                }
                let mut c = w.chars();
                if let Some(f) = c.next() {
                    out.extend(f.to_uppercase());
                    out.push_str(c.as_str());
                }
            } else {
                out.push(' ');
                out.push_str(w);
            }
        }
        out.push('.');
        out
    }

    fn search(&mut self, n: usize) -> String {
        let results: Vec<serde_json::Value> = (0..n)
            .map(|i| {
                serde_json::json!({
                    "title": self.prose(6).trim_end_matches('.').to_owned(),
                    "url": format!("https://news{}.example/btc/{}", i % 7, self.next() % 10_000),
                    "snippet": self.prose(14),
                })
            })
            .collect();
        serde_json::to_string_pretty(&serde_json::json!({ "results": results })).unwrap_or_default()
    }
}

pub(crate) struct Call {
    thought: &'static str,
    tool: &'static str,
    args: serde_json::Value,
    output: String,
}

fn calls() -> Vec<Call> {
    let mut g = Lcg(2025);
    let mut out = Vec::new();
    let mut push = |thought, tool, args, output| {
        out.push(Call {
            thought,
            tool,
            args,
            output,
        })
    };
    let search = |q: &str| serde_json::json!({ "query": q });
    let url = |u: &str| serde_json::json!({ "url": u });
    let cmd = |c: &str| serde_json::json!({ "command": c });
    let report = g.prose(300);
    // 1-5: search queries, read articles.
    push(
        "I should search for Bitcoin price predictions.",
        "web_search",
        search("Bitcoin 2025 price prediction"),
        g.search(15),
    );
    push(
        "Let me read the first article for details.",
        "fetch",
        url("https://cryptonews.example/btc-100k"),
        g.prose(450),
    );
    push(
        "The halving matters; search for its impact.",
        "web_search",
        search("BTC halving 2024 impact on price"),
        g.search(10),
    );
    push(
        "Read the most cited analysis.",
        "fetch",
        url("https://financetimes.example/btc-75k"),
        g.prose(450),
    );
    push(
        "Check my saved source list.",
        "read_file",
        serde_json::json!({ "path": "notes/sources.md" }),
        g.prose(180),
    );
    // 6-10: more searches, fetch data.
    push(
        "Look at ETF flows.",
        "web_search",
        search("Bitcoin ETF inflows 2025"),
        g.search(12),
    );
    push(
        "And on-chain forecasts.",
        "web_search",
        search("Bitcoin on-chain analysis forecast"),
        g.search(8),
    );
    push(
        "Fetch daily prices.",
        "fetch",
        url("https://api.example/btc/history?days=60"),
        {
            let rows: Vec<serde_json::Value> = (0..60)
                .map(|d| serde_json::json!({ "day": d, "close": 60_000 + (g.next() % 40_000) }))
                .collect();
            serde_json::to_string(&rows).unwrap_or_default()
        },
    );
    push(
        "Collect analyst targets.",
        "web_search",
        search("analyst BTC targets 2025"),
        g.search(10),
    );
    push(
        "Read the bank research note.",
        "fetch",
        url("https://bank.example/research/btc-2025"),
        g.prose(450),
    );
    // 11-17: analysis commands, file writes, the report.
    push(
        "Compute the trend from the data.",
        "bash",
        cmd("python analyze.py data/btc.json"),
        format!(
            "mean 78214.5\nstd 11021.7\ntrend +0.8%/week\n{}",
            g.prose(60)
        ),
    );
    push(
        "Plot it.",
        "bash",
        cmd("python plot.py data/summary.csv"),
        "saved plot.png".into(),
    );
    push(
        "Count my notes.",
        "bash",
        cmd("wc -l notes/*.md"),
        "  42 notes/findings.md\n  18 notes/sources.md\n  60 total".into(),
    );
    let write = |path: &str, content: String| {
        let wrote = format!("Wrote {} bytes to {path}", content.len());
        (
            serde_json::json!({ "path": path, "content": content }),
            wrote,
        )
    };
    let (args, wrote) = write("data/summary.csv", "day,close\n".repeat(90));
    push("Save the summary table.", "write_file", args, wrote);
    let (args, wrote) = write("notes/findings.md", g.prose(150));
    push("Write down the findings.", "write_file", args, wrote);
    let (args, wrote) = write("report.md", g.prose(200));
    push("Draft the report.", "write_file", args, wrote);
    push(
        "Render it to PDF.",
        "bash",
        cmd("pandoc report.md -o report.pdf"),
        String::new(),
    );
    // 18-20: the analysis, a final search.
    let (args, wrote) = write("analysis.md", report.clone());
    push("Write the analysis.", "write_file", args, wrote);
    push(
        "One last check of technical analysis.",
        "web_search",
        search("Bitcoin technical analysis"),
        g.search(12),
    );
    push(
        "Re-read the analysis before answering.",
        "read_file",
        serde_json::json!({ "path": "analysis.md" }),
        report,
    );
    out
}

/// The calls, their raw arguments and their steps.
pub(crate) struct Reduced {
    pub(crate) calls: Vec<Call>,
    pub(crate) args: Vec<String>,
    pub(crate) steps: Vec<Step>,
}

/// The 20 calls reduced to steps.
pub(crate) fn reduced() -> Reduced {
    let calls = calls();
    let reduce = ReduceConfig::default();
    let mut steps = Vec::new();
    let mut args = Vec::new();
    for (i, c) in calls.iter().enumerate() {
        let call = ToolCall {
            id: format!("call_{i}"),
            name: c.tool.to_owned(),
            arguments: c.args.to_string(),
        };
        let stats = ContentStats::of(c.output.as_bytes());
        let n = i as u64;
        let r = reduce.reduce(
            &ResultInput {
                call: Some(&call),
                call_id: &call.id,
                tool_name: &call.name,
                content: c.output.as_bytes(),
                is_error: false,
                stats: &stats,
            },
            &StepContext {
                number: i as u32 + 1,
                call_seq: 2 * n + 2,
                result_seq: 2 * n + 3,
                timestamp_ms: 0,
            },
        );
        steps.push(r.step);
        args.push(call.arguments);
    }
    Reduced { calls, args, steps }
}

/// The calls as ReAct steps.
pub(crate) fn react<'a>(r: &'a Reduced) -> Vec<ReactStep<'a>> {
    r.calls
        .iter()
        .zip(&r.args)
        .zip(&r.steps)
        .map(|((c, a), s)| ReactStep {
            thought: c.thought,
            action: c.tool,
            arguments: a,
            output: &c.output,
            step: s,
        })
        .collect()
}
