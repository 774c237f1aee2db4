//! Integration tests, one module per concern, sharing the helpers below.

mod chat;
mod control;
mod faults;
mod messages;
mod responses;

use loom_mock_upstream::{Mock, MockHandle};
use serde_json::Value;

/// JSON bodies without reqwest's `json` feature, which nothing else in the workspace needs.
trait JsonBody {
    /// Sends `value` as the JSON body.
    fn json_body(self, value: &Value) -> Self;
}

impl JsonBody for reqwest::RequestBuilder {
    fn json_body(self, value: &Value) -> Self {
        self.header("content-type", "application/json")
            .body(value.to_string())
    }
}

/// Reading a reply body as JSON, failing the test when it is not.
trait JsonReply {
    /// The body as JSON.
    async fn json_value(self) -> Value;
}

impl JsonReply for reqwest::Response {
    async fn json_value(self) -> Value {
        let bytes = self.bytes().await.expect("a complete body");
        serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&bytes)
            )
        })
    }
}

/// A fresh mock on a free port.
async fn spawn() -> MockHandle {
    Mock::spawn().await.expect("mock binds a free port")
}

/// POSTs `body` as JSON to `path` on `mock`.
async fn post(mock: &MockHandle, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{path}", mock.base_url()))
        .header("authorization", "Bearer sk-test")
        .header("anthropic-version", "2023-06-01")
        .json_body(body)
        .send()
        .await
        .expect("request reaches the mock")
}

/// POSTs and reads a JSON reply, checking the status.
async fn post_json(mock: &MockHandle, path: &str, body: &Value, status: u16) -> Value {
    let resp = post(mock, path, body).await;
    assert_eq!(resp.status().as_u16(), status, "status of {path}");
    resp.json_value().await
}

/// POSTs and reads a whole SSE body, checking it is one.
async fn post_sse(mock: &MockHandle, path: &str, body: &Value) -> Vec<Event> {
    let resp = post(mock, path, body).await;
    assert_eq!(resp.status().as_u16(), 200);
    let content_type = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    let text = resp.text().await.expect("a complete body");
    parse_sse(&text)
}

/// One SSE event: its `event:` name (if any) and its `data:`.
#[derive(Debug, Clone, PartialEq)]
struct Event {
    name: Option<String>,
    data: String,
}

impl Event {
    /// The data as JSON.
    fn json(&self) -> Value {
        serde_json::from_str(&self.data)
            .unwrap_or_else(|e| panic!("event data is not JSON ({e}): {}", self.data))
    }
}

/// A strict SSE reader for what the mock writes: events end with a blank line, and every
/// line is `event: ...` or `data: ...`.
fn parse_sse(text: &str) -> Vec<Event> {
    assert!(
        text.ends_with("\n\n"),
        "stream ends with a complete event: {text:?}"
    );
    text.split("\n\n")
        .filter(|block| !block.is_empty())
        .map(|block| {
            let mut event = Event {
                name: None,
                data: String::new(),
            };
            for line in block.lines() {
                if let Some(name) = line.strip_prefix("event: ") {
                    event.name = Some(name.to_owned());
                } else if let Some(data) = line.strip_prefix("data: ") {
                    event.data.push_str(data);
                } else {
                    panic!("unexpected SSE line {line:?}");
                }
            }
            event
        })
        .collect()
}

/// `value` without the fields that hold the clock, so replies from two runs compare equal.
fn without_clock(mut value: Value) -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(map) => {
                map.remove("created");
                map.remove("created_at");
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut value);
    value
}
