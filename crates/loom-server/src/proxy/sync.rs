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
            let mut new = read.events[view.len()..].to_vec();
            drop(view);
            state.answer_aliases(&mut new);
            state.stage(b, &new)?;
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
        // A call the client replays after its compaction (opencode its latest step, with the
        // same ids) is a new call in the log: it takes an alias, as a reused id does.
        alias_replayed(&state, &mut staged);
        state.answer_aliases(&mut staged);
        if state.stage(b, &staged).is_err() {
            // The rewrite breaks the log's pairing rules: a fork holds it.
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
    let mut new = read.events[logged..].to_vec();
    state.answer_aliases(&mut new);
    state.stage(b, &new)?;
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

/// Gives the calls of `events` whose ids the log already holds their aliases
/// ([`Live::alias_calls`], the batch's calls together, so no two take one alias), and the
/// results after each call that answer it the same.
fn alias_replayed(state: &Live, events: &mut [NewEvent]) {
    let ids = |events: &[NewEvent]| -> Vec<Vec<String>> {
        events
            .iter()
            .map(|e| match &e.body {
                EventBody::Assistant { tool_calls, .. } => {
                    tool_calls.iter().map(|c| c.id.clone()).collect()
                }
                _ => Vec::new(),
            })
            .collect()
    };
    let before = ids(events);
    state.alias_calls(events, "");
    let after = ids(events);
    let mut renamed = std::collections::HashMap::new();
    for ((e, old), new) in events.iter_mut().zip(before).zip(after) {
        renamed.extend(old.into_iter().zip(new).filter(|(o, n)| o != n));
        if let EventBody::ToolResult { call_id, .. } = &mut e.body {
            if let Some(alias) = renamed.get(call_id.as_str()) {
                *call_id = alias.clone();
            }
        }
    }
}

/// Whether a call id in the log is `sent`, or the alias the log gave it (`<sent>_r<n>`).
fn same_call_id(logged: &str, sent: &str) -> bool {
    logged == sent
        || logged.strip_prefix(sent).is_some_and(|rest| {
            rest.strip_prefix("_r")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
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

/// A client's own compaction as it shows on the wire: the instruction that ends its summary
/// request, and how the conversation that continues from the summary opens.
struct ClientCompaction {
    client: &'static str,
    /// Text in the last user message of the request that asks the model for the summary.
    prompt: &'static str,
    /// Text that opens the window continuing from the summary (a message starting with it).
    opening: &'static str,
}

/// The clients' compactions Loom knows: the table a new client's signature is added to.
/// (A `compaction` block or item, Anthropic's and Codex's v2, needs no entry: it names itself.)
const CLIENT_COMPACTIONS: [ClientCompaction; 4] = [
    ClientCompaction {
        client: "Claude Code",
        prompt: "CRITICAL: Respond with TEXT ONLY",
        opening: "This session is being continued from a previous conversation",
    },
    ClientCompaction {
        client: "Codex (local compaction)",
        prompt: "You are performing a CONTEXT CHECKPOINT COMPACTION",
        opening: "Another language model started to solve this problem",
    },
    ClientCompaction {
        // Its summary request holds the conversation as text (a conversation of its own); the
        // window after it opens with this question, then the summary as the model's reply.
        client: "opencode",
        prompt: "Create a new anchored summary from the conversation history",
        opening: "What did we do so far?",
    },
    ClientCompaction {
        // Its summarizer is a request of its own: this instruction as the system prompt, the
        // conversation as one user message of text. The summary then opens the user message that
        // takes the place of the summarised turns (followed by the assistant's "Ok.").
        client: "aider",
        prompt: "*Briefly* summarize this partial conversation about programming",
        opening: "I spoke to you previously about a number of things.",
    },
];

/// Whether `text` opens a conversation a client compacted ([`CLIENT_COMPACTIONS`]): a line of
/// it starts with a client's opening (Claude Code puts its context reminders before it, in the
/// same message).
fn opens_compacted(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim_start();
        CLIENT_COMPACTIONS
            .iter()
            .any(|c| line.starts_with(c.opening))
    })
}

/// The client whose summary instruction `text` holds ([`CLIENT_COMPACTIONS`]).
fn summary_prompt(text: &str) -> Option<&'static str> {
    CLIENT_COMPACTIONS
        .iter()
        .find(|c| text.contains(c.prompt))
        .map(|c| c.client)
}

/// The client whose summary request `event` ends, when it is one: a user message holding the
/// client's summary instruction.
fn summary_request(event: &EventBody) -> Option<&'static str> {
    let EventBody::User { content, .. } = event else {
        return None;
    };
    match content {
        loom_core::MessageContent::Text(t) => summary_prompt(t),
        loom_core::MessageContent::Parts(parts) => parts.iter().find_map(|p| match p {
            loom_core::ContentPart::Text { text } => summary_prompt(text),
            _ => None,
        }),
    }
}

/// The client whose summary request the body `client` is, when it is one: its last message is
/// the user's and holds the client's summary instruction, its system prompt is that instruction
/// (aider's summarizer), or its last item is Codex's `compaction_trigger` (its remote
/// compaction, answered with one `compaction` item).
pub(crate) fn asks_for_summary(
    api: loom_core::Api,
    client: &serde_json::Map<String, serde_json::Value>,
) -> Option<&'static str> {
    let history = client
        .get(loom_wire::dialect(api).history_field())?
        .as_array()?;
    let first = history.first()?;
    let system = match client.get("system").or_else(|| client.get("instructions")) {
        Some(system) => Some(system),
        None if first.get("role").and_then(serde_json::Value::as_str) == Some("system") => {
            first.get("content")
        }
        None => None,
    };
    if let Some(client) = system.and_then(|s| summary_prompt(&loom_wire::content_text(Some(s)))) {
        return Some(client);
    }
    let last = history.last()?;
    if last.get("type").and_then(serde_json::Value::as_str) == Some("compaction_trigger") {
        return Some("Codex (remote compaction)");
    }
    if last.get("role").and_then(serde_json::Value::as_str) != Some("user") {
        return None;
    }
    summary_prompt(&loom_wire::content_text(last.get("content")))
}

/// The rewrite that turns the log's conversation into `history`, when the history is the same
/// conversation rewritten by its client: it opens with events of the conversation and either
/// still holds the model's latest reply (context the client rebuilds every turn was moved or
/// changed, as aider's files in chat are, or old messages were dropped by a client's window) or
/// marks itself as compacted (a `compaction` block or item, or a client's continuation summary:
/// [`CLIENT_COMPACTIONS`]), or is the client's request for that summary (the conversation, its
/// newest reply perhaps left out, then the client's instruction). `None` for any other divergence (a regenerated reply,
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
    // A client's summary request: the conversation (its newest reply left out, as Claude
    // Code sends it) and the client's instruction to summarise it.
    let summary = kept + 1 == history.len()
        && history
            .last()
            .is_some_and(|e| summary_request(&e.body).is_some());
    // The marker may be the last event the opening matched: a client whose window after each
    // compaction opens the same way (opencode's "What did we do so far?") matches the one
    // before, and so may a `compaction` item the log holds as the reply that brought it.
    let compaction = summary
        || history[kept.saturating_sub(1)..]
            .iter()
            .any(|e| compacted(&e.body));
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

/// The summaries a turn's native items hold (`compaction` items, by their encrypted content):
/// two turns whose only output is one are the same turn only if it is the same summary.
fn compactions(
    native: Option<&loom_core::NativeReasoning>,
) -> impl Iterator<Item = Option<&serde_json::Value>> {
    native
        .into_iter()
        .flat_map(|n| &n.items)
        .filter(|item| item.get("type").and_then(serde_json::Value::as_str) == Some("compaction"))
        .map(|item| item.get("encrypted_content"))
}

/// Whether an event marks a history its client compacted.
fn compacted(body: &EventBody) -> bool {
    let content = match body {
        EventBody::User { content, .. } | EventBody::System { content } => content,
        EventBody::Assistant { native, .. } if compactions(native.as_ref()).next().is_some() => {
            return true
        }
        EventBody::Assistant {
            content: Some(content),
            ..
        } => content,
        _ => return false,
    };
    match content {
        loom_core::MessageContent::Text(t) => opens_compacted(t),
        loom_core::MessageContent::Parts(parts) => parts.iter().any(|p| match p {
            loom_core::ContentPart::Text { text } => opens_compacted(text),
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
                native: v1,
                ..
            },
            EventBody::Assistant {
                content: c2,
                tool_calls: t2,
                native: v2,
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
                && compactions(v1.as_ref()).eq(compactions(v2.as_ref()))
                && t1.len() == t2.len()
                && t1.iter().zip(t2).all(|(a, b)| {
                    same_call_id(&a.id, &b.id)
                        && a.name == b.name
                        && same_arguments(&a.arguments, &b.arguments)
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
        (
            EventBody::ToolResult {
                call_id: i1,
                tool_name: n1,
                content: c1,
                is_error: e1,
                ..
            },
            EventBody::ToolResult {
                call_id: i2,
                tool_name: n2,
                content: c2,
                is_error: e2,
                ..
            },
        ) if i1 != i2 => same_call_id(i1, i2) && n1 == n2 && e1 == e2 && c1 == c2,
        // A system prompt that differs only in lines its client rewrites within one
        // conversation (Claude Code's billing header) is the same message.
        (EventBody::System { content: c1 }, EventBody::System { content: c2 }) => {
            same_content(c1, c2) || same_content(&without_churn(c1), &without_churn(c2))
        }
        _ => logged == sent,
    }
}

/// Content without the lines its client rewrites within one conversation.
fn without_churn(c: &loom_core::MessageContent) -> loom_core::MessageContent {
    use loom_core::{ContentPart, MessageContent};
    match c {
        MessageContent::Text(t) => {
            MessageContent::Text(loom_wire::without_churn_lines(t).into_owned())
        }
        MessageContent::Parts(parts) => MessageContent::Parts(
            parts
                .iter()
                .map(|p| match p {
                    ContentPart::Text { text } => ContentPart::Text {
                        text: loom_wire::without_churn_lines(text).into_owned(),
                    },
                    other => other.clone(),
                })
                .collect(),
        ),
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
            ) => a1 == a2 && w1 == w2 && (same_value(v1, v2) || (*w1 && same_item(v1, v2))),
            _ => p == q,
        })
}

/// Two whole items (kept as they came) that say the same: equal but for their own `id` and what
/// their client changes from one request to the next ([`loom_wire::CHURN_FIELDS`]). Codex gives
/// its `additional_tools` item a new id when it rebuilds its context after a compaction.
fn same_item(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    let bare = |v: &serde_json::Value| match v {
        serde_json::Value::Object(m) => serde_json::Value::Object(
            m.iter()
                .filter(|(k, _)| {
                    k.as_str() != "id" && !loom_wire::CHURN_FIELDS.contains(&k.as_str())
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    };
    same_value(&bare(a), &bare(b))
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
mod tests;
