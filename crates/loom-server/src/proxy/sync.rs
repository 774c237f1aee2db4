//! From the history a client sends to the log: append only what is new, never rewrite.
//!
//! Provider APIs are stateless, so a client sends its whole conversation with every call. The
//! history is read into events with the same importers as `loom import`, then compared with the
//! session's log. When the log is a prefix of the history, the rest is appended. When it is not
//! (the client edited or dropped messages, or regenerated a reply it did not keep), the log is
//! left as it is and the conversation continues in a fork: a new session `ID~N` whose parent is
//! the fork it departed from and which holds the whole history. A later call whose history
//! extends any fork continues that fork, so conversations that share an opening (parallel runs
//! of one task) each settle in their own.
//!
//! Assistant turns are compared by what a client can send back: the visible text and the calls
//! (id, name, arguments). Reasoning is not compared: Chat clients cannot send it back, and the
//! log keeps what the provider produced.

use std::sync::{Arc, Mutex};

use loom_core::{AgentId, Event, EventBody, NewEvent, SessionId};
use loom_store::{NewSession, Store};

use crate::error::{ApiError, Result};
use crate::live::{lock_live, Backend, Live};
use crate::state::now_ms;

/// Forks of one conversation are named `ID~2`, `ID~3`, ...
const FORK_MARK: char = '~';

/// Most forks searched for one that the history extends; past it a new fork is made.
const MAX_FORKS: u32 = 64;

/// Where a history landed.
#[derive(Debug)]
pub(crate) struct Synced {
    /// The session the call belongs to (the base id or a fork of it), caught up with the store
    /// and holding the whole history.
    pub live: Arc<Mutex<Live>>,
    /// Events appended by this call.
    pub appended: usize,
    /// The session the history departed from, when this call started a fork.
    pub diverged_from: Option<SessionId>,
}

/// Appends the new part of `history` to the session `base` (or one of its forks), creating it if
/// needed. The caller holds the conversation's lock.
pub(crate) fn sync(
    b: Backend<'_>,
    base: &SessionId,
    agent: &AgentId,
    history: &[NewEvent],
) -> Result<Synced> {
    if b.store.session(base)?.is_none() {
        create(b.store, base, agent, None, history)?;
        return Ok(Synced {
            live: loaded(b, base)?,
            appended: history.len(),
            diverged_from: None,
        });
    }
    // The newest fork first: a conversation most often continues where it was last seen.
    let mut forks = vec![base.clone()];
    for n in 2..=MAX_FORKS {
        let id = fork_id(base, n)?;
        if b.store.session(&id)?.is_none() {
            break;
        }
        forks.push(id);
    }
    for id in forks.iter().rev() {
        let live = loaded(b, id)?;
        let mut state = lock_live(&live);
        if extends(&state.events, history) {
            let new = &history[state.events.len()..];
            state.append(b, new)?;
            let appended = new.len();
            drop(state);
            return Ok(Synced {
                live,
                appended,
                diverged_from: None,
            });
        }
    }
    let newest = forks.last().unwrap_or(base).clone();
    let next = u32::try_from(forks.len() + 1).unwrap_or(u32::MAX);
    let id = fork_id(base, next)?;
    if next > MAX_FORKS || b.store.session(&id)?.is_some() {
        return Err(ApiError::conflict(format!(
            "session `{base}`: the history diverged from all of its {} forks; name a new \
             session with X-Loom-Session",
            forks.len()
        )));
    }
    create(b.store, &id, agent, Some(newest.clone()), history)?;
    Ok(Synced {
        live: loaded(b, &id)?,
        appended: history.len(),
        diverged_from: Some(newest),
    })
}

/// The live state of a session that exists.
fn loaded(b: Backend<'_>, id: &SessionId) -> Result<Arc<Mutex<Live>>> {
    b.live
        .get(b, id)?
        .ok_or_else(|| ApiError::internal(format!("loading session `{id}` just written")))
}

fn create(
    store: &dyn Store,
    id: &SessionId,
    agent: &AgentId,
    parent: Option<SessionId>,
    history: &[NewEvent],
) -> Result<()> {
    store.create_session(
        &NewSession {
            id: id.clone(),
            agent: agent.clone(),
            parent,
            created_ms: now_ms(),
        },
        history,
    )?;
    Ok(())
}

fn fork_id(base: &SessionId, n: u32) -> Result<SessionId> {
    SessionId::new(format!("{base}{FORK_MARK}{n}"))
        .map_err(|e| ApiError::invalid_field("X-Loom-Session", e.to_string()))
}

/// Whether `history` starts with the whole of `log`.
fn extends(log: &[Event], history: &[NewEvent]) -> bool {
    log.len() <= history.len() && log.iter().zip(history).all(|(l, h)| same(&l.body, &h.body))
}

/// Whether a logged event and one read from a client's history are the same message.
pub(crate) fn same(logged: &EventBody, sent: &EventBody) -> bool {
    match (logged, sent) {
        (
            EventBody::Assistant {
                content: c1,
                tool_calls: t1,
                ..
            },
            EventBody::Assistant {
                content: c2,
                tool_calls: t2,
                ..
            },
        ) => {
            let text = |c: &Option<loom_core::MessageContent>| {
                c.as_ref()
                    .map(|c| c.text().into_owned())
                    .unwrap_or_default()
            };
            text(c1) == text(c2)
                && t1.len() == t2.len()
                && t1.iter().zip(t2).all(|(a, b)| {
                    a.id == b.id && a.name == b.name && same_arguments(&a.arguments, &b.arguments)
                })
        }
        _ => logged == sent,
    }
}

/// Arguments are the same text, or the same JSON value (a client may re-serialise them).
fn same_arguments(a: &str, b: &str) -> bool {
    a == b
        || matches!(
            (
                serde_json::from_str::<serde_json::Value>(a),
                serde_json::from_str::<serde_json::Value>(b),
            ),
            (Ok(x), Ok(y)) if x == y
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::TestBackend;
    use loom_core::{MessageContent, ToolCall};

    fn user(text: &str) -> NewEvent {
        NewEvent::new(
            1,
            EventBody::User {
                content: MessageContent::from(text),
                name: None,
            },
        )
    }

    fn assistant(text: &str, calls: &[(&str, &str)]) -> NewEvent {
        NewEvent::new(
            1,
            EventBody::Assistant {
                content: Some(MessageContent::from(text)),
                reasoning: None,
                native: None,
                tool_calls: calls
                    .iter()
                    .map(|(id, args)| ToolCall {
                        id: (*id).into(),
                        name: "f".into(),
                        arguments: (*args).into(),
                    })
                    .collect(),
                name: None,
            },
        )
    }

    #[test]
    fn only_the_new_part_is_appended_and_a_divergence_forks() {
        let t = TestBackend::new(8);
        let (store, b) = (&t.store, t.backend());
        let sync = |history: &[NewEvent]| {
            let r = sync(
                b,
                &SessionId::new("s").unwrap(),
                &AgentId::new("a").unwrap(),
                history,
            )
            .unwrap();
            let id = lock_live(&r.live).id().clone();
            (id, r.appended, r.diverged_from)
        };
        let base = SessionId::new("s").unwrap();
        let mut history = vec![user("hi")];
        let (_, appended, diverged) = sync(&history);
        assert_eq!((appended, diverged), (1, None));
        // The reply is logged behind the live session's back, as another server would.
        store.append(&base, &[assistant("hello", &[])]).unwrap();
        // The client sends the reply back (re-serialised), and a new message.
        history.push(assistant("hello", &[]));
        history.push(user("more"));
        let (id, appended, _) = sync(&history);
        assert_eq!((id.as_str(), appended), ("s", 1));
        assert_eq!(store.latest_seq(&base).unwrap(), 3);
        // The same history again appends nothing.
        assert_eq!(sync(&history).1, 0);
        // An edited message starts a fork that records where it came from.
        let edited = vec![user("hi"), assistant("hello", &[]), user("other")];
        let (fork_id, _, diverged) = sync(&edited);
        assert_eq!(fork_id.as_str(), "s~2");
        assert_eq!(diverged.as_ref().map(SessionId::as_str), Some("s"));
        assert_eq!(
            store.latest_seq(&base).unwrap(),
            3,
            "the log is never rewritten"
        );
        let fork = store.session(&fork_id).unwrap().unwrap();
        assert_eq!(fork.parent.as_ref().map(SessionId::as_str), Some("s"));
        // Each history continues the fork it extends.
        let mut first = history.clone();
        first.push(user("again"));
        assert_eq!(sync(&first).0.as_str(), "s");
        let mut second = edited.clone();
        second.push(user("again"));
        assert_eq!(sync(&second).0.as_str(), "s~2");
    }

    #[test]
    fn arguments_compare_as_json() {
        assert!(same(
            &assistant("", &[("c1", "{\"a\": 1}")]).body,
            &assistant("", &[("c1", "{\"a\":1}")]).body
        ));
        assert!(!same(
            &assistant("", &[("c1", "{\"a\": 1}")]).body,
            &assistant("", &[("c2", "{\"a\": 1}")]).body
        ));
    }
}
