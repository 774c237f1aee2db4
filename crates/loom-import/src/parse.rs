//! Reading one input (a JSON document or JSONL) into checked sessions.
//!
//! An input is a sequence of top-level JSON values separated by whitespace: a JSON file holds
//! one, a JSONL file one per line. Each value is parsed from the stream on its own, turned into
//! events and checked; nothing is written to the store here (long tool outputs are already in the
//! blob store, which is content-addressed, so an unreferenced blob changes nothing visible).

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use crate::sink::BlobSink;
use loom_core::{AgentId, NewEvent, SessionId};
use serde::de::DeserializeSeed;

use crate::build::Builder;
use crate::detect::{detect, Clue};
use crate::error::{ImportError, Location, Result};
use crate::input::{Input, NotUtf8, Tracker};
use crate::raw::{Ctx, ItemsKey, RawRecord, RecordSeed};
use loom_core::Api;

use crate::{anthropic, gemini, openai, responses};

/// Tool outputs longer than this many bytes go to the blob store unless told otherwise.
pub const DEFAULT_INLINE_LIMIT: usize = 1 << 20;

/// Agent id for sessions whose source names none.
pub const DEFAULT_AGENT: &str = "agent";

/// How to read inputs.
#[derive(Debug, Clone)]
pub struct ParseOptions {
    /// The input format, or `None` to tell it from the content.
    pub format: Option<Api>,
    /// Id for the session of a single-conversation input (overrides the file name and any `id`).
    pub session: Option<SessionId>,
    /// Agent for every session (overrides a trajectory's `source`).
    pub agent: Option<AgentId>,
    /// Tool outputs longer than this many bytes are offloaded to the blob store.
    pub inline_limit: usize,
    /// Timestamp given to every event, UTC ms. Sources carry none, so the import's start is
    /// used; re-import identity ignores it.
    pub ts_ms: i64,
    /// The index the input's first message has in the whole conversation: a proxy reads only
    /// the messages a client added since its last call, and the ids and field paths that depend
    /// on a message's position (`messages[12]`, a legacy function call's `fc_12`) stay those of
    /// the whole conversation.
    pub first_item: usize,
    /// Calls made before the input, still waiting for their results, as `(call id, tool name)`:
    /// an input that continues a stored log (an agent framework adding its next items) may
    /// answer them. The store checks the answers against its own ledger when they are appended.
    pub open_calls: Vec<(String, String)>,
    /// Keep what Loom does not model (a role, block, item or content part of a type it does not
    /// know) as opaque parts, in place, instead of refusing it: what a proxy does with a
    /// client's request (DESIGN.md, principle 9). A file imported in a named format is held to
    /// that format, where an unknown type is more often a mistake than news.
    pub keep_unknown: bool,
}

impl ParseOptions {
    /// Auto-detection, default limit, events stamped `ts_ms`.
    pub fn new(ts_ms: i64) -> Self {
        Self {
            format: None,
            session: None,
            agent: None,
            inline_limit: DEFAULT_INLINE_LIMIT,
            ts_ms,
            first_item: 0,
            open_calls: Vec::new(),
            keep_unknown: false,
        }
    }
}

/// One session read from an input, checked and ready to store.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedSession {
    /// Its id: the trajectory's `id`, `--session`, or the file's name.
    pub id: SessionId,
    /// Its agent.
    pub agent: AgentId,
    /// The format it was read as.
    pub format: Api,
    /// Its events, in order; they pass the ledger's checks.
    pub events: Vec<NewEvent>,
    /// Where it was read.
    pub at: Location,
    /// How many tool outputs went to the blob store.
    pub offloaded: u64,
}

/// Reads the file at `path`. Sessions without an id are named after the file's stem.
///
/// The file is read whole into memory (a trace file is parsed whole anyway, and parsing from a
/// slice is several times faster than from the byte stream); the sessions and errors are those
/// of [`parse_reader`].
pub fn parse_file(
    path: &Path,
    opts: &ParseOptions,
    blobs: &dyn BlobSink,
) -> Result<Vec<ParsedSession>> {
    let name = path.display().to_string();
    let mut file = File::open(path).map_err(|source| ImportError::Io {
        file: name.clone(),
        source,
    })?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| name.clone());
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|source| ImportError::Io {
            file: name.clone(),
            source,
        })?;
    match parse_lines(&name, &bytes, opts, blobs) {
        Some(drafts) => name_sessions(&name, &stem, drafts, opts),
        None => parse_reader(&name, &stem, bytes.as_slice(), opts, blobs),
    }
}

/// Reads a JSONL file held in memory, one record per line, each parsed straight from its slice
/// (the streaming reader hands serde_json one byte at a time, which made parsing a large part of
/// `loom replay`). The records, lines and events are those [`parse_reader`] gives; `None` when
/// the file is not that simple (not UTF-8, a record over several lines or two on one line) or
/// when anything fails, so that the streaming reader reads it again and reports the error with
/// its exact place.
fn parse_lines(
    name: &str,
    bytes: &[u8],
    opts: &ParseOptions,
    blobs: &dyn BlobSink,
) -> Option<Vec<Draft>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let tracker = Tracker::new();
    let ctx = Ctx::new(blobs, opts.inline_limit, &tracker).keeping_unknown(opts.keep_unknown);
    let mut file_clue: Option<(Clue, usize)> = None;
    let mut drafts: Vec<Draft> = Vec::new();
    for (index, line) in text.split('\n').enumerate() {
        // The whitespace the streaming reader skips between records.
        let record_text = line.trim_matches(|c| matches!(c, ' ' | '\t' | '\r'));
        if record_text.is_empty() {
            continue;
        }
        if !record_text.starts_with(['{', '[']) {
            return None;
        }
        let line_no = index as u64 + 1;
        tracker.set_line(line_no);
        ctx.reset();
        let mut de = serde_json::Deserializer::from_str(record_text);
        let raw = RecordSeed(&ctx).deserialize(&mut de).ok()?;
        de.end().ok()?;
        let record = drafts.len() + 1;
        let at = Location {
            file: name.to_owned(),
            line: Some(line_no),
            column: None,
            record: Some(record),
        };
        let format = choose(opts.format, &raw, &at, record, &mut file_clue).ok()?;
        let (id, source) = (raw.id.clone(), raw.source.clone());
        let (events, offloaded) = convert(raw, format, &at, opts, blobs).ok()?;
        drafts.push(Draft {
            id,
            source,
            format,
            events,
            at,
            offloaded,
        });
    }
    Some(drafts)
}

/// Reads one input from `reader`; `name` is used in errors, `stem` names sessions without an id.
pub fn parse_reader(
    name: &str,
    stem: &str,
    reader: impl Read,
    opts: &ParseOptions,
    blobs: &dyn BlobSink,
) -> Result<Vec<ParsedSession>> {
    let tracker = Tracker::new();
    let mut input = Input::new(reader, &tracker);
    let ctx = Ctx::new(blobs, opts.inline_limit, &tracker).keeping_unknown(opts.keep_unknown);
    let mut file_clue: Option<(Clue, usize)> = None;
    let mut drafts: Vec<Draft> = Vec::new();
    loop {
        let first = input.peek_non_ws().map_err(|e| io_error(name, e))?;
        let Some(first) = first else { break };
        let record = drafts.len() + 1;
        let line = tracker.line();
        let at = Location {
            file: name.to_owned(),
            line: Some(line),
            column: None,
            record: Some(record),
        };
        if first != b'{' && first != b'[' {
            return Err(ImportError::Json {
                at: Box::new(at),
                field: String::new(),
                reason: format!(
                    "expected `{{` or `[` at the start of a record, found `{}`",
                    char::from(first).escape_default()
                ),
            });
        }
        ctx.reset();
        let mut de = serde_json::Deserializer::from_reader(&mut input);
        let raw = RecordSeed(&ctx)
            .deserialize(&mut de)
            .map_err(|e| json_error(e, &ctx, &at))?;
        let format = choose(opts.format, &raw, &at, record, &mut file_clue)?;
        let (id, source) = (raw.id.clone(), raw.source.clone());
        let (events, offloaded) = convert(raw, format, &at, opts, blobs)?;
        drafts.push(Draft {
            id,
            source,
            format,
            events,
            at,
            offloaded,
        });
    }
    name_sessions(name, stem, drafts, opts)
}

/// Reads one JSON document held in memory (a request body): the same sessions, events and errors
/// as [`parse_reader`], several times faster. The document is parsed straight from the slice;
/// only when that fails (bad input, or several records) is it read again through
/// [`parse_reader`], whose error says where, to the line and byte.
pub fn parse_slice(
    name: &str,
    stem: &str,
    bytes: &[u8],
    opts: &ParseOptions,
    blobs: &dyn BlobSink,
) -> Result<Vec<ParsedSession>> {
    let tracker = Tracker::new();
    let ctx = Ctx::new(blobs, opts.inline_limit, &tracker).keeping_unknown(opts.keep_unknown);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = RecordSeed(&ctx)
        .deserialize(&mut de)
        .and_then(|raw| de.end().map(|()| raw));
    let Ok(raw) = parsed else {
        return parse_reader(name, stem, bytes, opts, blobs);
    };
    let at = Location {
        file: name.to_owned(),
        line: Some(1),
        column: None,
        record: Some(1),
    };
    let converted = choose(opts.format, &raw, &at, 1, &mut None).and_then(|format| {
        let (id, source) = (raw.id.clone(), raw.source.clone());
        convert(raw, format, &at, opts, blobs).map(|(events, offloaded)| Draft {
            id,
            source,
            format,
            events,
            at,
            offloaded,
        })
    });
    // An error is reported as the streaming reader reports it, which knows the lines.
    let Ok(draft) = converted else {
        return parse_reader(name, stem, bytes, opts, blobs);
    };
    name_sessions(name, stem, vec![draft], opts)
}

/// Names the sessions read (forced, from the record, or after the input) and their agents.
fn name_sessions(
    name: &str,
    stem: &str,
    drafts: Vec<Draft>,
    opts: &ParseOptions,
) -> Result<Vec<ParsedSession>> {
    if drafts.is_empty() {
        return Err(ImportError::Empty {
            file: name.to_owned(),
        });
    }
    if opts.session.is_some() && drafts.len() > 1 {
        return Err(ImportError::Options(format!(
            "{name}: --session names one conversation, but the file holds {}",
            drafts.len()
        )));
    }
    let single = drafts.len() == 1;
    drafts
        .into_iter()
        .map(|d| {
            let record = d.at.record.unwrap_or(1);
            let id = match (&opts.session, d.id) {
                (Some(forced), _) => forced.as_str().to_owned(),
                (None, Some(id)) => id,
                (None, None) if single => stem.to_owned(),
                (None, None) => format!("{stem}-{record}"),
            };
            let invalid = |field: &str, e: loom_core::LogError| ImportError::Invalid {
                at: Box::new(d.at.clone()),
                field: field.into(),
                reason: e.to_string(),
            };
            let id = SessionId::new(id).map_err(|e| invalid("id", e))?;
            let agent = match (&opts.agent, d.source) {
                (Some(agent), _) => agent.clone(),
                (None, Some(source)) => AgentId::new(source).map_err(|e| invalid("source", e))?,
                (None, None) => AgentId::new(DEFAULT_AGENT).map_err(|e| invalid("source", e))?,
            };
            Ok(ParsedSession {
                id,
                agent,
                format: d.format,
                events: d.events,
                at: d.at,
                offloaded: d.offloaded,
            })
        })
        .collect()
}

/// A record read, before the file's sessions are named.
struct Draft {
    id: Option<String>,
    source: Option<String>,
    format: Api,
    events: Vec<NewEvent>,
    at: Location,
    offloaded: u64,
}

/// Picks the converter for one record, keeping every record of a file in one format.
fn choose(
    requested: Option<Api>,
    raw: &RawRecord,
    at: &Location,
    record: usize,
    file_clue: &mut Option<(Clue, usize)>,
) -> Result<Api> {
    if raw.items.is_none() && raw.contents.is_none() {
        return Err(ImportError::Format {
            at: Box::new(at.clone()),
            reason: "unknown format: expected a list of messages, or an object with `messages` \
                     (OpenAI Chat, Anthropic Messages), `input` (OpenAI Responses) or \
                     `contents` (Gemini)"
                .into(),
        });
    }
    if raw.both_keys {
        return Err(ImportError::Format {
            at: Box::new(at.clone()),
            reason: "ambiguous format: the object has both `messages` and `input`".into(),
        });
    }
    if raw.items.is_some() && raw.contents.is_some() {
        return Err(ImportError::Format {
            at: Box::new(at.clone()),
            reason: "ambiguous format: the object has both `contents` and `messages` or `input`"
                .into(),
        });
    }
    if let Some(requested) = requested {
        return Ok(requested);
    }
    match detect(raw) {
        Err(clues) => {
            let list: Vec<String> = clues.iter().map(ToString::to_string).collect();
            Err(ImportError::Format {
                at: Box::new(at.clone()),
                reason: format!(
                    "ambiguous format: found clues of several formats: {}; pass --format",
                    list.join(", ")
                ),
            })
        }
        Ok(None) => Ok(Api::OpenaiChat),
        Ok(Some(clue)) => {
            match file_clue {
                Some((earlier, earlier_record)) if earlier.format != clue.format => {
                    return Err(ImportError::Format {
                        at: Box::new(at.clone()),
                        reason: format!(
                            "mixed formats in one file: this record has {clue}, record \
                             {earlier_record} has {earlier}; pass --format"
                        ),
                    });
                }
                Some(_) => {}
                None => *file_clue = Some((clue.clone(), record)),
            }
            Ok(clue.format)
        }
    }
}

fn convert(
    raw: RawRecord,
    format: Api,
    at: &Location,
    opts: &ParseOptions,
    blobs: &dyn BlobSink,
) -> Result<(Vec<NewEvent>, u64)> {
    let items = raw.items.unwrap_or_default();
    let key = raw.items_key;
    let foreign = |field: &str, owner: Api| ImportError::Invalid {
        at: Box::new(at.clone()),
        field: field.to_owned(),
        reason: format!(
            "is a {} field, but the record is read as {}; pass --format {} or auto",
            owner.title(),
            format.title(),
            owner.as_str()
        ),
    };
    if raw.system.is_some() && format != Api::Anthropic {
        return Err(foreign("system", Api::Anthropic));
    }
    if format != Api::Gemini {
        if raw.contents.is_some() {
            return Err(foreign("contents", Api::Gemini));
        }
        if raw.system_instruction.is_some() {
            return Err(foreign("systemInstruction", Api::Gemini));
        }
    } else if !items.is_empty() {
        let field = if key == ItemsKey::Bare {
            "[]"
        } else {
            key.name()
        };
        return Err(ImportError::Invalid {
            at: Box::new(at.clone()),
            field: field.to_owned(),
            reason: "is not a Gemini conversation, which is an object with `contents`; pass \
                     --format auto or the record's own format"
                .to_owned(),
        });
    }
    if (raw.instructions.is_some() || key == ItemsKey::Input) && format != Api::OpenaiResponses {
        let field = if key == ItemsKey::Input {
            "input"
        } else {
            "instructions"
        };
        return Err(foreign(field, Api::OpenaiResponses));
    }
    let contents = raw.contents.unwrap_or_default();
    if items.is_empty()
        && contents.is_empty()
        && raw.system.is_none()
        && raw.instructions.is_none()
        && raw.system_instruction.is_none()
    {
        return Err(ImportError::Invalid {
            at: Box::new(at.clone()),
            field: if key == ItemsKey::Bare {
                "[]".into()
            } else {
                key.name().into()
            },
            reason: "is empty; a conversation needs at least one message".into(),
        });
    }
    let mut b = Builder::new(blobs, opts.inline_limit, opts.ts_ms, at.clone(), key);
    b.first_item = opts.first_item;
    b.open_calls(&opts.open_calls);
    b.keep_unknown = opts.keep_unknown;
    b.api = format;
    match format {
        Api::Anthropic => anthropic::convert(&mut b, raw.system, items)?,
        Api::OpenaiResponses => responses::convert(&mut b, raw.instructions, items)?,
        Api::OpenaiChat => openai::convert(&mut b, items)?,
        Api::Gemini => gemini::convert(&mut b, raw.system_instruction, contents)?,
    }
    Ok(b.finish())
}

fn io_error(file: &str, e: io::Error) -> ImportError {
    if let Some(bad) = e.get_ref().and_then(|r| r.downcast_ref::<NotUtf8>()) {
        return ImportError::InvalidUtf8 {
            file: file.to_owned(),
            offset: bad.offset,
        };
    }
    ImportError::Io {
        file: file.to_owned(),
        source: e,
    }
}

fn json_error(e: serde_json::Error, ctx: &Ctx<'_>, record: &Location) -> ImportError {
    if let Some(source) = ctx.take_blob_error() {
        return ImportError::Blob {
            at: Box::new(record.clone()),
            source,
        };
    }
    if e.is_io() {
        return io_error(&record.file, io::Error::from(e));
    }
    let (line, column) = (e.line(), e.column());
    let mut reason = e.to_string();
    let suffix = format!(" at line {line} column {column}");
    if let Some(stripped) = reason.strip_suffix(&suffix) {
        reason = stripped.to_owned();
    }
    let mut at = record.clone();
    if line > 0 {
        // serde_json counts from where this record's parse began. Column 0 means the offending
        // byte was the newline ending the previous line.
        let (line, column) = if column == 0 && line > 1 {
            (line - 1, None)
        } else {
            (line, Some(column as u64))
        };
        at.line = record.line.map(|start| start + line as u64 - 1);
        at.column = column;
    }
    ImportError::Json {
        at: Box::new(at),
        field: ctx.path(),
        reason,
    }
}
