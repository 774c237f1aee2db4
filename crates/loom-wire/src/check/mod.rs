//! Checks of client request bodies, before anything is forwarded or stored.
//!
//! An invalid request gets a provider-shaped 400 from Loom that names the field, rather than an
//! upstream 400 after Loom has logged half of it. Each rule here is one the provider enforces;
//! the checks are precise rather than exhaustive, and unknown fields, unknown content part types
//! and unknown item types pass, because clients send new parameters before Loom knows them.

mod chat;
mod gemini;
mod messages;
mod responses;

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use crate::json::{join, kind, missing, opt_str, FieldError};
use loom_core::Api;

/// Why a client request would be refused by the provider: the field and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {reason}", if field.is_empty() { "request body" } else { field.as_str() })]
pub struct RequestError {
    /// JSON path of the field, e.g. `messages[3].tool_calls[0].id`; empty for the body itself.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

impl From<FieldError> for RequestError {
    fn from(e: FieldError) -> Self {
        Self {
            field: e.field,
            reason: e.reason,
        }
    }
}

/// Checks a client's request body for `api`; the first problem found is returned.
pub fn check_request(api: Api, body: &Value) -> Result<(), RequestError> {
    check_continuation(api, body, &mut CallIds::default())
}

/// The call ids a conversation has used, carried from the check of its beginning to the check
/// of its continuation (see [`check_continuation`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallIds {
    ids: HashSet<String>,
    /// Whether the body checked last made a call with an id used before it.
    reused: bool,
}

impl CallIds {
    /// How many ids.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Whether the body checked last reused a call id (one of its own, or an earlier body's).
    /// The APIs that allow it read a result as answering the oldest call with its id still
    /// waiting, so such a body's calls can only be told apart knowing every call before it.
    pub fn reused(&self) -> bool {
        self.reused
    }
}

/// Checks a body whose conversation continues one already checked: `earlier` holds the call
/// ids of the messages before the body's first, all of them answered. A proxy that has checked
/// a conversation's first messages checks only the new ones this way, and gets the same answer
/// as [`check_request`] on the whole conversation whenever the earlier messages end at a point
/// where no call waits for its result (before a user message or after a tool result): every
/// rule across messages is about calls, and those are the ids. On success the body's call ids
/// are added to `earlier`; on failure it is unchanged. Field paths count from the body's first
/// message.
pub fn check_continuation(
    api: Api,
    body: &Value,
    earlier: &mut CallIds,
) -> Result<(), RequestError> {
    if let Value::Object(obj) = body {
        streaming(obj).map_err(RequestError::from)?;
    }
    let mut calls = Calls::after(earlier);
    // Anthropic refuses a request whose `tool_use` ids repeat; OpenAI's APIs take an id used
    // again (some servers number calls `call_0` in every turn), a result answering the oldest
    // call with its id that waits for one.
    calls.unique = crate::dialect(api).unique_call_ids();
    match api {
        Api::OpenaiChat => chat::check(body, &mut calls),
        Api::OpenaiResponses => responses::check(body, &mut calls),
        Api::Anthropic => messages::check(body, &mut calls),
        Api::Gemini => gemini::check(body, &mut calls),
    }
    .map_err(RequestError::from)?;
    earlier.reused = calls.reused;
    earlier.ids.extend(calls.made.into_keys());
    Ok(())
}

type Checked<T = ()> = Result<T, FieldError>;

/// `model`: a non-empty string.
fn model(obj: &Map<String, Value>) -> Checked {
    match opt_str(obj, "", "model")? {
        Some(m) if !m.is_empty() => Ok(()),
        Some(_) => Err(FieldError::new("model", "must not be empty")),
        None => Err(missing("", "model", "a string")),
    }
}

/// A required array with at least one element.
fn non_empty_array<'a>(obj: &'a Map<String, Value>, path: &str, key: &str) -> Checked<&'a [Value]> {
    match obj.get(key) {
        Some(Value::Array(a)) if !a.is_empty() => Ok(a),
        Some(Value::Array(_)) => Err(FieldError::new(
            join(path, key),
            "empty array: at least one element is required",
        )),
        None | Some(Value::Null) => Err(missing(path, key, "an array")),
        Some(other) => Err(FieldError::new(
            join(path, key),
            format!("expected an array, got {}", kind(other)),
        )),
    }
}

/// A field that must be a string when present.
fn string_if_present(obj: &Map<String, Value>, path: &str, key: &str) -> Checked {
    opt_str(obj, path, key).map(drop)
}

/// `stream` and `stream_options`, which every API reads the same way and which decide how the
/// reply is shaped (a proxy that relays it must know).
fn streaming(obj: &Map<String, Value>) -> Checked {
    match obj.get("stream") {
        None | Some(Value::Null) | Some(Value::Bool(_)) => {}
        Some(other) => {
            return Err(FieldError::new(
                "stream",
                format!("expected a boolean, got {}", crate::json::kind(other)),
            ))
        }
    }
    object_if_present(obj, "", "stream_options")
}

/// A field that must be an object when present (`null` allowed).
fn object_if_present(obj: &Map<String, Value>, path: &str, key: &str) -> Checked {
    crate::json::opt_object(obj, path, key).map(drop)
}

/// OpenAI's rule for function names: letters, digits, `_` and `-`, at most 64 of them.
fn function_name(name: &str, path: &str) -> Checked {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(FieldError::new(
            path,
            format!("`{name}` must be 1 to 64 letters, digits, underscores or dashes"),
        ))
    }
}

/// The calls of a conversation and which still wait for their result.
#[derive(Debug, Default)]
struct Calls {
    /// Every call id seen, with the path where it was made.
    made: HashMap<String, String>,
    /// Calls without a result yet, in the order they were made: (id, path of the id).
    pending: Vec<(String, String)>,
    /// Whether an id may be used once only (else a reuse is allowed and noted).
    unique: bool,
    /// Whether an id was used again.
    reused: bool,
}

impl Calls {
    /// The state after earlier messages that used the ids `earlier` and left none pending.
    fn after(earlier: &CallIds) -> Self {
        Self {
            made: earlier
                .ids
                .iter()
                .map(|id| (id.clone(), "an earlier message".to_owned()))
                .collect(),
            ..Self::default()
        }
    }

    /// A call made at `path`. Where ids must be unique, a reuse is refused.
    fn call(&mut self, id: &str, path: String) -> Checked {
        if let Some(first) = self.made.get(id) {
            if self.unique {
                return Err(FieldError::new(
                    path,
                    format!("duplicate call id `{id}` (first used at {first})"),
                ));
            }
            self.reused = true;
        } else {
            self.made.insert(id.to_owned(), path.clone());
        }
        self.pending.push((id.to_owned(), path));
        Ok(())
    }

    /// A result at `path` for call `id`, which must be waiting for it.
    fn answer(&mut self, id: &str, path: String) -> Checked {
        if let Some(at) = self.pending.iter().position(|(p, _)| p == id) {
            self.pending.remove(at);
            return Ok(());
        }
        Err(FieldError::new(
            path,
            match self.made.get(id) {
                Some(_) => format!("call `{id}` is already answered, or not answerable here"),
                None => format!("answers no earlier call: no call has id `{id}`"),
            },
        ))
    }

    /// Every call made so far must have its result before the message at `next`.
    fn settled_before(&self, next: &str) -> Checked {
        match self.pending.first() {
            None => Ok(()),
            Some((id, path)) => Err(FieldError::new(
                path.as_str(),
                format!("call `{id}` has no result before {next}"),
            )),
        }
    }

    /// Forgets the pending calls (they can no longer be answered), keeping their ids as used.
    fn close(&mut self) {
        self.pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_continuation_is_checked_against_the_ids_before_it() {
        let call = |id: &str| {
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}}]})
        };
        let result = |id: &str| json!({"role": "tool", "tool_call_id": id, "content": "ok"});
        let body = |messages: Vec<Value>| json!({"model": "gpt-4o", "messages": messages});
        let mut ids = CallIds::default();
        let first = body(vec![
            json!({"role": "user", "content": "hi"}),
            call("c1"),
            result("c1"),
        ]);
        check_continuation(Api::OpenaiChat, &first, &mut ids).unwrap();
        assert_eq!(ids.len(), 1);
        assert!(!ids.reused());
        // OpenAI takes an id used again once its call is answered; the check notes it.
        let reused = body(vec![call("c1"), result("c1")]);
        check_continuation(Api::OpenaiChat, &reused, &mut ids).unwrap();
        assert!(ids.reused());
        assert_eq!(ids.len(), 1);
        let unanswered = body(vec![json!({"role": "user", "content": "x"}), result("zz")]);
        assert!(check_continuation(Api::OpenaiChat, &unanswered, &mut ids).is_err());
        let next = body(vec![call("c2"), result("c2")]);
        check_continuation(Api::OpenaiChat, &next, &mut ids).unwrap();
        assert_eq!(ids.len(), 2);
        assert!(!ids.reused(), "the flag is the last body's");
    }

    #[test]
    fn function_names_follow_openai_pattern() {
        assert!(function_name("read_file-2", "f").is_ok());
        assert!(function_name("", "f").is_err());
        assert!(function_name("has space", "f").is_err());
        assert!(function_name(&"x".repeat(65), "f").is_err());
        assert!(function_name(&"x".repeat(64), "f").is_ok());
    }

    #[test]
    fn anthropic_ids_are_unique_and_openai_ids_may_repeat() {
        let turn = |ids: [&str; 2]| {
            json!({"model": "m", "max_tokens": 5, "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": ids[0], "name": "f", "input": {}},
                    {"type": "tool_use", "id": ids[1], "name": "f", "input": {}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": ids[0], "content": "a"},
                    {"type": "tool_result", "tool_use_id": ids[1], "content": "b"}]}]})
        };
        check_request(Api::Anthropic, &turn(["t1", "t2"])).unwrap();
        let e = check_request(Api::Anthropic, &turn(["t1", "t1"])).unwrap_err();
        assert!(e.reason.contains("duplicate call id `t1`"), "{e}");
        let chat = json!({"model": "m", "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_0", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "call_0", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_0", "content": "a"},
            {"role": "tool", "tool_call_id": "call_0", "content": "b"},
            {"role": "tool", "tool_call_id": "call_0", "content": "c"}]});
        let e = check_request(Api::OpenaiChat, &chat).unwrap_err();
        assert_eq!(
            e.field, "messages[4].tool_call_id",
            "a third result answers nothing"
        );
        let mut two = chat.clone();
        two["messages"].as_array_mut().unwrap().pop();
        check_request(Api::OpenaiChat, &two).unwrap();
    }

    #[test]
    fn calls_are_answered_once_and_in_time() {
        let mut calls = Calls {
            unique: true,
            ..Calls::default()
        };
        calls.call("a", "m[0].a".into()).unwrap();
        calls.call("b", "m[0].b".into()).unwrap();
        assert!(calls.call("a", "m[1]".into()).is_err());
        calls.answer("a", "m[1]".into()).unwrap();
        let e = calls.settled_before("messages[3]").unwrap_err();
        assert_eq!(e.field, "m[0].b");
        calls.answer("b", "m[2]".into()).unwrap();
        calls.settled_before("messages[3]").unwrap();
        assert!(calls.answer("b", "m[3]".into()).is_err());
        assert!(calls.answer("zz", "m[3]".into()).is_err());
        let e = RequestError::from(FieldError::new("", "expected an object"));
        assert_eq!(e.to_string(), "request body: expected an object");
    }
}
