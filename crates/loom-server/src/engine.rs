//! Rendering a stored session, for the API's render endpoint and the proxy's `fit` mode.
//!
//! The same steps as `loom render`: derive the session's missing steps (offloading large outputs),
//! continue from the compaction state of the session's last receipt when it was made under the
//! same policy, model and format (so consecutive requests stay append-only between compaction
//! points), render, and record the receipt as a model call. Everything here is blocking: callers
//! run it off the async threads.

use loom_core::render::{
    self, CompactionState, Format, Policy, Receipt, RenderInput, SummaryView, ToolSpec,
};
use loom_core::{ReduceConfig, SessionId};
use loom_store::{NewModelCall, Store};

use crate::live::Live;
use loom_tokens::{Registry, Tokenizer};

use crate::error::{ApiError, Result};

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
}

/// A rendered request and its record.
#[derive(Debug, Clone)]
pub struct RenderOutcome {
    /// The request body in the format asked for.
    pub body: serde_json::Value,
    /// What was included, stubbed, folded, summarised or dropped.
    pub receipt: Receipt,
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
    /// The token counter and window of a model. An unknown model is bad input naming `field`,
    /// unless `estimate_unknown` (the caller gave a budget): then Loom's calibrated estimate
    /// counts, and the window is the caller's to give.
    pub fn model(
        &self,
        model: &str,
        field: &str,
        estimate_unknown: bool,
    ) -> Result<(Tokenizer, u64)> {
        let info = match self.registry.lookup(model) {
            Ok(info) => info,
            Err(_) if estimate_unknown => {
                return Ok((Tokenizer::Estimate(Default::default()), u64::MAX));
            }
            Err(e) => return Err(ApiError::invalid_field(field, e.to_string())),
        };
        let tokenizer = Tokenizer::for_model(info)
            .map_err(|e| ApiError::invalid_field(field, format!("model `{model}`: {e}")))?;
        Ok((tokenizer, info.context_window))
    }

    /// The counter and policy `spec` renders with; checking them before anything is written
    /// lets a request with an unknown model or an impossible budget change nothing.
    pub fn prepare(&self, spec: &RenderSpec) -> Result<(Tokenizer, Policy)> {
        let (meter, window) = self.model(&spec.model, "model", spec.budget.is_some())?;
        let mut policy = self.policy.clone();
        policy.context_window = match spec.budget {
            Some(budget) => budget.saturating_add(policy.response_reserve),
            None => window,
        };
        policy
            .validate()
            .map_err(|e| ApiError::invalid_field("budget", e.to_string()))?;
        Ok((meter, policy))
    }

    /// Renders a live session for `spec` and records the receipt. The caller has caught the
    /// session up with the store ([`Live::refresh`]) and holds it for the call.
    pub fn render(
        &self,
        store: &dyn Store,
        live: &mut Live,
        spec: &RenderSpec,
    ) -> Result<RenderOutcome> {
        let session = live.id().clone();
        let (meter, policy) = self.prepare(spec)?;
        let summaries = summary_views(store, &session)?;
        let prev = store
            .last_model_call(&session)?
            .and_then(|last| continued_state(&last, &policy, &spec.model, spec.format));
        let now_ms = live.now_ms();
        let audience = live.audience_at(now_ms);
        let (events, steps, projection, memo) = live.parts(&audience);
        let input = RenderInput {
            events,
            steps,
            summaries: &summaries,
            policy: &policy,
            format: spec.format,
            model: &spec.model,
            tools: &spec.tools,
            injections: &[],
            audience: &audience,
            meter: &meter,
        };
        let (prev_state, prev_seq) = prev.unwrap_or_default();
        let rendered = render::render_projection(&input, &projection, &prev_state, memo)
            .map_err(|e| ApiError::invalid(format!("session `{session}`: {e}")))?;
        let at_seq = render::last_seq(events);
        let model_call = if !spec.always_record && prev_seq == Some(at_seq) {
            None
        } else {
            let call = store.record_model_call(&NewModelCall {
                session: session.clone(),
                at_seq,
                created_ms: now_ms,
                receipt: serde_json::json!({
                    "receipt": rendered.receipt,
                    "state": rendered.state,
                }),
            })?;
            Some(call.id)
        };
        Ok(RenderOutcome {
            body: rendered.body(),
            receipt: rendered.receipt,
            model_call,
        })
    }
}

/// The summaries a render of `session` can apply: those that cover the log from its start.
pub fn summary_views(
    store: &dyn Store,
    session: &SessionId,
) -> loom_store::Result<Vec<SummaryView>> {
    Ok(store
        .summaries(session)?
        .into_iter()
        .filter(|s| s.summary.from_seq == 1)
        .map(|s| SummaryView {
            version: s.version,
            to_seq: s.summary.to_seq,
            content: s.summary.content,
        })
        .collect())
}

/// The compaction state of a recorded call to continue from, with the seq it was rendered at:
/// only when it was made under the same policy, model and format.
fn continued_state(
    call: &loom_store::ModelCall,
    policy: &Policy,
    model: &str,
    format: Format,
) -> Option<(CompactionState, Option<u64>)> {
    let receipt: Receipt = serde_json::from_value(call.call.receipt["receipt"].clone()).ok()?;
    let state: CompactionState = serde_json::from_value(call.call.receipt["state"].clone()).ok()?;
    (receipt.policy_version == policy.version()
        && receipt.model == model
        && receipt.format == format.as_str())
    .then_some((state, Some(call.call.at_seq)))
}
