//! The tables a run prints: Markdown, so they can go into `docs/performance.md` as they are.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use super::metrics::Histogram;
use super::scenarios::{Latency, Sessions, Throughput};

/// When, on what and under how much load the figures were taken.
pub(crate) fn header() -> String {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(
            || "unknown".to_owned(),
            |o| String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        );
    // A build from a tree with uncommitted changes is not quite the commit it names.
    let dirty = std::process::Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .filter(|o| o.status.success() && !o.stdout.is_empty())
        .map_or("", |_| " with uncommitted changes");
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into());
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let memory = if crate::harness::MEMORY.get() == Some(&true) {
        "on"
    } else {
        "off"
    };
    format!(
        "loom serve load: {} UTC, commit {commit}{dirty}, {cores} cores, load average at start {load}, memory {memory}\n",
        utc_now()
    )
}

/// The value at quantile `q` of `values` (nearest rank), or NaN when there are none.
pub(crate) fn quantile(values: &[f64], q: f64) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// A histogram's mean and bucket bounds, in milliseconds.
fn buckets(h: &Histogram) -> String {
    let bound = |q| {
        h.quantile_bound(q)
            .map_or_else(|| "> last bucket".to_owned(), |b| format!("≤ {}", b * 1e3))
    };
    match h.mean() {
        Some(m) => format!(
            "{:.3} | {} | {} | {}",
            m * 1e3,
            bound(0.5),
            bound(0.99),
            h.count
        ),
        None => "– | – | – | 0".to_owned(),
    }
}

/// The latency scenario's tables.
pub(crate) fn latency(runs: &[Latency], sample: usize, budget: u64) -> String {
    let mut out = String::new();
    let turns = runs.iter().map(|r| r.turns).max().unwrap_or(0);
    let _ = writeln!(
        out,
        "### latency: one conversation of {turns} calls, the last {sample} measured (fit budget {budget})\n"
    );
    out.push_str(
        "| mode | client → mock p50 | p99 | client → Loom → mock p50 | p99 | added p50 | added p99 | mock alone on Loom's body p50 |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in runs {
        let added: Vec<f64> = r
            .through
            .iter()
            .zip(&r.direct)
            .map(|(t, d)| t - d)
            .collect();
        let _ = writeln!(
            out,
            "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
            r.mode,
            quantile(&r.direct, 0.5),
            quantile(&r.direct, 0.99),
            quantile(&r.through, 0.5),
            quantile(&r.through, 0.99),
            quantile(&added, 0.5),
            quantile(&added, 0.99),
            quantile(&r.upstream_only, 0.5),
        );
    }
    if runs.iter().any(|r| r.stream) {
        out.push_str(
            "\nStreamed: until the first event.\n\n\
             | mode | client → mock p50 | p99 | client → Loom → mock p50 | p99 | added p50 | added p99 |\n\
             |---|---:|---:|---:|---:|---:|---:|\n",
        );
        for r in runs {
            let added: Vec<f64> = r
                .through_first
                .iter()
                .zip(&r.direct_first)
                .map(|(t, d)| t - d)
                .collect();
            let _ = writeln!(
                out,
                "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
                r.mode,
                quantile(&r.direct_first, 0.5),
                quantile(&r.direct_first, 0.99),
                quantile(&r.through_first, 0.5),
                quantile(&r.through_first, 0.99),
                quantile(&added, 0.5),
                quantile(&added, 0.99),
            );
        }
    }
    out.push_str(
        "\nMilliseconds, until the whole reply (a stream's last event) was read. \"added\" is, per \
         call, through Loom minus the same body straight to the mock.\n\n\
         | mode | `loom_proxy_overhead_seconds` mean (ms) | p50 (bucket) | p99 (bucket) | calls | last client body | last upstream body | tool outputs | compaction points | run | database |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in runs {
        let _ = writeln!(
            out,
            "| {} | {} | {} KB | {} KB | {} | {} | {:.0} s{} | {:.1} MB |",
            r.mode,
            buckets(&r.overhead),
            r.client_bytes / 1024,
            r.upstream_bytes / 1024,
            r.outputs,
            r.compaction_points,
            r.run.as_secs_f64(),
            if r.stopped_early { " (time limit)" } else { "" },
            r.db_bytes as f64 / 1e6,
        );
    }
    if runs.iter().any(|r| r.recall.count > 0) {
        out.push_str(
            "\nHidden `loom_recall` rounds among the measured calls (`loom_recall_round_seconds`: \
             from the upstream's reply to the next request, answers, log and render included), \
             beside Loom's own overhead per call:\n\n\
             | mode | recall round mean (ms) | p50 (bucket) | p99 (bucket) | rounds | overhead mean (ms) |\n\
             |---|---:|---:|---:|---:|---:|\n",
        );
        for r in runs.iter().filter(|r| r.recall.count > 0) {
            let _ = writeln!(
                out,
                "| {} | {} | {:.3} |",
                r.mode,
                buckets(&r.recall),
                r.overhead.mean().unwrap_or(0.0) * 1e3
            );
        }
    }
    out.push_str(
        "\nWhere the overhead goes over the measured calls (ms, the means of the server's \
         `loom_proxy_phase_seconds`; \"rest\" is the overhead's mean minus their sum: the key, \
         the session's lock, the hand-offs to the store's threads):\n\n| mode |",
    );
    let mut names: Vec<&str> = Vec::new();
    for (n, _) in runs.iter().flat_map(|r| &r.phases) {
        if !names.contains(n) {
            names.push(n);
        }
    }
    for n in &names {
        let _ = write!(out, " {n} |");
    }
    out.push_str(" rest |\n|---|");
    out.push_str(&"---:|".repeat(names.len() + 1));
    out.push('\n');
    for r in runs {
        let _ = write!(out, "| {} |", r.mode);
        for n in &names {
            match r.phases.iter().find(|(p, _)| p == n) {
                Some((_, t)) => {
                    let _ = write!(out, " {t:.2} |");
                }
                None => out.push_str(" – |"),
            }
        }
        let timed: f64 = r.phases.iter().map(|(_, t)| t).sum();
        let rest = r.overhead.mean().map_or(f64::NAN, |m| m * 1e3 - timed);
        let _ = writeln!(out, " {rest:.2} |");
    }
    // How a call's cost grows with the conversation: the mean by tenth of the run.
    let tenth = (turns / 10).max(1);
    out.push_str("\nMean latency through Loom by tenth of the conversation (ms):\n\n| mode |");
    let spans = turns.div_ceil(tenth);
    for i in 0..spans {
        let _ = write!(out, " {}–{} |", i * tenth + 1, ((i + 1) * tenth).min(turns));
    }
    out.push_str("\n|---|");
    out.push_str(&"---:|".repeat(spans));
    out.push('\n');
    for r in runs {
        let _ = write!(out, "| {} |", r.mode);
        for chunk in r.proxied.chunks(tenth) {
            let _ = write!(out, " {:.2} |", mean(chunk));
        }
        out.push('\n');
    }
    out
}

/// The throughput scenario's table.
pub(crate) fn throughput(runs: &[Throughput], turns: usize) -> String {
    let mut out = String::new();
    let clients = runs.first().map_or(0, |r| r.clients);
    let cpu_per_call = |r: &Throughput| r.cpu * 1e3 / r.latencies.len() as f64;
    let baseline = runs.iter().find(|r| r.mode.is_none()).map(cpu_per_call);
    let _ = writeln!(
        out,
        "### throughput: {clients} clients, {turns}-call conversations\n\n\
         | target | calls | errors | conversations | seconds | calls/s | p50 (ms) | p99 (ms) | max (ms) | CPU ms/call | Loom's CPU ms/call | overhead mean (ms) | p50 (bucket) | p99 (bucket) | calls seen |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in runs {
        let secs = r.elapsed.as_secs_f64();
        let cpu = cpu_per_call(r);
        let loom = match (r.mode, baseline) {
            (Some(_), Some(b)) => format!("{:.2}", cpu - b),
            _ => "–".to_owned(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.1} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {loom} | {} |",
            r.mode.map_or("mock alone (no Loom)", |m| m.as_str()),
            r.latencies.len(),
            r.errors,
            r.conversations,
            secs,
            r.latencies.len() as f64 / secs,
            quantile(&r.latencies, 0.5),
            quantile(&r.latencies, 0.99),
            quantile(&r.latencies, 1.0),
            cpu,
            buckets(&r.overhead),
        );
    }
    out.push_str(
        "\nCPU is the whole process's (server, mock and clients); Loom's share is the \
         difference with the mock-alone row.\n",
    );
    for r in runs {
        if let Some(e) = &r.first_error {
            let _ = writeln!(
                out,
                "\n{} first error: {e}",
                r.mode.map_or("direct", |m| m.as_str())
            );
        }
    }
    out
}

/// The sessions scenario's table.
pub(crate) fn sessions(runs: &[Sessions], turns: usize) -> String {
    let mut out = String::new();
    for r in runs {
        let _ = writeln!(
            out,
            "### sessions: {} conversations of {turns} calls, mode {}{}\n\n\
             Resident memory of the whole process (server, mock and clients) before the first call: {:.0} MB.\n\n\
             | sessions | calls | seconds | RSS (MB) | growth since start (MB) | `loom_live_sessions` | `loom_live_bytes` (MB) |\n\
             |---:|---:|---:|---:|---:|---:|---:|",
            r.sessions,
            r.mode,
            if r.stopped_early { " (cut short)" } else { "" },
            r.rss_start_kib as f64 / 1024.0,
        );
        for c in &r.checkpoints {
            let _ = writeln!(
                out,
                "| {} | {} | {:.1} | {:.0} | {:.0} | {} | {:.1} |",
                c.sessions,
                c.requests,
                c.elapsed.as_secs_f64(),
                c.rss_kib as f64 / 1024.0,
                (c.rss_kib as f64 - r.rss_start_kib as f64) / 1024.0,
                c.live,
                c.live_bytes / 1e6,
            );
        }
        let _ = writeln!(
            out,
            "\nPeak RSS {:.0} MB; errors {}; database {:.1} MB.",
            r.peak_kib as f64 / 1024.0,
            r.errors,
            r.db_bytes as f64 / 1e6
        );
        if let Some(e) = &r.first_error {
            let _ = writeln!(out, "First error: {e}");
        }
    }
    out
}

/// The wall clock as `YYYY-MM-DD HH:MM`, in UTC.
fn utc_now() -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let mut text = loom_core::time::utc_datetime(ms);
    text.truncate("YYYY-MM-DD HH:MM".len());
    text
}
