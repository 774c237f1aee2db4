//! Appending what an agent framework hands over, one batch of provider items at a time.

use loom_core::{AgentId, Api, EventBody, MessageContent, NativeReasoning, NewEvent, SessionId};
use loom_store::NewSession;
use loom_wire::AssistantReply;

use crate::error::{ErrorKind, Result, SessionError};

/// The agent a session belongs to when its caller names none.
pub const DEFAULT_AGENT: &str = "agent";

/// Appends the next items of a provider history (`body`: a document holding only the new
/// messages or items, as the provider takes them) to session `session`, creating it (for
/// `agent`, or the default agent) when it does not exist; returns the seqs given (`n + 1..=n`
/// when the items hold no event). Results may answer calls the log already holds: an agent
/// framework that hands over its new items one batch at a time (the Python package's adapters,
/// `POST /loom/v1/sessions/{id}/history`).
pub fn append_history(
    store: &dyn loom_store::Store,
    blobs: &dyn loom_store::BlobStore,
    session: &SessionId,
    body: &[u8],
    format: Option<loom_core::Api>,
    agent: Option<AgentId>,
    now_ms: i64,
) -> Result<std::ops::RangeInclusive<u64>> {
    let mut opts = loom_import::ParseOptions::new(now_ms);
    opts.format = format;
    opts.session = Some(session.clone());
    let info = store.session(session)?;
    if let Some(info) = &info {
        opts.first_item = usize::try_from(info.event_count).unwrap_or(usize::MAX);
        opts.open_calls = store
            .tool_calls(session)?
            .into_iter()
            .filter(|c| c.status == loom_store::CallStatus::Pending)
            .map(|c| (c.call_id, c.tool_name))
            .collect();
    }
    let mut parsed = loom_import::parse_slice("body", "body", body, &opts, blobs)?;
    let events = parsed.pop().map(|s| s.events).unwrap_or_default();
    match info {
        Some(info) if events.is_empty() => Ok(info.event_count + 1..=info.event_count),
        Some(_) => Ok(store.append(session, &events)?),
        None => {
            let agent = match agent {
                Some(a) => a,
                None => {
                    AgentId::new(DEFAULT_AGENT).map_err(|e| SessionError::invalid(e.to_string()))?
                }
            };
            let n = events.len() as u64;
            store.create_session(
                &NewSession {
                    id: session.clone(),
                    agent,
                    parent: None,
                    created_ms: now_ms,
                },
                &events,
            )?;
            Ok(1..=n)
        }
    }
}

/// Deletes session `id` (its log and everything derived from it, as
/// [`loom_store::Store::delete_session`] does) and drops its live state; returns the session as
/// it was (its agent names the memory to forget), or a not-found error. What a front end keeps
/// beside the store (memory, saved files) is its own to remove.
pub fn delete_session(b: crate::Backend<'_>, id: &SessionId) -> Result<loom_core::SessionInfo> {
    let gone = || {
        SessionError::new(
            ErrorKind::SessionNotFound,
            format!("session `{id}` not found"),
        )
    };
    let info = b.store.session(id)?.ok_or_else(gone)?;
    let deleted = b.store.delete_session(id)?;
    b.live.forget(id);
    if deleted {
        Ok(info)
    } else {
        Err(gone())
    }
}

/// The log's form of a reply (the proxy's, and the agent runtime's for its own model calls).
pub fn assistant_event(api: Api, reply: AssistantReply) -> NewEvent {
    let native = (!reply.native.is_empty() && loom_wire::dialect(api).replays_reasoning())
        .then_some(api)
        .map(|api| NativeReasoning {
            api,
            items: reply.native.clone(),
        });
    NewEvent::new(
        now_ms(),
        EventBody::Assistant {
            content: reply.content.map(MessageContent::Text),
            reasoning: reply.reasoning,
            native,
            tool_calls: reply.tool_calls,
            name: None,
        },
    )
}

/// Now, in UTC milliseconds.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
