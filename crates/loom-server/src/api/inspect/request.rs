//! One model call for the inspector: its receipt and usage, and its request — the bytes this
//! server sent (kept in memory by `crate::sent`), or, when it no longer holds them (after a
//! restart, or past the bound), the request rendered again from the log. Rendering is a pure
//! function of the log, the policy and the previous call's compaction state, all stored; but a
//! proxied request also carried the client's tool definitions, injected content and fields,
//! which are not, so a rebuild says how far it can be trusted.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use loom_core::render::{self, Audience, CompactionState, CostMemo, Format, Receipt, StepIndex};
use loom_core::{SessionId, SessionInfo};
use loom_store::{ModelCall as StoredCall, Offloader};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::api::extract::Owned;
use crate::api::{schema, CallPath, ModelCall};
use crate::error::{ApiError, Result};
use crate::state::AppState;

/// One model call: its receipt and usage, and the request it sent.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CallDetail {
    call: ModelCall,
    request: Request,
}

/// A call's request: exactly as sent while this server holds the bytes, else rebuilt.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Request {
    /// The body exactly as it was sent, as text: a proxied call's body as it went upstream
    /// (the client's fields, tool definitions and injected content included), or the body
    /// `render` answered. `null` when this server no longer holds it.
    sent: Option<String>,
    /// Whether `sent` holds the body.
    as_sent: bool,
    /// The body rendered again from the log, when `sent` is `null`; `null` too when the call
    /// was proxied in observe mode (Loom rendered nothing) or cannot be rendered again.
    #[schema(value_type = Option<Object>)]
    body: Option<Value>,
    /// Whether rendering again gave the stored receipt (then `body` holds the messages sent,
    /// bar the client's own fields and tool definitions a proxied request carried); `null` when
    /// the body was not rendered again.
    matches_receipt: Option<bool>,
    /// What the page should say of it.
    note: String,
}

impl Request {
    fn rebuilt(
        body: Option<Value>,
        matches_receipt: Option<bool>,
        note: impl Into<String>,
    ) -> Self {
        Self {
            sent: None,
            as_sent: false,
            body,
            matches_receipt,
            note: note.into(),
        }
    }
}

/// One model call's receipt, usage and request.
#[utoipa::path(get, path = "/loom/v1/inspect/sessions/{id}/calls/{call}", params(CallPath),
    responses((status = 200, body = CallDetail), schema::Errors))]
pub(crate) async fn call(
    State(state): State<Arc<AppState>>,
    Owned { p, id, sid, info }: Owned,
    Path((_, call)): Path<(String, String)>,
) -> Result<Response> {
    let n: u64 = call
        .parse()
        .map_err(|_| ApiError::invalid_field("call", format!("`{call}` is not a call number")))?;
    let out = state
        .blocking("reading a model call", move |s| {
            let missing = || ApiError::not_found(format!("session `{id}` has no model call {n}"));
            let kept = s
                .sent
                .get(p.tenant.as_ref(), &sid, n)
                // Kept before the session was created: a deleted session's, whose id was used
                // again.
                .filter(|k| k.kept_ms >= info.created_ms)
                .and_then(|k| String::from_utf8(k.body.to_vec()).ok());
            // The call before it too, for a rebuild (it continues from that call's state).
            let from = if kept.is_some() {
                n
            } else {
                n.saturating_sub(1)
            };
            let calls = s.store.model_calls_after(&sid, from.saturating_sub(1))?;
            let i = calls.iter().position(|c| c.id == n).ok_or_else(missing)?;
            let request = match kept {
                Some(text) => Request {
                    sent: Some(text),
                    as_sent: true,
                    body: None,
                    matches_receipt: None,
                    note: "exactly as sent: the bytes this server sent for this call".to_owned(),
                },
                None => rebuild(s, &sid, &info, &calls[..=i])?,
            };
            Ok(CallDetail {
                call: ModelCall::of(&p, &calls[i]),
                request,
            })
        })
        .await?;
    Ok(Json(out).into_response())
}

/// Renders again the last of `calls` from the log as it was then, continuing from the
/// compaction state the call before it stored, as the engine did.
fn rebuild(
    s: &AppState,
    sid: &SessionId,
    info: &SessionInfo,
    calls: &[StoredCall],
) -> Result<Request> {
    let Some((last, before)) = calls.split_last() else {
        return Err(ApiError::internal("rebuilding a request: no call"));
    };
    let stored = &last.call.receipt["receipt"];
    let Ok(receipt) = serde_json::from_value::<Receipt>(stored.clone()) else {
        return Ok(Request::rebuilt(
            None,
            None,
            "proxied in observe mode: forwarded as the client sent it, so Loom rendered nothing, \
             and this server no longer holds the bytes",
        ));
    };
    let unknown = |what: &str| Request::rebuilt(None, None, format!("cannot be rebuilt: {what}"));
    let Some(format) = Format::parse(&receipt.format) else {
        return Ok(unknown(&format!("unknown format `{}`", receipt.format)));
    };
    let Ok((meter, _)) = s.engine.model(&receipt.model, "model", true) else {
        return Ok(unknown(&format!("unknown model `{}`", receipt.model)));
    };
    let mut policy = s.engine.policy.clone();
    policy.context_window = receipt.budget.context_window;
    policy.response_reserve = receipt.budget.response_reserve;
    let events = s.store.read(sid, 1..=receipt.at_seq)?;
    let off = Offloader::new(s.store.as_ref(), s.blobs.as_ref(), &s.engine.reduce);
    let steps: StepIndex = off
        .steps(sid)?
        .into_iter()
        .map(|st| (st.call_id.clone(), st))
        .collect();
    let summaries: Vec<_> = loom_session::engine::summary_views(&s.store.summaries(sid)?)
        .into_iter()
        .filter(|v| receipt.summary_version.is_some_and(|n| v.version <= n))
        .collect();
    // The engine continues from the newest receipt when it was made under the same policy,
    // model and format; otherwise it starts afresh.
    let prev = before
        .last()
        .and_then(|c| {
            let r = &c.call.receipt["receipt"];
            let same = r["policy_version"] == receipt.policy_version.as_str()
                && r["model"] == receipt.model.as_str()
                && r["format"] == receipt.format.as_str();
            same.then(|| CompactionState::deserialize(&c.call.receipt["state"]).ok())
                .flatten()
        })
        .unwrap_or_default();
    let audience = Audience {
        agent: Some(info.agent.clone()),
        now_ms: events.last().map_or(info.created_ms, |e| e.ts_ms),
    };
    let input = render::RenderInput {
        events: &events,
        steps: &steps,
        summaries: &summaries,
        policy: &policy,
        format,
        model: &receipt.model,
        tools: &[],
        injections: &[],
        audience: &audience,
        meter: &meter,
    };
    let rendered = match render::render(&input, &prev, &mut CostMemo::default()) {
        Ok(r) => r,
        Err(e) => return Ok(unknown(&e.to_string())),
    };
    let again = serde_json::to_value(&rendered.receipt).unwrap_or(Value::Null);
    let matches_receipt = &again == stored;
    let note = if matches_receipt {
        "rendered again from the log (this server no longer holds the bytes sent): its receipt \
         is the stored one, so these are the messages sent"
    } else if receipt
        .tiers
        .get(&render::Tier::Tools)
        .is_some_and(|t| *t > 0)
        || !receipt.injected.is_empty()
    {
        "rendered again from the log (this server no longer holds the bytes sent) without the \
         call's tool definitions or injected content, which are not stored: the messages may \
         differ from those sent"
    } else {
        "rendered again from the log (this server no longer holds the bytes sent), but its \
         receipt differs from the stored one (another policy or server setting): the messages \
         may differ from those sent"
    };
    Ok(Request::rebuilt(
        Some(rendered.body()),
        Some(matches_receipt),
        note,
    ))
}
