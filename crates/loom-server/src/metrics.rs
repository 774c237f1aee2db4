//! `GET /metrics`: what the server did, in Prometheus's text format (version 0.0.4).
//!
//! Requests by route and status, latency histograms by route (end to end, and the time Loom
//! itself added before the upstream call), tokens in, out and cached as providers reported them,
//! compaction points, upstream errors, and the live-session cache's size. The counting and the
//! exposition are the Prometheus client's (`prometheus-client`): a labelled series is found under
//! a read lock and counted atomically, so requests seldom wait on one another here.
//!
//! The series keep the names, labels and format they had before the client took them over
//! (other tools scrape them): counters are registered without their `_total`, which the encoder
//! adds, and the exposition is the classic text format, not OpenMetrics.

use std::time::Duration;

use prometheus_client::encoding::{prometheus_text, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
];

/// The `Content-Type` of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RouteStatus {
    route: String,
    status: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct Route {
    route: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PhaseLabel {
    phase: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TokenKind {
    kind: &'static str,
    model: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct UpstreamError {
    provider: String,
    kind: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct Read {
    read: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency() -> Histogram {
    Histogram::new(BUCKETS)
}

fn histograms<L: Clone + std::hash::Hash + Eq>() -> Histograms<L> {
    Family::new_with_constructor(latency)
}

/// The server's counters.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RouteStatus, Counter>,
    latency: Histograms<Route>,
    overhead: Histograms<Route>,
    phases: Histograms<PhaseLabel>,
    recall_round_time: Histograms<Route>,
    tokens: Family<TokenKind, Counter>,
    upstream_errors: Family<UpstreamError, Counter>,
    compaction_points: Counter,
    diverged_sessions: Counter,
    unlogged_replies: Counter,
    histories: Family<Read, Counter>,
    connections_open: Gauge,
    connections_refused: Counter,
    bodies_timed_out: Counter,
    recall_rounds: Counter,
    recalls: Counter,
    recalls_failed: Counter,
    recalled_tokens: Counter,
    live_sessions: Gauge,
    live_bytes: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every series registered, at zero.
    pub fn new() -> Self {
        let mut m = Self {
            registry: Registry::default(),
            requests: Family::default(),
            latency: histograms(),
            overhead: histograms(),
            phases: histograms(),
            recall_round_time: histograms(),
            tokens: Family::default(),
            upstream_errors: Family::default(),
            compaction_points: Counter::default(),
            diverged_sessions: Counter::default(),
            unlogged_replies: Counter::default(),
            histories: Family::default(),
            connections_open: Gauge::default(),
            connections_refused: Counter::default(),
            bodies_timed_out: Counter::default(),
            recall_rounds: Counter::default(),
            recalls: Counter::default(),
            recalls_failed: Counter::default(),
            recalled_tokens: Counter::default(),
            live_sessions: Gauge::default(),
            live_bytes: Gauge::default(),
        };
        // Both ways a history is read are shown from the start, at zero.
        for read in ["whole", "continuation"] {
            let _ = m.histories.get_or_create(&Read { read });
        }
        // The encoder ends each help with a full stop; counters get their `_total` from it.
        let r = &mut m.registry;
        r.register(
            "loom_requests",
            "Requests served, by route and status",
            m.requests.clone(),
        );
        r.register(
            "loom_request_duration_seconds",
            "End-to-end request latency, by route",
            m.latency.clone(),
        );
        r.register(
            "loom_proxy_overhead_seconds",
            "Time Loom added before calling the upstream (sync, render, checks), by route",
            m.overhead.clone(),
        );
        r.register(
            "loom_recall_round_seconds",
            "Time a hidden loom_recall round added before the upstream was asked again (the \
             answers, their log, the next render), by route",
            m.recall_round_time.clone(),
        );
        r.register(
            "loom_proxy_phase_seconds",
            "The steps of that time, by phase: split (the body into fields and raw messages), \
             sync (check, read and append what is new), render (fit: render and its receipt), \
             record (observe: the receipt), assemble (fit: the upstream body)",
            m.phases.clone(),
        );
        r.register(
            "loom_tokens",
            "Tokens providers reported, by kind and model",
            m.tokens.clone(),
        );
        r.register(
            "loom_upstream_errors",
            "Upstream failures, by provider and kind",
            m.upstream_errors.clone(),
        );
        r.register(
            "loom_recall_rounds",
            "Hidden rounds: loom_recall answered by the proxy and the upstream asked again",
            m.recall_rounds.clone(),
        );
        r.register(
            "loom_recalls",
            "loom_recall calls the proxy answered",
            m.recalls.clone(),
        );
        r.register(
            "loom_recalls_failed",
            "loom_recall calls answered with an error (a reference that is not the session's)",
            m.recalls_failed.clone(),
        );
        r.register(
            "loom_recalled_tokens",
            "Tokens of the answers to loom_recall calls",
            m.recalled_tokens.clone(),
        );
        r.register(
            "loom_compaction_points",
            "Renders that fired a compaction point",
            m.compaction_points.clone(),
        );
        r.register(
            "loom_diverged_sessions",
            "Client histories that no longer extended their log (a new session was started)",
            m.diverged_sessions.clone(),
        );
        r.register(
            "loom_unlogged_replies",
            "Replies delivered to the client that could not be logged",
            m.unlogged_replies.clone(),
        );
        r.register(
            "loom_connections_refused",
            "Connections answered 503 and closed because max_connections were open",
            m.connections_refused.clone(),
        );
        r.register(
            "loom_request_body_timeouts",
            "Requests whose body did not arrive within body_timeout_ms (408)",
            m.bodies_timed_out.clone(),
        );
        r.register(
            "loom_proxy_histories",
            "Client histories synced, by how they were read: whole, or only the messages after \
             those the session remembered",
            m.histories.clone(),
        );
        r.register(
            "loom_live_sessions",
            "Sessions whose render state is cached in memory",
            m.live_sessions.clone(),
        );
        r.register(
            "loom_live_bytes",
            "Estimated memory held by the cached render state",
            m.live_bytes.clone(),
        );
        r.register(
            "loom_connections_open",
            "Client connections open",
            m.connections_open.clone(),
        );
        m
    }

    /// A finished request: its route (the matched path), status and duration.
    pub fn request(&self, route: &str, status: u16, took: Duration) {
        self.requests
            .get_or_create(&RouteStatus {
                route: route.to_owned(),
                status,
            })
            .inc();
        observe(&self.latency, route, took);
    }

    /// The time Loom spent on a proxied request before calling the upstream.
    pub fn overhead(&self, route: &str, took: Duration) {
        observe(&self.overhead, route, took);
    }

    /// Tokens a provider reported for a call of `model`.
    pub fn tokens(&self, model: &str, input: u64, cached: u64, output: u64) {
        for (kind, n) in [("input", input), ("cached", cached), ("output", output)] {
            self.tokens
                .get_or_create(&TokenKind {
                    kind,
                    model: model.to_owned(),
                })
                .inc_by(n);
        }
    }

    /// An upstream failure: its provider and kind (`status_500`, `timeout`, `dropped_stream`, ...).
    pub fn upstream_error(&self, provider: &str, kind: &str) {
        self.upstream_errors
            .get_or_create(&UpstreamError {
                provider: provider.to_owned(),
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// A hidden round: the proxy answered `loom_recall` and asked the upstream again, after
    /// `took` (answering, logging, rendering the next request) on `route`.
    pub fn recall_round(&self, route: &str, took: Duration) {
        self.recall_rounds.inc();
        observe(&self.recall_round_time, route, took);
    }

    /// One `loom_recall` call answered: whether it failed, and the answer's tokens.
    pub fn recalled(&self, failed: bool, tokens: u64) {
        self.recalls.inc();
        if failed {
            self.recalls_failed.inc();
        }
        self.recalled_tokens.inc_by(tokens);
    }

    /// A render that fired a compaction point.
    pub fn compaction_point(&self) {
        self.compaction_points.inc();
    }

    /// A connection opened (`true`) or closed.
    pub fn connection(&self, opened: bool) {
        if opened {
            self.connections_open.inc();
        } else {
            self.connections_open.dec();
        }
    }

    /// A connection answered 503 and closed because `max_connections` were open.
    pub fn connection_refused(&self) {
        self.connections_refused.inc();
    }

    /// A request whose body did not arrive within `body_timeout_ms`.
    pub fn body_timed_out(&self) {
        self.bodies_timed_out.inc();
    }

    /// A client history that no longer extended its log, so a new session was started.
    pub fn diverged(&self) {
        self.diverged_sessions.inc();
    }

    /// A reply that reached the client but could not be logged (it broke the log's rules).
    pub fn unlogged_reply(&self) {
        self.unlogged_replies.inc();
    }

    /// One step of a proxied call's preparation (see [`Phase`]) and how long it took.
    pub fn phase(&self, phase: Phase, took: Duration) {
        self.phases
            .get_or_create(&PhaseLabel {
                phase: phase.name(),
            })
            .observe(took.as_secs_f64());
    }

    /// A client history synced: read whole, or only its new messages (`continued`).
    pub fn history_read(&self, continued: bool) {
        let read = if continued { "continuation" } else { "whole" };
        self.histories.get_or_create(&Read { read }).inc();
    }

    /// The exposition text ([`CONTENT_TYPE`]); `live` is the number of sessions in the render
    /// cache and `live_bytes` their estimated size.
    pub fn render(&self, live: usize, live_bytes: usize) -> String {
        self.live_sessions
            .set(i64::try_from(live).unwrap_or(i64::MAX));
        self.live_bytes
            .set(i64::try_from(live_bytes).unwrap_or(i64::MAX));
        let mut out = String::new();
        // Writing into a String cannot fail, and the encoder fails only when its writer does.
        let _ = prometheus_text::encode(&mut out, &self.registry);
        out
    }
}

fn observe(family: &Histograms<Route>, route: &str, took: Duration) {
    family
        .get_or_create(&Route {
            route: route.to_owned(),
        })
        .observe(took.as_secs_f64());
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

    /// Every family as scrapers knew it before the Prometheus client took the exposition over:
    /// its name (counters with `_total`) and type, exactly these and no others.
    const FAMILIES: [(&str, &str); 20] = [
        ("loom_requests_total", "counter"),
        ("loom_request_duration_seconds", "histogram"),
        ("loom_proxy_overhead_seconds", "histogram"),
        ("loom_recall_round_seconds", "histogram"),
        ("loom_proxy_phase_seconds", "histogram"),
        ("loom_tokens_total", "counter"),
        ("loom_upstream_errors_total", "counter"),
        ("loom_recall_rounds_total", "counter"),
        ("loom_recalls_total", "counter"),
        ("loom_recalls_failed_total", "counter"),
        ("loom_recalled_tokens_total", "counter"),
        ("loom_compaction_points_total", "counter"),
        ("loom_diverged_sessions_total", "counter"),
        ("loom_unlogged_replies_total", "counter"),
        ("loom_connections_refused_total", "counter"),
        ("loom_request_body_timeouts_total", "counter"),
        ("loom_proxy_histories_total", "counter"),
        ("loom_live_sessions", "gauge"),
        ("loom_live_bytes", "gauge"),
        ("loom_connections_open", "gauge"),
    ];

    #[test]
    fn the_families_keep_their_names_and_types() {
        // A labelled family with no series yet is left out of the text (before, its HELP and
        // TYPE were written alone): one series of each.
        let m = Metrics::default();
        m.request("/healthz", 200, Duration::ZERO);
        m.overhead("/v1/messages", Duration::ZERO);
        m.recall_round("/v1/messages", Duration::ZERO);
        m.phase(Phase::Split, Duration::ZERO);
        m.tokens("gpt-4o", 0, 0, 0);
        m.upstream_error("openai", "timeout");
        let text = m.render(0, 0);
        let mut typed: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(str::to_owned)
            .collect();
        let mut want: Vec<String> = FAMILIES.iter().map(|(n, t)| format!("{n} {t}")).collect();
        typed.sort();
        want.sort();
        assert_eq!(typed, want);
        for (name, _) in FAMILIES {
            assert!(text.contains(&format!("# HELP {name} ")), "{name}: {text}");
        }
        // Series without labels are shown at zero from the start, as before.
        for line in [
            "loom_recalls_total 0",
            "loom_proxy_histories_total{read=\"whole\"} 0",
            "loom_proxy_histories_total{read=\"continuation\"} 0",
            "loom_connections_open 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}: {text}");
        }
        assert!(!text.contains(".."), "{text}");
    }

    #[test]
    fn histograms_phases_and_escaped_labels_read_as_before() {
        let m = Metrics::default();
        m.phase(Phase::Render, Duration::from_micros(300));
        m.overhead("/v1/messages", Duration::from_millis(700));
        m.tokens("a\"b", 1, 0, 0);
        m.connection(true);
        m.connection(true);
        m.connection(false);
        m.history_read(true);
        let text = m.render(0, 0);
        for line in [
            "loom_proxy_phase_seconds_bucket{phase=\"render\",le=\"0.0005\"} 1",
            "loom_proxy_phase_seconds_count{phase=\"render\"} 1",
            "loom_proxy_overhead_seconds_bucket{route=\"/v1/messages\",le=\"0.5\"} 0",
            "loom_proxy_overhead_seconds_bucket{route=\"/v1/messages\",le=\"1\"} 1",
            "loom_proxy_overhead_seconds_bucket{route=\"/v1/messages\",le=\"60\"} 1",
            "loom_tokens_total{kind=\"input\",model=\"a\\\"b\"} 1",
            "loom_connections_open 1",
            "loom_proxy_histories_total{read=\"continuation\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}: {text}");
        }
    }
}
