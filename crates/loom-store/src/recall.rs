//! The recall tool's answer: the original of a reference a render left in place of something
//! (`outputs/shell_017.log`, `sha256:…`, `seq:8`, `seq:12-19`), or a range of its lines, within
//! a token cap. One function for every front end that offers the tool (the proxy, `loom run`,
//! the Python package), so the tool takes the same arguments and answers the same text
//! everywhere.
//!
//! A reference is confined to one session: an alias is looked up in that session only, a
//! content address must be one the session's log or steps refer to, and a seq is one of its
//! events. A reference that fails any of these is answered as a tool error the model can read,
//! never as a failure of the request.

use loom_core::render::{Locator, RecallRefs, TokenMeter, RECALL_TOOL};
use loom_core::{
    joined_text, BlobRef, ContentStats, Event, EventBody, NewEvent, ReduceConfig, Seq, SessionId,
    ToolCall, ToolOutput,
};
use serde::Deserialize;

use crate::{BlobStore, Offloader, Resolution, Result, Store, StoreError};

/// The arguments of a recall call.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecallArgs {
    /// What to recall: an output's alias or address, `seq:N` or `seq:A-B`.
    #[serde(rename = "ref")]
    pub reference: String,
    /// The first line to return (1-based), when not the first.
    #[serde(default)]
    pub start_line: Option<u64>,
    /// The last line to return (inclusive), when not the last.
    #[serde(default)]
    pub end_line: Option<u64>,
}

impl RecallArgs {
    /// The arguments of a call as the model wrote them (a JSON object); the error is the text to
    /// answer the call with.
    pub fn parse(arguments: &str) -> std::result::Result<Self, String> {
        let text = if arguments.trim().is_empty() {
            "{}"
        } else {
            arguments
        };
        serde_json::from_str(text).map_err(|e| {
            format!(
                "{RECALL_TOOL}: the arguments are not {{\"ref\": string, \"start_line\"?: \
                 integer, \"end_line\"?: integer}}: {e}"
            )
        })
    }
}

/// A recall call's answer: the tool result's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// What the model reads.
    pub text: String,
    /// Whether the reference could not be recalled (the text says why).
    pub is_error: bool,
    /// The text's tokens by the meter the answer was cut with.
    pub tokens: u64,
}

/// The tool's definition: name, description and JSON schema of its arguments.
pub fn tool_definition() -> (&'static str, &'static str, serde_json::Value) {
    (
        RECALL_TOOL,
        "Read again, exactly, the original of something left out of this conversation to fit \
         the context window: an output a stub names (ref=outputs/shell_017.log), one earlier \
         event (ref=seq:8) or a range of earlier events (ref=seq:12-19). Lines count from 1; \
         give start_line and end_line to read part of a long original.",
        serde_json::json!({
            "type": "object",
            "properties": {
                "ref": {"type": "string", "description": "The reference the stub, group or notice gives."},
                "start_line": {"type": "integer", "minimum": 1},
                "end_line": {"type": "integer", "minimum": 1},
            },
            "required": ["ref"],
            "additionalProperties": false,
        }),
    )
}

/// The most tokens one answer may hold: the front end's own limit (`[recall] max_tokens`, 8,000
/// by default), never more than the share of the budget one output may take (`oversized`), so
/// an answer cannot fire a compaction point in the middle of a turn; at least 200.
pub fn answer_cap(max_tokens: u64, oversized: u64) -> u64 {
    max_tokens.min(oversized).max(200)
}

/// The default of [`answer_cap`]'s `max_tokens`.
pub const DEFAULT_MAX_TOKENS: u64 = 8_000;

/// Where a reference leads within a session.
enum Target {
    Blob(BlobRef),
    Events(Seq, Seq),
}

/// Answers a recall of `args` in `session`: the original, or its lines `start_line..=end_line`,
/// cut at a line boundary to at most `max_tokens` (by `meter`) with a last line saying how to
/// read the rest. `Err` only when the store fails.
pub fn answer(
    store: &dyn Store,
    blobs: &dyn BlobStore,
    reduce: &ReduceConfig,
    session: &SessionId,
    args: &RecallArgs,
    max_tokens: u64,
    meter: &dyn TokenMeter,
) -> Result<Answer> {
    let error = |text: String| Answer {
        tokens: meter.count(&text),
        text,
        is_error: true,
    };
    let reference = args.reference.trim();
    let target = match target(store, blobs, reduce, session, reference)? {
        Ok(t) => t,
        Err(why) => return Ok(error(why)),
    };
    let original = match &target {
        Target::Blob(blob) => match blobs.get(blob) {
            Ok(bytes) => text_of(bytes),
            Err(StoreError::BlobNotFound(_)) => {
                return Ok(error(format!(
                    "`{reference}`: the output is no longer stored"
                )))
            }
            Err(e) => return Err(e),
        },
        Target::Events(from, to) => {
            let events = store.read(session, *from..=*to)?;
            if from == to {
                match events.first() {
                    Some(e) => event_text(blobs, e)?,
                    None => return Ok(error(format!("`{reference}`: no such event"))),
                }
            } else {
                let mut out = String::new();
                for e in &events {
                    out.push_str(&format!(
                        "[seq {} · {}]\n{}\n",
                        e.seq,
                        label(&e.body),
                        event_text(blobs, e)?.trim_end_matches('\n')
                    ));
                }
                out
            }
        }
    };
    Ok(cut(&original, reference, args, max_tokens, meter))
}

/// The events of a hidden round, appended after seq `last`: `asked` (the turn with only its
/// recall `calls`), an answer to each call (within `cap` tokens by `meter`; `answered` sees each,
/// with the reference as the call gave it, or its raw arguments when they cannot be read),
/// and the `hidden` record naming them. The proxy and the Python package write these the same way.
#[allow(clippy::too_many_arguments)]
pub fn hidden_round(
    store: &dyn Store,
    blobs: &dyn BlobStore,
    reduce: &ReduceConfig,
    session: &SessionId,
    asked: NewEvent,
    last: Seq,
    cap: u64,
    meter: &dyn TokenMeter,
    mut answered: impl FnMut(&str, &Answer),
) -> Result<Vec<NewEvent>> {
    let ts = asked.ts_ms;
    let calls: Vec<ToolCall> = match &asked.body {
        EventBody::Assistant { tool_calls, .. } => tool_calls.clone(),
        _ => Vec::new(),
    };
    let mut events = vec![asked];
    for c in &calls {
        let (reference, a) = match RecallArgs::parse(&c.arguments) {
            Ok(args) => (
                args.reference.clone(),
                answer(store, blobs, reduce, session, &args, cap, meter)?,
            ),
            Err(why) => (
                c.arguments.clone(),
                Answer {
                    tokens: meter.count(&why),
                    text: why,
                    is_error: true,
                },
            ),
        };
        answered(&reference, &a);
        events.push(NewEvent::new(
            ts,
            EventBody::ToolResult {
                call_id: c.id.clone(),
                tool_name: c.name.clone(),
                stats: ContentStats::of(a.text.as_bytes()),
                content: ToolOutput::Text(a.text),
                is_error: a.is_error,
            },
        ));
    }
    let first = last + 1;
    events.push(NewEvent::new(
        ts,
        EventBody::Hidden {
            events: [first, first + events.len() as u64 - 1],
        },
    ));
    Ok(events)
}

/// Whether `session`'s log or steps refer to `blob` (an inline output a step offloaded, or a
/// tool result stored in the blob store): a content address is the session's only then.
pub fn refers_to(
    store: &dyn Store,
    blobs: &dyn BlobStore,
    reduce: &ReduceConfig,
    session: &SessionId,
    blob: &BlobRef,
) -> Result<bool> {
    let latest = store.latest_seq(session)?;
    let in_log = store.read(session, 1..=latest)?.iter().any(|e| {
        matches!(&e.body, EventBody::ToolResult { content: ToolOutput::Blob(b), .. } if b == blob)
    });
    if in_log {
        return Ok(true);
    }
    let off = Offloader::new(store, blobs, reduce);
    for step in off.steps(session)? {
        let Some(alias) = step.outcome_ref else {
            continue;
        };
        if let Ok(Resolution::Found(b)) = off.resolve(Some(session), &alias) {
            if &b == blob {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Where `reference` leads in `session`, or why it leads nowhere.
fn target(
    store: &dyn Store,
    blobs: &dyn BlobStore,
    reduce: &ReduceConfig,
    session: &SessionId,
    reference: &str,
) -> Result<std::result::Result<Target, String>> {
    if reference.is_empty() {
        return Ok(Err(format!(
            "{RECALL_TOOL}: give the ref a stub or notice shows"
        )));
    }
    if let Some(span) = reference
        .strip_prefix("seq:")
        .or_else(|| reference.strip_prefix("seq "))
        .or_else(|| reference.strip_prefix("seqs "))
    {
        let latest = store.latest_seq(session)?;
        let parse = |s: &str| s.trim().parse::<Seq>().ok().filter(|n| *n >= 1);
        let (from, to) = match span.split_once('-') {
            Some((a, b)) => (parse(a), parse(b)),
            None => (parse(span), parse(span)),
        };
        return Ok(match (from, to) {
            (Some(a), Some(b)) if a <= b && b <= latest => Ok(Target::Events(a, b)),
            (Some(_), Some(b)) if b > latest => {
                Err(format!("`{reference}`: the log has {latest} events"))
            }
            _ => Err(format!(
                "`{reference}` is not a seq or a range of seqs (seq:8, seq:12-19)"
            )),
        });
    }
    let off = Offloader::new(store, blobs, reduce);
    let not_here = || Err(format!("`{reference}` is not an output of this session"));
    // Aliases are made when steps are derived: derived again (a read of the log) only when the
    // alias is not there yet.
    let mut resolved = off.resolve(Some(session), reference);
    if matches!(resolved, Err(StoreError::BlobNotFound(_))) {
        off.run(session, false)?;
        resolved = off.resolve(Some(session), reference);
    }
    let blob = match resolved {
        Ok(Resolution::Found(blob)) => blob,
        Ok(Resolution::Ambiguous(_)) | Err(StoreError::BlobNotFound(_)) => return Ok(not_here()),
        Err(e) if e.is_bad_input() => return Ok(Err(format!("`{reference}`: {e}"))),
        Err(e) => return Err(e),
    };
    if reference.starts_with("sha256:") && !refers_to(store, blobs, reduce, session, &blob)? {
        return Ok(not_here());
    }
    Ok(Ok(Target::Blob(blob)))
}

/// Bytes as the text a model reads: UTF-8, or a line saying what they are.
fn text_of(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => format!(
            "[binary output, {} bytes: not shown as text]",
            e.as_bytes().len()
        ),
    }
}

/// The kind of an event as a range's block header names it.
fn label(body: &EventBody) -> String {
    match body {
        EventBody::ToolResult { tool_name, .. } => format!("tool_result {tool_name}"),
        other => other.kind().as_str().to_owned(),
    }
}

/// An event's original text: a result's output exactly, a message's text, a turn's text and
/// calls.
fn event_text(blobs: &dyn BlobStore, event: &Event) -> Result<String> {
    Ok(match &event.body {
        EventBody::ToolResult { content, .. } => match content {
            ToolOutput::Text(s) => s.clone(),
            ToolOutput::Parts(parts) => joined_text(parts),
            ToolOutput::Blob(blob) => text_of(blobs.get(blob)?),
        },
        EventBody::System { content } | EventBody::User { content, .. } => {
            content.text().into_owned()
        }
        EventBody::Assistant {
            content,
            tool_calls,
            ..
        } => {
            let mut out = content
                .as_ref()
                .map(|c| c.text().into_owned())
                .unwrap_or_default();
            for call in tool_calls {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(&format!("→ {}({})", call.name, call.arguments));
            }
            out
        }
        EventBody::Pin { content, .. } => content.clone(),
        EventBody::DirectMessage {
            source, content, ..
        } => format!("[message from {source}] {content}"),
        EventBody::AgentResult { result, .. } => result.clone(),
        other => serde_json::to_string(other).unwrap_or_default(),
    })
}

/// `original`'s lines `start_line..=end_line`, cut at a line boundary to `max_tokens`, with a
/// last line saying which lines were shown and how to read the rest.
/// Whether `lines` count at most `max_tokens` by `meter`, stopping at the first line past it.
fn within(lines: &[&str], max_tokens: u64, meter: &dyn TokenMeter) -> bool {
    let mut sum = 0u64;
    lines.iter().all(|line| {
        sum += meter.count(line);
        sum <= max_tokens
    })
}

fn cut(
    original: &str,
    reference: &str,
    args: &RecallArgs,
    max_tokens: u64,
    meter: &dyn TokenMeter,
) -> Answer {
    let lines: Vec<&str> = original.split_inclusive('\n').collect();
    let total = lines.len() as u64;
    let first = args.start_line.unwrap_or(1).max(1);
    let last = args.end_line.unwrap_or(total).min(total);
    let whole = args.start_line.is_none() && args.end_line.is_none();
    // Counted a line at a time, and no further than the cap: an original far over it (a
    // range of a thousand events) costs the cap's tokens to count, not its own.
    if whole && within(&lines, max_tokens, meter) {
        let tokens = meter.count(original);
        if tokens <= max_tokens {
            return Answer {
                tokens,
                text: original.to_owned(),
                is_error: false,
            };
        }
    }
    if first > last {
        let text = format!("`{reference}` has {total} lines; lines {first}-{last} hold nothing");
        return Answer {
            tokens: meter.count(&text),
            text,
            is_error: true,
        };
    }
    let wanted = &lines[(first - 1) as usize..last as usize];
    // Room for the closing line.
    let room = max_tokens.saturating_sub(40);
    let mut text = String::new();
    let mut tokens = 0;
    let mut shown = 0u64;
    for line in wanted {
        let t = meter.count(line);
        if shown > 0 && tokens + t > room {
            break;
        }
        text.push_str(line);
        tokens += t;
        shown += 1;
    }
    let end = first + shown - 1;
    let name = RecallRefs::Tool.name(Locator::Output(reference));
    if end < last {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!(
            "[{RECALL_TOOL}: lines {first}-{end} of {total} shown; the rest: {name} start_line={}]",
            end + 1
        ));
    } else if !whole {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("[{RECALL_TOOL}: lines {first}-{end} of {total}]"));
    }
    Answer {
        tokens: meter.count(&text),
        text,
        is_error: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemoryBlobStore, MemoryStore, NewSession};
    use loom_core::{AgentId, MessageContent};

    struct Chars;
    impl TokenMeter for Chars {
        fn count(&self, text: &str) -> u64 {
            text.len().div_ceil(4) as u64
        }
        fn name(&self) -> &str {
            "chars/4"
        }
    }

    fn session() -> (MemoryStore, MemoryBlobStore, SessionId, String) {
        let store = MemoryStore::new();
        let blobs = MemoryBlobStore::new();
        let id = SessionId::new("s").unwrap();
        let out: String = (1..=2000).map(|i| format!("line {i}\n")).collect();
        let events = vec![
            NewEvent::new(
                1,
                EventBody::User {
                    content: MessageContent::Text("Build it.".into()),
                    name: None,
                },
            ),
            NewEvent::new(
                2,
                EventBody::Assistant {
                    content: Some(MessageContent::Text("Building.".into())),
                    reasoning: None,
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "bash".into(),
                        arguments: "{\"command\":\"make\"}".into(),
                    }],
                    name: None,
                    native: None,
                },
            ),
            NewEvent::new(
                3,
                EventBody::ToolResult {
                    call_id: "c1".into(),
                    tool_name: "bash".into(),
                    stats: ContentStats::of(out.as_bytes()),
                    content: ToolOutput::Text(out.clone()),
                    is_error: false,
                },
            ),
        ];
        store
            .create_session(
                &NewSession {
                    id: id.clone(),
                    agent: AgentId::new("a").unwrap(),
                    parent: None,
                    created_ms: 0,
                },
                &events,
            )
            .unwrap();
        (store, blobs, id, out)
    }

    fn recall(reference: &str, start: Option<u64>, end: Option<u64>, cap: u64) -> Answer {
        let (store, blobs, id, _) = session();
        let args = RecallArgs {
            reference: reference.into(),
            start_line: start,
            end_line: end,
        };
        answer(
            &store,
            &blobs,
            &ReduceConfig::default(),
            &id,
            &args,
            cap,
            &Chars,
        )
        .unwrap()
    }

    #[test]
    fn an_output_comes_back_byte_for_byte() {
        let (store, blobs, id, out) = session();
        let reduce = ReduceConfig::default();
        let off = Offloader::new(&store, &blobs, &reduce);
        let alias = off.steps(&id).unwrap()[0].outcome_ref.clone().unwrap();
        let args = RecallArgs::parse(&format!("{{\"ref\": \"{alias}\"}}")).unwrap();
        let a = answer(
            &store,
            &blobs,
            &ReduceConfig::default(),
            &id,
            &args,
            100_000,
            &Chars,
        )
        .unwrap();
        assert!(!a.is_error);
        assert_eq!(a.text, out);
        assert_eq!(recall("seq:3", None, None, 100_000).text, out);
    }

    #[test]
    fn a_long_original_is_cut_at_a_line_and_says_how_to_read_on() {
        let a = recall("seq:3", None, None, 500);
        assert!(a.tokens <= 500, "{}", a.tokens);
        let last = a.text.lines().last().unwrap();
        assert!(
            last.starts_with("[loom_recall: lines 1-") && last.contains("start_line="),
            "{last}"
        );
        let a = recall("seq:3", Some(1990), None, 500);
        assert!(a.text.starts_with("line 1990\n"), "{}", a.text);
        assert!(a.text.ends_with("[loom_recall: lines 1990-2000 of 2000]"));
        let a = recall("seq:3", Some(5), Some(6), 500);
        assert!(
            a.text.starts_with("line 5\nline 6\n[loom_recall"),
            "{}",
            a.text
        );
    }

    #[test]
    fn a_range_reads_each_event_and_its_calls() {
        let a = recall("seq:1-2", None, None, 10_000);
        assert_eq!(
            a.text,
            "[seq 1 · user]\nBuild it.\n[seq 2 · assistant]\nBuilding.\n→ bash({\"command\":\"make\"})\n"
        );
    }

    #[test]
    fn what_is_not_the_sessions_is_a_tool_error() {
        for (reference, why) in [
            ("seq:9", "the log has 3 events"),
            ("seq:0", "is not a seq"),
            ("seq:3-1", "is not a seq"),
            ("outputs/none.log", "is not an output of this session"),
            (
                "sha256:0000000000000000000000000000000000000000000000000000000000000000",
                "is not an output of this session",
            ),
            ("../etc/passwd", "`../etc/passwd`"),
            ("", "give the ref"),
        ] {
            let a = recall(reference, None, None, 1_000);
            assert!(a.is_error, "{reference}: {}", a.text);
            assert!(a.text.contains(why), "{reference}: {}", a.text);
        }
        assert!(RecallArgs::parse("{\"path\": \"x\"}").is_err());
        assert!(RecallArgs::parse("not json").is_err());
    }
}
