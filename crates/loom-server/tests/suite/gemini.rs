//! The Gemini API through the proxy: `streamGenerateContent` (server-sent events) and
//! `generateContent`, the model named by the path, the key in `x-goog-api-key`; `observe` sends
//! the client's bytes, `fit` renders contents the API's rules accept, with every signature of
//! the current tool loop as the model gave it (the mock refuses a missing or changed one).

use loom_core::{EventBody, SessionId};
use loom_server::AuthMode;
use loom_store::ProxyMode;
use serde_json::{json, Value};

use super::support::{start, text, Server};

const STREAM: &str = "/v1beta/models/gemini-3-flash:streamGenerateContent?alt=sse";

fn tools() -> Value {
    json!([{"functionDeclarations": [{"name": "run_shell_command", "description": "Runs a command",
        "parametersJsonSchema": {"type": "object", "properties": {"command": {"type": "string"}}}}]}])
}

/// The build log of step `n`: long, and different from every other step's.
fn output(n: usize) -> String {
    (1..=300)
        .map(|i| format!("step {n} line {i}: compiled module_{n}_{i}.rs\n"))
        .collect()
}

/// The model content a streamed reply assembles to, as a client keeps it: the frames' parts in
/// order, pieces of one text joined, thoughts left out (Gemini CLI drops them).
fn assemble(sse: &str) -> Value {
    let mut parts: Vec<Value> = Vec::new();
    for line in sse.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        let frame: Value = serde_json::from_str(data).unwrap();
        let got = frame["candidates"][0]["content"]["parts"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for p in got {
            if p["thought"] == json!(true) {
                continue;
            }
            match (parts.last_mut(), p.get("text").and_then(Value::as_str)) {
                (Some(last), Some(t))
                    if last.get("text").is_some() && last.get("thoughtSignature").is_none() =>
                {
                    let joined = format!("{}{t}", last["text"].as_str().unwrap());
                    last["text"] = json!(joined);
                    if let Some(s) = p.get("thoughtSignature") {
                        last["thoughtSignature"] = s.clone();
                    }
                }
                _ => parts.push(p),
            }
        }
    }
    json!({"role": "model", "parts": parts})
}

async fn send(s: &Server, contents: &[Value], budget: Option<&str>) -> reqwest::Response {
    let body = json!({
        "contents": contents,
        "systemInstruction": {"parts": [{"text": "You are a build agent."}]},
        "tools": tools(),
        "generationConfig": {"thinkingConfig": {"includeThoughts": true}},
    });
    let mut headers = vec![("x-goog-api-key", "g-key"), ("x-loom-session", "gem")];
    if let Some(b) = budget {
        headers.push(("x-loom-budget", b));
    }
    s.http
        .post(format!("{}{STREAM}", s.url))
        .json(&body)
        .headers(
            headers
                .iter()
                .map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap()))
                .collect(),
        )
        .send()
        .await
        .unwrap()
}

/// Runs `steps` tool loops of the conversation; returns it as the client holds it.
async fn conversation(s: &Server, steps: usize, budget: Option<&str>) -> Vec<Value> {
    let mut contents = Vec::new();
    for n in 0..steps {
        contents.push(json!({"role": "user", "parts": [{"text": format!("run build {n}")}]}));
        let r = send(s, &contents, budget).await;
        assert_eq!(r.status(), 200, "step {n}");
        let model = assemble(&text(r).await);
        let call = model["parts"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|p| p.get("functionCall"))
            .expect("the model calls its tool")
            .clone();
        contents.push(model);
        contents.push(json!({"role": "user", "parts": [{"functionResponse": {
            "id": call["id"], "name": call["name"], "response": {"output": output(n)}}}]}));
        let r = send(s, &contents, budget).await;
        assert_eq!(r.status(), 200, "step {n}: {}", s.mock.requests().len());
        contents.push(assemble(&text(r).await));
    }
    contents
}

#[tokio::test]
async fn observe_sends_the_clients_bytes_and_logs_one_session() {
    let s = start(AuthMode::None, ProxyMode::Observe).await;
    conversation(&s, 3, None).await;
    let sent = s.mock.requests();
    assert_eq!(sent.len(), 6);
    for r in &sent {
        assert_eq!(
            r.path,
            "/v1beta/models/gemini-3-flash:streamGenerateContent"
        );
        assert_eq!(r.query.as_deref(), Some("alt=sse"));
        assert_eq!(
            r.header("x-goog-api-key"),
            Some("g-key"),
            "the client's key, forwarded"
        );
    }
    let sessions = s.store().sessions().unwrap();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let log = s
        .store()
        .read(&SessionId::new("gem").unwrap(), 1..=u64::MAX)
        .unwrap();
    // Each turn that called a tool keeps its parts, its signature among them.
    let signed = log
        .iter()
        .filter(|e| match &e.body {
            EventBody::Assistant {
                native: Some(n),
                tool_calls,
                ..
            } => {
                !tool_calls.is_empty()
                    && n.items.iter().any(|p| p.get("thoughtSignature").is_some())
            }
            _ => false,
        })
        .count();
    assert_eq!(signed, 3);
    let results = log
        .iter()
        .filter(|e| matches!(e.body, EventBody::ToolResult { .. }))
        .count();
    assert_eq!(results, 3);
}

#[tokio::test]
async fn fit_renders_what_the_api_accepts_and_keeps_the_loops_signature() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let contents = conversation(&s, 6, Some("6000")).await;
    let sent = s.mock.requests();
    // Every call was accepted by the mock's rules (pairing, signatures), and the later ones
    // were fitted: smaller than the client's conversation.
    let last = &sent.last().unwrap().body;
    loom_core::render::check_gemini(last).unwrap();
    let client_bytes = json!({"contents": contents}).to_string().len();
    assert!(
        last.to_string().len() < client_bytes / 2,
        "fitted: {} of {client_bytes} bytes",
        last.to_string().len()
    );
    assert!(last.to_string().contains("loom_recall ref="), "{last}");
    assert_eq!(
        last["systemInstruction"],
        json!({"parts": [{"text": "You are a build agent."}]})
    );
    // The newest loop's call went back with its signature, byte for byte.
    let newest = contents[contents.len() - 3]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p.get("functionCall").is_some())
        .unwrap()
        .clone();
    assert!(
        last["contents"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|c| c["parts"].as_array().cloned().unwrap_or_default())
            .any(|p| p == newest),
        "{newest} in {last}"
    );
}

#[tokio::test]
async fn a_missing_signature_is_the_providers_400_in_googles_shape() {
    let s = start(AuthMode::None, ProxyMode::Observe).await;
    let contents = json!([
        {"role": "user", "parts": [{"text": "run it"}]},
        {"role": "model", "parts": [{"functionCall": {"id": "c1", "name": "run_shell_command", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"id": "c1", "name": "run_shell_command", "response": {"output": "ok"}}}]}
    ]);
    let r = send(&s, contents.as_array().unwrap(), None).await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["status"], "INVALID_ARGUMENT", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("thought_signature"),
        "{body}"
    );
    // Loom's own refusal is in Google's shape too.
    let bad = json!([{"role": "system", "parts": [{"text": "x"}]}]);
    let r = send(&s, bad.as_array().unwrap(), None).await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("contents[0].role"),
        "{body}"
    );
    // An unknown method is a 404 in Google's shape.
    let r = s
        .http
        .post(format!(
            "{}/v1beta/models/gemini-3-flash:embedContent",
            s.url
        ))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["status"], "NOT_FOUND", "{body}");
}

#[tokio::test]
async fn generate_content_whole_and_count_tokens_pass() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "hello"}]}],
        "generationConfig": {"maxOutputTokens": 64}});
    let r = s
        .http
        .post(format!(
            "{}/v1beta/models/gemini-3-flash:generateContent",
            s.url
        ))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let reply: Value = r.json().await.unwrap();
    assert!(
        reply["candidates"][0]["content"]["parts"][0]["text"].is_string(),
        "{reply}"
    );
    assert_eq!(
        s.mock.requests().last().unwrap().body,
        body,
        "it fits: the client's own"
    );
    let r = s
        .http
        .post(format!(
            "{}/v1beta/models/gemini-3-flash:countTokens",
            s.url
        ))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let count: Value = r.json().await.unwrap();
    assert!(count["totalTokens"].as_u64().unwrap() > 0);
    assert_eq!(
        s.mock.requests().last().unwrap().path,
        "/v1beta/models/gemini-3-flash:countTokens"
    );
}
