//! Splicing the streams of a reply's rounds into the one stream a client gets: a streamed reply
//! that calls `loom_recall` is answered by Loom and asked again, and the client sees one reply.
//!
//! Each event is relayed as it arrives until the reply's first tool call; from there on the
//! round's events are held, since only the end of the reply tells whether it calls `loom_recall`
//! (and calls to the client's own tools in such a reply are dropped). When it does not, the held
//! events follow as they came. When it does, they are discarded and the next round's events
//! continue the same stream: its opening events (`message_start`, `response.created`) are left
//! out, content blocks, output items and tool calls are numbered after those the client already
//! has, the Responses API's `sequence_number` runs on, and the closing `response.completed` lists
//! every item the client received. When the rounds run out, the held events follow without the
//! `loom_recall` calls.

use std::collections::BTreeSet;

use loom_core::render::RECALL_TOOL;
use loom_core::Api;
use serde_json::{json, Value};

use crate::SseEvent;

/// One stream to the client out of the upstream's streams of every round.
#[derive(Debug)]
pub struct Splice {
    api: Api,
    /// The round being read (1 for the client's own request).
    round: u32,
    /// Where this round's numbering starts in the client's: content blocks (Messages), output
    /// items (Responses), tool calls (Chat Completions).
    base: u64,
    /// How many the client has received so far, in its numbering.
    given: u64,
    /// The next `sequence_number` (Responses).
    seq: u64,
    /// The id the client saw first: the completion's (Chat) or the response's (Responses).
    first_id: Option<String>,
    /// The output items the client has received whole, by their number (Responses).
    items: Vec<(u64, Value)>,
    /// Events held since the round's first tool call.
    held: Vec<SseEvent>,
    holding: bool,
    /// Every tool call of the held reply is dropped: it stops as a reply without calls.
    stop_instead: bool,
    /// The event being rewritten was changed: an unchanged one goes out as the upstream's bytes.
    changed: bool,
    /// The `functionCall` parts of the held events rewritten so far (Gemini, whose calls are
    /// numbered by their order in the round).
    calls_seen: u64,
}

impl Splice {
    pub fn new(api: Api) -> Self {
        Self {
            api,
            round: 1,
            base: 0,
            given: 0,
            seq: 0,
            first_id: None,
            items: Vec::new(),
            held: Vec::new(),
            holding: false,
            stop_instead: false,
            changed: false,
            calls_seen: 0,
        }
    }

    /// Takes the upstream's next event; returns those the client gets now.
    pub fn take(&mut self, event: SseEvent) -> Vec<SseEvent> {
        // Parsed once: whether it opens a call, and what it becomes.
        let v = serde_json::from_str::<Value>(&event.data).ok();
        if !self.holding && v.as_ref().is_some_and(|v| opens_a_call(self.api, v)) {
            self.holding = true;
        }
        if self.holding {
            self.held.push(event);
            return Vec::new();
        }
        self.rewrite_parsed(event, v, &BTreeSet::new())
            .into_iter()
            .collect()
    }

    /// The round is over and its reply goes to the client: the held events, without the
    /// `loom_recall` calls when `drop_recall`.
    pub fn settle(&mut self, drop_recall: bool) -> Vec<SseEvent> {
        let held = std::mem::take(&mut self.held);
        self.holding = false;
        let drops = if drop_recall {
            recall_indices(self.api, &held)
        } else {
            BTreeSet::new()
        };
        self.stop_instead = !drops.is_empty() && call_indices(self.api, &held) == drops;
        self.calls_seen = 0;
        held.into_iter()
            .filter_map(|e| self.rewrite(e, &drops))
            .collect()
    }

    /// The `sequence_number` the next event the client gets carries (Responses).
    pub fn sequence_number(&self) -> u64 {
        self.seq
    }

    /// The round's reply called `loom_recall`: its held events are discarded, and the next
    /// round's numbering follows what the client has.
    pub fn next_round(&mut self) {
        self.held.clear();
        self.holding = false;
        self.round += 1;
        self.base = self.given;
    }

    /// The client's number for the upstream's `index`; `None` when it is dropped.
    fn number(&self, index: u64, drops: &BTreeSet<u64>) -> Option<u64> {
        if drops.contains(&index) {
            return None;
        }
        let before = drops.range(..index).count() as u64;
        Some(self.base + index - before)
    }

    /// Renumbers `index_key` of `v` (absent: kept); `None` when the event goes.
    fn renumber(&mut self, v: &mut Value, index_key: &str, drops: &BTreeSet<u64>) -> Option<()> {
        if let Some(i) = v.get(index_key).and_then(Value::as_u64) {
            let n = self.number(i, drops)?;
            if n != i {
                v[index_key] = json!(n);
                self.changed = true;
            }
            self.given = self.given.max(n + 1);
        }
        Some(())
    }

    /// The event as the client gets it; `None` when it is left out.
    fn rewrite(&mut self, event: SseEvent, drops: &BTreeSet<u64>) -> Option<SseEvent> {
        let v = serde_json::from_str::<Value>(&event.data).ok();
        self.rewrite_parsed(event, v, drops)
    }

    /// [`Splice::rewrite`] of an event already parsed (`v`: its data, when JSON). An event
    /// nothing changes keeps the upstream's own bytes.
    fn rewrite_parsed(
        &mut self,
        event: SseEvent,
        v: Option<Value>,
        drops: &BTreeSet<u64>,
    ) -> Option<SseEvent> {
        let Some(mut v) = v else {
            // `[DONE]`, or a payload no round changes.
            return Some(event);
        };
        self.changed = false;
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        match self.api {
            Api::Anthropic => match kind.as_str() {
                "message_start" if self.round > 1 => return None,
                "content_block_start" | "content_block_delta" | "content_block_stop" => {
                    self.renumber(&mut v, "index", drops)?;
                }
                "message_delta"
                    if self.stop_instead
                        && v.pointer("/delta/stop_reason") == Some(&json!("tool_use")) =>
                {
                    v["delta"]["stop_reason"] = json!("end_turn");
                    self.changed = true;
                }
                _ => {}
            },
            Api::OpenaiChat => {
                match (&self.first_id, v.get("id").and_then(Value::as_str)) {
                    (None, Some(id)) => self.first_id = Some(id.to_owned()),
                    (Some(first), Some(id)) if first != id => {
                        v["id"] = json!(first);
                        self.changed = true;
                    }
                    _ => {}
                }
                let stop_instead = self.stop_instead;
                if let Some(Value::Array(choices)) = v.get_mut("choices") {
                    for choice in choices.iter_mut() {
                        if let Some(Value::Array(calls)) = choice.pointer_mut("/delta/tool_calls") {
                            let calls_before = calls.len();
                            let mut kept = Vec::with_capacity(calls.len());
                            for mut call in std::mem::take(calls) {
                                if self.renumber(&mut call, "index", drops).is_some() {
                                    kept.push(call);
                                }
                            }
                            if kept.len() != calls_before {
                                self.changed = true;
                            }
                            *calls = kept;
                            if calls.is_empty() {
                                if let Some(d) = choice["delta"].as_object_mut() {
                                    d.remove("tool_calls");
                                }
                            }
                        }
                        if stop_instead && choice["finish_reason"] == "tool_calls" {
                            choice["finish_reason"] = json!("stop");
                            self.changed = true;
                        }
                    }
                }
            }
            // Every event is a whole response with the next parts; a call is a part of its own.
            Api::Gemini => {
                if let Some(Value::Array(parts)) = v.pointer_mut("/candidates/0/content/parts") {
                    let before = parts.len();
                    let mut kept = Vec::with_capacity(before);
                    for part in std::mem::take(parts) {
                        if part.get("functionCall").is_some() {
                            let n = self.calls_seen;
                            self.calls_seen += 1;
                            if drops.contains(&n) {
                                continue;
                            }
                        }
                        kept.push(part);
                    }
                    let emptied = kept.is_empty() && before > 0;
                    self.changed |= kept.len() != before;
                    *parts = kept;
                    // A response left with nothing to say goes, unless it ends the reply.
                    if emptied
                        && v.pointer("/candidates/0/finishReason").is_none()
                        && v.get("usageMetadata").is_none()
                    {
                        return None;
                    }
                }
            }
            Api::OpenaiResponses => {
                match kind.as_str() {
                    "response.created" | "response.in_progress" | "response.queued" => {
                        if self.round > 1 {
                            return None;
                        }
                        if let Some(id) = v.pointer("/response/id").and_then(Value::as_str) {
                            self.first_id.get_or_insert_with(|| id.to_owned());
                        }
                    }
                    // A reply of one round, all of it relayed, closes as the upstream closed it
                    // (whatever items its events did or did not announce one by one).
                    "response.completed" | "response.incomplete" | "response.failed"
                        if self.round > 1 || !drops.is_empty() =>
                    {
                        self.items.sort_by_key(|(n, _)| *n);
                        let items: Vec<Value> =
                            self.items.iter().map(|(_, item)| item.clone()).collect();
                        if let Some(r) = v.get_mut("response").and_then(Value::as_object_mut) {
                            self.changed = true;
                            r.insert("output".to_owned(), Value::Array(items));
                            if let Some(first) = &self.first_id {
                                r.insert("id".to_owned(), json!(first));
                            }
                        }
                    }
                    _ => {}
                }
                self.renumber(&mut v, "output_index", drops)?;
                if kind == "response.output_item.done" {
                    if let (Some(n), Some(item)) = (v["output_index"].as_u64(), v.get("item")) {
                        self.items.push((n, item.clone()));
                    }
                }
                if let Some(seq) = v.get("sequence_number").and_then(Value::as_u64) {
                    if seq != self.seq {
                        v["sequence_number"] = json!(self.seq);
                        self.changed = true;
                    }
                    self.seq += 1;
                }
            }
        }
        if !self.changed {
            return Some(event);
        }
        Some(SseEvent {
            event: event.event,
            data: v.to_string(),
        })
    }
}

/// Whether `event` opens a tool call of the reply.
fn opens_a_call(api: Api, v: &Value) -> bool {
    match api {
        Api::Anthropic => {
            v["type"] == "content_block_start" && v["content_block"]["type"] == "tool_use"
        }
        Api::OpenaiResponses => {
            v["type"] == "response.output_item.added"
                && matches!(
                    v["item"]["type"].as_str(),
                    Some("function_call" | "custom_tool_call")
                )
        }
        Api::OpenaiChat => v["choices"].as_array().is_some_and(|choices| {
            choices.iter().any(|c| {
                c.pointer("/delta/tool_calls")
                    .and_then(Value::as_array)
                    .is_some_and(|calls| !calls.is_empty())
            })
        }),
        Api::Gemini => gemini_calls(v).next().is_some(),
    }
}

/// The names of the `functionCall` parts of a Gemini response, in order.
fn gemini_calls(v: &Value) -> impl Iterator<Item = Option<&str>> {
    v.pointer("/candidates/0/content/parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("functionCall"))
        .map(|c| c.get("name").and_then(Value::as_str))
}

/// The upstream numbers of the tool calls the held events open, and of those that call
/// `loom_recall`.
fn calls_in(api: Api, held: &[SseEvent]) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let mut all = BTreeSet::new();
    let mut recall = BTreeSet::new();
    let mut note = |index: Option<u64>, name: Option<&str>| {
        if let Some(i) = index {
            all.insert(i);
            if name == Some(RECALL_TOOL) {
                recall.insert(i);
            }
        }
    };
    let mut gemini_seen = 0;
    for event in held {
        let Ok(v) = serde_json::from_str::<Value>(&event.data) else {
            continue;
        };
        match api {
            Api::Gemini => {
                for name in gemini_calls(&v) {
                    note(Some(gemini_seen), name);
                    gemini_seen += 1;
                }
            }
            Api::Anthropic => {
                if v["type"] == "content_block_start" && v["content_block"]["type"] == "tool_use" {
                    note(v["index"].as_u64(), v["content_block"]["name"].as_str());
                }
            }
            Api::OpenaiResponses => {
                if v["type"] == "response.output_item.added"
                    && matches!(
                        v["item"]["type"].as_str(),
                        Some("function_call" | "custom_tool_call")
                    )
                {
                    note(v["output_index"].as_u64(), v["item"]["name"].as_str());
                }
            }
            Api::OpenaiChat => {
                for choice in v["choices"].as_array().into_iter().flatten() {
                    let calls = choice
                        .pointer("/delta/tool_calls")
                        .and_then(Value::as_array);
                    for call in calls.into_iter().flatten() {
                        // The name comes with a call's first delta; later ones carry only the
                        // index and more arguments.
                        if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                            note(call["index"].as_u64(), Some(name));
                        }
                    }
                }
            }
        }
    }
    (all, recall)
}

fn recall_indices(api: Api, held: &[SseEvent]) -> BTreeSet<u64> {
    calls_in(api, held).1
}

fn call_indices(api: Api, held: &[SseEvent]) -> BTreeSet<u64> {
    calls_in(api, held).0
}

/// A failure after the stream began, as the provider would report it inside the stream.
pub fn stream_error(api: Api, status: u16, message: &str, seq: u64) -> SseEvent {
    let body = crate::error_body(api, status, message, None);
    match api {
        Api::Anthropic => SseEvent {
            event: Some("error".to_owned()),
            data: body.to_string(),
        },
        Api::OpenaiChat | Api::Gemini => SseEvent {
            event: None,
            data: body.to_string(),
        },
        Api::OpenaiResponses => SseEvent {
            event: Some("error".to_owned()),
            data: json!({"type": "error", "code": body["error"]["type"],
                "message": message, "param": null, "sequence_number": seq})
            .to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(name: Option<&str>, data: Value) -> SseEvent {
        SseEvent {
            event: name.map(str::to_owned),
            data: data.to_string(),
        }
    }

    fn anthropic_round(text: &str, tool: &str, id: &str) -> Vec<SseEvent> {
        vec![
            ev(
                Some("message_start"),
                json!({"type": "message_start", "message": {"id": id}}),
            ),
            ev(
                Some("content_block_start"),
                json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}}),
            ),
            ev(
                Some("content_block_delta"),
                json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": text}}),
            ),
            ev(
                Some("content_block_stop"),
                json!({"type": "content_block_stop", "index": 0}),
            ),
            ev(
                Some("content_block_start"),
                json!({"type": "content_block_start", "index": 1,
                    "content_block": {"type": "tool_use", "id": "t1", "name": tool, "input": {}}}),
            ),
            ev(
                Some("content_block_stop"),
                json!({"type": "content_block_stop", "index": 1}),
            ),
            ev(
                Some("message_delta"),
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}}),
            ),
            ev(Some("message_stop"), json!({"type": "message_stop"})),
        ]
    }

    fn data(events: &[SseEvent]) -> Vec<Value> {
        events
            .iter()
            .map(|e| serde_json::from_str(&e.data).unwrap())
            .collect()
    }

    #[test]
    fn text_goes_at_once_and_a_call_waits_for_the_end() {
        let mut s = Splice::new(Api::Anthropic);
        let events = anthropic_round("hi", "bash", "m1");
        let mut now = Vec::new();
        for e in events.clone() {
            now.extend(s.take(e));
        }
        assert_eq!(now, events[..4], "the text block streams as it comes");
        assert_eq!(s.settle(false), events[4..], "the call follows unchanged");
    }

    #[test]
    fn an_event_no_round_changes_keeps_the_upstreams_bytes() {
        let mut s = Splice::new(Api::OpenaiResponses);
        let raw = SseEvent {
            event: Some("response.output_text.delta".into()),
            data: r#"{"type":"response.output_text.delta", "sequence_number":0,"output_index":0,"delta":"hi"}"#.into(),
        };
        assert_eq!(s.take(raw.clone()), [raw]);
    }

    #[test]
    fn a_second_round_continues_the_numbering_without_a_second_start() {
        let mut s = Splice::new(Api::Anthropic);
        for e in anthropic_round("let me look", RECALL_TOOL, "m1") {
            s.take(e);
        }
        s.next_round();
        let mut out = Vec::new();
        for e in anthropic_round("found it", "bash", "m2") {
            out.extend(s.take(e));
        }
        out.extend(s.settle(false));
        let out = data(&out);
        assert!(out.iter().all(|v| v["type"] != "message_start"));
        let indices: Vec<u64> = out.iter().filter_map(|v| v["index"].as_u64()).collect();
        assert_eq!(indices, [1, 1, 1, 2, 2], "after the client's one block");
    }

    #[test]
    fn rounds_run_out_the_recall_call_is_dropped_and_the_reply_ends_its_turn() {
        let mut s = Splice::new(Api::Anthropic);
        for e in anthropic_round("let me look", RECALL_TOOL, "m1") {
            s.take(e);
        }
        let out = data(&s.settle(true));
        assert!(out.iter().all(|v| v["content_block"]["type"] != "tool_use"));
        let delta = out.iter().find(|v| v["type"] == "message_delta").unwrap();
        assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    }

    #[test]
    fn responses_events_are_renumbered_and_completed_lists_every_item() {
        let round = |text: &str, tool: &str, id: &str| -> Vec<SseEvent> {
            let msg = json!({"type": "message", "id": format!("msg_{id}"), "role": "assistant",
                "content": [{"type": "output_text", "text": text}]});
            let call = json!({"type": "function_call", "id": format!("fc_{id}"),
                "call_id": "c1", "name": tool, "arguments": "{}"});
            [
                json!({"type": "response.created", "response": {"id": id}}),
                json!({"type": "response.output_item.added", "output_index": 0, "item": msg}),
                json!({"type": "response.output_text.delta", "output_index": 0,
                    "content_index": 0, "delta": text}),
                json!({"type": "response.output_item.done", "output_index": 0, "item": msg}),
                json!({"type": "response.output_item.added", "output_index": 1, "item": call}),
                json!({"type": "response.output_item.done", "output_index": 1, "item": call}),
                json!({"type": "response.completed", "response": {"id": id,
                    "output": [msg, call]}}),
            ]
            .into_iter()
            .enumerate()
            .map(|(i, mut v)| {
                v["sequence_number"] = json!(i);
                let name = v["type"].as_str().unwrap().to_owned();
                ev(Some(&name), v)
            })
            .collect()
        };
        let mut s = Splice::new(Api::OpenaiResponses);
        let mut out = Vec::new();
        for e in round("looking", RECALL_TOOL, "r1") {
            out.extend(s.take(e));
        }
        s.next_round();
        for e in round("found", "bash", "r2") {
            out.extend(s.take(e));
        }
        out.extend(s.settle(false));
        let out = data(&out);
        let seqs: Vec<u64> = out
            .iter()
            .map(|v| v["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>());
        assert_eq!(
            out.iter()
                .filter(|v| v["type"] == "response.created")
                .count(),
            1
        );
        let done = out.last().unwrap();
        assert_eq!(done["response"]["id"], "r1");
        let names: Vec<&str> = done["response"]["output"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["msg_r1", "msg_r2", "fc_r2"]);
    }

    #[test]
    fn chat_keeps_its_id_and_a_stripped_reply_stops() {
        let chunk = |id: &str, delta: Value, finish: Value| {
            ev(
                None,
                json!({"id": id, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
            )
        };
        let mut s = Splice::new(Api::OpenaiChat);
        let first = [
            chunk(
                "c1",
                json!({"role": "assistant", "content": "let me look"}),
                json!(null),
            ),
            chunk(
                "c1",
                json!({"tool_calls": [{"index": 0, "id": "t", "type": "function",
                    "function": {"name": RECALL_TOOL, "arguments": "{}"}}]}),
                json!(null),
            ),
            chunk("c1", json!({}), json!("tool_calls")),
        ];
        let mut out = Vec::new();
        for e in first {
            out.extend(s.take(e));
        }
        out.push(SseEvent {
            event: None,
            data: "[DONE]".to_owned(),
        });
        s.next_round();
        out.extend(s.take(chunk("c2", json!({"content": "found"}), json!("stop"))));
        let out: Vec<Value> = out
            .iter()
            .filter_map(|e| serde_json::from_str(&e.data).ok())
            .collect();
        assert!(out.iter().all(|v| v["id"] == "c1"));
        let mut s = Splice::new(Api::OpenaiChat);
        s.take(chunk("c1", json!({"content": "x"}), json!(null)));
        s.take(chunk(
            "c1",
            json!({"tool_calls": [{"index": 0, "id": "t", "type": "function",
                "function": {"name": RECALL_TOOL, "arguments": "{}"}}]}),
            json!(null),
        ));
        s.take(chunk("c1", json!({}), json!("tool_calls")));
        let out = data(&s.settle(true));
        assert!(out
            .iter()
            .all(|v| v["choices"][0]["delta"].get("tool_calls").is_none()));
        assert_eq!(out.last().unwrap()["choices"][0]["finish_reason"], "stop");
    }
}
