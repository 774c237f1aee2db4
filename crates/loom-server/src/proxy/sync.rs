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

use loom_core::{AgentId, Event, EventBody, NewEvent, Said, Seq, SessionId};
use loom_store::{NewSession, Store};

use crate::error::{ApiError, Result};
use crate::proxy::ingest::{Read, RequestBody};
use crate::state::now_ms;
use loom_session::live::{lock_live, Backend, Live};

/// Forks of one conversation are named `ID~2`, `ID~3`, ...
const FORK_MARK: char = '~';

/// Most forks searched (newest first) for one that the history extends; when none of them is, a
/// new fork is made. There is no cap on forks: a conversation is never refused for having
/// diverged often (a client that rewrites its history every turn would otherwise be locked out).
const FORKS_SEARCHED: u32 = 64;

/// Where a history landed.
#[derive(Debug)]
pub(crate) struct Synced {
    /// The session the call belongs to (the base id or a fork of it), caught up with the store
    /// and holding the whole history.
    pub live: Arc<Mutex<Live>>,
    /// Events this call adds (held by the live session until its turn is written).
    pub appended: usize,
    /// The session the history departed from, when this call started a fork.
    pub diverged_from: Option<SessionId>,
    /// Whether only the body's new items were read (the session remembered the rest).
    pub continued: bool,
}

/// Appends the new part of the history in `body` to the session `base` (or one of its forks),
/// creating it if needed. The caller holds the conversation's lock.
pub(crate) fn sync(
    b: Backend<'_>,
    base: &SessionId,
    agent: &AgentId,
    body: &RequestBody,
) -> Result<Synced> {
    // The sessions of this conversation the server has live, newest fork first: a call that
    // continues one of them needs no lookup of the others in the store.
    let mut cached = Vec::new();
    if b.live.contains(base) {
        cached.push(base.clone());
        for n in 2.. {
            let id = fork_id(base, n)?;
            if !b.live.contains(&id) {
                break;
            }
            cached.push(id);
        }
    }
    let skip = cached.len().saturating_sub(FORKS_SEARCHED as usize);
    let cached: Vec<SessionId> = cached.into_iter().skip(skip).collect();
    for id in cached.iter().rev() {
        let Some(live) = b.live.get(b, id)? else {
            continue;
        };
        if let Some(synced) = continuation(b, body, id, live)? {
            return Ok(synced);
        }
    }
    if b.store.session(base)?.is_none() {
        let read = body.read_whole(b, base)?;
        create(b.store, base, agent, None, &read.events)?;
        let live = loaded(b, base)?;
        let appended = read.events.len();
        lock_live(&live).body = body.memo(appended, read);
        return Ok(Synced {
            live,
            appended,
            diverged_from: None,
            continued: false,
        });
    }
    // The newest fork first: a conversation most often continues where it was last seen.
    let mut forks = vec![base.clone()];
    for n in 2.. {
        let id = fork_id(base, n)?;
        if b.store.session(&id)?.is_none() {
            break;
        }
        forks.push(id);
    }
    let count = forks.len();
    let forks: Vec<SessionId> = forks
        .into_iter()
        .skip(count.saturating_sub(FORKS_SEARCHED as usize))
        .collect();
    let mut whole: Option<Read> = None;
    for id in forks.iter().rev() {
        let live = loaded(b, id)?;
        if !cached.contains(id) {
            if let Some(synced) = continuation(b, body, id, Arc::clone(&live))? {
                return Ok(synced);
            }
        }
        let mut state = lock_live(&live);
        let read = match whole.take() {
            Some(read) => read,
            None => body.read_whole(b, base)?,
        };
        let view = loom_core::conversation(state.events());
        if extends_view(&view, &read.events) {
            let new = &read.events[view.len()..];
            drop(view);
            state.stage(b, new)?;
            let appended = new.len();
            state.body = body.memo(read.events.len(), read);
            drop(state);
            return Ok(Synced {
                live,
                appended,
                diverged_from: None,
                continued: false,
            });
        }
        whole = Some(read);
    }
    let read = match whole {
        Some(read) => read,
        None => body.read_whole(b, base)?,
    };
    // No session's conversation is a prefix of the history. One the client rewrote (compacted,
    // or with context it rebuilds every turn moved) continues that session, recorded as the
    // client's rewrite; any other divergence starts a fork.
    for id in forks.iter().rev() {
        let live = loaded(b, id)?;
        let mut state = lock_live(&live);
        let Some(plan) = rewrite_plan(state.events(), &read.events) else {
            continue;
        };
        let mut staged = Vec::with_capacity(read.events.len() - plan.kept + 1);
        staged.push(NewEvent::new(
            now_ms(),
            EventBody::Rewrite {
                replaced: plan.replaced,
                compaction: plan.compaction,
            },
        ));
        let mut repeats = plan.repeats.iter().peekable();
        for (i, event) in read.events.iter().enumerate().skip(plan.kept) {
            match repeats.next_if(|(at, _)| *at == i) {
                Some(&(_, of)) => {
                    staged.push(NewEvent::new(event.ts_ms, EventBody::Repeat { of }));
                }
                None => staged.push(event.clone()),
            }
        }
        if state.stage(b, &staged).is_err() {
            // The rewrite breaks the log's pairing rules (a call id used again): a fork holds it.
            continue;
        }
        let appended = staged.len();
        state.body = body.memo(read.events.len(), read);
        drop(state);
        tracing::debug!("{id}: the client rewrote its conversation; continued");
        return Ok(Synced {
            live,
            appended,
            diverged_from: None,
            continued: false,
        });
    }
    let newest = forks.last().unwrap_or(base).clone();
    let next = u32::try_from(count + 1).unwrap_or(u32::MAX);
    let id = fork_id(base, next)?;
    create(b.store, &id, agent, Some(newest.clone()), &read.events)?;
    let live = loaded(b, &id)?;
    let appended = read.events.len();
    lock_live(&live).body = body.memo(appended, read);
    Ok(Synced {
        live,
        appended,
        diverged_from: Some(newest),
        continued: false,
    })
}

/// Appends the body's new items to session `id` when its live state remembers the body's
/// beginning and the log past that point is a prefix of what follows; `None` otherwise.
fn continuation(
    b: Backend<'_>,
    body: &RequestBody,
    id: &SessionId,
    live: Arc<Mutex<Live>>,
) -> Result<Option<Synced>> {
    let mut state = lock_live(&live);
    let read = state.body.as_ref().and_then(|memo| {
        body.read_continuation(b, id, memo)
            .map(|read| (memo.events(), read))
    });
    let Some((before, read)) = read else {
        return Ok(None);
    };
    let view = loom_core::conversation(state.events());
    let logged = &view[before.min(view.len())..];
    if !extends_view(logged, &read.events) {
        return Ok(None);
    }
    let logged = logged.len();
    drop(view);
    let new = &read.events[logged..];
    state.stage(b, new)?;
    let appended = new.len();
    state.body = body.memo(before + read.events.len(), read);
    drop(state);
    Ok(Some(Synced {
        live,
        appended,
        diverged_from: None,
        continued: true,
    }))
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

/// Whether `history` starts with the whole of a log's conversation (see
/// [`loom_core::conversation`]).
fn extends_view(view: &[Said<'_>], history: &[NewEvent]) -> bool {
    view.len() <= history.len() && view.iter().zip(history).all(|(l, h)| same(l.body, &h.body))
}

/// How a history continues a session whose conversation it does not extend, as the client's
/// rewrite of it.
#[derive(Debug, PartialEq)]
struct RewritePlan {
    /// The history's first `kept` events are events of the conversation, in order.
    kept: usize,
    /// The conversation's events the history no longer holds in their place.
    replaced: Vec<[Seq; 2]>,
    /// The history's events after the kept ones that say what a replaced message said: the
    /// client's rebuilt context, sent again unchanged (by index into the history, with the seq
    /// of the event holding the content), recorded as repeats of it.
    repeats: Vec<(usize, Seq)>,
    /// Whether the client compacted its history.
    compaction: bool,
}

/// Text Claude Code opens a compacted conversation with.
const CONTINUED_MARK: &str = "This session is being continued from a previous conversation";

/// The rewrite that turns the log's conversation into `history`, when the history is the same
/// conversation rewritten by its client: it opens with events of the conversation and either
/// still holds the model's latest reply (context the client rebuilds every turn was moved or
/// changed, as aider's files in chat are, or old messages were dropped by a client's window) or
/// marks itself as compacted (a `compaction` block or item, or Claude Code's continuation
/// summary). `None` for any other divergence (a regenerated reply,
/// another run of the same task, a side request): those are forks.
fn rewrite_plan(log: &[Event], history: &[NewEvent]) -> Option<RewritePlan> {
    let view = loom_core::conversation(log);
    // The longest opening of the history that is a subsequence of the conversation, matched
    // as early as possible (which finds the longest such opening).
    let mut matched = vec![false; view.len()];
    let mut j = 0;
    let mut kept = 0;
    for h in history {
        let Some(at) = (j..view.len()).find(|&at| same(view[at].body, &h.body)) else {
            break;
        };
        matched[at] = true;
        j = at + 1;
        kept += 1;
    }
    if kept == 0 {
        return None;
    }
    let latest_reply = view
        .iter()
        .rposition(|e| matches!(e.body, EventBody::Assistant { .. }));
    let kept_reply = latest_reply.is_none_or(|at| matched[at]);
    let compaction = history[kept..].iter().any(|e| compacted(&e.body));
    if !kept_reply && !compaction {
        return None;
    }
    let replaced: Vec<Seq> = view
        .iter()
        .zip(&matched)
        .filter(|(_, m)| !**m)
        .map(|(e, _)| e.seq)
        .collect();
    if replaced.is_empty() {
        return None;
    }
    // The replaced messages the client sent again unchanged, matched in order.
    let mut repeats = Vec::new();
    let mut from = 0;
    let moved: Vec<&Said<'_>> = view
        .iter()
        .zip(&matched)
        .filter(|(e, m)| !**m && e.body.repeatable())
        .map(|(e, _)| e)
        .collect();
    for (i, h) in history.iter().enumerate().skip(kept) {
        if let Some(at) = (from..moved.len()).find(|&at| same(moved[at].body, &h.body)) {
            repeats.push((i, moved[at].origin));
            from = at + 1;
        }
    }
    Some(RewritePlan {
        kept,
        replaced: runs(&replaced),
        repeats,
        compaction,
    })
}

/// Whether an event marks a history its client compacted.
fn compacted(body: &EventBody) -> bool {
    let content = match body {
        EventBody::User { content, .. } | EventBody::System { content } => content,
        EventBody::Assistant {
            content: Some(content),
            ..
        } => content,
        _ => return false,
    };
    match content {
        loom_core::MessageContent::Text(t) => t.starts_with(CONTINUED_MARK),
        loom_core::MessageContent::Parts(parts) => parts.iter().any(|p| match p {
            loom_core::ContentPart::Text { text } => text.starts_with(CONTINUED_MARK),
            loom_core::ContentPart::Opaque { .. } => p.opaque_type() == Some("compaction"),
            loom_core::ContentPart::Image { .. } => false,
        }),
    }
}

/// Sorted seqs as inclusive runs.
fn runs(seqs: &[Seq]) -> Vec<[Seq; 2]> {
    let mut out: Vec<[Seq; 2]> = Vec::new();
    for &s in seqs {
        match out.last_mut() {
            Some(run) if run[1] + 1 == s => run[1] = s,
            _ => out.push([s, s]),
        }
    }
    out
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
            // Clients trim what they send back (aider strips the reply's last newline). A
            // reply's text blocks are fragments of one text (as the reply was logged), so a
            // history's are joined as they are, with nothing between.
            let text = |c: &Option<loom_core::MessageContent>| match c {
                Some(loom_core::MessageContent::Text(t)) => t.trim_end().to_owned(),
                Some(loom_core::MessageContent::Parts(parts)) => parts
                    .iter()
                    .filter_map(|p| match p {
                        loom_core::ContentPart::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect::<String>()
                    .trim_end()
                    .to_owned(),
                None => String::new(),
            };
            text(c1) == text(c2)
                && t1.len() == t2.len()
                && t1.iter().zip(t2).all(|(a, b)| {
                    a.id == b.id && a.name == b.name && same_arguments(&a.arguments, &b.arguments)
                })
        }
        (
            EventBody::User {
                content: c1,
                name: n1,
            },
            EventBody::User {
                content: c2,
                name: n2,
            },
        ) => n1 == n2 && same_content(c1, c2),
        (EventBody::System { content: c1 }, EventBody::System { content: c2 }) => {
            same_content(c1, c2)
        }
        _ => logged == sent,
    }
}

/// Content equal by meaning: a text and a list holding only that text are the same message
/// (clients move between the two forms), and opaque parts compare as JSON by meaning.
fn same_content(a: &loom_core::MessageContent, b: &loom_core::MessageContent) -> bool {
    use loom_core::{ContentPart, MessageContent};
    let parts = |c: &MessageContent| -> Vec<ContentPart> {
        match c {
            MessageContent::Text(t) => vec![ContentPart::Text { text: t.clone() }],
            MessageContent::Parts(p) => p.clone(),
        }
    };
    if a == b {
        return true;
    }
    let (x, y) = (parts(a), parts(b));
    x.len() == y.len()
        && x.iter().zip(&y).all(|(p, q)| match (p, q) {
            (
                ContentPart::Opaque {
                    api: a1,
                    whole: w1,
                    value: v1,
                },
                ContentPart::Opaque {
                    api: a2,
                    whole: w2,
                    value: v2,
                },
            ) => a1 == a2 && w1 == w2 && same_value(v1, v2),
            _ => p == q,
        })
}

/// Arguments are the same text, or the same JSON value by meaning (a client may re-serialise
/// them, and add fields with their default value: Claude Code re-sends an Edit call's input with
/// `"replace_all": false` added).
fn same_arguments(a: &str, b: &str) -> bool {
    a == b
        || matches!(
            (
                serde_json::from_str::<serde_json::Value>(a),
                serde_json::from_str::<serde_json::Value>(b),
            ),
            (Ok(x), Ok(y)) if same_value(&x, &y)
        )
}

/// JSON values equal by meaning: key order aside, an object field present on one side only is
/// the same as absent when it holds a default (`false`, `null`).
pub(crate) fn same_value(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    let default = |v: &Value| matches!(v, Value::Null | Value::Bool(false));
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.iter().all(|(k, v)| match y.get(k) {
                Some(w) => same_value(v, w),
                None => default(v),
            }) && y.iter().all(|(k, w)| x.contains_key(k) || default(w))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same_value(v, w))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Bytes;
    use loom_core::Api;
    use loom_core::{MessageContent, ToolCall};
    use loom_session::MemoryBackend as TestBackend;
    use serde_json::{json, Value};

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

    fn chat(messages: &[Value]) -> RequestBody {
        let body = json!({"model": "gpt-4o", "messages": messages});
        RequestBody::parse(Api::OpenaiChat, Bytes::from(body.to_string())).unwrap()
    }

    fn u(text: &str) -> Value {
        json!({"role": "user", "content": text})
    }

    fn a(text: &str, calls: &[&str]) -> Value {
        let calls: Vec<Value> = calls
            .iter()
            .map(|id| json!({"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}}))
            .collect();
        if calls.is_empty() {
            json!({"role": "assistant", "content": text})
        } else {
            json!({"role": "assistant", "content": text, "tool_calls": calls})
        }
    }

    fn tool(id: &str, text: &str) -> Value {
        json!({"role": "tool", "tool_call_id": id, "content": text})
    }

    /// Syncs `body` into the conversation `s` and writes the turn: (session, appended, diverged
    /// from, continued).
    fn run(b: Backend<'_>, body: &RequestBody) -> Result<(String, usize, Option<String>, bool)> {
        let r = sync(
            b,
            &SessionId::new("s").unwrap(),
            &AgentId::new("a").unwrap(),
            body,
        )?;
        // As a call does once it has rendered: the turn is written.
        lock_live(&r.live).commit(b, None, None)?;
        let id = lock_live(&r.live).id().to_string();
        Ok((
            id,
            r.appended,
            r.diverged_from.map(|d| d.to_string()),
            r.continued,
        ))
    }

    #[test]
    fn only_the_new_part_is_appended_and_a_divergence_forks() {
        let t = TestBackend::new(8);
        let (store, b) = (&t.store, t.backend());
        let base = SessionId::new("s").unwrap();
        let mut history = vec![u("hi")];
        let (_, appended, diverged, _) = run(b, &chat(&history)).unwrap();
        assert_eq!((appended, diverged), (1, None));
        // The reply is logged behind the live session's back, as another server would.
        store.append(&base, &[assistant("hello", &[])]).unwrap();
        // The client sends the reply back, and a new message: only those are read.
        history.push(a("hello", &[]));
        history.push(u("more"));
        let (id, appended, _, continued) = run(b, &chat(&history)).unwrap();
        assert_eq!((id.as_str(), appended, continued), ("s", 1, true));
        assert_eq!(store.latest_seq(&base).unwrap(), 3);
        // The same history again appends nothing.
        assert_eq!(run(b, &chat(&history)).unwrap().1, 0);
        // A history that departs before the model's latest reply (an edited or regenerated
        // turn) starts a fork that records where it came from.
        let edited = vec![u("hi"), a("something else", &[]), u("other")];
        let (fork_id, _, diverged, continued) = run(b, &chat(&edited)).unwrap();
        assert_eq!((fork_id.as_str(), continued), ("s~2", false));
        assert_eq!(diverged.as_deref(), Some("s"));
        assert_eq!(
            store.latest_seq(&base).unwrap(),
            3,
            "the log is never rewritten"
        );
        let fork = store
            .session(&SessionId::new(&fork_id).unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(fork.parent.as_ref().map(SessionId::as_str), Some("s"));
        // Each history continues the fork it extends, each read from where it was left.
        let mut first = history.clone();
        first.push(u("again"));
        assert_eq!(run(b, &chat(&first)).unwrap(), ("s".into(), 1, None, true));
        let mut second = edited.clone();
        second.push(u("again"));
        assert_eq!(
            run(b, &chat(&second)).unwrap(),
            ("s~2".into(), 1, None, true)
        );
    }

    #[test]
    fn a_history_rewritten_after_the_latest_reply_continues_as_the_clients_rewrite() {
        let t = TestBackend::new(8);
        let (store, b) = (&t.store, t.backend());
        let base = SessionId::new("s").unwrap();
        let context = |v: &str| u(&format!("files in chat, version {v}"));
        run(b, &chat(&[context("1"), u("change a")])).unwrap();
        store.append(&base, &[assistant("done a", &[])]).unwrap();
        // The context moves after the history, in a new version.
        let history = vec![u("change a"), a("done a", &[]), context("2"), u("change b")];
        let (id, appended, diverged, _) = run(b, &chat(&history)).unwrap();
        assert_eq!((id.as_str(), diverged), ("s", None));
        assert_eq!(
            appended, 3,
            "the rewrite, the new context and the new message"
        );
        let log = store.read(&base, 1..=u64::MAX).unwrap();
        assert_eq!(
            log[3].body,
            EventBody::Rewrite {
                replaced: vec![[1, 1]],
                compaction: false
            }
        );
        // The session's conversation is the history: the next call extends it.
        store.append(&base, &[assistant("done b", &[])]).unwrap();
        let mut next = history.clone();
        next.push(a("done b", &[]));
        next.push(u("change c"));
        let (id, appended, diverged, _) = run(b, &chat(&next)).unwrap();
        assert_eq!((id.as_str(), appended, diverged), ("s", 1, None));
    }

    /// A conversation of `turns` calls in `api`'s shape, each body extending the last, with
    /// calls and results (sometimes two calls in a turn).
    fn conversation(api: Api, turns: usize) -> Vec<Value> {
        let mut items: Vec<Value> = Vec::new();
        let mut bodies = Vec::new();
        for turn in 0..turns {
            let ids: Vec<String> = (0..1 + turn % 2)
                .map(|k| format!("call_{turn}_{k}"))
                .collect();
            match api {
                Api::OpenaiChat => {
                    if turn == 0 {
                        items.push(json!({"role": "system", "content": "be brief"}));
                        items.push(u("fix the bug"));
                    } else {
                        let calls: Vec<&str> = ids.iter().map(String::as_str).collect();
                        items.push(a(&format!("step {turn}"), &calls));
                        for id in &ids {
                            items.push(tool(id, &format!("output of {id}\nline two")));
                        }
                    }
                    bodies.push(json!({"model": "gpt-4o", "messages": items}));
                }
                Api::Anthropic => {
                    if turn == 0 {
                        items.push(json!({"role": "user", "content": "fix the bug"}));
                    } else {
                        let mut content =
                            vec![json!({"type": "text", "text": format!("step {turn}")})];
                        content.extend(ids.iter().map(|id| json!({"type": "tool_use", "id": id, "name": "f", "input": {"n": turn}})));
                        items.push(json!({"role": "assistant", "content": content}));
                        let results: Vec<Value> = ids.iter().map(|id| json!({"type": "tool_result", "tool_use_id": id, "content": format!("out {id}")})).collect();
                        items.push(json!({"role": "user", "content": results}));
                    }
                    bodies.push(json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "system": "be brief", "messages": items}));
                }
                Api::OpenaiResponses => {
                    if turn == 0 {
                        items.push(json!({"role": "user", "content": "fix the bug"}));
                    } else {
                        items.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": format!("step {turn}")}]}));
                        for id in &ids {
                            items.push(json!({"type": "function_call", "call_id": id, "name": "f", "arguments": "{}"}));
                        }
                        for id in &ids {
                            items.push(json!({"type": "function_call_output", "call_id": id, "output": format!("out {id}")}));
                        }
                    }
                    bodies.push(
                        json!({"model": "gpt-4o", "instructions": "be brief", "input": items}),
                    );
                }
            }
        }
        bodies
    }

    #[test]
    fn reading_only_the_new_messages_logs_what_reading_the_whole_body_logs() {
        for api in [Api::OpenaiChat, Api::Anthropic, Api::OpenaiResponses] {
            let (fast, slow) = (TestBackend::new(8), TestBackend::new(8));
            let mut continued = 0;
            for body in conversation(api, 12) {
                let body = RequestBody::parse(api, Bytes::from(body.to_string())).unwrap();
                continued += usize::from(run(fast.backend(), &body).unwrap().3);
                // The other server forgets every body, so it reads each whole.
                let r = run(slow.backend(), &body).unwrap();
                assert!(!r.3);
                let live = slow.live.get(slow.backend(), &SessionId::new("s").unwrap());
                lock_live(&live.unwrap().unwrap()).body = None;
            }
            assert_eq!(
                continued, 11,
                "{api:?}: every call after the first read only its news"
            );
            let s = SessionId::new("s").unwrap();
            let bodies = |t: &TestBackend| -> Vec<EventBody> {
                let n = t.store.latest_seq(&s).unwrap();
                t.store
                    .read(&s, 1..=n)
                    .unwrap()
                    .into_iter()
                    .map(|e| e.body)
                    .collect()
            };
            assert_eq!(bodies(&fast), bodies(&slow), "{api:?}");
            assert!(bodies(&fast).len() >= 25);
        }
    }

    #[test]
    fn a_bad_continuation_gets_the_error_of_the_whole_body() {
        let t = TestBackend::new(8);
        let b = t.backend();
        let mut history = vec![u("hi"), a("", &["c1"]), tool("c1", "ok")];
        run(b, &chat(&history)).unwrap();
        // A result for a call nobody made, at its place in the whole conversation.
        history.push(a("next", &[]));
        history.push(tool("nope", "?"));
        let e = run(b, &chat(&history)).unwrap_err();
        assert_eq!(
            e.field.as_deref(),
            Some("messages[4].tool_call_id"),
            "{e:?}"
        );
        // A call id the conversation already used.
        history.pop();
        history.pop();
        history.push(a("again", &["c1"]));
        history.push(tool("c1", "ok"));
        let e = run(b, &chat(&history)).unwrap_err();
        assert_eq!(
            e.field.as_deref(),
            Some("messages[3].tool_calls[0].id"),
            "{e:?}"
        );
        assert_eq!(
            t.store.latest_seq(&SessionId::new("s").unwrap()).unwrap(),
            3,
            "nothing stored"
        );
    }

    #[test]
    fn a_changed_system_prompt_is_read_whole() {
        let t = TestBackend::new(8);
        let b = t.backend();
        let body = |system: &str, messages: &[Value]| {
            let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 5, "system": system, "messages": messages});
            RequestBody::parse(Api::Anthropic, Bytes::from(body.to_string())).unwrap()
        };
        run(b, &body("one", &[u("hi")])).unwrap();
        let r = run(b, &body("two", &[u("hi"), a("yes", &[]), u("more")])).unwrap();
        assert_eq!((r.0.as_str(), r.3), ("s~2", false));
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
