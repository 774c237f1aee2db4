//! A local mock of the OpenAI Chat Completions and Anthropic Messages endpoints, on
//! 127.0.0.1 with an OS-chosen port. It records every request, checks the wire shape each API
//! requires (answering 400 like the real ones when it is wrong), and answers with a summary that
//! has the required sections and echoes the identifiers the instruction asks to keep.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use serde_json::{json, Value};

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) path: String,
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) body: Value,
}

/// How the server answers.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// A valid summary keeping the requested identifiers.
    Summary,
    /// This text as the summary.
    Text(String),
    /// This status with an error body.
    Status(u16),
}

pub(crate) struct MockServer {
    pub(crate) url: String,
    pub(crate) seen: Arc<Mutex<Vec<Seen>>>,
    pub(crate) reply: Arc<Mutex<Reply>>,
    stop: Arc<AtomicBool>,
    addr: std::net::SocketAddr,
    handle: Option<JoinHandle<()>>,
}

impl MockServer {
    pub(crate) fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let reply = Arc::new(Mutex::new(Reply::Summary));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, r, st) = (Arc::clone(&seen), Arc::clone(&reply), Arc::clone(&stop));
        let handle = thread::spawn(move || {
            for stream in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(stream) = stream {
                    let reply = r.lock().unwrap().clone();
                    handle(stream, &s, &reply);
                }
            }
        });
        Self {
            url: format!("http://{addr}"),
            seen,
            reply,
            stop,
            addr,
            handle: Some(handle),
        }
    }

    pub(crate) fn set_reply(&self, reply: Reply) {
        *self.reply.lock().unwrap() = reply;
    }

    pub(crate) fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn respond(mut stream: TcpStream, status: u16, body: &Value) {
    let text = body.to_string();
    let reason = if status == 200 { "OK" } else { "Error" };
    let _ = write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    );
    let _ = stream.flush();
}

fn handle(stream: TcpStream, seen: &Mutex<Vec<Seen>>, reply: &Reply) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or("").to_owned(),
        parts.next().unwrap_or("").to_owned(),
    );
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_lowercase(), v.trim().to_owned());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut buf = vec![0; len];
    reader.read_exact(&mut buf).unwrap();
    let body: Value = serde_json::from_slice(&buf).unwrap_or(Value::Null);
    seen.lock().unwrap().push(Seen {
        path: path.clone(),
        headers: headers.clone(),
        body: body.clone(),
    });

    let problem = check_shape(&method, &path, &headers, &body);
    if let Some(problem) = problem {
        respond(stream, 400, &json!({"error": {"message": problem}}));
        return;
    }
    let text = match reply {
        Reply::Status(code) => {
            respond(
                stream,
                *code,
                &json!({"error": {"message": "upstream failure"}}),
            );
            return;
        }
        Reply::Text(t) => t.clone(),
        Reply::Summary => summary_for(&path, &body),
    };
    let answer = if path == "/v1/messages" {
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 10, "cache_read_input_tokens": 8},
        })
    } else {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10},
        })
    };
    respond(stream, 200, &answer);
}

/// The rules each API enforces that a summary request could break.
fn check_shape(
    method: &str,
    path: &str,
    headers: &BTreeMap<String, String>,
    body: &Value,
) -> Option<String> {
    if method != "POST" {
        return Some(format!("method {method} not allowed"));
    }
    if !headers
        .get("content-type")
        .is_some_and(|c| c.starts_with("application/json"))
    {
        return Some("content-type must be application/json".into());
    }
    if !body["model"].is_string() {
        return Some("model is required".into());
    }
    let messages = body["messages"].as_array()?;
    match path {
        "/v1/chat/completions" => {
            if headers.get("authorization").map(String::as_str) != Some("Bearer test-key") {
                return Some("missing bearer key".into());
            }
            if messages.last()?["role"] != "user" {
                return Some("last message must be the user's".into());
            }
            None
        }
        "/v1/messages" => {
            if headers.get("x-api-key").map(String::as_str) != Some("test-key") {
                return Some("missing x-api-key".into());
            }
            if headers.get("anthropic-version").is_none() {
                return Some("missing anthropic-version".into());
            }
            if !body["max_tokens"].is_u64() {
                return Some("max_tokens is required".into());
            }
            if messages.first()?["role"] != "user" {
                return Some("first message must be the user's".into());
            }
            if messages.iter().any(|m| m["role"] == "system") {
                return Some("system goes in the top-level field".into());
            }
            None
        }
        other => Some(format!("no route {other}")),
    }
}

/// The text of the last user message.
pub(crate) fn last_user_text(path: &str, body: &Value) -> String {
    let last = body["messages"].as_array().and_then(|m| m.last());
    let Some(last) = last else {
        return String::new();
    };
    match (&last["content"], path) {
        (Value::String(s), _) => s.clone(),
        (Value::Array(blocks), _) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// A short summary with the sections, keeping what the instruction lists.
fn summary_for(path: &str, body: &Value) -> String {
    let prompt = last_user_text(path, body);
    let keep = prompt
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "Copy these identifiers verbatim where they belong; later turns refer to them: ",
            )
        })
        .unwrap_or("(none)");
    format!("## Goal\nFix the parser.\n## Progress\n- read files\n## Open items\n- keep {keep}")
}
