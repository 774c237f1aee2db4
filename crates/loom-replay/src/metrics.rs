//! Aggregates per source and overall.

use serde::Serialize;

use crate::run::{Sent, TraceRun};

/// Totals of one strategy over a scope.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct StrategyStats {
    /// Input tokens sent.
    pub input_tokens: u64,
    /// Of which a prompt cache would reuse.
    pub cached_tokens: u64,
    /// `cached_tokens / input_tokens`.
    pub cache_share: f64,
    /// Share of calls whose previous request is a prefix of theirs.
    pub append_only_share: f64,
    /// Calls whose request exceeded the budget.
    pub over_budget: u64,
    /// Requests with an orphaned call or result.
    pub orphans: u64,
    /// sum(uncached + 0.1 × cached) / full history's input tokens.
    pub cost: f64,
    /// The same with the model registry's cached-read price multiplier.
    pub cost_registry: f64,
    /// Evidence identifiers present / evidence identifiers.
    pub evidence_recall: f64,
    /// Evidence identifiers present.
    pub evidence_hits: u64,
}

/// One row group of the report: a source file or everything.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Source name, or `all`.
    pub scope: String,
    /// Trajectories.
    pub trajectories: usize,
    /// Calls replayed.
    pub calls: usize,
    /// Evidence identifiers over all calls.
    pub evidence: u64,
    /// Loom.
    pub loom: StrategyStats,
    /// Full history.
    pub full: StrategyStats,
    /// Sliding window.
    pub window: StrategyStats,
    /// Loom's render latency per call, median, microseconds.
    pub render_p50_us: f64,
    /// 99th percentile.
    pub render_p99_us: f64,
    /// Compaction points fired.
    pub compaction_points: u64,
    /// Tokens Loom sent again uncached at compaction points: what a point's request sends after
    /// its cached prefix, less what the conversation added since the previous call (the full
    /// history's growth), summed over the points.
    pub resent_at_points: u64,
    /// `resent_at_points` over Loom's input tokens.
    pub resent_share: f64,
    /// References in Loom's requests checked.
    pub refs_checked: u64,
    /// References that failed to return the original bytes.
    pub refs_failed: u64,
    /// Trajectories Loom could not render to the end.
    pub errors: usize,
}

/// The cost multiplier the formula fixes for cached tokens.
pub const FORMULA_CACHED: f64 = 0.1;

fn stats(
    runs: &[&TraceRun],
    pick: impl Fn(&crate::run::CallRecord) -> Sent,
    full_tokens: u64,
    registry_cached: f64,
    evidence: u64,
) -> StrategyStats {
    let mut s = StrategyStats::default();
    let mut calls = 0u64;
    let mut append_only = 0u64;
    let (mut cost, mut cost_registry) = (0.0f64, 0.0f64);
    for run in runs {
        for c in &run.calls {
            let sent = pick(c);
            calls += 1;
            s.input_tokens += sent.tokens;
            s.cached_tokens += sent.cached;
            append_only += u64::from(sent.append_only);
            s.over_budget += u64::from(sent.over_budget);
            s.orphans += u64::from(sent.orphan);
            s.evidence_hits += u64::from(sent.evidence_hits);
            let uncached = sent.tokens.saturating_sub(sent.cached) as f64;
            cost += uncached + FORMULA_CACHED * sent.cached as f64;
            cost_registry += uncached + registry_cached * sent.cached as f64;
        }
    }
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    s.cache_share = ratio(s.cached_tokens as f64, s.input_tokens as f64);
    s.append_only_share = ratio(append_only as f64, calls as f64);
    s.cost = ratio(cost, full_tokens as f64);
    s.cost_registry = ratio(cost_registry, full_tokens as f64);
    s.evidence_recall = if evidence == 0 {
        1.0
    } else {
        s.evidence_hits as f64 / evidence as f64
    };
    s
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64 / 1_000.0
}

/// Summarises one scope.
pub fn summarize(scope: &str, runs: &[&TraceRun], registry_cached: f64) -> Summary {
    let full_tokens: u64 = runs
        .iter()
        .flat_map(|r| &r.calls)
        .map(|c| c.full.tokens)
        .sum();
    let evidence: u64 = runs
        .iter()
        .flat_map(|r| &r.calls)
        .map(|c| u64::from(c.evidence))
        .sum();
    let mut lat: Vec<u64> = runs
        .iter()
        .flat_map(|r| &r.calls)
        .map(|c| c.render_ns)
        .collect();
    lat.sort_unstable();
    let mut resent_at_points = 0u64;
    for run in runs {
        for pair in run.calls.windows(2) {
            let (prev, c) = (&pair[0], &pair[1]);
            if c.compaction {
                let uncached = c.loom.tokens.saturating_sub(c.loom.cached);
                let growth = c.full.tokens.saturating_sub(prev.full.tokens);
                resent_at_points += uncached.saturating_sub(growth);
            }
        }
    }
    let loom = stats(runs, |c| c.loom, full_tokens, registry_cached, evidence);
    let resent_share = if loom.input_tokens > 0 {
        resent_at_points as f64 / loom.input_tokens as f64
    } else {
        0.0
    };
    Summary {
        scope: scope.to_owned(),
        trajectories: runs.len(),
        calls: runs.iter().map(|r| r.calls.len()).sum(),
        evidence,
        loom,
        full: stats(runs, |c| c.full, full_tokens, registry_cached, evidence),
        window: stats(runs, |c| c.window, full_tokens, registry_cached, evidence),
        render_p50_us: percentile(&lat, 0.50),
        render_p99_us: percentile(&lat, 0.99),
        compaction_points: runs
            .iter()
            .flat_map(|r| &r.calls)
            .filter(|c| c.compaction)
            .count() as u64,
        resent_at_points,
        resent_share,
        refs_checked: runs
            .iter()
            .flat_map(|r| &r.calls)
            .map(|c| u64::from(c.refs_checked))
            .sum(),
        refs_failed: runs
            .iter()
            .flat_map(|r| &r.calls)
            .map(|c| u64::from(c.refs_failed))
            .sum(),
        errors: runs.iter().filter(|r| r.error.is_some()).count(),
    }
}

/// One summary per source (sorted by name), then `all`.
pub fn summaries(runs: &[TraceRun], registry_cached: f64) -> Vec<Summary> {
    let mut sources: Vec<&str> = runs.iter().map(|r| r.source.as_str()).collect();
    sources.sort_unstable();
    sources.dedup();
    let mut out: Vec<Summary> = sources
        .iter()
        .map(|src| {
            let subset: Vec<&TraceRun> = runs.iter().filter(|r| r.source == *src).collect();
            summarize(src, &subset, registry_cached)
        })
        .collect();
    let all: Vec<&TraceRun> = runs.iter().collect();
    out.push(summarize("all", &all, registry_cached));
    out
}
