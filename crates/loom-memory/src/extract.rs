//! The optional LLM extractor (issue 18, item 2): a model distils durable facts from a session's
//! log, each written as an L4 item of kind `fact` whose provenance is the lines it came from.
//!
//! The deterministic index stays the base of memory; facts are added beside it. A session is
//! read in windows of numbered lines (user and assistant turns, step observations); the model
//! answers each window with `{"facts": [{"text", "seqs"}]}`. Every fact is checked before it is
//! written: its text must be a non-empty sentence of bounded size, and every seq it cites must be
//! a line of the window it was shown, so a fact never points at an event the model did not see.
//! A fact that fails is left out and reported with the field and the reason; a reply that is not
//! that JSON at all stops the extraction with an error naming the session and the seqs.
//!
//! Facts go through the same write path as derived items, so the same fact extracted twice is
//! one item with two sources and a newer value supersedes an older one. How far each session has
//! been read is kept per extractor (its API and model) with the facts, in the same transaction:
//! running it again reads only what was appended since, and a crash never loses or repeats a
//! window.

use loom_core::time::utc_date;
use loom_core::Api;
use loom_core::{AgentId, EventBody, Seq, SessionId, Step};
use loom_provider::client::{Client, ProviderConfig};
use loom_store::Store;
use serde::Serialize;
use serde_json::Value;

use crate::error::{MemoryError, Result};
use crate::item::{ItemKind, NewItem, Provenance, Tier, Written};
use crate::notes::MAX_NOTE_BYTES;
use crate::Memory;

/// Tokens of log lines shown to the model per call unless the caller says otherwise: enough
/// context for a model to resolve who "she" is, small enough that one call stays cheap.
pub const DEFAULT_WINDOW_TOKENS: u64 = 3_000;

/// The longest a single log line is shown (characters); longer texts are cut, since a fact worth
/// keeping is stated in the first part of a turn far more often than in a pasted log's tail.
const MAX_LINE_CHARS: usize = 4_000;

/// The most output tokens a reply may use.
const MAX_OUTPUT_TOKENS: u32 = 2_048;

/// What the model is told. The reply format is fixed so that it can be checked, and each fact
/// carries the seqs of its lines so that its provenance comes from the log, not from the model.
pub const INSTRUCTIONS: &str = "You distil durable facts from a conversation log for an \
agent's long-term memory. Each line of the log starts with its sequence number in brackets, \
then its date and who spoke. Write each fact as one short, self-contained sentence in the \
third person: name people instead of using pronouns, and give absolute dates instead of \
relative ones (\"last week\" said on 2023-05-08 is \"the week before 2023-05-08\"). Write a \
fact about something that can change as \"SUBJECT is VALUE\" with a short subject (\"Mel is in \
Austin\", \"the deadline is 2023-06-01\"), so that a later value replaces it. Keep facts \
about people, their plans, preferences, relationships, decisions and events, and the state of \
the work; leave out greetings, small talk and anything uncertain. Reply with JSON only, no \
prose and no code fence: {\"facts\": [{\"text\": \"...\", \"seqs\": [12, 14]}]}, where seqs are \
the sequence numbers of the lines the fact comes from. Reply {\"facts\": []} when nothing is \
worth keeping.";

/// A model that answers the extractor's prompt: the provider client in production, anything in
/// tests.
pub trait FactModel: Send + Sync {
    /// A stable name (API and model): how far each session has been read is kept per name, so
    /// another model reads the log again.
    fn name(&self) -> &str;

    /// The reply's text to `instructions` and `input`, or why there is none.
    fn complete(&self, instructions: &str, input: &str) -> std::result::Result<Reply, String>;
}

/// A model's answer with what it cost.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply {
    /// The visible text.
    pub text: String,
    /// Input tokens the provider billed (0 when not reported).
    pub input_tokens: u64,
    /// Output tokens the provider billed (0 when not reported).
    pub output_tokens: u64,
}

/// A [`FactModel`] behind Loom's provider client: any API it speaks (Chat Completions,
/// Responses, Messages), any OpenAI-compatible server.
pub struct ProviderFacts {
    client: Client,
    api: Api,
    model: String,
    name: String,
}

impl std::fmt::Debug for ProviderFacts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderFacts")
            .field("name", &self.name)
            .field("url", &self.client.url().as_str())
            .finish_non_exhaustive()
    }
}

impl ProviderFacts {
    /// An extractor model from a provider config; its `model` is required (the body names it).
    pub fn new(config: ProviderConfig) -> Result<Self> {
        let model = config
            .model
            .clone()
            .filter(|m| !m.trim().is_empty())
            .ok_or(MemoryError::InvalidInput {
                field: "extractor.model",
                reason: "the extractor needs a model name".into(),
            })?;
        let api = config.api;
        let client = Client::new(config).map_err(|e| MemoryError::InvalidInput {
            field: "extractor",
            reason: e.to_string(),
        })?;
        let name = format!("{}:{model}", loom_wire::dialect(api).endpoint_name());
        Ok(Self {
            client,
            api,
            model,
            name,
        })
    }

    /// The request body for `api`: the instructions as its system part, the log as one user
    /// message, the output bounded.
    fn body(&self, instructions: &str, input: &str) -> Value {
        loom_wire::dialect(self.api).one_turn(
            &self.model,
            instructions,
            input,
            MAX_OUTPUT_TOKENS.into(),
        )
    }
}

impl FactModel for ProviderFacts {
    fn name(&self) -> &str {
        &self.name
    }

    fn complete(&self, instructions: &str, input: &str) -> std::result::Result<Reply, String> {
        let body = self.body(instructions, input);
        let done = self
            .client
            .complete(&body, false, &mut |_| {})
            .map_err(|e| e.to_string())?;
        let usage = done.reply.usage.unwrap_or_default();
        Ok(Reply {
            text: done.reply.content.unwrap_or_default(),
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens.unwrap_or(0),
        })
    }
}

/// How far an extractor has read a session: written with the facts of the window that ends there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtractMark {
    /// Whose memory.
    pub agent: AgentId,
    /// The session read.
    pub session: SessionId,
    /// The extractor's [`FactModel::name`].
    pub extractor: String,
    /// The last seq read.
    pub to_seq: Seq,
}

/// A fact the extractor left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rejected {
    /// The window's first and last seq.
    pub from_seq: Seq,
    /// See `from_seq`.
    pub to_seq: Seq,
    /// The field at fault (`facts[2].seqs`).
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

/// What extracting one session did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ExtractReport {
    /// The session read.
    pub session: Option<SessionId>,
    /// The extractor.
    pub extractor: String,
    /// Windows sent to the model.
    pub windows: usize,
    /// The seq the session had been read to before (0: never).
    pub from_mark: Seq,
    /// The seq it has been read to now.
    pub to_mark: Seq,
    /// Facts accepted.
    pub facts: usize,
    /// New items written.
    pub created: usize,
    /// Facts merged into an item that says the same (exactly or nearly).
    pub duplicates: usize,
    /// Facts already written from the same lines.
    pub known: usize,
    /// Facts left out, with the field and reason.
    pub rejected: Vec<Rejected>,
    /// Input tokens billed, as the provider reported them.
    pub input_tokens: u64,
    /// Output tokens billed, as the provider reported them.
    pub output_tokens: u64,
}

/// One numbered line of the log as the model sees it.
struct Line {
    seq: Seq,
    ts_ms: i64,
    text: String,
}

/// Extracts facts from `session`'s log with `model` and writes them to `memory` (under `agent`,
/// or the session's own agent), from where the extractor last stopped.
///
/// `window_tokens` bounds the log shown per call (counted with the memory's tokenizer). On a
/// reply that cannot be read, the windows before it stay written and the error names the window;
/// running it again resumes there.
pub fn extract(
    store: &dyn Store,
    memory: &dyn Memory,
    model: &dyn FactModel,
    session: &SessionId,
    agent: Option<&AgentId>,
    window_tokens: u64,
) -> Result<ExtractReport> {
    let log = |source| MemoryError::Log {
        session: session.clone(),
        source: Box::new(source),
    };
    let info = store
        .session(session)
        .map_err(log)?
        .ok_or_else(|| MemoryError::SessionNotFound(session.clone()))?;
    let agent = agent.unwrap_or(&info.agent);
    let mark = memory.extracted_to(agent, session, model.name())?;
    let mut report = ExtractReport {
        session: Some(session.clone()),
        extractor: model.name().to_owned(),
        from_mark: mark,
        to_mark: mark,
        ..ExtractReport::default()
    };
    if mark >= info.event_count {
        return Ok(report);
    }
    let events = store
        .read(session, mark + 1..=info.event_count)
        .map_err(log)?;
    // Only the steps of results after the mark: a rerun reads what is new.
    let steps = store.steps_after(session, mark).map_err(log)?;
    let lines = lines(&events, &steps, mark);
    let windows = windows(memory, &lines, window_tokens.max(1));
    let count = windows.len();
    for (i, window) in windows.into_iter().enumerate() {
        // The last window also covers the events after it that give no line (tool calls).
        let end = if i + 1 == count {
            info.event_count
        } else {
            window.last().map_or(mark, |l| l.seq)
        };
        let input: String = window.iter().map(|l| l.text.as_str()).collect();
        let reply = model
            .complete(INSTRUCTIONS, &input)
            .map_err(|reason| extract_error(session, window, &reason))?;
        report.windows += 1;
        report.input_tokens += reply.input_tokens;
        report.output_tokens += reply.output_tokens;
        let items = facts(agent, session, window, &reply.text, &mut report.rejected)?;
        report.facts += items.len();
        let mark = ExtractMark {
            agent: agent.clone(),
            session: session.clone(),
            extractor: model.name().to_owned(),
            to_seq: end,
        };
        for w in memory.write_extracted(&items, &mark)? {
            match w {
                Written::Created(_) => report.created += 1,
                Written::Duplicate(_) | Written::NearDuplicate(_) => report.duplicates += 1,
                Written::Known(_) => report.known += 1,
            }
        }
        report.to_mark = end;
    }
    if count == 0 {
        // Nothing to read (tool calls only): still remembered as read.
        let mark = ExtractMark {
            agent: agent.clone(),
            session: session.clone(),
            extractor: model.name().to_owned(),
            to_seq: info.event_count,
        };
        memory.write_extracted(&[], &mark)?;
        report.to_mark = info.event_count;
    }
    Ok(report)
}

/// The error for a window whose call or reply failed.
fn extract_error(session: &SessionId, window: &[Line], reason: &str) -> MemoryError {
    MemoryError::Extract {
        session: session.clone(),
        from_seq: window.first().map_or(0, |l| l.seq),
        to_seq: window.last().map_or(0, |l| l.seq),
        reason: reason.to_owned(),
    }
}

/// The log's lines after `mark`: user and assistant text and step observations, in seq order.
fn lines(events: &[loom_core::Event], steps: &[loom_store::StepRecord], mark: Seq) -> Vec<Line> {
    let mut out = Vec::new();
    for event in events {
        let (who, text) = match &event.body {
            EventBody::User { content, .. } => ("user", content.text()),
            EventBody::Assistant {
                content: Some(content),
                ..
            } => ("assistant", content.text()),
            _ => continue,
        };
        if let Some(line) = line(event.seq, event.ts_ms, who, text.trim()) {
            out.push(line);
        }
    }
    for record in steps {
        let Ok(step) = serde_json::from_value::<Step>(record.body.clone()) else {
            continue;
        };
        if step.result_seq <= mark {
            continue;
        }
        if let Some(line) = line(
            step.result_seq,
            step.timestamp_ms,
            "tool result",
            step.observation.trim(),
        ) {
            out.push(line);
        }
    }
    out.sort_by_key(|l| l.seq);
    out
}

/// One line, `[seq] date who: text`, the text cut to [`MAX_LINE_CHARS`]; none for empty text.
fn line(seq: Seq, ts_ms: i64, who: &str, text: &str) -> Option<Line> {
    if text.is_empty() {
        return None;
    }
    let mut shown: String = text.chars().take(MAX_LINE_CHARS).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    let shown = shown.replace('\n', " ");
    Some(Line {
        seq,
        ts_ms,
        text: format!("[{seq}] {} {who}: {shown}\n", utc_date(ts_ms)),
    })
}

/// Consecutive runs of lines of at most `budget` tokens each (a longer line alone).
fn windows<'a>(memory: &dyn Memory, lines: &'a [Line], budget: u64) -> Vec<&'a [Line]> {
    let mut out = Vec::new();
    let (mut start, mut used) = (0, 0);
    for (i, l) in lines.iter().enumerate() {
        let n = memory.count_tokens(&l.text);
        if i > start && used + n > budget {
            out.push(&lines[start..i]);
            (start, used) = (i, 0);
        }
        used += n;
    }
    if start < lines.len() {
        out.push(&lines[start..]);
    }
    out
}

/// The facts of a reply to `window`, checked; those that fail go to `rejected`.
fn facts(
    agent: &AgentId,
    session: &SessionId,
    window: &[Line],
    reply: &str,
    rejected: &mut Vec<Rejected>,
) -> Result<Vec<NewItem>> {
    let (from_seq, to_seq) = (
        window.first().map_or(0, |l| l.seq),
        window.last().map_or(0, |l| l.seq),
    );
    let bad = |reason: String| MemoryError::Extract {
        session: session.clone(),
        from_seq,
        to_seq,
        reason,
    };
    let value: Value = serde_json::from_str(json_part(reply)).map_err(|e| {
        bad(format!(
            "the reply is not the JSON asked for ({e}); it begins {:?}",
            reply.chars().take(80).collect::<String>()
        ))
    })?;
    let list = value
        .get("facts")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("the reply has no `facts` array".into()))?;
    let mut out = Vec::new();
    for (i, fact) in list.iter().enumerate() {
        let reject = |field: &str, reason: String| Rejected {
            from_seq,
            to_seq,
            field: format!("facts[{i}].{field}"),
            reason,
        };
        match checked(fact, window) {
            Ok((text, first, last)) => out.push(NewItem {
                agent: agent.clone(),
                tier: Tier::L4,
                kind: ItemKind::Fact,
                text,
                source: Provenance {
                    session: session.clone(),
                    from_seq: first.seq,
                    to_seq: last.seq,
                    ts_ms: last.ts_ms,
                },
            }),
            Err((field, reason)) => rejected.push(reject(field, reason)),
        }
    }
    Ok(out)
}

/// A fact's text and its first and last cited lines, or the field at fault and why.
fn checked<'a>(
    fact: &Value,
    window: &'a [Line],
) -> std::result::Result<(String, &'a Line, &'a Line), (&'static str, String)> {
    let text = fact
        .get("text")
        .and_then(Value::as_str)
        .map(str::trim)
        .ok_or(("text", "expected a string".to_owned()))?;
    if text.is_empty() {
        return Err(("text", "empty".into()));
    }
    if text.len() > MAX_NOTE_BYTES {
        return Err((
            "text",
            format!("{} bytes, more than {MAX_NOTE_BYTES}", text.len()),
        ));
    }
    let seqs = fact
        .get("seqs")
        .and_then(Value::as_array)
        .filter(|s| !s.is_empty())
        .ok_or(("seqs", "expected a non-empty array of seqs".to_owned()))?;
    let mut cited = Vec::with_capacity(seqs.len());
    for s in seqs {
        let seq = s
            .as_u64()
            .ok_or(("seqs", format!("{s} is not a seq number")))?;
        let at = window
            .iter()
            .find(|l| l.seq == seq)
            .ok_or(("seqs", format!("{seq} is not a line the model was shown")))?;
        cited.push(at);
    }
    let first = cited.iter().min_by_key(|l| l.seq);
    let last = cited.iter().max_by_key(|l| l.seq);
    match (first, last) {
        (Some(first), Some(last)) => Ok((text.to_owned(), first, last)),
        _ => Err(("seqs", "expected a non-empty array of seqs".into())),
    }
}

/// The JSON object in a reply: models asked for bare JSON still wrap it in a code fence or a
/// sentence at times, so the text from the first `{` to the last `}` is read.
fn json_part(reply: &str) -> &str {
    match (reply.find('{'), reply.rfind('}')) {
        (Some(a), Some(b)) if a < b => &reply[a..=b],
        _ => reply,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_found_inside_fences_and_prose() {
        assert_eq!(
            json_part("```json\n{\"facts\": []}\n```"),
            "{\"facts\": []}"
        );
        assert_eq!(
            json_part("Here: {\"a\": {\"b\": 1}} done"),
            "{\"a\": {\"b\": 1}}"
        );
        assert_eq!(json_part("no json"), "no json");
    }
}
