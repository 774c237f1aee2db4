//! The three scenarios. Each starts its own mock and server over a fresh database, drives them,
//! and returns what it measured; the caller prints it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use loom_store::ProxyMode;

use super::conversation::Conversation;
use super::harness::{cpu_seconds, rss_kib, Harness, ServerOptions, Via};
use super::metrics::Histogram;
/// One step of the server's preparation of a call and its mean time in milliseconds.
pub(crate) type Phase = (&'static str, f64);

/// The server's histogram of those steps, and the steps, in order.
const PHASE: &str = "loom_proxy_phase_seconds";
const PHASES: [&str; 5] = ["split", "sync", "render", "record", "assemble"];

/// The route every scenario calls.
const ROUTE: &str = "/v1/chat/completions";
/// The histogram of the time Loom spends before the upstream call.
pub(crate) const OVERHEAD: &str = "loom_proxy_overhead_seconds";
/// The time a hidden `loom_recall` round added.
const RECALL: &str = "loom_recall_round_seconds";
/// How often the mock's recorded requests are dropped while clients run.
const FORGET_EVERY: Duration = Duration::from_millis(200);

/// What every scenario's conversations share.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Common {
    /// `X-Loom-Budget` in fit mode.
    pub(crate) budget: u64,
    /// The conversations' seed.
    pub(crate) seed: u64,
    /// Replies streamed (server-sent events) rather than whole.
    pub(crate) stream: bool,
    /// Latency: every how many user turns one asks to recall an earlier output (0: never).
    pub(crate) recall_every: usize,
    /// Latency: where each call puts its cache breakpoint.
    pub(crate) breakpoint: super::conversation::Breakpoint,
}

/// Milliseconds, for tables.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `latency`: what one long conversation's calls cost through Loom against the mock alone.
#[derive(Debug)]
pub(crate) struct Latency {
    pub(crate) mode: ProxyMode,
    pub(crate) turns: usize,
    /// Set when the time limit ended the run early.
    pub(crate) stopped_early: bool,
    pub(crate) run: Duration,
    /// Through Loom, every turn, in milliseconds.
    pub(crate) proxied: Vec<f64>,
    /// The measured turns: the client's body straight to the mock.
    pub(crate) direct: Vec<f64>,
    /// The measured turns: through Loom.
    pub(crate) through: Vec<f64>,
    /// The measured turns: Loom's upstream body straight to the mock.
    pub(crate) upstream_only: Vec<f64>,
    /// The measured turns, until the first byte: straight to the mock, and through Loom (for a
    /// stream, the first event).
    pub(crate) direct_first: Vec<f64>,
    pub(crate) through_first: Vec<f64>,
    pub(crate) stream: bool,
    pub(crate) client_bytes: usize,
    pub(crate) upstream_bytes: usize,
    pub(crate) outputs: usize,
    /// `loom_proxy_overhead_seconds` over the measured turns.
    pub(crate) overhead: Histogram,
    pub(crate) compaction_points: f64,
    pub(crate) db_bytes: u64,
    /// The proxy's public steps timed on the last client body.
    pub(crate) phases: Vec<Phase>,
    /// `loom_recall_round_seconds` over the measured turns.
    pub(crate) recall: Histogram,
}

/// Runs one conversation of `turns` calls and measures the last `sample`.
pub(crate) async fn latency(
    mode: ProxyMode,
    turns: usize,
    sample: usize,
    common: Common,
    limit: Duration,
) -> Result<Latency> {
    let h = Harness::start(ServerOptions::default()).await?;
    let via = Via::Loom(mode, Some(common.budget));
    let session = format!("latency-{mode}");
    let mut conv = Conversation::new(common.seed, common.stream)
        .recalling(common.recall_every)
        .marking(common.breakpoint);
    let from = turns.saturating_sub(sample);
    let started = Instant::now();
    let mut out = Latency {
        mode,
        turns: 0,
        stopped_early: false,
        run: Duration::ZERO,
        proxied: Vec::with_capacity(turns),
        direct: Vec::new(),
        through: Vec::new(),
        upstream_only: Vec::new(),
        direct_first: Vec::new(),
        through_first: Vec::new(),
        stream: common.stream,
        client_bytes: 0,
        upstream_bytes: 0,
        outputs: 0,
        overhead: Histogram::default(),
        compaction_points: 0.0,
        db_bytes: 0,
        phases: Vec::new(),
        recall: Histogram::default(),
    };
    let mut before = h.metrics().await?;
    for turn in 0..turns {
        if started.elapsed() > limit {
            out.stopped_early = true;
            break;
        }
        if turn == from {
            before = h.metrics().await?;
        }
        let body = Bytes::from(conv.body()?);
        out.client_bytes = body.len();
        let answer = if turn >= from {
            // The client's body to the mock alone, then through Loom, then what Loom sent
            // upstream to the mock alone: the difference is Loom's, and the last tells how much
            // of it the smaller fitted body gives back.
            let direct = h.chat(Via::Direct, &session, body.clone()).await?;
            h.forget();
            let through = h.chat(via, &session, body).await?;
            let upstream = h.last_upstream_body()?;
            out.upstream_bytes = upstream.len();
            h.forget();
            let alone = h.chat(Via::Direct, &session, upstream).await?;
            out.direct.push(ms(direct.took));
            out.through.push(ms(through.took));
            out.upstream_only.push(ms(alone.took));
            out.direct_first.push(ms(direct.first_byte));
            out.through_first.push(ms(through.first_byte));
            through
        } else {
            h.chat(via, &session, body).await?
        };
        h.forget();
        out.proxied.push(ms(answer.took));
        conv.answer(answer.message)
            .map_err(|e| anyhow::anyhow!("session {session}, turn {turn}: {e}"))?;
        out.turns = turn + 1;
        if (turn + 1) % 100 == 0 {
            super::progress(format_args!(
                "latency {mode}: turn {} of {turns}, {:.0} s, last call {:.2} ms, body {} KB",
                turn + 1,
                started.elapsed().as_secs_f64(),
                ms(answer.took),
                out.client_bytes / 1024
            ));
        }
    }
    out.run = started.elapsed();
    let after = h.metrics().await?;
    out.overhead = after
        .histogram(OVERHEAD, ROUTE)
        .since(&before.histogram(OVERHEAD, ROUTE));
    out.recall = after
        .histogram(RECALL, ROUTE)
        .since(&before.histogram(RECALL, ROUTE));
    out.compaction_points = after.value("loom_compaction_points_total");
    out.outputs = conv.outputs();
    out.db_bytes = h.db_bytes();
    h.stop().await?;
    out.phases = PHASES
        .iter()
        .map(|phase| {
            let h = after
                .histogram(PHASE, phase)
                .since(&before.histogram(PHASE, phase));
            (*phase, h.mean().map_or(0.0, |m| m * 1e3))
        })
        .filter(|(_, ms)| *ms > 0.0)
        .collect();
    Ok(out)
}

/// `throughput`: many clients, each running short conversations one after another.
#[derive(Debug)]
pub(crate) struct Throughput {
    /// `None`: the clients call the mock directly, the baseline.
    pub(crate) mode: Option<ProxyMode>,
    /// Process CPU time (server, mock and clients) over the run, in seconds.
    pub(crate) cpu: f64,
    pub(crate) clients: usize,
    pub(crate) elapsed: Duration,
    /// Every successful call, in milliseconds.
    pub(crate) latencies: Vec<f64>,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
    pub(crate) conversations: u64,
    pub(crate) overhead: Histogram,
}

/// How a throughput run ends: after a time, or a count of calls.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bound {
    pub(crate) duration: Duration,
    pub(crate) requests: Option<u64>,
}

/// Runs `clients` concurrent clients of `turns`-call conversations until `bound`, through Loom
/// in `mode`, or straight to the mock when `mode` is `None`.
pub(crate) async fn throughput(
    mode: Option<ProxyMode>,
    clients: usize,
    turns: usize,
    common: Common,
    bound: Bound,
) -> Result<Throughput> {
    let h = Arc::new(Harness::start(ServerOptions::default()).await?);
    let via = mode.map_or(Via::Direct, |m| Via::Loom(m, Some(common.budget)));
    let label = mode.map_or("direct", ProxyMode::as_str);
    warm_up(&h, via, common).await?;
    let forgetting = forget_while_running(&h);
    let before = h.metrics().await?;
    let issued = Arc::new(AtomicU64::new(0));
    let cpu_before = cpu_seconds().unwrap_or(f64::NAN);
    let started = Instant::now();
    let deadline = started + bound.duration;
    let mut tasks = Vec::with_capacity(clients);
    for client in 0..clients {
        let h = Arc::clone(&h);
        let issued = Arc::clone(&issued);
        tasks.push(tokio::spawn(async move {
            let mut done = ClientStats::default();
            let take = || {
                Instant::now() < deadline
                    && bound
                        .requests
                        .is_none_or(|max| issued.fetch_add(1, Ordering::Relaxed) < max)
            };
            for k in 0_u64.. {
                let session = format!("throughput-{label}-{client}-{k}");
                let mut conv =
                    Conversation::new(common.seed ^ ((client as u64) << 32) ^ k, common.stream);
                for _ in 0..turns {
                    if !take() {
                        return done;
                    }
                    match call(&h, &mut conv, via, &session).await {
                        Ok(took) => done.latencies.push(took),
                        Err(e) => {
                            done.errors += 1;
                            done.first_error.get_or_insert_with(|| format!("{e:#}"));
                            break;
                        }
                    }
                }
                done.conversations += 1;
            }
            done
        }));
    }
    let mut all = ClientStats::default();
    for t in tasks {
        let s = t.await.context("a client task failed")?;
        all.latencies.extend(s.latencies);
        all.errors += s.errors;
        all.conversations += s.conversations;
        if all.first_error.is_none() {
            all.first_error = s.first_error;
        }
    }
    let elapsed = started.elapsed();
    let cpu = cpu_seconds().unwrap_or(f64::NAN) - cpu_before;
    forgetting.store(true, Ordering::Relaxed);
    let after = h.metrics().await?;
    let h = Arc::into_inner(h).context("a client still holds the server")?;
    h.stop().await?;
    Ok(Throughput {
        mode,
        cpu,
        clients,
        elapsed,
        latencies: all.latencies,
        errors: all.errors,
        first_error: all.first_error,
        conversations: all.conversations,
        overhead: after
            .histogram(OVERHEAD, ROUTE)
            .since(&before.histogram(OVERHEAD, ROUTE)),
    })
}

#[derive(Debug, Default)]
struct ClientStats {
    latencies: Vec<f64>,
    errors: u64,
    first_error: Option<String>,
    conversations: u64,
}

/// One call through `via` and the client's next turn; the latency in milliseconds.
async fn call(h: &Harness, conv: &mut Conversation, via: Via, session: &str) -> Result<f64> {
    let body = Bytes::from(conv.body()?);
    let answer = h.chat(via, session, body).await?;
    conv.answer(answer.message)
        .map_err(|e| anyhow::anyhow!("session {session}: {e}"))?;
    Ok(ms(answer.took))
}

/// A short conversation before the clock starts, so one-time costs (loading the tokenizer's
/// tables, opening the store's connections) are not counted as load.
async fn warm_up(h: &Harness, via: Via, common: Common) -> Result<()> {
    let mut conv = Conversation::new(common.seed, common.stream);
    for _ in 0..2 {
        call(h, &mut conv, via, "warm-up").await?;
    }
    h.forget();
    Ok(())
}

/// Drops the mock's recorded requests every so often until the returned flag is set.
fn forget_while_running(h: &Harness) -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let mock = h.mock();
    let flag = Arc::clone(&stop);
    tokio::spawn(async move {
        while !flag.load(Ordering::Relaxed) {
            mock.clear();
            tokio::time::sleep(FORGET_EVERY).await;
        }
    });
    stop
}

/// `sessions`: many short conversations, and the process's memory as they accumulate.
#[derive(Debug)]
pub(crate) struct Sessions {
    pub(crate) mode: ProxyMode,
    pub(crate) sessions: usize,
    pub(crate) stopped_early: bool,
    pub(crate) rss_start_kib: u64,
    pub(crate) checkpoints: Vec<Checkpoint>,
    pub(crate) peak_kib: u64,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
    pub(crate) db_bytes: u64,
}

/// Memory after a number of sessions.
#[derive(Debug, Clone)]
pub(crate) struct Checkpoint {
    pub(crate) sessions: usize,
    pub(crate) requests: u64,
    pub(crate) elapsed: Duration,
    pub(crate) rss_kib: u64,
    /// The server's `loom_live_sessions` gauge.
    pub(crate) live: f64,
    /// The server's `loom_live_bytes` gauge.
    pub(crate) live_bytes: f64,
}

/// Runs `count` sessions of `turns` calls each over `clients` workers.
pub(crate) async fn sessions(
    mode: ProxyMode,
    count: usize,
    turns: usize,
    clients: usize,
    common: Common,
    server: ServerOptions,
    limit: Duration,
) -> Result<Sessions> {
    let h = Arc::new(Harness::start(server).await?);
    let via = Via::Loom(mode, Some(common.budget));
    warm_up(&h, via, common).await?;
    let forgetting = forget_while_running(&h);
    let rss_start_kib = rss_kib().map_or(0, |(rss, _)| rss);
    let next = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Mutex::new((0_u64, None::<String>)));
    let started = Instant::now();
    let deadline = started + limit;
    let mut tasks = Vec::with_capacity(clients);
    for _ in 0..clients {
        let (h, next, finished, requests, errors) = (
            Arc::clone(&h),
            Arc::clone(&next),
            Arc::clone(&finished),
            Arc::clone(&requests),
            Arc::clone(&errors),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count || Instant::now() > deadline {
                    return;
                }
                let session = format!("sessions-{mode}-{i}");
                let mut conv = Conversation::new(common.seed ^ i as u64, common.stream);
                for _ in 0..turns {
                    match call(&h, &mut conv, via, &session).await {
                        Ok(_) => {
                            requests.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            let mut errors = errors.lock().unwrap_or_else(|p| p.into_inner());
                            errors.0 += 1;
                            errors.1.get_or_insert_with(|| format!("{e:#}"));
                            break;
                        }
                    }
                }
                finished.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // Memory at every tenth of the sessions, read while the clients run.
    let step = (count / 10).max(1);
    let mut checkpoints = Vec::new();
    let mut mark = step;
    loop {
        let done = finished.load(Ordering::Relaxed);
        let over = tasks.iter().all(tokio::task::JoinHandle::is_finished);
        if done >= mark || over {
            let metrics = h.metrics().await?;
            let live = metrics.value("loom_live_sessions");
            let live_bytes = metrics.value("loom_live_bytes");
            checkpoints.push(Checkpoint {
                sessions: done,
                requests: requests.load(Ordering::Relaxed),
                elapsed: started.elapsed(),
                rss_kib: rss_kib().map_or(0, |(rss, _)| rss),
                live,
                live_bytes,
            });
            super::progress(format_args!(
                "sessions {mode}: {done} of {count}, {:.0} s",
                started.elapsed().as_secs_f64()
            ));
            while mark <= done {
                mark += step;
            }
        }
        if over {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for t in tasks {
        t.await.context("a client task failed")?;
    }
    forgetting.store(true, Ordering::Relaxed);
    let done = finished.load(Ordering::Relaxed);
    let (errors, first_error) = errors.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let db_bytes = h.db_bytes();
    let h = Arc::into_inner(h).context("a client still holds the server")?;
    h.stop().await?;
    Ok(Sessions {
        mode,
        sessions: done,
        stopped_early: done < count,
        rss_start_kib,
        checkpoints,
        peak_kib: rss_kib().map_or(0, |(_, peak)| peak),
        errors,
        first_error,
        db_bytes,
    })
}
