//! Replaying one trajectory: for each assistant message m_k, append m_1..m_(k-1) to the log, render
//! the request for call k exactly as a live agent would have received it, and measure it beside
//! the baselines.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::time::Instant;

use loom_core::render::{
    self, Audience, CompactionState, CostMemo, Format, Msg, Piece, Policy, RenderError,
    RenderInput, Rendered, StepIndex, TokenMeter,
};
use loom_core::{BlobRef, Event, EventBody, ReduceConfig, Seq, ToolOutput};
use loom_import::ParsedSession;
use loom_session::SessionState;
use loom_store::BlobStore;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::evidence::{self, Seen};
use crate::meter::CachedMeter;
use crate::window;

/// How to replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// Model name (put in request bodies).
    pub model: String,
    /// The most input tokens a request may have.
    pub budget: u64,
    /// The render policy; its context window is set to `budget + response_reserve`.
    pub policy: Policy,
    /// Output format of Loom's requests.
    pub format: Format,
    /// Reduction at ingest.
    pub reduce: ReduceConfig,
}

impl ReplayOptions {
    /// These options with the policy's context window derived from the budget, as a replay
    /// applies them.
    pub fn derived(mut self) -> Self {
        self.policy.context_window = self.budget + self.policy.response_reserve;
        self
    }
}

/// What one strategy sent for one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Sent {
    /// Input tokens.
    pub tokens: u64,
    /// Tokens of the longest prefix shared with the previous request of the trajectory.
    pub cached: u64,
    /// Whether the previous request is a prefix of this one.
    pub append_only: bool,
    /// Whether the request exceeds the budget.
    pub over_budget: bool,
    /// Whether the request holds an orphaned call or result.
    pub orphan: bool,
    /// Evidence identifiers present in the request.
    pub evidence_hits: u32,
}

/// One call of one trajectory.
#[derive(Debug, Clone, Serialize)]
pub struct CallRecord {
    /// 0-based index of m_k in the trajectory's messages.
    pub call: usize,
    /// Evidence identifiers for this call.
    pub evidence: u32,
    /// Loom.
    pub loom: Sent,
    /// The full history.
    pub full: Sent,
    /// LangChain-style sliding window.
    pub window: Sent,
    /// Loom's render time, nanoseconds.
    pub render_ns: u64,
    /// Whether a compaction point fired for this call.
    pub compaction: bool,
    /// References in Loom's request checked for recoverability.
    pub refs_checked: u32,
    /// References that did not resolve to the original bytes.
    pub refs_failed: u32,
}

/// The replay of one trajectory.
#[derive(Debug, Clone, Serialize)]
pub struct TraceRun {
    /// The trajectory's id.
    pub id: String,
    /// Its source (the file it came from).
    pub source: String,
    /// Its calls.
    pub calls: Vec<CallRecord>,
    /// Loom's failure, if a call could not be rendered.
    pub error: Option<String>,
}

/// Why a trajectory could not be replayed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// A blob the log refers to is missing.
    #[error("trajectory `{trace}`: {source}")]
    Blob {
        /// The trajectory.
        trace: String,
        /// The store's error.
        #[source]
        source: Box<loom_store::StoreError>,
    },
}

/// A message of a request as the cache accounting sees it.
#[derive(Clone, Copy)]
struct Sending<'r> {
    piece: Piece,
    msg: &'r Msg,
}

/// The requests of the previous call, kept for cache accounting.
struct Last {
    loom: Rendered,
    full: Rendered,
    window: Vec<usize>,
}

fn sending(r: &Rendered) -> Vec<Sending<'_>> {
    r.pieces
        .iter()
        .zip(&r.request.messages)
        .map(|(p, m)| Sending { piece: *p, msg: m })
        .collect()
}

fn window_sending<'r>(full: &'r Rendered, kept: &[usize]) -> Vec<Sending<'r>> {
    kept.iter()
        .map(|&i| Sending {
            piece: full.pieces[i],
            msg: &full.request.messages[i],
        })
        .collect()
}

/// Measures a request against the previous one of its strategy.
///
/// Cached tokens are the longest common token prefix: every identical leading message, plus the
/// common prefix of the first message that differs (a message that only grew at its end keeps its
/// cached prefix), less one token for the boundary.
fn sent(
    now: &[Sending<'_>],
    prev: Option<&[Sending<'_>]>,
    overhead: u64,
    budget: u64,
    format: Format,
    meter: &dyn TokenMeter,
) -> Sent {
    let tokens = overhead + now.iter().map(|s| s.piece.tokens).sum::<u64>();
    let mut out = Sent {
        tokens,
        over_budget: tokens > budget,
        ..Sent::default()
    };
    let Some(prev) = prev else {
        return out;
    };
    let common = prev
        .iter()
        .zip(now)
        .take_while(|(p, n)| p.piece.key == n.piece.key)
        .count();
    out.cached = now[..common].iter().map(|s| s.piece.tokens).sum();
    out.append_only = common == prev.len();
    if !out.append_only && common < now.len() {
        let (was, is) = (
            wire_text(format, prev[common].msg),
            wire_text(format, now[common].msg),
        );
        let shared = common_prefix(&was, &is);
        if shared > 0 {
            // The wire text (JSON, escapes and keys included) can count more tokens than the
            // message's piece, which meters its string values: the cached part of a message is
            // never more than the message.
            let prefix = meter.count(&is[..shared]).saturating_sub(1);
            out.cached += prefix.min(now[common].piece.tokens);
        }
    }
    out
}

/// A message's wire form as text (what the provider tokenizes).
fn wire_text(format: Format, msg: &Msg) -> String {
    format
        .wire(msg)
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Length of the common prefix of two strings, at a char boundary.
fn common_prefix(a: &str, b: &str) -> usize {
    let mut n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    while !b.is_char_boundary(n) {
        n -= 1;
    }
    n
}

/// The texts of a neutral message (content, call arguments, results).
fn msg_texts(msg: &Msg) -> Vec<&str> {
    fn content(c: &loom_core::MessageContent) -> Vec<&str> {
        match c {
            loom_core::MessageContent::Text(s) => vec![s.as_str()],
            loom_core::MessageContent::Parts(parts) => parts
                .iter()
                .filter_map(|p| match p {
                    loom_core::ContentPart::Text { text } => Some(text.as_str()),
                    loom_core::ContentPart::Image { .. }
                    | loom_core::ContentPart::Opaque { .. } => None,
                })
                .collect(),
        }
    }
    match msg {
        Msg::System(c) => content(c),
        Msg::User { content: c, .. } => content(c),
        Msg::Assistant {
            content: c, calls, ..
        } => {
            let mut out: Vec<&str> = c.as_ref().map(content).unwrap_or_default();
            for rc in calls {
                out.push(rc.call.arguments.as_str());
                out.extend(content(&rc.content));
            }
            out
        }
    }
}

/// Evidence hits of the full history and of the window kept from it (`kept`, indices into
/// `messages`). The window's messages are the full history's own, so an identifier the window
/// holds is in the full history too; only the others are looked for in the messages the window
/// left out, instead of scanning the whole history for every identifier.
fn full_and_window_hits(evidence: &[String], messages: &[Msg], kept: &[usize]) -> (u32, u32) {
    let mut in_window = vec![false; messages.len()];
    for &i in kept {
        if let Some(w) = in_window.get_mut(i) {
            *w = true;
        }
    }
    let window: Vec<&str> = kept
        .iter()
        .filter_map(|&i| messages.get(i))
        .flat_map(msg_texts)
        .collect();
    let rest: Vec<&str> = messages
        .iter()
        .zip(&in_window)
        .filter(|(_, w)| !**w)
        .flat_map(|(m, _)| msg_texts(m))
        .collect();
    let (mut full, mut win) = (0, 0);
    for id in evidence {
        let finder = memchr::memmem::Finder::new(id.as_bytes());
        let found = |texts: &[&str]| texts.iter().any(|t| finder.find(t.as_bytes()).is_some());
        if found(&window) {
            win += 1;
            full += 1;
        } else if found(&rest) {
            full += 1;
        }
    }
    (full, win)
}

/// Replays trajectories with one set of options.
pub struct Replayer<'a> {
    opts: ReplayOptions,
    /// The meter behind one count cache for every trajectory: trajectories of one source share
    /// their system prompt and tool list, and both renders of a call meter the same messages.
    meter: CachedMeter<'a>,
    blobs: &'a dyn BlobStore,
    full_policy: Policy,
}

impl std::fmt::Debug for Replayer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replayer")
            .field("opts", &self.opts)
            .finish()
    }
}

impl<'a> Replayer<'a> {
    /// A replayer counting with `meter`; `blobs` holds the outputs the importer offloaded and
    /// receives the ones reduction offloads.
    pub fn new(opts: ReplayOptions, meter: &'a dyn TokenMeter, blobs: &'a dyn BlobStore) -> Self {
        let opts = opts.derived();
        // The full history never compacts: its window is as large as anything it will hold.
        let full_policy = Policy {
            context_window: u64::MAX / 4,
            oversized_share: 1.0,
            supersede_snapshots: false,
            output_diffs: false,
            ..opts.policy.clone()
        };
        // The first count loads the tokenizer's tables; do it here so no call's latency pays it.
        meter.count("warm up");
        Self {
            opts,
            meter: CachedMeter::new(meter),
            blobs,
            full_policy,
        }
    }

    /// The options in force (with the context window derived from the budget).
    pub fn options(&self) -> &ReplayOptions {
        &self.opts
    }

    /// Replays one trajectory. `emit` receives Loom's request body for each call.
    pub fn run(
        &self,
        session: &ParsedSession,
        source: &str,
        emit: &mut dyn FnMut(usize, &Rendered),
    ) -> Result<TraceRun, ReplayError> {
        let id = session.id.as_str().to_owned();
        let audience = Audience {
            agent: Some(session.agent.clone()),
            now_ms: session.events.last().map_or(0, |e| e.ts_ms),
        };
        // The session as a live engine holds it, grown event by event.
        let mut state = SessionState::new();
        let mut aliases: HashMap<String, BlobRef> = HashMap::new();
        let mut verified: HashSet<Seq> = HashSet::new();
        let mut seen = Seen::default();
        let mut compaction = CompactionState::default();
        let mut full_memo = CostMemo::new();
        let meter: &dyn TokenMeter = &self.meter;
        let mut last: Option<Last> = None;
        let mut out = Vec::new();
        let mut error = None;

        for (j, new) in session.events.iter().enumerate() {
            let event = Event {
                seq: j as Seq + 1,
                ts_ms: new.ts_ms,
                body: new.body.clone(),
            };
            if let EventBody::Assistant {
                content,
                tool_calls,
                ..
            } = &event.body
            {
                if j > 0 && error.is_none() {
                    let mut text = content
                        .as_ref()
                        .map(|c| c.text().into_owned())
                        .unwrap_or_default();
                    for c in tool_calls {
                        text.push('\n');
                        text.push_str(&c.arguments);
                    }
                    let mut evidence = seen.evidence(&text);
                    let arguments: Vec<&str> =
                        tool_calls.iter().map(|c| c.arguments.as_str()).collect();
                    evidence.extend(seen.elements(&arguments));
                    match self.call(
                        meter,
                        &mut state,
                        &audience,
                        &mut compaction,
                        &mut full_memo,
                    ) {
                        Ok((loom, full, nanos)) => {
                            emit(j, &loom);
                            let kept = window::trim_last(
                                &full.request.messages,
                                &full.pieces,
                                self.opts.budget,
                                full.overhead,
                            );
                            let mut rec = self.measure(
                                meter,
                                j,
                                &evidence,
                                &loom,
                                &full,
                                &kept,
                                last.as_ref(),
                            );
                            rec.render_ns = nanos;
                            let (checked, failed) = self.check_refs(
                                &loom,
                                state.events(),
                                state.steps(),
                                &aliases,
                                &mut verified,
                            );
                            rec.refs_checked = checked;
                            rec.refs_failed = failed;
                            out.push(rec);
                            last = Some(Last {
                                loom,
                                full,
                                window: kept,
                            });
                        }
                        Err(e) => error = Some(format!("call {j}: {e}")),
                    }
                }
            }
            // Ingest: what a live agent's log would hold after this event.
            match (&event.body, state.ingest().next(&event)) {
                (EventBody::System { content } | EventBody::User { content, .. }, _) => {
                    seen.dialogue(&content.text());
                }
                (EventBody::ToolResult { content, stats, .. }, Some(arrived)) => {
                    // A text output is read where it is, not copied for every result.
                    let bytes: Cow<'_, [u8]> = match content {
                        ToolOutput::Text(s) => Cow::Borrowed(s.as_bytes()),
                        ToolOutput::Parts(parts) => Cow::Owned(
                            loom_core::MessageContent::Parts(parts.clone())
                                .text()
                                .into_owned()
                                .into_bytes(),
                        ),
                        ToolOutput::Blob(r) => {
                            Cow::Owned(self.blobs.get(r).map_err(|source| ReplayError::Blob {
                                trace: id.clone(),
                                source: Box::new(source),
                            })?)
                        }
                    };
                    seen.tool(&String::from_utf8_lossy(&bytes));
                    let reduction = arrived.reduce(&self.opts.reduce, &bytes, stats);
                    if let Some(alias) = &reduction.offload {
                        let info = self.blobs.put(&bytes).map_err(|source| ReplayError::Blob {
                            trace: id.clone(),
                            source: Box::new(source),
                        })?;
                        aliases.insert(alias.clone(), info.blob);
                    }
                    state.insert_step(reduction.step);
                }
                _ => {}
            }
            state.push(event, &audience);
        }
        Ok(TraceRun {
            id,
            source: source.to_owned(),
            calls: out,
            error,
        })
    }

    /// Renders the next call for Loom (timed), continuing from `compaction`, and for the full
    /// history (which never compacts, with a memo of its own), from the session as held.
    fn call(
        &self,
        meter: &dyn TokenMeter,
        state: &mut SessionState,
        audience: &Audience,
        compaction: &mut CompactionState,
        full_memo: &mut CostMemo,
    ) -> Result<(Rendered, Rendered, u64), RenderError> {
        let view = state.view(audience);
        let mut input = RenderInput {
            events: view.events,
            steps: view.steps,
            summaries: &[],
            policy: &self.opts.policy,
            format: self.opts.format,
            model: &self.opts.model,
            tools: &[],
            injections: &[],
            audience,
            meter,
        };
        let start = Instant::now();
        let loom = render::render_projection(&input, &view.projection, compaction, view.memo)?;
        let nanos = start.elapsed().as_nanos() as u64;
        *compaction = loom.state.clone();
        input.policy = &self.full_policy;
        let full = render::render_projection(
            &input,
            &view.projection,
            &CompactionState::default(),
            full_memo,
        )?;
        Ok((loom, full, nanos))
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one call's whole context, used once"
    )]
    fn measure(
        &self,
        meter: &dyn TokenMeter,
        call: usize,
        evidence: &[String],
        loom: &Rendered,
        full: &Rendered,
        kept: &[usize],
        last: Option<&Last>,
    ) -> CallRecord {
        let budget = self.opts.budget;
        let format = self.opts.format;
        let prev_loom = last.map(|l| sending(&l.loom));
        let prev_full = last.map(|l| sending(&l.full));
        let prev_window = last.map(|l| window_sending(&l.full, &l.window));
        let mut loom_sent = sent(
            &sending(loom),
            prev_loom.as_deref(),
            loom.overhead,
            budget,
            format,
            meter,
        );
        loom_sent.orphan =
            render::check_request(loom.format, &loom.body()).is_err_and(|v| v.is_orphan());
        let loom_texts: Vec<&str> = loom.request.messages.iter().flat_map(msg_texts).collect();
        loom_sent.evidence_hits = evidence::hits(evidence, loom_texts.iter().copied());
        let mut full_sent = sent(
            &sending(full),
            prev_full.as_deref(),
            full.overhead,
            budget,
            format,
            meter,
        );
        let mut window_sent = sent(
            &window_sending(full, kept),
            prev_window.as_deref(),
            full.overhead,
            budget,
            format,
            meter,
        );
        (full_sent.evidence_hits, window_sent.evidence_hits) =
            full_and_window_hits(evidence, &full.request.messages, kept);
        CallRecord {
            call,
            evidence: evidence.len() as u32,
            loom: loom_sent,
            full: full_sent,
            window: window_sent,
            render_ns: 0,
            compaction: loom.receipt.compaction.is_some(),
            refs_checked: 0,
            refs_failed: 0,
        }
    }

    /// Checks that every reference in Loom's request returns the original bytes.
    fn check_refs(
        &self,
        loom: &Rendered,
        events: &[Event],
        steps: &StepIndex,
        aliases: &HashMap<String, BlobRef>,
        verified: &mut HashSet<Seq>,
    ) -> (u32, u32) {
        let receipt = &loom.receipt;
        let mut checked = 0;
        let mut failed = 0;
        let reduced = receipt
            .stubbed
            .iter()
            .chain(&receipt.elided)
            .chain(&receipt.grouped);
        for range in reduced {
            for seq in range.from..=range.to {
                let Some(Event {
                    body:
                        EventBody::ToolResult {
                            call_id,
                            content,
                            stats,
                            ..
                        },
                    ..
                }) = events.get(seq as usize - 1)
                else {
                    continue;
                };
                checked += 1;
                if verified.contains(&seq) {
                    continue;
                }
                let step = steps.get(call_id);
                let ok = match step.and_then(|s| s.outcome_ref.as_deref()) {
                    Some(alias) => aliases
                        .get(alias)
                        .and_then(|blob| self.blobs.get(blob).ok())
                        .is_some_and(|bytes| sha256_hex(&bytes) == stats.sha256),
                    // Not offloaded: the reference is the log itself.
                    None => match content {
                        ToolOutput::Text(s) => sha256_hex(s.as_bytes()) == stats.sha256,
                        ToolOutput::Blob(r) => r.hex() == stats.sha256,
                        ToolOutput::Parts(_) => true,
                    },
                };
                if ok {
                    verified.insert(seq);
                } else {
                    failed += 1;
                }
            }
        }
        (checked, failed)
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use loom_core::render::ApproxMeter;
    use loom_core::MessageContent;

    fn user(text: &str) -> Msg {
        Msg::User {
            content: MessageContent::Text(text.to_owned()),
            name: None,
        }
    }

    #[test]
    fn full_and_window_hits_equal_scanning_each_whole() {
        let messages = [
            Msg::System(MessageContent::Text("rules".into())),
            user("saw alpha_1 here"),
            user("and beta_2 there"),
            user("beta_2 again, and delta_4"),
        ];
        let evidence: Vec<String> = ["alpha_1", "beta_2", "gamma_3", "delta_4"]
            .map(String::from)
            .to_vec();
        for kept in [vec![0, 3], vec![0, 2, 3], vec![], vec![0, 1, 2, 3]] {
            let full = evidence::hits(&evidence, messages.iter().flat_map(msg_texts));
            let window = evidence::hits(
                &evidence,
                kept.iter().flat_map(|&i: &usize| msg_texts(&messages[i])),
            );
            assert_eq!(
                full_and_window_hits(&evidence, &messages, &kept),
                (full, window),
                "kept {kept:?}"
            );
        }
        assert_eq!(full_and_window_hits(&evidence, &messages, &[0, 3]), (3, 2));
    }

    #[test]
    fn a_message_never_counts_more_cached_tokens_than_it_has() {
        // The message grew at its end, so its wire text shares a long prefix with the previous
        // one; its piece says 5 tokens, fewer than that prefix's wire text counts.
        let (was, is) = (user(&"word ".repeat(200)), user(&"word ".repeat(201)));
        let prev = [Sending {
            piece: Piece { key: 1, tokens: 5 },
            msg: &was,
        }];
        let now = [Sending {
            piece: Piece { key: 2, tokens: 5 },
            msg: &is,
        }];
        let sent = sent(&now, Some(&prev), 3, 100, Format::OPENAI_CHAT, &ApproxMeter);
        assert_eq!(sent.tokens, 8);
        assert_eq!(sent.cached, 5);
    }
}
