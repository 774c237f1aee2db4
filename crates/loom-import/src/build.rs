//! Building one session's events: the ledger check on every event, call-id bookkeeping, and the
//! conversion of contents shared by every format.
//!
//! Every event goes through a [`Ledger`] as it is built, so a log that the store would refuse is
//! refused here, with the message and field that caused it, before anything is written.

use std::collections::HashMap;
use std::io::Read;

use crate::sink::BlobSink;
use loom_core::{
    Api, ContentPart, ContentStats, EventBody, Ledger, LogError, MessageContent, NewEvent, Seq,
    StatsBuilder, ToolCall, ToolOutput,
};
use serde_json::value::RawValue;

use crate::error::{ImportError, Location, Result};
use crate::raw::{Content, ItemsKey, RawBlock, Text};

/// Builds the events of one session.
#[derive(Debug)]
pub(crate) struct Builder<'a> {
    blobs: &'a dyn BlobSink,
    inline_limit: usize,
    ts_ms: i64,
    at: Location,
    items_key: ItemsKey,
    events: Vec<NewEvent>,
    ledger: Ledger,
    /// The log ids of the calls made with each source call id, oldest first (they differ from
    /// it when the source reused an id).
    ids: HashMap<String, Vec<String>>,
    assistant_seen: bool,
    offloaded: u64,
    /// The index of the first item read in the whole conversation.
    pub(crate) first_item: usize,
    /// The API the conversation is written for: what it holds that Loom does not model is
    /// kept as that API's opaque parts.
    pub(crate) api: Api,
    /// Whether what Loom does not model is kept as opaque parts rather than refused.
    pub(crate) keep_unknown: bool,
}

/// Where a value is: the line its item starts on and its path (`messages[3]`).
#[derive(Debug, Clone)]
pub(crate) struct Spot {
    line: Option<u64>,
    path: String,
}

impl Spot {
    /// The path of `field` under this spot.
    pub(crate) fn field(&self, field: &str) -> String {
        match (self.path.is_empty(), field.is_empty()) {
            (_, true) => self.path.clone(),
            (true, false) => field.to_owned(),
            (false, false) => format!("{}.{field}", self.path),
        }
    }
}

/// One piece of converted content.
enum Segment {
    Text(Text),
    Image {
        url: String,
        detail: Option<String>,
    },
    /// A block Loom does not model (a document, a search result), kept as it came.
    Opaque(ContentPart),
}

impl<'a> Builder<'a> {
    /// Appends an item Loom does not model (a message of an unknown role, an item of an
    /// unknown type) as a user-side event that sends it back as it came, in place.
    pub(crate) fn push_opaque(&mut self, spot: &Spot, item: crate::raw::RawItem) -> Result<()> {
        self.push_opaque_items(spot, vec![item])
    }

    /// Items Loom does not model that belong together (a built-in tool's call and its output),
    /// as one event that keeps them as they came.
    pub(crate) fn push_opaque_items(
        &mut self,
        spot: &Spot,
        items: Vec<crate::raw::RawItem>,
    ) -> Result<()> {
        let content = crate::opaque::wholes(self.blobs, self.api, items);
        self.push(
            spot,
            "",
            EventBody::User {
                content,
                name: None,
            },
        )
    }

    /// The blob store content is offloaded to.
    pub(crate) fn blobs(&self) -> &'a dyn BlobSink {
        self.blobs
    }

    pub(crate) fn new(
        blobs: &'a dyn BlobSink,
        inline_limit: usize,
        ts_ms: i64,
        at: Location,
        items_key: ItemsKey,
    ) -> Self {
        Self {
            blobs,
            inline_limit,
            ts_ms,
            at,
            items_key,
            events: Vec::new(),
            ledger: Ledger::new(),
            ids: HashMap::new(),
            assistant_seen: false,
            offloaded: 0,
            api: Api::OpenaiChat,
            keep_unknown: false,
            first_item: 0,
        }
    }

    /// Takes `calls` as made before the input and still open (see `ParseOptions::open_calls`).
    pub(crate) fn open_calls(&mut self, calls: &[(String, String)]) {
        if calls.is_empty() {
            return;
        }
        // The turn that made them came before the input: a result may open it.
        self.assistant_seen = true;
        self.ledger = Ledger::from_states(calls.iter().map(|(id, tool)| {
            (
                id.clone(),
                loom_core::CallState::Pending {
                    tool_name: tool.clone(),
                    call_seq: 0,
                },
            )
        }));
    }

    /// The events built so far and how many tool outputs were offloaded.
    pub(crate) fn finish(self) -> (Vec<NewEvent>, u64) {
        (self.events, self.offloaded)
    }

    /// Where item `index` (starting at `line`) is.
    pub(crate) fn spot(&self, line: u64, index: usize) -> Spot {
        Spot {
            line: Some(line),
            path: format!("{}[{index}]", self.items_key.name()),
        }
    }

    /// Tool outputs longer than this many bytes go to the blob store.
    pub(crate) fn inline_limit(&self) -> usize {
        self.inline_limit
    }

    /// The line the record starts on (readers of values already parsed know no finer place).
    pub(crate) fn line(&self) -> u64 {
        self.at.line.unwrap_or(1)
    }

    /// Puts a tool output read whole into the blob store.
    pub(crate) fn offload(&mut self, spot: &Spot, bytes: &[u8]) -> Result<loom_core::BlobInfo> {
        match self.blobs.offload(bytes) {
            Ok(info) => {
                self.offloaded += 1;
                Ok(info)
            }
            Err(source) => {
                let mut at = self.at.clone();
                at.line = spot.line.or(at.line);
                Err(ImportError::Blob {
                    at: Box::new(at),
                    source,
                })
            }
        }
    }

    /// Where a top-level field of the record is.
    pub(crate) fn record_spot(&self) -> Spot {
        Spot {
            line: self.at.line,
            path: String::new(),
        }
    }

    /// An error about `field` of the value at `spot`.
    pub(crate) fn invalid(
        &self,
        spot: &Spot,
        field: &str,
        reason: impl Into<String>,
    ) -> ImportError {
        let mut at = self.at.clone();
        at.line = spot.line.or(at.line);
        ImportError::Invalid {
            at: Box::new(at),
            field: spot.field(field),
            reason: reason.into(),
        }
    }

    /// Checks `body` against the ledger and appends it.
    pub(crate) fn push(&mut self, spot: &Spot, field: &str, body: EventBody) -> Result<()> {
        let seq = self.events.len() as Seq + 1;
        if let Err(e) = self.ledger.apply(seq, &body) {
            let reason = match e {
                LogError::InvalidField {
                    field: inner,
                    reason,
                } => format!("`{inner}` {reason}"),
                other => other.to_string(),
            };
            return Err(self.invalid(spot, field, reason));
        }
        if matches!(body, EventBody::Assistant { .. }) {
            self.assistant_seen = true;
        }
        self.events.push(NewEvent::new(self.ts_ms, body));
        Ok(())
    }

    /// Gives the calls of one assistant turn their log ids.
    ///
    /// Real agents and servers reuse call ids: once a result is in (tau-bench and SWE-agent
    /// traces do), in every turn (`call_0`, as some OpenAI-compatible servers number them),
    /// even twice in one turn. The provider accepts it, and the log needs ids unique per
    /// session, so a reused id gets an alias ([`Ledger::fresh_id`]: `<id>_r<n>`) and a result
    /// naming `<id>` answers the oldest call with that id still waiting for one.
    pub(crate) fn assign_ids(&mut self, calls: &mut [ToolCall]) {
        let mut turn: Vec<String> = Vec::with_capacity(calls.len());
        for call in calls.iter_mut() {
            let id = self.ledger.fresh_id(&call.id, &turn);
            let made = self.ids.entry(call.id.clone()).or_default();
            // Calls answered long ago need not be remembered: only the newest few can match.
            made.retain(|log_id| {
                matches!(
                    self.ledger.get(log_id),
                    Some(loom_core::CallState::Pending { .. }) | None
                )
            });
            made.push(id.clone());
            call.id = id.clone();
            turn.push(id);
        }
    }

    /// The log id a result naming `source_id` answers: the oldest call made with that id that
    /// still waits for its result, else the newest one (whose state then names the error).
    fn log_id(&self, source_id: &str) -> String {
        let Some(made) = self.ids.get(source_id) else {
            return source_id.to_owned();
        };
        made.iter()
            .find(|id| {
                matches!(
                    self.ledger.get(id),
                    Some(loom_core::CallState::Pending { .. })
                )
            })
            .or(made.last())
            .cloned()
            .unwrap_or_else(|| source_id.to_owned())
    }

    /// The log id and tool name of the call a result answers.
    pub(crate) fn resolve_call(
        &self,
        spot: &Spot,
        field: &str,
        source_id: &str,
    ) -> Result<(String, String)> {
        if !self.assistant_seen {
            return Err(self.invalid(
                spot,
                field,
                format!(
                    "tool result for call `{source_id}` comes before any assistant message; \
                     a result must follow the assistant turn that made its call"
                ),
            ));
        }
        let id = self.log_id(source_id);
        match self.ledger.get(&id) {
            Some(state) => Ok((id, state.tool_name().to_owned())),
            None => Err(self.invalid(
                spot,
                field,
                LogError::UnknownCall {
                    call_id: source_id.to_owned(),
                }
                .to_string(),
            )),
        }
    }

    /// The most recent pending call to `name` (legacy `function` messages carry no call id).
    pub(crate) fn pending_call_named(&self, name: &str) -> Option<String> {
        self.ledger
            .iter()
            .filter(|(_, s)| {
                matches!(s, loom_core::CallState::Pending { .. }) && s.tool_name() == name
            })
            .max_by_key(|(_, s)| s.call_seq())
            .map(|(id, _)| id.to_owned())
    }

    /// A string that was offloaded while parsing, brought back because it is not tool output.
    pub(crate) fn inline(&self, spot: &Spot, field: &str, text: Text) -> Result<String> {
        match text {
            Text::Inline(s) => Ok(s),
            Text::Spilled(info) => {
                let bytes = self
                    .blobs
                    .fetch(&info.blob)
                    .map_err(|source| ImportError::Blob {
                        at: Box::new(self.at.clone()),
                        source,
                    })?;
                String::from_utf8(bytes)
                    .map_err(|_| self.invalid(spot, field, "offloaded text is not UTF-8"))
            }
        }
    }

    /// Message content; `parts` converts each block (its index and the block) to a part.
    pub(crate) fn message_content(
        &self,
        spot: &Spot,
        field: &str,
        content: Content,
        mut part: impl FnMut(&Self, usize, RawBlock) -> Result<Option<ContentPart>>,
    ) -> Result<Option<MessageContent>> {
        match content {
            Content::Null => Ok(None),
            Content::Text(t) => Ok(Some(MessageContent::Text(self.inline(spot, field, t)?))),
            Content::Blocks(blocks) => {
                let mut parts = Vec::with_capacity(blocks.len());
                for (i, block) in blocks.into_iter().enumerate() {
                    if let Some(p) = part(self, i, block)? {
                        parts.push(p);
                    }
                }
                Ok(Some(MessageContent::Parts(parts)))
            }
        }
    }

    /// A text or image block as a part, in any format's spelling; `None` for other types.
    pub(crate) fn common_part(
        &self,
        spot: &Spot,
        field: &str,
        block: RawBlock,
    ) -> Result<std::result::Result<ContentPart, RawBlock>> {
        let kind = block.kind.as_deref().unwrap_or("");
        match kind {
            "text" | "input_text" | "output_text" | "summary_text" | "reasoning_text" => {
                let text = match block.text {
                    Some(t) => self.inline(spot, &format!("{field}.text"), t)?,
                    None => {
                        return Err(self.invalid(
                            spot,
                            &format!("{field}.text"),
                            format!("missing in a `{kind}` block"),
                        ))
                    }
                };
                Ok(Ok(ContentPart::Text { text }))
            }
            "refusal" => Ok(Ok(ContentPart::Text {
                text: block.refusal.unwrap_or_default(),
            })),
            "image_url" | "input_image" => {
                let (url, detail) = match &block.image_url {
                    Some(serde_json::Value::String(url)) => (url.clone(), block.detail.clone()),
                    Some(serde_json::Value::Object(o)) => (
                        o.get("url")
                            .and_then(|u| u.as_str())
                            .unwrap_or_default()
                            .to_owned(),
                        o.get("detail").and_then(|d| d.as_str()).map(str::to_owned),
                    ),
                    _ => (String::new(), None),
                };
                if url.is_empty() {
                    // An image by file id (or by nothing but its `detail`): not an image Loom
                    // models; the caller keeps it as it came.
                    return Ok(Err(block));
                }
                Ok(Ok(ContentPart::Image { url, detail }))
            }
            "image" => {
                let Some(source) = block.source.as_ref() else {
                    return Err(self.invalid(
                        spot,
                        &format!("{field}.source"),
                        "an image needs a source",
                    ));
                };
                let url = match source.get("type").and_then(|t| t.as_str()) {
                    Some("base64") => {
                        let media = source.get("media_type").and_then(|m| m.as_str());
                        let data = source.get("data").and_then(|d| d.as_str());
                        media.zip(data).map(|(m, d)| format!("data:{m};base64,{d}"))
                    }
                    Some("url") => source
                        .get("url")
                        .and_then(|u| u.as_str())
                        .map(str::to_owned),
                    _ => None,
                };
                match url {
                    Some(url) => Ok(Ok(ContentPart::Image { url, detail: None })),
                    // A source Loom does not model (a file id, a kind added later).
                    None => Ok(Err(block)),
                }
            }
            _ => Ok(Err(block)),
        }
    }

    /// Tool output and the stats of the original, offloading it when it is long.
    pub(crate) fn tool_output(
        &mut self,
        spot: &Spot,
        field: &str,
        content: Option<Content>,
    ) -> Result<(ToolOutput, ContentStats)> {
        let content = content.ok_or_else(|| self.invalid(spot, field, "missing"))?;
        let blocks = match content {
            Content::Null => {
                return Ok((ToolOutput::Text(String::new()), ContentStats::of(b"")));
            }
            Content::Text(Text::Inline(s)) => {
                let stats = ContentStats::of(s.as_bytes());
                return Ok((ToolOutput::Text(s), stats));
            }
            Content::Text(Text::Spilled(info)) => {
                self.offloaded += 1;
                return Ok((ToolOutput::Blob(info.blob), info.stats));
            }
            Content::Blocks(blocks) => blocks,
        };
        let mut segments = Vec::with_capacity(blocks.len());
        for (i, mut block) in blocks.into_iter().enumerate() {
            let f = format!("{field}[{i}]");
            if let Some("text" | "input_text" | "output_text") = block.kind.as_deref() {
                // Taken as is, so that an offloaded part stays offloaded.
                match block.text.take() {
                    Some(t) => segments.push(Segment::Text(t)),
                    None => return Err(self.invalid(spot, &format!("{f}.text"), "missing")),
                }
                continue;
            }
            match self.common_part(spot, &f, block)? {
                Ok(ContentPart::Image { url, detail }) => {
                    segments.push(Segment::Image { url, detail });
                }
                Ok(ContentPart::Text { text }) => segments.push(Segment::Text(Text::Inline(text))),
                Ok(part @ ContentPart::Opaque { .. }) => segments.push(Segment::Opaque(part)),
                Err(block) if self.keep_unknown => segments.push(Segment::Opaque(
                    crate::opaque::part(self.blobs, self.api, block),
                )),
                Err(block) => {
                    return Err(self.invalid(
                        spot,
                        &format!("{f}.type"),
                        format!(
                            "unsupported block type `{}` in tool output; expected text or image",
                            block.kind.as_deref().unwrap_or("<missing>")
                        ),
                    ))
                }
            }
        }
        self.segments_output(spot, field, segments)
    }

    fn segments_output(
        &mut self,
        spot: &Spot,
        field: &str,
        mut segments: Vec<Segment>,
    ) -> Result<(ToolOutput, ContentStats)> {
        let has_image = segments
            .iter()
            .any(|s| matches!(s, Segment::Image { .. } | Segment::Opaque(_)));
        let text_len: u64 = segments
            .iter()
            .map(|s| match s {
                Segment::Text(t) => t.len(),
                Segment::Image { .. } | Segment::Opaque(_) => 0,
            })
            .sum();
        if let [Segment::Text(_)] = segments.as_slice() {
            if let Some(Segment::Text(t)) = segments.pop() {
                return self.tool_output(spot, field, Some(Content::Text(t)));
            }
        }
        if !has_image && text_len > self.inline_limit as u64 {
            // Long text in several parts: offload the parts joined, as one output.
            let mut reader = Joined {
                blobs: self.blobs,
                segments: segments.into_iter(),
                current: std::io::Cursor::new(Vec::new()),
                first: true,
            };
            let info =
                self.blobs
                    .offload_reader(&mut reader)
                    .map_err(|source| ImportError::Blob {
                        at: Box::new(self.at.clone()),
                        source,
                    })?;
            self.offloaded += 1;
            return Ok((ToolOutput::Blob(info.blob), info.stats));
        }
        let mut parts = Vec::with_capacity(segments.len());
        let mut stats = StatsBuilder::new();
        let mut first_text = true;
        for seg in segments {
            match seg {
                Segment::Text(t) => {
                    let text = self.inline(spot, field, t)?;
                    if !first_text {
                        stats.update(b"\n");
                    }
                    first_text = false;
                    stats.update(text.as_bytes());
                    parts.push(ContentPart::Text { text });
                }
                Segment::Image { url, detail } => parts.push(ContentPart::Image { url, detail }),
                Segment::Opaque(part) => parts.push(part),
            }
        }
        Ok((ToolOutput::Parts(parts), stats.finish()))
    }
}

/// Reads text segments joined by newlines, fetching offloaded ones one at a time.
struct Joined<'a, I> {
    blobs: &'a dyn BlobSink,
    segments: I,
    current: std::io::Cursor<Vec<u8>>,
    first: bool,
}

impl<I: Iterator<Item = Segment>> Read for Joined<'_, I> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let n = self.current.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            let Some(seg) = self.segments.next() else {
                return Ok(0);
            };
            let Segment::Text(text) = seg else { continue };
            let mut bytes = if self.first {
                Vec::new()
            } else {
                b"\n".to_vec()
            };
            self.first = false;
            match text {
                Text::Inline(s) => bytes.extend_from_slice(s.as_bytes()),
                Text::Spilled(info) => {
                    bytes.extend(
                        self.blobs
                            .fetch(&info.blob)
                            .map_err(std::io::Error::other)?,
                    );
                }
            }
            self.current = std::io::Cursor::new(bytes);
        }
    }
}

/// Tool-call arguments as text: a JSON string is taken as is, any other JSON value becomes its
/// compact text (key order kept).
pub(crate) fn arguments_text(raw: Option<&RawValue>) -> String {
    let Some(raw) = raw else {
        return String::new();
    };
    let text = raw.get();
    if text.starts_with('"') {
        if let Ok(s) = serde_json::from_str::<String>(text) {
            return s;
        }
    }
    if text == "null" {
        return String::new();
    }
    minify(text)
}

/// Removes the whitespace outside strings from valid JSON text.
pub(crate) fn minify(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in json.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !c.is_ascii_whitespace() {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minify_keeps_strings_and_order() {
        assert_eq!(
            minify("{ \"b\" : [1, 2],\n \"a\": \"x y \\\" z\" }"),
            "{\"b\":[1,2],\"a\":\"x y \\\" z\"}"
        );
    }

    #[test]
    fn arguments_accept_strings_and_objects() {
        let s = RawValue::from_string("\"{\\\"q\\\": 1}\"".into()).unwrap();
        assert_eq!(arguments_text(Some(&s)), "{\"q\": 1}");
        let o = RawValue::from_string("{\"q\": 1}".into()).unwrap();
        assert_eq!(arguments_text(Some(&o)), "{\"q\":1}");
        assert_eq!(arguments_text(None), "");
    }
}
