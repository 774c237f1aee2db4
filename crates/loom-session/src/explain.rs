//! What happened to one event in each recorded model call, and how to get its original back:
//! `loom explain`, the API's `explain` and the Python package's.

use loom_core::render::Receipt;
use loom_core::{EventBody, SessionId};
use loom_store::Offloader;
use serde::Serialize;

use crate::error::{Result, SessionError};

/// What happened to one event in each recorded model call, and where its original is.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Explanation {
    /// The event's seq.
    pub event: u64,
    /// Its kind.
    pub kind: String,
    /// Its fate in each recorded model call, oldest first.
    pub calls: Vec<CallFate>,
    /// Where its original is.
    pub original: Original,
}

/// What one model call did with the event.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CallFate {
    /// The model call's id.
    pub call: u64,
    /// The last seq of the log the call was rendered from.
    pub at_seq: u64,
    /// `verbatim`, `stubbed`, `grouped`, `summarized`, `dropped`, ... (the receipt's lists).
    pub fate: String,
    /// The render's estimate of the call's input tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate: Option<u64>,
    /// The compaction point that took the event, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub compaction: Option<loom_core::render::PointRecord>,
    /// The usage the provider reported for the call.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub usage: Option<loom_store::Usage>,
}

/// Where an event's original is: an offloaded output's reference (and, through the API, the
/// URL that recalls it), or the event itself in the log.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Original {
    #[serde(rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// `GET` this for the original bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recall: Option<String>,
    /// The seqs that hold it (`[n, n]`), when it is the event itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub events: Option<OriginalEvents>,
}

/// The seqs of an original in the log: `[n, n]` in `explain_event`, the URL reading them
/// through the API.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum OriginalEvents {
    /// `[n, n]`: the event's own seq, as a range (`explain_event`, the Python package).
    Seqs([u64; 2]),
    /// The URL that reads the event through the API.
    Url(String),
}

/// What happened to event `n` of `session` in each recorded model call (its fate in the call's
/// receipt, the compaction point that took it, the call's usage), and where its original is: the
/// reference of the output a step offloaded (`original.ref`), or the event itself
/// (`original.events: [n, n]`). The API's and the Python package's `explain`.
pub fn explain_event(
    store: &dyn loom_store::Store,
    blobs: &dyn loom_store::BlobStore,
    reduce: &loom_core::ReduceConfig,
    session: &SessionId,
    n: u64,
) -> Result<Explanation> {
    let event = store
        .read(session, n..=n)?
        .pop()
        .ok_or_else(|| SessionError::invalid_field("event", format!("no event {n}")))?;
    let mut calls = Vec::new();
    for mc in store.model_calls(session)? {
        // A call proxied in observe mode went upstream as the client sent it: there is no
        // render to explain, only that the event was sent as it is.
        let receipt: Option<Receipt> =
            serde_json::from_value(mc.call.receipt["receipt"].clone()).ok();
        let fate = match &receipt {
            Some(r) => r.fate(n),
            None if n <= mc.call.at_seq => "sent as the client sent it (observe mode)",
            None => "not yet in the log",
        };
        calls.push(CallFate {
            call: mc.id,
            at_seq: mc.call.at_seq,
            fate: fate.to_owned(),
            estimate: receipt.as_ref().map(|r| r.estimate),
            compaction: receipt
                .as_ref()
                .and_then(|r| r.compaction.clone())
                .filter(|p| p.at_seq >= n),
            usage: mc.usage,
        });
    }
    let reference = match &event.body {
        EventBody::ToolResult { call_id, .. } => {
            let off = Offloader::new(store, blobs, reduce);
            off.steps(session)?
                .into_iter()
                .find(|step| &step.call_id == call_id)
                .and_then(|step| step.outcome_ref)
        }
        _ => None,
    };
    let original = Original {
        events: reference.is_none().then_some(OriginalEvents::Seqs([n, n])),
        reference,
        recall: None,
    };
    Ok(Explanation {
        event: n,
        kind: event.body.kind().as_str().to_owned(),
        calls,
        original,
    })
}
