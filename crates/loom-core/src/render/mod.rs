//! The render pipeline: from the log to a provider request that fits, stays cache-stable, is
//! never malformed, and leaves a receipt.
//!
//! [`render`] is a pure function of (log, policy, derived records, previous compaction state):
//! the same inputs give byte-identical bodies. It projects the log into units that hold each call
//! with its result ([`projection`]), decides at compaction points what is stubbed, folded or
//! summarised ([`reducers`]), lays the request out as stable prefix → verbatim tail → injected
//! content ([`layout`]), and serialises it in a provider [`Format`].

mod check;
mod cost;
mod diff;
mod format;
mod hash;
mod layout;
mod meter;
mod policy;
mod projection;
mod receipt;
mod reducers;
mod refs;
mod request;
mod state;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

pub use check::{
    check_anthropic, check_chat, check_gemini, check_request, check_responses, Violation,
};
pub use cost::{CostMemo, Key as CostKey};
pub use format::{Format, ANTHROPIC_TOOL_PROMPT};
pub use layout::{StepIndex, SummaryView, COMPACT_HEADER};
pub use meter::{
    leaf_tokens, message_tokens, tool_tokens, ApproxMeter, TokenMeter, INLINE_IMAGE_TOKENS,
    REPLY_PRIMING, TOKENS_PER_MESSAGE, TOKENS_PER_NAME,
};
pub use policy::{Budget, Policy, Retention, Tier};
pub use projection::{Audience, Paired, Projection, ResultView, Turn, Unit, UnitBody};
pub use receipt::{Injected, Parts, Receipt, SeqRange};
pub use refs::{tool_ref, Locator, RecallRefs, RECALL_TOOL};
pub use request::{Msg, RenderedCall, Request, ResultForm, ToolSpec};
pub use state::{CompactionState, CutRule, PointReason, PointRecord};

use serde_json::Value;

use crate::event::{Event, MessageContent, Seq};
use cost::Coster;
use reducers::PlanInput;

/// Content a hook injected for this turn only (never written to the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injection {
    /// The hook that produced it.
    pub hook: String,
    /// The text.
    pub content: String,
}

/// Everything a render reads.
#[derive(Debug, Clone, Copy)]
pub struct RenderInput<'a> {
    /// The session's log, in seq order.
    pub events: &'a [Event],
    /// Steps derived at ingest, by call id (observations and references for stubs).
    pub steps: &'a StepIndex,
    /// Summaries of the session, any order.
    pub summaries: &'a [SummaryView],
    /// The policy.
    pub policy: &'a Policy,
    /// The output format.
    pub format: Format,
    /// The model name put in the body.
    pub model: &'a str,
    /// Tools offered to the model.
    pub tools: &'a [ToolSpec],
    /// Per-turn injected content, already produced by the hooks.
    pub injections: &'a [Injection],
    /// Whose request and when (direct-message filtering).
    pub audience: &'a Audience,
    /// Token counter.
    pub meter: &'a dyn TokenMeter,
}

impl std::fmt::Debug for dyn TokenMeter + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenMeter({})", self.name())
    }
}

/// One message of a rendered request as the cache sees it: an identity (equal keys render equal
/// bytes within a session) and its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Identity of the message's content.
    pub key: u64,
    /// Its tokens.
    pub tokens: u64,
}

/// A rendered request.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The format it is for.
    pub format: Format,
    /// The neutral request; [`Rendered::body`] serialises it.
    pub request: Request,
    /// One piece per message of `request`, in order.
    pub pieces: Vec<Piece>,
    /// Tokens of the request besides its messages (priming and tools).
    pub overhead: u64,
    /// What was included, stubbed, folded, summarised or dropped, and why.
    pub receipt: Receipt,
    /// The compaction decision to store and pass to the next render.
    pub state: CompactionState,
}

/// Why a request could not be rendered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// The policy is incoherent.
    #[error("invalid policy: {0}")]
    Policy(#[from] crate::error::LogError),
    /// Even with everything reducible reduced, the request does not fit.
    #[error(
        "request needs {needed} tokens but the hard budget is {hard_total}: the irreducible floor \
         (system prompt, tools, pins, task statement, latest turn and injected content) is \
         {floor} tokens; {over} tokens over"
    )]
    OverBudget {
        /// Tokens the smallest rendering needs.
        needed: u64,
        /// Window minus response reserve.
        hard_total: u64,
        /// System prompt + tools + pins + task statement + latest turn, as small as they get,
        /// plus the turn's injected content.
        floor: u64,
        /// `needed - hard_total`.
        over: u64,
    },
    /// Nothing in the log is for this audience: a provider rejects an empty request.
    #[error("nothing to render: the log up to seq {at_seq} holds no message for this agent")]
    NothingToRender {
        /// Last seq of the log.
        at_seq: Seq,
    },
    /// A hook injected more than the injection reserve.
    #[error("hook `{hook}` injected {tokens} tokens, over the injection reserve of {reserve}")]
    InjectionOverflow {
        /// The hook.
        hook: String,
        /// Tokens injected so far, including this hook's.
        tokens: u64,
        /// The reserve.
        reserve: u64,
    },
}

/// Renders the request for the next model call.
///
/// `prev` is the compaction state stored after the previous render of this session (default for
/// the first); `memo` caches token costs across renders of the same session, format and meter.
pub fn render(
    input: &RenderInput<'_>,
    prev: &CompactionState,
    memo: &mut CostMemo,
) -> Result<Rendered, RenderError> {
    let projection = Projection::build(input.events, input.audience);
    render_projection(input, &projection, prev, memo)
}

/// Renders from a projection the caller keeps up to date (see [`Projection::push`]), so a long
/// session is not re-projected on every call.
pub fn render_projection(
    input: &RenderInput<'_>,
    proj: &Projection,
    prev: &CompactionState,
    memo: &mut CostMemo,
) -> Result<Rendered, RenderError> {
    input.policy.validate()?;
    let budget = input.policy.budget();
    let format = input.format;
    let at_seq = input.events.last().map_or(0, |e| e.seq);
    if proj.units.is_empty() {
        return Err(RenderError::NothingToRender { at_seq });
    }

    // Injected content is checked against its reserve hook by hook, before anything else.
    let mut injected = Vec::new();
    let mut injected_tokens = 0u64;
    for inj in input.injections {
        let tokens = format.msg_tokens(&injection_msg(&inj.content), input.meter);
        injected_tokens += tokens;
        if injected_tokens > budget.injection_reserve {
            return Err(RenderError::InjectionOverflow {
                hook: inj.hook.clone(),
                tokens: injected_tokens,
                reserve: budget.injection_reserve,
            });
        }
        injected.push(Injected {
            hook: inj.hook.clone(),
            tokens,
        });
    }

    let policy_version = input.policy.version();
    memo.enter(format, input.meter.name(), &policy_version);
    let mut coster = Coster::new(format, input.meter, input.steps, input.policy, memo);
    let overhead = coster.overhead(input.tools);
    let summary_of = |st: &CompactionState| reducers::summary_in(input.summaries, st);
    let mut state = prev.clone();
    let mut fired = None;
    if reducers::expire_oversized(proj, &mut state, input.policy, &budget, &mut coster) {
        state.points += 1;
        let before_oversized = overhead + coster.total(proj, prev, summary_of(prev));
        let after = overhead + coster.total(proj, &state, summary_of(&state));
        let record = PointRecord {
            at_seq,
            reason: PointReason::Oversized,
            before: before_oversized,
            after,
            ineffective: state.ineffective(),
        };
        state.last_point = Some(record.clone());
        fired = Some(record);
    }
    let mut estimate = overhead + coster.total(proj, &state, summary_of(&state));
    let over_cap = budget
        .tier_caps
        .get(&Tier::ToolResults)
        .is_some_and(|cap| coster.results(proj, &state) > *cap);
    // What the messages may take: the hard total less what this turn's hooks injected (at most
    // the injection reserve, which the watermarks already leave free).
    let room = budget.hard_total.saturating_sub(injected_tokens);
    let trigger = if estimate > room {
        Some(PointReason::HardTotal)
    } else if estimate > budget.high && !state.ineffective() {
        Some(PointReason::HighWatermark)
    } else if over_cap && !state.ineffective() {
        Some(PointReason::TierCap)
    } else {
        None
    };
    if let Some(reason) = trigger {
        let plan_input = PlanInput {
            policy: input.policy,
            budget: &budget,
            overhead,
            summaries: input.summaries,
            room,
            at_seq,
            reason,
        };
        state = reducers::plan(proj, &state, &plan_input, &mut coster);
        estimate = overhead + coster.total(proj, &state, summary_of(&state));
        fired = state.last_point.clone();
        coster.carry_eager(&state);
    }
    if estimate > room {
        let floor =
            injected_tokens + floor_tokens(proj, &mut coster, &state, summary_of(&state), overhead);
        let needed = estimate + injected_tokens;
        return Err(RenderError::OverBudget {
            needed,
            hard_total: budget.hard_total,
            floor,
            over: needed - budget.hard_total,
        });
    }

    let summary = summary_of(&state);
    let (mut request, mut pieces, tiers, parts) =
        layout_request(input, proj, &state, summary, &mut coster, overhead);
    for (inj, record) in input.injections.iter().zip(&injected) {
        request.messages.push(injection_msg(&inj.content));
        pieces.push(Piece {
            key: identity(&("injection", &inj.content)),
            tokens: record.tokens,
        });
    }
    let folded = coster.folded(proj, &state, summary);
    let prefix_hash = coster.prefix_hash(&request, &pieces);
    let receipt = receipt::build(receipt::ReceiptInput {
        folded: &folded,
        prefix_hash,
        policy_version,
        input,
        proj,
        state: &state,
        summary,
        budget,
        tiers,
        parts,
        estimate: estimate + injected_tokens,
        injected,
        fired,
        at_seq,
    });
    Ok(Rendered {
        format,
        request,
        pieces,
        overhead,
        receipt,
        state,
    })
}

impl Rendered {
    /// The request body in its format: canonical JSON, the same bytes for the same inputs.
    pub fn body(&self) -> Value {
        self.format.body(&self.request)
    }

    /// [`Rendered::body`] as the JSON bytes sent, written without building the value tree (the
    /// same bytes as serialising it).
    pub fn body_bytes(&self) -> serde_json::Result<Vec<u8>> {
        // About four bytes a token, so the buffer is seldom grown.
        let guess = usize::try_from(self.tokens().saturating_mul(4)).unwrap_or(0);
        let mut out = Vec::with_capacity(guess.saturating_add(1024));
        self.format.write_body(&self.request, &mut out)?;
        Ok(out)
    }

    /// [`Rendered::body_bytes`] for a session's next call: `memo` is the one its renders use,
    /// and the messages this request shares with the last one written through it are copied
    /// rather than written again (the same bytes either way).
    pub fn body_bytes_with(&self, memo: &mut CostMemo) -> serde_json::Result<Vec<u8>> {
        let guess = usize::try_from(self.tokens().saturating_mul(4)).unwrap_or(0);
        let mut out = Vec::with_capacity(guess.saturating_add(1024));
        let keys: Vec<u64> = self.pieces.iter().map(|p| p.key).collect();
        self.format
            .write_body_reusing(&self.request, &keys, &mut memo.body, &mut out)?;
        Ok(out)
    }

    /// Tokens of the whole request.
    pub fn tokens(&self) -> u64 {
        self.overhead + self.pieces.iter().map(|p| p.tokens).sum::<u64>()
    }
}

fn identity(value: &impl std::hash::Hash) -> u64 {
    use std::hash::{DefaultHasher, Hasher};
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

fn injection_msg(content: &str) -> Msg {
    Msg::User {
        content: MessageContent::Text(content.to_owned()),
        name: None,
    }
}

/// System prompt, tools, pins, task statement and the latest unit, each as small as it gets.
fn floor_tokens(
    proj: &Projection,
    coster: &mut Coster<'_>,
    state: &CompactionState,
    summary: Option<&SummaryView>,
    overhead: u64,
) -> u64 {
    let last = proj.units.len().saturating_sub(1);
    let smallest_block = CompactionState {
        block_lines: Some(0),
        ..state.clone()
    };
    let mut floor = overhead + coster.block(proj, &smallest_block, summary);
    for i in 0..proj.units.len() {
        if proj.is_kept(i) || i == last {
            floor += coster.unit(proj, i, state);
        }
    }
    floor
}

/// Lays out the neutral request and reports tokens per tier, and the parts of two of them.
fn layout_request(
    input: &RenderInput<'_>,
    proj: &Projection,
    state: &CompactionState,
    summary: Option<&SummaryView>,
    coster: &mut Coster<'_>,
    overhead: u64,
) -> (
    Request,
    Vec<Piece>,
    std::collections::BTreeMap<Tier, u64>,
    Parts,
) {
    use std::collections::BTreeMap;
    let mut pieces = Vec::new();
    let policy = input.policy;
    let mut tiers: BTreeMap<Tier, u64> = BTreeMap::new();
    let mut parts = Parts::default();
    let mut messages = Vec::new();
    let tools_tokens = overhead.saturating_sub(input.format.priming_tokens());
    *tiers.entry(Tier::Tools).or_default() += tools_tokens;
    *tiers.entry(Tier::Overhead).or_default() += overhead - tools_tokens;

    let first_tail = proj
        .units
        .iter()
        .position(|u| u.seq >= state.boundary)
        .unwrap_or(proj.units.len());
    for (i, unit) in proj.units.iter().enumerate().take(first_tail) {
        if proj.is_kept(i) {
            let tokens = coster.unit(proj, i, state);
            *tiers.entry(tier_of(&unit.body)).or_default() += tokens;
            split_turn(coster, proj, i, state, tokens, &mut parts);
            let (key, msg) = coster.msg(proj, i, state);
            pieces.push(Piece { key, tokens });
            messages.push(msg);
        }
    }
    if let Some(block) = coster.block_text(proj, state, summary) {
        let tokens = coster.block(proj, state, summary);
        pieces.push(Piece {
            key: identity(&("block", &block.text)),
            tokens,
        });
        *tiers.entry(Tier::Summary).or_default() += tokens;
        // The summary's text, which the block ends with; the rest is the compact lines.
        let of_summary = summary.map_or(0, |s| coster.summary(s).min(tokens));
        parts.summary += of_summary;
        parts.compact += tokens - of_summary;
        messages.push(Msg::User {
            content: MessageContent::Text(block.text.clone()),
            name: None,
        });
    }
    // Before any fold, the leading system messages are the stable prefix; after, everything up to
    // and including the compact block is.
    let stable_len = if first_tail > 0 {
        messages.len()
    } else {
        proj.units
            .iter()
            .take_while(|u| matches!(u.body, UnitBody::System(_)))
            .count()
    };
    for (i, unit) in proj.units.iter().enumerate().skip(first_tail) {
        let tokens = coster.unit(proj, i, state);
        *tiers.entry(tier_of(&unit.body)).or_default() += tokens;
        split_turn(coster, proj, i, state, tokens, &mut parts);
        let (key, msg) = coster.msg(proj, i, state);
        pieces.push(Piece { key, tokens });
        messages.push(msg);
    }
    (
        Request {
            model: input.model.to_owned(),
            tools: input.tools.to_vec(),
            messages,
            stable_len,
            max_output_tokens: policy.response_reserve,
        },
        pieces,
        tiers,
        parts,
    )
}

/// Adds unit `i`'s `tokens`, when it is an assistant turn, to `parts`: each result by the form
/// it is sent in (a turn's cost is its head plus each result's, [`Coster::unit`]), the rest as
/// the turn's own.
fn split_turn(
    coster: &mut Coster<'_>,
    proj: &Projection,
    i: usize,
    state: &CompactionState,
    tokens: u64,
    parts: &mut Parts,
) {
    let UnitBody::Turn(turn) = &proj.units[i].body else {
        return;
    };
    let mut results = 0;
    for (c, paired) in turn.calls.iter().enumerate() {
        let form = layout::form_of(paired, state);
        let part = match form {
            ResultForm::Verbatim => &mut parts.verbatim,
            ResultForm::Stubbed => &mut parts.stubbed,
            ResultForm::Elided => &mut parts.elided,
            ResultForm::Diff => &mut parts.diffed,
            ResultForm::Missing => continue,
        };
        let t = coster.result(proj, state, i, c, form);
        *part += t;
        results += t;
    }
    parts.turns += tokens.saturating_sub(results);
}

fn tier_of(body: &UnitBody) -> Tier {
    match body {
        UnitBody::System(_) => Tier::System,
        UnitBody::Pin { .. } => Tier::Pins,
        UnitBody::User { .. } | UnitBody::Note(_) => Tier::Dialogue,
        UnitBody::Turn(_) => Tier::ToolResults,
    }
}

/// The seq of the last event a render covered (for receipts and `explain`).
pub fn last_seq(events: &[Event]) -> Seq {
    events.last().map_or(0, |e| e.seq)
}
