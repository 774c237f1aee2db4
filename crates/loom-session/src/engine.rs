//! Rendering a stored session, for the API's render endpoint and the proxy's `fit` mode.
//!
//! The same steps as `loom render`, over a live session: continue from the compaction state of the
//! session's last receipt when it was made under the same policy, model and format (so
//! consecutive requests stay append-only between compaction points), render, and hand back the
//! receipt, which the caller records with the call's turn. Everything here is blocking: callers
//! run it off the async threads.

use loom_core::render::{
    self, CompactionState, CostMemo, Format, Policy, Receipt, RenderInput, SummaryView, ToolSpec,
};
use loom_core::{ReduceConfig, SessionId};
use loom_store::{NewModelCall, StoreError, Summary};

use crate::live::{lock_live, Backend, Continued, Live, TURN_ATTEMPTS};
use loom_tokens::{CountTokens, Registry, Tokenizer};

use crate::error::{Result, SessionError};

/// What to render a session for.
#[derive(Debug, Clone)]
pub struct RenderSpec {
    /// The model: its tokenizer counts and its window applies.
    pub model: String,
    /// Input-token budget; the model's window minus the response reserve when absent.
    pub budget: Option<u64>,
    /// The wire format.
    pub format: Format,
    /// Tools offered to the model, budgeted with the request.
    pub tools: Vec<ToolSpec>,
    /// Record a receipt even when the log has not grown since the last one (every proxied call
    /// is a model call of its own; a repeated API render is not).
    pub always_record: bool,
    /// Content the turn's pre-hooks inject at the tail, under the injection reserve (the agent
    /// runtime's hooks; none for the proxy and the API).
    pub injections: Vec<render::Injection>,
    /// What the request itself says of the model's limits.
    pub limits: ModelLimits,
    /// How references to what is left out are written, over the policy's `recall` (the proxy
    /// writes `loom_recall` calls when it answers the tool itself).
    pub recall: Option<render::RecallRefs>,
}

/// What a request says of its model's limits, over the registry's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelLimits {
    /// The reply's reserve: the request's own `max_tokens` / `max_output_tokens`, so that a
    /// fitted request and the longest reply it asks for fit the window together.
    pub reserve: Option<u64>,
    /// The window, when the request asks for a larger one than the model's usual (Anthropic's
    /// 1M-context beta).
    pub window: Option<u64>,
}

/// A rendered request and its record; the body as a JSON value, or as the JSON bytes sent
/// ([`Engine::render_session_bytes`]).
#[derive(Debug, Clone)]
pub struct RenderOutcome<B = serde_json::Value> {
    /// The request body in the format asked for.
    pub body: B,
    /// What was included, stubbed, folded, summarised or dropped.
    pub receipt: Receipt,
    /// The factor the budget was divided by because the provider counted this session's
    /// requests above Loom's estimate ([`Live::anchor`]); `None` when it did not or the count
    /// is exact.
    pub anchor: Option<f64>,
    /// The model call recorded for it, if one was.
    pub model_call: Option<u64>,
}

/// What rendering reads besides the store: the registry, the base policy and the reducers'
/// settings.
#[derive(Debug)]
pub struct Engine {
    /// Models: tokenizer and window.
    pub registry: Registry,
    /// The policy every render starts from (its window is set per request).
    pub policy: Policy,
    /// Reduction settings for deriving steps.
    pub reduce: ReduceConfig,
}

impl Engine {
    /// The built-in model registry, the default policy and reduction settings: what an embedded
    /// engine (the Python package, `loom run`) starts from.
    pub fn built_in() -> loom_tokens::Result<Self> {
        Ok(Self {
            registry: Registry::built_in()?,
            policy: Policy::default(),
            reduce: ReduceConfig::default(),
        })
    }

    /// The token counter and window of a model. An unknown model is bad input naming `field`,
    /// unless `estimate_unknown` (the caller gave a budget): then Loom's calibrated estimate
    /// counts, and the window is the caller's to give.
    pub fn model(
        &self,
        model: &str,
        field: &str,
        estimate_unknown: bool,
    ) -> Result<(Tokenizer, u64)> {
        let info = match self.entry(model) {
            Ok(info) => info,
            // Counted as models without a public tokenizer are: never below an exact count.
            Err(_) if estimate_unknown => {
                return Ok((
                    Tokenizer::Bounded(Default::default(), loom_tokens::Encoding::O200kBase),
                    u64::MAX,
                ));
            }
            Err(e) => return Err(SessionError::invalid_field(field, e.to_string())),
        };
        let tokenizer = Tokenizer::for_model(info)
            .map_err(|e| SessionError::invalid_field(field, format!("model `{model}`: {e}")))?;
        Ok((tokenizer, info.context_window))
    }

    /// What to tell the caller of how `model` was found: `Some` when the registry knows it only
    /// by its family (a new model of a known provider), naming the model whose figures apply.
    pub fn model_note(&self, model: &str) -> Option<String> {
        if self.registry.lookup(model).is_ok() {
            return None;
        }
        let info = self.registry.lookup_family(model)?;
        Some(format!(
            "model `{model}` is not in Loom's registry: counted and fitted as its family's `{}` \
             ({} tokens)",
            info.name, info.context_window
        ))
    }

    /// The registry's entry for `model`, by name or by family.
    pub fn model_info(&self, model: &str) -> Result<&loom_tokens::ModelInfo> {
        self.entry(model)
            .map_err(|e| SessionError::invalid_field("model", e.to_string()))
    }

    /// The registry's entry for `model`: by name, else the newest of its family; the error is
    /// the lookup by name's (it lists near names).
    fn entry(&self, model: &str) -> loom_tokens::Result<&loom_tokens::ModelInfo> {
        self.registry
            .lookup(model)
            .or_else(|e| self.registry.lookup_family(model).ok_or(e))
    }

    /// The counter and policy `spec` renders with; checking them before anything is written
    /// lets a request with an unknown model or an impossible budget change nothing.
    pub fn prepare(&self, spec: &RenderSpec) -> Result<(Tokenizer, Policy)> {
        let (meter, window) = self.model(&spec.model, "model", spec.budget.is_some())?;
        let window = spec.limits.window.unwrap_or(window);
        let mut policy = self.policy.clone();
        if let Some(refs) = &spec.recall {
            policy.recall = refs.clone();
        }
        if let Some(reserve) = spec.limits.reserve {
            // The request's own reserve, within what leaves the window room for a request.
            policy.response_reserve = reserve.min(window / 2).max(1);
        }
        // A budget never lets the request and its reply's reserve pass the model's window.
        policy.context_window = match spec.budget {
            Some(budget) => budget.saturating_add(policy.response_reserve).min(window),
            None => window,
        };
        policy
            .validate()
            .map_err(|e| SessionError::invalid_field("budget", e.to_string()))?;
        Ok((meter, policy))
    }

    /// Renders session `id` for `spec` and records the receipt (the API's render and `loom
    /// render`), rendering again from the store should another writer move the session on
    /// between the two. `None` when the session does not exist.
    pub fn render_session(
        &self,
        b: Backend<'_>,
        id: &SessionId,
        spec: &RenderSpec,
    ) -> Result<Option<RenderOutcome>> {
        self.render_session_as(b, id, spec, |r, _| Ok(r.body()))
    }

    /// [`Engine::render_session`] with the body written as the JSON bytes a provider is sent
    /// (the same bytes as serialising the value), without building the value: for a caller that
    /// only sends it (the agent loop).
    pub fn render_session_bytes(
        &self,
        b: Backend<'_>,
        id: &SessionId,
        spec: &RenderSpec,
    ) -> Result<Option<RenderOutcome<Vec<u8>>>> {
        // The messages this call shares with the session's last are copied from its body.
        self.render_session_as(b, id, spec, |r, memo| {
            r.body_bytes_with(memo).map_err(|e| {
                SessionError::internal(format!("writing the request body of session `{id}`: {e}"))
            })
        })
    }

    fn render_session_as<B>(
        &self,
        b: Backend<'_>,
        id: &SessionId,
        spec: &RenderSpec,
        body: impl Fn(&render::Rendered, &mut CostMemo) -> Result<B>,
    ) -> Result<Option<RenderOutcome<B>>> {
        let mut attempt = 1;
        loop {
            let Some(live) = b.live.get(b, id)? else {
                return Ok(None);
            };
            let mut live = lock_live(&live);
            let (mut out, record) = self.render_as(&mut live, spec, &body)?;
            match live.commit_owned(b, record, None) {
                Ok(call) => {
                    out.model_call = call;
                    return Ok(Some(out));
                }
                Err(StoreError::Moved { .. }) if attempt < TURN_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Renders a live session for `spec`, continuing from its newest receipt, and returns the
    /// receipt to record with the call's turn ([`Live::commit`]); `None` when nothing needs
    /// recording (a repeated render of an unchanged log that does not ask for one). The caller
    /// has caught the session up with the store ([`Live::refresh`]) and holds it for the call;
    /// nothing here reads or writes the store.
    pub fn render(
        &self,
        live: &mut Live,
        spec: &RenderSpec,
    ) -> Result<(RenderOutcome, Option<NewModelCall>)> {
        self.render_as(live, spec, |r, _| Ok(r.body()))
    }

    /// [`Engine::render`] with the body made by `body` from the rendered request (and the
    /// session's cost memo, which it may use to write the body).
    fn render_as<B>(
        &self,
        live: &mut Live,
        spec: &RenderSpec,
        body: impl Fn(&render::Rendered, &mut CostMemo) -> Result<B>,
    ) -> Result<(RenderOutcome<B>, Option<NewModelCall>)> {
        let session = live.id().clone();
        let (meter, mut policy) = self.prepare(spec)?;
        // An estimate the provider's own count has shown low is kept an upper bound by leaving
        // the request that much less room.
        let anchor = if meter.exact() { None } else { live.anchor() };
        if let Some(factor) = anchor {
            let room = policy.context_window - policy.response_reserve;
            policy.context_window = policy.response_reserve + (room as f64 / factor) as u64;
            policy
                .validate()
                .map_err(|e| SessionError::invalid_field("budget", e.to_string()))?;
        }
        let summaries = summary_views(live.summaries());
        let policy_version = policy.version();
        let format = spec.format.as_str();
        let same = |c: &Continued| {
            c.policy_version == policy_version && c.model == spec.model && c.format == format
        };
        // The state this process rendered last is taken as it is; one from elsewhere is read
        // from the receipt.
        let prev = match live.take_state() {
            Some(c) => same(&c).then_some((c.state, Some(c.at_seq))),
            None => live
                .last_call()
                .and_then(|last| continued_state(last, &policy_version, &spec.model, format)),
        };
        let now_ms = live.now_ms();
        let audience = live.audience_at(now_ms);
        let (view, counts) = live.parts(&audience);
        let meter = counts.meter(&meter);
        let input = RenderInput {
            events: view.events,
            steps: view.steps,
            summaries: &summaries,
            policy: &policy,
            format: spec.format,
            model: &spec.model,
            tools: &spec.tools,
            injections: &spec.injections,
            audience: &audience,
            meter: &meter,
        };
        let (prev_state, prev_seq) = prev.unwrap_or_default();
        let rendered = render::render_projection(&input, &view.projection, &prev_state, view.memo)
            .map_err(|e| {
                let over = match &e {
                    render::RenderError::OverBudget { over, .. } => Some(*over),
                    _ => None,
                };
                let mut e = SessionError::invalid(format!("session `{session}`: {e}"));
                e.over_budget = over;
                e
            })?;
        let body = body(&rendered, view.memo)?;
        let at_seq = render::last_seq(view.events);
        let record = (spec.always_record || prev_seq != Some(at_seq)).then(|| NewModelCall {
            session: session.clone(),
            at_seq,
            created_ms: now_ms,
            receipt: serde_json::json!({
                "receipt": rendered.receipt,
                "state": rendered.state,
            }),
        });
        live.rendered(record.as_ref().map(|r| Continued {
            at_seq: r.at_seq,
            created_ms: r.created_ms,
            policy_version,
            model: spec.model.clone(),
            format: format.to_owned(),
            state: rendered.state,
        }));
        Ok((
            RenderOutcome {
                body,
                receipt: rendered.receipt,
                anchor,
                model_call: None,
            },
            record,
        ))
    }
}

/// Bounds on an anchoring factor: a provider's count and Loom's estimate of the same request
/// never differ more than this unless something else is wrong (then the estimate stands).
pub const ANCHOR_RANGE: std::ops::RangeInclusive<f64> = 0.5..=2.0;

/// The provider's count of a rendered call's input over Loom's estimate of it, when both are
/// known and within [`ANCHOR_RANGE`].
pub fn reported_ratio(call: &loom_store::ModelCall) -> Option<f64> {
    let reported = call.usage?.input_tokens as f64;
    let estimated = call.call.receipt["receipt"]["estimate"].as_u64()? as f64;
    let factor = reported / estimated;
    (estimated > 0.0 && ANCHOR_RANGE.contains(&factor)).then_some(factor)
}

/// The summaries a render can apply: those that cover the log from its start.
pub fn summary_views(summaries: &[Summary]) -> Vec<SummaryView> {
    summaries
        .iter()
        .filter(|s| s.summary.from_seq == 1)
        .map(|s| SummaryView {
            version: s.version,
            to_seq: s.summary.to_seq,
            content: s.summary.content.clone(),
        })
        .collect()
}

/// The compaction state of a recorded call to continue from, with the seq it was rendered at:
/// only when it was made under the same policy, model and format.
fn continued_state(
    call: &loom_store::ModelCall,
    policy_version: &str,
    model: &str,
    format: &str,
) -> Option<(CompactionState, Option<u64>)> {
    use serde::Deserialize;
    // Read in place from the stored JSON, without copying it first.
    let receipt = Receipt::deserialize(&call.call.receipt["receipt"]).ok()?;
    let state = CompactionState::deserialize(&call.call.receipt["state"]).ok()?;
    (receipt.policy_version == policy_version && receipt.model == model && receipt.format == format)
        .then_some((state, Some(call.call.at_seq)))
}
