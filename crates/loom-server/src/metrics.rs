//! `GET /metrics`: Prometheus text exposition of what the server did.
//!
//! Requests by route and status, latency histograms by route (end to end, and the time Loom
//! itself added before the upstream call), tokens in, out and cached as providers reported them,
//! compaction points, upstream errors, and the live-session cache's size. Counters sit behind one
//! mutex each family; a request touches a handful, so contention stays far below the cost of a
//! request.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
];

#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        for (i, bound) in BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum += seconds;
    }
}

/// The server's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    latency: Mutex<BTreeMap<String, Histogram>>,
    overhead: Mutex<BTreeMap<String, Histogram>>,
    phases: Mutex<BTreeMap<String, Histogram>>,
    recall_round_time: Mutex<BTreeMap<String, Histogram>>,
    tokens: Mutex<BTreeMap<(&'static str, String), u64>>,
    upstream_errors: Mutex<BTreeMap<(String, String), u64>>,
    compaction_points: AtomicU64,
    diverged_sessions: AtomicU64,
    unlogged_replies: AtomicU64,
    histories_whole: AtomicU64,
    histories_continued: AtomicU64,
    connections_open: AtomicU64,
    connections_refused: AtomicU64,
    bodies_timed_out: AtomicU64,
    recall_rounds: AtomicU64,
    recalls: AtomicU64,
    recalls_failed: AtomicU64,
    recalled_tokens: AtomicU64,
}

impl Metrics {
    /// A finished request: its route (the matched path), status and duration.
    pub fn request(&self, route: &str, status: u16, took: Duration) {
        *lock(&self.requests)
            .entry((route.to_owned(), status))
            .or_default() += 1;
        lock(&self.latency)
            .entry(route.to_owned())
            .or_default()
            .observe(took.as_secs_f64());
    }

    /// The time Loom spent on a proxied request before calling the upstream.
    pub fn overhead(&self, route: &str, took: Duration) {
        lock(&self.overhead)
            .entry(route.to_owned())
            .or_default()
            .observe(took.as_secs_f64());
    }

    /// Tokens a provider reported for a call of `model`.
    pub fn tokens(&self, model: &str, input: u64, cached: u64, output: u64) {
        let mut t = lock(&self.tokens);
        for (kind, n) in [("input", input), ("cached", cached), ("output", output)] {
            *t.entry((kind, model.to_owned())).or_default() += n;
        }
    }

    /// An upstream failure: its provider and kind (`status_500`, `timeout`, `dropped_stream`, ...).
    pub fn upstream_error(&self, provider: &str, kind: &str) {
        *lock(&self.upstream_errors)
            .entry((provider.to_owned(), kind.to_owned()))
            .or_default() += 1;
    }

    /// A hidden round: the proxy answered `loom_recall` and asked the upstream again, after
    /// `took` (answering, logging, rendering the next request) on `route`.
    pub fn recall_round(&self, route: &str, took: Duration) {
        self.recall_rounds.fetch_add(1, Ordering::Relaxed);
        lock(&self.recall_round_time)
            .entry(route.to_owned())
            .or_default()
            .observe(took.as_secs_f64());
    }

    /// One `loom_recall` call answered: whether it failed, and the answer's tokens.
    pub fn recalled(&self, failed: bool, tokens: u64) {
        self.recalls.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.recalls_failed.fetch_add(1, Ordering::Relaxed);
        }
        self.recalled_tokens.fetch_add(tokens, Ordering::Relaxed);
    }

    /// A render that fired a compaction point.
    pub fn compaction_point(&self) {
        self.compaction_points.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection opened (`true`) or closed.
    pub fn connection(&self, opened: bool) {
        if opened {
            self.connections_open.fetch_add(1, Ordering::Relaxed);
        } else {
            self.connections_open.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// A connection answered 503 and closed because `max_connections` were open.
    pub fn connection_refused(&self) {
        self.connections_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// A request whose body did not arrive within `body_timeout_ms`.
    pub fn body_timed_out(&self) {
        self.bodies_timed_out.fetch_add(1, Ordering::Relaxed);
    }

    /// A client history that no longer extended its log, so a new session was started.
    pub fn diverged(&self) {
        self.diverged_sessions.fetch_add(1, Ordering::Relaxed);
    }

    /// A reply that reached the client but could not be logged (it broke the log's rules).
    pub fn unlogged_reply(&self) {
        self.unlogged_replies.fetch_add(1, Ordering::Relaxed);
    }

    /// One step of a proxied call's preparation (see [`Phase`]) and how long it took.
    pub fn phase(&self, phase: Phase, took: Duration) {
        lock(&self.phases)
            .entry(phase.name().to_owned())
            .or_default()
            .observe(took.as_secs_f64());
    }

    /// A client history synced: read whole, or only its new messages (`continued`).
    pub fn history_read(&self, continued: bool) {
        let counter = if continued {
            &self.histories_continued
        } else {
            &self.histories_whole
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The exposition text; `live` is the number of sessions in the render cache and
    /// `live_bytes` their estimated size.
    pub fn render(&self, live: usize, live_bytes: usize) -> String {
        let mut out = String::new();
        out.push_str("# HELP loom_requests_total Requests served, by route and status.\n");
        out.push_str("# TYPE loom_requests_total counter\n");
        for ((route, status), n) in lock(&self.requests).iter() {
            let _ = writeln!(
                out,
                "loom_requests_total{{route=\"{}\",status=\"{status}\"}} {n}",
                escape(route)
            );
        }
        histograms(
            &mut out,
            "loom_request_duration_seconds",
            "End-to-end request latency, by route.",
            &lock(&self.latency),
        );
        histograms(
            &mut out,
            "loom_proxy_overhead_seconds",
            "Time Loom added before calling the upstream (sync, render, checks), by route.",
            &lock(&self.overhead),
        );
        histograms(
            &mut out,
            "loom_recall_round_seconds",
            "Time a hidden loom_recall round added before the upstream was asked again (the \
             answers, their log, the next render), by route.",
            &lock(&self.recall_round_time),
        );
        histograms_by(
            &mut out,
            "loom_proxy_phase_seconds",
            "The steps of that time, by phase: split (the body into fields and raw messages), \
             sync (check, read and append what is new), render (fit: render and its receipt), \
             record (observe: the receipt), assemble (fit: the upstream body).",
            "phase",
            &lock(&self.phases),
        );
        out.push_str("# HELP loom_tokens_total Tokens providers reported, by kind and model.\n");
        out.push_str("# TYPE loom_tokens_total counter\n");
        for ((kind, model), n) in lock(&self.tokens).iter() {
            let _ = writeln!(
                out,
                "loom_tokens_total{{kind=\"{kind}\",model=\"{}\"}} {n}",
                escape(model)
            );
        }
        out.push_str(
            "# HELP loom_upstream_errors_total Upstream failures, by provider and kind.\n",
        );
        out.push_str("# TYPE loom_upstream_errors_total counter\n");
        for ((provider, kind), n) in lock(&self.upstream_errors).iter() {
            let _ = writeln!(
                out,
                "loom_upstream_errors_total{{provider=\"{}\",kind=\"{}\"}} {n}",
                escape(provider),
                escape(kind)
            );
        }
        for (name, help, value) in [
            (
                "loom_recall_rounds_total",
                "Hidden rounds: loom_recall answered by the proxy and the upstream asked again.",
                self.recall_rounds.load(Ordering::Relaxed),
            ),
            (
                "loom_recalls_total",
                "loom_recall calls the proxy answered.",
                self.recalls.load(Ordering::Relaxed),
            ),
            (
                "loom_recalls_failed_total",
                "loom_recall calls answered with an error (a reference that is not the session's).",
                self.recalls_failed.load(Ordering::Relaxed),
            ),
            (
                "loom_recalled_tokens_total",
                "Tokens of the answers to loom_recall calls.",
                self.recalled_tokens.load(Ordering::Relaxed),
            ),
            (
                "loom_compaction_points_total",
                "Renders that fired a compaction point.",
                self.compaction_points.load(Ordering::Relaxed),
            ),
            (
                "loom_diverged_sessions_total",
                "Client histories that no longer extended their log (a new session was started).",
                self.diverged_sessions.load(Ordering::Relaxed),
            ),
            (
                "loom_unlogged_replies_total",
                "Replies delivered to the client that could not be logged.",
                self.unlogged_replies.load(Ordering::Relaxed),
            ),
            (
                "loom_connections_refused_total",
                "Connections answered 503 and closed because max_connections were open.",
                self.connections_refused.load(Ordering::Relaxed),
            ),
            (
                "loom_request_body_timeouts_total",
                "Requests whose body did not arrive within body_timeout_ms (408).",
                self.bodies_timed_out.load(Ordering::Relaxed),
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP loom_proxy_histories_total Client histories synced, by how they were read: \
             whole, or only the messages after those the session remembered.\n\
             # TYPE loom_proxy_histories_total counter\n\
             loom_proxy_histories_total{{read=\"whole\"}} {}\n\
             loom_proxy_histories_total{{read=\"continuation\"}} {}",
            self.histories_whole.load(Ordering::Relaxed),
            self.histories_continued.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP loom_live_sessions Sessions whose render state is cached in memory.\n\
             # TYPE loom_live_sessions gauge\nloom_live_sessions {live}"
        );
        let _ = writeln!(
            out,
            "# HELP loom_live_bytes Estimated memory held by the cached render state.\n\
             # TYPE loom_live_bytes gauge\nloom_live_bytes {live_bytes}"
        );
        let _ = writeln!(
            out,
            "# HELP loom_connections_open Client connections open.\n\
             # TYPE loom_connections_open gauge\nloom_connections_open {}",
            self.connections_open.load(Ordering::Relaxed)
        );
        out
    }
}

fn histograms(out: &mut String, name: &str, help: &str, map: &BTreeMap<String, Histogram>) {
    histograms_by(out, name, help, "route", map);
}

fn histograms_by(
    out: &mut String,
    name: &str,
    help: &str,
    label: &str,
    map: &BTreeMap<String, Histogram>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for (value, h) in map {
        let value = escape(value);
        for (bound, n) in BUCKETS.iter().zip(h.counts) {
            let _ = writeln!(
                out,
                "{name}_bucket{{{label}=\"{value}\",le=\"{bound}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{label}=\"{value}\",le=\"+Inf\"}} {}",
            h.count
        );
        let _ = writeln!(out, "{name}_sum{{{label}=\"{value}\"}} {}", h.sum);
        let _ = writeln!(out, "{name}_count{{{label}=\"{value}\"}} {}", h.count);
    }
}

/// The steps of a proxied call's preparation, timed in `loom_proxy_phase_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The body split into its fields and its messages' raw text, hashed.
    Split,
    /// The history checked, read and compared with the log; what is new appended.
    Sync,
    /// `fit`: the render and its receipt.
    Render,
    /// `observe`: the receipt.
    Record,
    /// `fit`: the upstream body merged, checked and serialised.
    Assemble,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Self::Split => "split",
            Self::Sync => "sync",
            Self::Render => "render",
            Self::Record => "record",
            Self::Assemble => "assemble",
        }
    }
}

/// A label value as the exposition format requires (backslash, quote and newline escaped).
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while counting leaves counts that are still counts.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_counters_and_cumulative_buckets() {
        let m = Metrics::default();
        m.request("/v1/chat/completions", 200, Duration::from_millis(2));
        m.request("/v1/chat/completions", 200, Duration::from_millis(20));
        m.tokens("gpt-4o", 100, 60, 7);
        m.upstream_error("openai", "status_500");
        m.compaction_point();
        let text = m.render(3, 4096);
        assert!(
            text.contains("loom_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 2")
        );
        assert!(text.contains(
            "loom_request_duration_seconds_bucket{route=\"/v1/chat/completions\",le=\"0.005\"} 1"
        ));
        assert!(text.contains(
            "loom_request_duration_seconds_bucket{route=\"/v1/chat/completions\",le=\"+Inf\"} 2"
        ));
        assert!(text.contains("loom_tokens_total{kind=\"cached\",model=\"gpt-4o\"} 60"));
        assert!(
            text.contains("loom_upstream_errors_total{provider=\"openai\",kind=\"status_500\"} 1")
        );
        assert!(text.contains("loom_compaction_points_total 1"));
        assert!(text.contains("loom_live_sessions 3"));
        assert!(text.contains("loom_live_bytes 4096"));
    }
}
