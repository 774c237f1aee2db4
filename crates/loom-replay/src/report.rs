//! The `--report DIR` output: a self-contained HTML page (no external resources) with the
//! summary tables and SVG charts of tokens per call and cumulative cost, for Loom and the
//! baselines, per source and per trajectory. The per-source charts are also written as `.svg`
//! files beside the page.

use std::fmt::Write as _;
use std::io;
use std::path::Path;

use crate::metrics::{StrategyStats, Summary, FORMULA_CACHED};
use crate::run::{CallRecord, Sent, TraceRun};

const COLORS: [(&str, &str); 3] = [
    ("loom", "#1b7f3b"),
    ("full", "#b03a2e"),
    ("window", "#2e5fb0"),
];

fn pick(c: &CallRecord, strategy: &str) -> Sent {
    match strategy {
        "loom" => c.loom,
        "full" => c.full,
        _ => c.window,
    }
}

fn cost(s: &Sent) -> f64 {
    (s.tokens - s.cached) as f64 + FORMULA_CACHED * s.cached as f64
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A line chart: one polyline per series, y from 0, an optional horizontal reference line.
fn line_chart(
    title: &str,
    series: &[(&str, &str, Vec<f64>)],
    reference: Option<(&str, f64)>,
) -> String {
    let (w, h, left, bottom, top, right) = (640.0, 260.0, 64.0, 28.0, 26.0, 110.0);
    let n = series.iter().map(|s| s.2.len()).max().unwrap_or(0).max(2);
    let mut ymax = series
        .iter()
        .flat_map(|s| s.2.iter().copied())
        .chain(reference.map(|r| r.1))
        .fold(0.0f64, f64::max);
    if ymax <= 0.0 {
        ymax = 1.0;
    }
    ymax *= 1.05;
    let x = |i: usize| left + (w - left - right) * i as f64 / (n - 1) as f64;
    let y = |v: f64| top + (h - top - bottom) * (1.0 - v / ymax);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(
        svg,
        r#"<text x="{left}" y="16" font-size="13">{}</text>"#,
        esc(title)
    );
    for k in 0..=4 {
        let v = ymax * k as f64 / 4.0;
        let yy = y(v);
        let _ = write!(
            svg,
            r##"<line x1="{left}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            w - right,
            left - 4.0,
            yy + 4.0,
            short(v)
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">call</text>"#,
        (left + w - right) / 2.0,
        h - 6.0
    );
    if let Some((label, v)) = reference {
        let yy = y(v);
        let _ = write!(
            svg,
            r##"<line x1="{left}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#888" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}">{}</text>"##,
            w - right,
            w - right + 4.0,
            yy + 4.0,
            esc(label)
        );
    }
    for (k, (name, color, values)) in series.iter().enumerate() {
        let points: Vec<String> = values
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{:.1},{:.1}", x(i), y(*v)))
            .collect();
        let _ = write!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{}"/>"#,
            points.join(" ")
        );
        let ly = top + 14.0 * k as f64 + 10.0;
        let _ = write!(
            svg,
            r#"<rect x="{:.1}" y="{:.1}" width="10" height="3" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            w - right + 6.0,
            ly - 3.0,
            w - right + 20.0,
            ly + 1.0,
            esc(name)
        );
    }
    svg.push_str("</svg>");
    svg
}

fn short(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// Mean tokens at each call index over the runs, per strategy.
fn mean_tokens(runs: &[&TraceRun], strategy: &str) -> Vec<f64> {
    let n = runs.iter().map(|r| r.calls.len()).max().unwrap_or(0);
    (0..n)
        .map(|i| {
            let vals: Vec<f64> = runs
                .iter()
                .filter_map(|r| r.calls.get(i))
                .map(|c| pick(c, strategy).tokens as f64)
                .collect();
            vals.iter().sum::<f64>() / vals.len().max(1) as f64
        })
        .collect()
}

/// Cumulative cost over the runs' calls, in order.
fn cumulative_cost(runs: &[&TraceRun], strategy: &str) -> Vec<f64> {
    let mut total = 0.0;
    runs.iter()
        .flat_map(|r| &r.calls)
        .map(|c| {
            total += cost(&pick(c, strategy));
            total
        })
        .collect()
}

fn charts(runs: &[&TraceRun], title: &str, budget: Option<f64>) -> (String, String) {
    let tokens: Vec<(&str, &str, Vec<f64>)> = COLORS
        .iter()
        .map(|(name, color)| (*name, *color, mean_tokens(runs, name)))
        .collect();
    let costs: Vec<(&str, &str, Vec<f64>)> = COLORS
        .iter()
        .map(|(name, color)| (*name, *color, cumulative_cost(runs, name)))
        .collect();
    (
        line_chart(
            &format!("{title}: input tokens per call (mean over trajectories)"),
            &tokens,
            budget.map(|b| ("budget", b)),
        ),
        line_chart(
            &format!("{title}: cumulative cost (uncached + 0.1 × cached tokens)"),
            &costs,
            None,
        ),
    )
}

fn stats_rows(html: &mut String, s: &Summary) {
    for (name, st) in [("loom", &s.loom), ("full", &s.full), ("window", &s.window)] {
        let st: &StrategyStats = st;
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{name}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{:.4}</td><td>{:.4}</td><td>{:.3}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.scope),
            s.calls,
            st.input_tokens,
            st.cache_share,
            st.append_only_share,
            st.cost,
            st.cost_registry,
            st.evidence_recall,
            st.over_budget,
            st.orphans
        );
    }
}

/// Writes `index.html` and the per-source SVG charts into `dir`.
pub fn write_report(
    dir: &Path,
    runs: &[TraceRun],
    sums: &[Summary],
    budget: u64,
) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut html = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Loom replay</title><style>\
         body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse}\
         td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td:first-child,td:nth-child(2){text-align:left}\
         details{margin:4px 0}</style></head><body><h1>Loom replay</h1>",
    );
    let _ = write!(
        html,
        "<p>Budget {budget} tokens per request. cost = sum(uncached + 0.1 × cached) relative to the full history sent uncached; cost* uses the model's cached-read price. Recall: evidence identifiers present in the request.</p>\
         <table><tr><th>scope</th><th>method</th><th>calls</th><th>input tokens</th><th>cache share</th><th>append-only</th><th>cost</th><th>cost*</th><th>recall</th><th>over budget</th><th>orphans</th></tr>"
    );
    for s in sums {
        stats_rows(&mut html, s);
    }
    html.push_str("</table>");
    let mut sources: Vec<&str> = runs.iter().map(|r| r.source.as_str()).collect();
    sources.sort_unstable();
    sources.dedup();
    for (i, source) in sources.iter().enumerate() {
        let subset: Vec<&TraceRun> = runs.iter().filter(|r| r.source == *source).collect();
        let (tokens, cost) = charts(&subset, source, Some(budget as f64));
        std::fs::write(dir.join(format!("source-{i}-tokens.svg")), &tokens)?;
        std::fs::write(dir.join(format!("source-{i}-cost.svg")), &cost)?;
        let _ = write!(html, "<h2>{}</h2>{tokens}{cost}", esc(source));
        html.push_str("<details><summary>per trajectory</summary>");
        for run in &subset {
            let (t, c) = charts(std::slice::from_ref(run), &run.id, Some(budget as f64));
            let _ = write!(
                html,
                "<details><summary>{} ({} calls{})</summary>{t}{c}</details>",
                esc(&run.id),
                run.calls.len(),
                run.error
                    .as_ref()
                    .map(|e| format!("; not rendered: {}", esc(e)))
                    .unwrap_or_default()
            );
        }
        html.push_str("</details>");
    }
    html.push_str("</body></html>");
    std::fs::write(dir.join("index.html"), html)
}
