//! What the agents people run send, through the proxy: Claude Code's `system` messages, blocks
//! and query string, Codex's items and tools, clients that re-send history with default fields
//! added or rewrite it every turn, and the clients' own session ids. The rule is the robustness
//! principle: a request a provider would accept is never refused, and what Loom does not model
//! travels as it came.

use loom_core::{EventBody, SessionId};
use loom_server::AuthMode;
use loom_store::ProxyMode;
use serde_json::{json, Value};

use super::support::{start, text, Server};

fn events(s: &Server, id: &str) -> Vec<loom_core::Event> {
    let id = SessionId::new(id).unwrap();
    s.store().read(&id, 1..=u64::MAX).unwrap()
}

/// The one session named after a client's own session id (`client-ID.` and the hash of the
/// conversation's system prompt).
fn client_session(s: &Server, id: &str) -> String {
    let prefix = format!("client-{id}.");
    let found: Vec<String> = s
        .store()
        .sessions()
        .unwrap()
        .into_iter()
        .map(|i| i.id.to_string())
        .filter(|i| i.starts_with(&prefix))
        .collect();
    assert_eq!(found.len(), 1, "{id}: {found:?}");
    found[0].clone()
}

/// A first request shaped as Claude Code 2.1 sends it: three system blocks with their own cache
/// breakpoints, a `system` message among the messages (a beta), a `document` block, a web
/// search's server blocks in an earlier assistant turn, its query string and headers.
fn claude_code_body() -> Value {
    json!({
        "model": "claude-opus-4-8",
        "max_tokens": 32000,
        "stream": false,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Use the tools to help the user.", "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>\nToday is Friday.\n</system-reminder>"},
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}, "title": "notes.txt"},
                {"type": "text", "text": "what is new in rust 1.95?"}
            ]},
            {"role": "assistant", "content": [
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "rust 1.95"}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [
                    {"type": "web_search_result", "url": "https://blog.rust-lang.org", "title": "Rust 1.95", "encrypted_content": "enc", "page_age": null}
                ]},
                {"type": "text", "text": "Rust 1.95 adds things."}
            ]},
            {"role": "system", "content": "The user prefers short answers."},
            {"role": "user", "content": [{"type": "text", "text": "and now fix calc.py", "cache_control": {"type": "ephemeral"}}]}
        ],
        "tools": [
            {"name": "Read", "description": "Read a file", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
        ],
        "metadata": {"user_id": "user_abc_account__session_123"}
    })
}

#[tokio::test]
async fn claude_codes_first_request_passes_as_it_came_in_both_modes() {
    for mode in [ProxyMode::Observe, ProxyMode::Fit] {
        let s = start(AuthMode::None, mode).await;
        let body = claude_code_body();
        let raw = serde_json::to_vec_pretty(&body).unwrap();
        let r = s
            .http
            .post(format!("{}/v1/messages?beta=true", s.url))
            .header("content-type", "application/json")
            .header("anthropic-version", "2023-06-01")
            .header(
                "anthropic-beta",
                "context-1m-2025-08-07,interleaved-thinking-2025-05-14",
            )
            .header("x-app", "cli")
            .header("user-agent", "claude-cli/2.1.0 (external, cli)")
            .header("x-claude-code-session-id", "cc-run-1")
            .body(raw.clone())
            .send()
            .await
            .unwrap();
        let warning = r
            .headers()
            .get("x-loom-warning")
            .map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(r.status(), 200, "{mode:?}: {}", text(r).await);
        let sent = s.mock.requests().last().unwrap().clone();
        // A conversation that fits goes upstream byte for byte, in both modes.
        assert_eq!(sent.raw, raw, "{mode:?}: the body was rewritten");
        assert_eq!(sent.query.as_deref(), Some("beta=true"), "{mode:?}");
        for (name, value) in [
            ("x-app", "cli"),
            ("user-agent", "claude-cli/2.1.0 (external, cli)"),
            (
                "anthropic-beta",
                "context-1m-2025-08-07,interleaved-thinking-2025-05-14",
            ),
        ] {
            assert_eq!(sent.header(name), Some(value), "{mode:?}: {name}");
        }
        assert!(sent.header("x-loom-session").is_none());
        // `claude-opus-4-8` is a new name of a family the registry knows: never a refusal.
        assert!(
            warning.as_deref().is_none_or(|w| !w.contains("unfitted")),
            "{mode:?}: {warning:?}"
        );
        // The client's own session id names the session; what Loom does not model is logged
        // as it came.
        let log = events(&s, &client_session(&s, "cc-run-1"));
        assert!(log.len() >= 5, "{log:?}");
        let opaque = log
            .iter()
            .filter(|e| {
                serde_json::to_string(&e.body)
                    .unwrap()
                    .contains("\"opaque\"")
            })
            .count();
        assert!(
            opaque >= 2,
            "the document and the server blocks are kept: {log:?}"
        );
        assert!(log
            .iter()
            .any(|e| matches!(&e.body, EventBody::System { content } if content.text().contains("short answers"))));
    }
}

/// A first request shaped as Codex CLI sends it: an `additional_tools` item, a `developer`
/// message, `<environment_context>` before the task, `namespace` and built-in tools, its session
/// id in `client_metadata`.
fn codex_body(task: &str) -> Value {
    json!({
        "model": "gpt-6.2-sol",
        "instructions": "You are Codex.",
        "input": [
            {"type": "additional_tools", "tools": [{"type": "function", "name": "extra", "parameters": {"type": "object"}}]},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions instructions>full</permissions instructions>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context>\n  <cwd>/repo</cwd>\n</environment_context>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": task}]}
        ],
        "tools": [
            {"type": "function", "name": "shell", "description": "Run a command", "strict": false,
             "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}}},
            {"type": "namespace", "name": "mcp", "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]},
            {"type": "web_search"}
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": false,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": false,
        "stream": false,
        "include": ["reasoning.encrypted_content"],
        "client_metadata": {"session_id": "codex-1"}
    })
}

#[tokio::test]
async fn codexs_items_and_tools_pass_and_fit_does_not_fall_back() {
    for mode in [ProxyMode::Observe, ProxyMode::Fit] {
        let s = start(AuthMode::None, mode).await;
        let body = codex_body("fix calc.py");
        let r = s.post("/v1/responses", None, &[], &body).await;
        let warning = r
            .headers()
            .get("x-loom-warning")
            .map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(
            r.headers()["x-loom-mode"].to_str().unwrap(),
            mode.as_str(),
            "{warning:?}"
        );
        assert_eq!(r.status(), 200, "{mode:?}: {}", text(r).await);
        assert!(
            warning.as_deref().is_none_or(|w| !w.contains("unfitted")),
            "{mode:?}: {warning:?}"
        );
        if mode == ProxyMode::Fit {
            // A model new to the registry, of a family it knows: fitted, with a warning.
            assert!(
                warning
                    .as_deref()
                    .is_some_and(|w| w.contains("gpt-6.2-sol")),
                "{warning:?}"
            );
        }
        let sent = s.mock.requests().last().unwrap().clone();
        assert_eq!(sent.body, body, "{mode:?}");
        let log = events(&s, &client_session(&s, "codex-1"));
        assert_eq!(log.len(), 6, "{log:?}");
    }
}

#[tokio::test]
async fn an_unknown_item_later_in_a_fitted_conversation_is_sent_back_as_it_came() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let mut body = codex_body("fix calc.py");
    body["input"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "compaction", "id": "cmp_1", "encrypted_content": "opaque-summary"}));
    body["input"].as_array_mut().unwrap().push(
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go on"}]}),
    );
    // A budget far below the conversation: Loom renders, and the items it does not model keep
    // their shape and place.
    let big = "x ".repeat(3000);
    for i in 0..6 {
        body["input"].as_array_mut().unwrap().push(json!({"type": "function_call", "call_id": format!("c{i}"), "name": "shell", "arguments": "{\"command\":[\"cat\",\"big\"]}"}));
        body["input"].as_array_mut().unwrap().push(
            json!({"type": "function_call_output", "call_id": format!("c{i}"), "output": big}),
        );
    }
    let r = s
        .post("/v1/responses", None, &[("x-loom-budget", "4000")], &body)
        .await;
    assert_eq!(r.status(), 200, "{}", text(r).await);
    let sent = s.mock.requests().last().unwrap().body.clone();
    let input = sent["input"].as_array().unwrap();
    assert!(
        input.iter().any(|i| i
            == &json!({"type": "compaction", "id": "cmp_1", "encrypted_content": "opaque-summary"})),
        "{sent}"
    );
    assert!(
        input.iter().any(|i| i["type"] == "additional_tools"),
        "{sent}"
    );
    // The task stays, behind the harness's context.
    assert!(sent.to_string().contains("fix calc.py"), "{sent}");
}

/// Claude Code re-sends each Edit call's input with `"replace_all": false` added: the same call.
#[tokio::test]
async fn edits_resent_with_default_fields_continue_one_session() {
    for mode in [ProxyMode::Observe, ProxyMode::Fit] {
        let s = start(AuthMode::None, mode).await;
        let tools = json!([{"name": "Edit", "description": "Edit a file", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}}]);
        let mut messages = vec![json!({"role": "user", "content": "make 70 edits"})];
        let call = |messages: &Vec<Value>, turn: usize| {
            let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 1024, "tools": tools, "messages": messages});
            let s = &s;
            async move {
                let r = s
                    .post("/v1/messages", None, &[("x-loom-session", "edits")], &body)
                    .await;
                assert_eq!(r.status(), 200, "{mode:?} turn {turn}");
                assert!(
                    r.headers().get("x-loom-diverged").is_none(),
                    "{mode:?} turn {turn} forked"
                );
                r.json::<Value>().await.unwrap()
            }
        };
        for turn in 0..70 {
            let reply = call(&messages, turn).await;
            let mut content = reply["content"].as_array().unwrap().clone();
            let mut id = None;
            for block in &mut content {
                if block["type"] == "tool_use" {
                    block["input"]["replace_all"] = json!(false);
                    id = Some(block["id"].clone());
                }
            }
            messages.push(json!({"role": "assistant", "content": content}));
            let id = id.expect("the mock calls the tool");
            messages.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id, "content": format!("edited {turn}"), "is_error": false}
            ]}));
            // The model says it is done with this edit; the user asks for the next.
            let reply = call(&messages, turn).await;
            messages.push(json!({"role": "assistant", "content": reply["content"]}));
            messages.push(json!({"role": "user", "content": "next edit"}));
        }
        let sessions = s.store().sessions().unwrap();
        assert_eq!(sessions.len(), 1, "{mode:?}: {sessions:?}");
    }
}

/// A client that rewrites its history on every call is never locked out (no fork cap, no 409).
#[tokio::test]
async fn a_history_rewritten_on_every_call_is_never_refused() {
    let s = start(AuthMode::None, ProxyMode::Observe).await;
    for turn in 0..70 {
        let body = json!({"model": "gpt-4o", "messages": [
            {"role": "system", "content": "You are aider."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": format!("files in chat, version {turn}")},
            {"role": "user", "content": "go on"}
        ]});
        let r = s
            .post(
                "/v1/chat/completions",
                None,
                &[("x-loom-session", "aider")],
                &body,
            )
            .await;
        assert_eq!(r.status(), 200, "turn {turn}: {}", text(r).await);
    }
}

/// Chat clients send content part types and roles Loom does not model; they pass too.
#[tokio::test]
async fn chat_parts_loom_does_not_model_pass_in_fit() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let body = json!({"model": "gpt-4o", "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "transcribe this"},
            {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
        ]}
    ]});
    let r = s.post("/v1/chat/completions", None, &[], &body).await;
    assert_eq!(r.status(), 200, "{}", text(r).await);
    assert_eq!(s.mock.requests().last().unwrap().body, body);
}

/// Codex's remote compaction goes to the provider as it came; Loom neither logs nor fits it.
#[tokio::test]
async fn responses_compact_is_forwarded_as_it_came() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let body = json!({"model": "gpt-6.2-sol", "input": [
        {"type": "message", "role": "user", "content": "fix calc.py"},
        {"type": "compaction_trigger"}
    ]});
    let r = s
        .http
        .post(format!("{}/v1/responses/compact?x=1", s.url))
        .header("authorization", "Bearer sk-test")
        .json(&body)
        .send()
        .await
        .unwrap();
    // The mock has no compaction endpoint: its 404 is relayed as it came.
    assert_eq!(r.status(), 404);
    let sent = s.mock.requests().last().unwrap().clone();
    assert_eq!(sent.path, "/v1/responses/compact");
    assert_eq!(sent.query.as_deref(), Some("x=1"));
    assert_eq!(sent.body, body);
    assert_eq!(sent.header("authorization"), Some("Bearer sk-test"));
    assert!(s.store().sessions().unwrap().is_empty(), "nothing logged");
}

/// aider re-sends its files-in-chat message pair after the history on every turn: the same
/// conversation with context moved, continued in one session (the move recorded as the client's
/// rewrite, the pair as repeats of it until the files change), in both modes, for 100 turns.
#[tokio::test]
async fn aiders_rebuilt_context_continues_one_session_for_100_turns() {
    for mode in [ProxyMode::Observe, ProxyMode::Fit] {
        let s = start(AuthMode::None, mode).await;
        let system = json!({"role": "system", "content": "Act as an expert software developer."});
        // aider opens every request with its repo map, the conversation's stable opening.
        let mut done: Vec<Value> = vec![
            json!({"role": "user", "content": "Here are summaries of some files present in my git repository."}),
            json!({"role": "assistant", "content": "Ok, I won't try and edit those files without asking first."}),
        ];
        for turn in 0..100 {
            // The files' content changes every few turns, as the model edits them.
            let files = json!([
                {"role": "user", "content": format!("I have *added these files to the chat*:\ncalc.py\n```\nVERSION = {}\n```", turn / 7)},
                {"role": "assistant", "content": "Ok, any changes I propose will be to those files."}
            ]);
            let current = json!({"role": "user", "content": format!("change {turn}")});
            let reminder = json!({"role": "system", "content": "# SEARCH/REPLACE block rules"});
            let mut messages = vec![system.clone()];
            messages.extend(done.iter().cloned());
            messages.extend(files.as_array().unwrap().iter().cloned());
            messages.push(current.clone());
            messages.push(reminder);
            let body = json!({"model": "gpt-4o", "messages": messages});
            let r = s.post("/v1/chat/completions", None, &[], &body).await;
            assert_eq!(r.status(), 200, "{mode:?} turn {turn}");
            assert!(
                r.headers().get("x-loom-diverged").is_none(),
                "{mode:?} turn {turn} forked"
            );
            let reply: Value = r.json().await.unwrap();
            if mode == ProxyMode::Fit {
                // The conversation fits: the client's own request went upstream.
                assert_eq!(s.mock.requests().last().unwrap().body, body, "turn {turn}");
            }
            done.push(current);
            done.push(reply["choices"][0]["message"].clone());
        }
        let sessions = s.store().sessions().unwrap();
        assert_eq!(sessions.len(), 1, "{mode:?}: {sessions:?}");
        let log = events(&s, sessions[0].id.as_str());
        let rewrites = log
            .iter()
            .filter(|e| matches!(e.body, EventBody::Rewrite { .. }))
            .count();
        assert_eq!(
            rewrites, 99,
            "{mode:?}: one rewrite per turn after the first"
        );
        // The log holds each turn once, and the rebuilt files' content once per version (the
        // files change every 7 turns): every other turn records repeats of it.
        let recorded = log
            .iter()
            .filter(|e| match &e.body {
                EventBody::User { content, .. } => content.text().contains("added these files"),
                _ => false,
            })
            .count();
        assert_eq!(recorded, 100_usize.div_ceil(7), "{mode:?}");
        let repeats = log
            .iter()
            .filter(|e| matches!(e.body, EventBody::Repeat { .. }))
            .count();
        assert!(repeats >= 99 * 2, "{mode:?}: {repeats} repeats");
        assert!(log.len() <= 100 * 6 + 4, "{mode:?}: {} events", log.len());
    }
}

/// Codex compacts locally (a provider not named "OpenAI"): the next request keeps its developer
/// and user context and goes on from a summary opening "Another language model started to solve
/// this problem". The session continues, and the log holds the compaction as one.
#[tokio::test]
async fn codex_local_compaction_continues_its_session() {
    let s = start(AuthMode::None, ProxyMode::Observe).await;
    let headers = [("session-id", "cx-compact")];
    let developer = json!({"type": "message", "role": "developer",
        "content": [{"type": "input_text", "text": "You are Codex."}]});
    let user = |text: &str| {
        json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text}]})
    };
    let mut input = vec![developer.clone(), user("fix calc.py")];
    let mut session = String::new();
    for turn in 0..4 {
        let body = json!({"model": "gpt-5.5", "input": input});
        let r = s.post("/v1/responses", None, &headers, &body).await;
        assert_eq!(r.status(), 200, "turn {turn}");
        session = r.headers()["x-loom-session"].to_str().unwrap().to_owned();
        let reply: Value = r.json().await.unwrap();
        input.extend(reply["output"].as_array().unwrap().iter().cloned());
        input.push(user(&format!("and step {turn}")));
    }
    let compacted = json!({"model": "gpt-5.5", "input": [
        developer,
        user("fix calc.py"),
        user("Another language model started to solve this problem and produced a summary of its thinking process. Summary: calc.py was fixed."),
        user("go on"),
    ]});
    let r = s.post("/v1/responses", None, &headers, &compacted).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("x-loom-diverged").is_none());
    assert_eq!(r.headers()["x-loom-session"], session.as_str());
    let log = events(&s, &session);
    assert!(
        log.iter().any(|e| matches!(
            &e.body,
            EventBody::Rewrite {
                compaction: true,
                ..
            }
        )),
        "recorded as a compaction"
    );
    assert_eq!(s.store().sessions().unwrap().len(), 1);
}

/// Codex compacts remotely (v2, a provider named "OpenAI"): its request ends with a
/// `compaction_trigger` item, the provider answers with one `compaction` item, and the next
/// requests send that item in place of the history. The trigger is logged as the client's (an
/// item kept as it came, offered no `loom_recall`), the `compaction` item as the model's turn (its
/// summary, kept whole), and every window after one is the session's compaction, twice over.
/// Rendered at a budget that forces Loom to write, the `compaction` item goes back as it came,
/// alone (no empty message beside it).
#[tokio::test]
async fn codex_remote_compaction_logs_its_items_as_what_they_are() {
    for mode in [ProxyMode::Observe, ProxyMode::Fit] {
        let s = start(AuthMode::None, mode).await;
        let headers = [("session-id", "cx-remote")];
        let developer = json!({"type": "message", "role": "developer",
            "content": [{"type": "input_text", "text": "You are Codex."}]});
        let user = |text: &str| {
            json!({"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": text}]})
        };
        let tools = json!([{"type": "function", "name": "shell", "description": "Runs a command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]);
        let body = |input: &[Value]| json!({"model": "gpt-5.5", "input": input, "tools": tools});
        let mut window = vec![developer.clone(), user("fix calc.py")];
        let mut session = String::new();
        for compaction in 0..2 {
            for turn in 0..3 {
                let r = s
                    .post("/v1/responses", None, &headers, &body(&window))
                    .await;
                assert_eq!(r.status(), 200, "{mode:?} {compaction}.{turn}");
                assert!(r.headers().get("x-loom-diverged").is_none(), "{mode:?}");
                session = r.headers()["x-loom-session"].to_str().unwrap().to_owned();
                let reply: Value = r.json().await.unwrap();
                for item in reply["output"].as_array().unwrap() {
                    window.push(item.clone());
                    if item["type"] == "function_call" {
                        window.push(json!({"type": "function_call_output",
                            "call_id": item["call_id"], "output": "ok"}));
                    }
                }
                window.push(user(&format!("step {compaction}.{turn}")));
            }
            let mut asked = window.clone();
            asked.push(json!({"type": "compaction_trigger"}));
            let r = s.post("/v1/responses", None, &headers, &body(&asked)).await;
            assert_eq!(r.status(), 200, "{mode:?}");
            assert!(r.headers().get("x-loom-diverged").is_none(), "{mode:?}");
            assert!(r.headers().get("x-loom-recall").is_none(), "{mode:?}");
            // The provider's summary (the mock has no remote compaction: the item is written
            // here as the provider returns it).
            let summary = json!({"type": "compaction", "id": format!("cmp_{compaction}"),
                "encrypted_content": format!("gAAAA-summary-{compaction}")});
            window = vec![
                developer.clone(),
                user("fix calc.py"),
                summary,
                user("go on"),
            ];
        }
        let r = s
            .post(
                "/v1/responses",
                None,
                &[("session-id", "cx-remote"), ("x-loom-budget", "2000")],
                &body(&window),
            )
            .await;
        assert_eq!(r.status(), 200, "{mode:?}: {}", text(r).await);
        assert!(r.headers().get("x-loom-diverged").is_none(), "{mode:?}");
        assert_eq!(s.store().sessions().unwrap().len(), 1, "{mode:?}");
        let sent = s.mock.requests().last().unwrap().body.clone();
        let input = sent["input"].as_array().unwrap();
        let at = input
            .iter()
            .position(|i| i["type"] == "compaction")
            .expect("the summary went upstream");
        assert_eq!(input[at], window[2], "{mode:?}: as it came");
        assert_eq!(
            input[at + 1],
            window[3],
            "{mode:?}: nothing between: {sent}"
        );
        let log = events(&s, &session);
        let triggers = log
            .iter()
            .filter(|e| match &e.body {
                EventBody::User { content, .. } => matches!(content,
                    loom_core::MessageContent::Parts(p)
                        if p.iter().any(|p| p.opaque_type() == Some("compaction_trigger"))),
                _ => false,
            })
            .count();
        assert_eq!(triggers, 2, "{mode:?}");
        let summaries: Vec<&loom_core::NativeReasoning> = log
            .iter()
            .filter_map(|e| match &e.body {
                EventBody::Assistant {
                    content: None,
                    tool_calls,
                    native: Some(native),
                    ..
                } if tool_calls.is_empty() && native.items[0]["type"] == "compaction" => {
                    Some(native)
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            summaries.len(),
            2,
            "{mode:?}: the model's summaries, once each"
        );
        let compactions = log
            .iter()
            .filter(|e| {
                matches!(
                    e.body,
                    EventBody::Rewrite {
                        compaction: true,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(compactions, 2, "{mode:?}");
    }
}

/// Claude Code compacts its own history (auto-compact, `/compact`): the next request opens with
/// the same system prompt and a continuation summary. The session continues, the compaction is
/// recorded with what it replaced, and a fitted request renders what the client sent.
#[tokio::test]
async fn a_client_that_compacts_its_history_continues_its_session() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let headers = [("x-claude-code-session-id", "cc-compact")];
    let mut messages = vec![json!({"role": "user", "content": "fix calc.py"})];
    for turn in 0..5 {
        let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": "You are Claude Code.", "messages": messages});
        let r = s.post("/v1/messages", None, &headers, &body).await;
        assert_eq!(r.status(), 200, "turn {turn}");
        let reply: Value = r.json().await.unwrap();
        messages.push(json!({"role": "assistant", "content": reply["content"]}));
        messages.push(json!({"role": "user", "content": format!("and step {turn}")}));
    }
    let compacted = json!({"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": "You are Claude Code.", "messages": [
        {"role": "user", "content": "This session is being continued from a previous conversation that ran out of context. Summary: calc.py was fixed."},
        {"role": "user", "content": "go on"}
    ]});
    let r = s.post("/v1/messages", None, &headers, &compacted).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("x-loom-diverged").is_none());
    let id = client_session(&s, "cc-compact");
    assert_eq!(r.headers()["x-loom-session"], id.as_str());
    assert_eq!(s.mock.requests().last().unwrap().body, compacted);
    let log = events(&s, &id);
    let rewrite = log
        .iter()
        .find_map(|e| match &e.body {
            EventBody::Rewrite {
                replaced,
                compaction,
            } => Some((replaced.clone(), *compaction)),
            _ => None,
        })
        .expect("the compaction is recorded");
    assert!(rewrite.1, "recorded as a compaction");
    assert_eq!(
        rewrite.0,
        vec![[2, 11]],
        "every message after the system prompt"
    );
    // Rendered at a budget that forces Loom to render, the request is the compacted
    // conversation, not the replaced one.
    let r = s
        .post(
            "/v1/messages",
            None,
            &[
                ("x-claude-code-session-id", "cc-compact"),
                ("x-loom-budget", "3000"),
            ],
            &compacted,
        )
        .await;
    assert_eq!(r.status(), 200, "{}", text(r).await);
    let sent = s.mock.requests().last().unwrap().body.to_string();
    assert!(sent.contains("calc.py was fixed"), "{sent}");
    assert!(!sent.contains("and step 3"), "{sent}");
}

/// Two runs of one task with the same opening and no session id of their own are still two
/// sessions (the second a fork), never each other's rewrite.
#[tokio::test]
async fn parallel_runs_of_one_task_are_not_taken_for_rewrites() {
    let s = start(AuthMode::None, ProxyMode::Observe).await;
    let tools = json!([{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]);
    let mut runs: Vec<Vec<Value>> = vec![
        vec![json!({"role": "user", "content": "run the tests"})],
        vec![json!({"role": "user", "content": "run the tests"})],
    ];
    for turn in 0..3 {
        for (i, messages) in runs.iter_mut().enumerate() {
            let body = json!({"model": "gpt-4o", "tools": tools, "messages": messages});
            let r = s.post("/v1/chat/completions", None, &[], &body).await;
            assert_eq!(r.status(), 200);
            let reply: Value = r.json().await.unwrap();
            let mut message = reply["choices"][0]["message"].clone();
            // Each run's model makes its own call.
            if let Some(call) = message["tool_calls"].get_mut(0) {
                call["id"] = json!(format!("call_{i}_{turn}"));
                call["function"]["arguments"] = json!(format!("{{\"command\":\"run {i}\"}}"));
            }
            messages.push(message.clone());
            if let Some(call) = message["tool_calls"].get(0) {
                messages.push(json!({"role": "tool", "tool_call_id": call["id"], "content": format!("output {i} {turn}")}));
            }
        }
    }
    let sessions = s.store().sessions().unwrap();
    assert!(sessions.len() >= 2, "{sessions:?}");
    for session in &sessions {
        let log = events(&s, session.id.as_str());
        assert!(
            !log.iter()
                .any(|e| matches!(e.body, EventBody::Rewrite { .. })),
            "{}: {log:?}",
            session.id
        );
    }
}

/// A Responses reply with a built-in tool's item (`web_search_call`) is logged as the client
/// sends it back, so the next request continues the session instead of forking it.
#[tokio::test]
async fn a_reply_with_a_built_in_tools_item_is_continued_by_the_next_request() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let output = json!([
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "search first"}], "encrypted_content": "enc"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "rust 1.95"}},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": "Rust 1.95 is out.", "annotations": []}]}
    ]);
    let reply = json!({"id": "resp_1", "object": "response", "status": "completed", "model": "gpt-4o",
        "output": output, "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}});
    s.mock.push_fault(loom_mock_upstream::Fault {
        body: Some(reply.to_string()),
        ..Default::default()
    });
    let mut input =
        vec![json!({"type": "message", "role": "user", "content": "what is new in rust?"})];
    let body = json!({"model": "gpt-4o", "tools": [{"type": "web_search"}], "input": input});
    let r = s
        .post("/v1/responses", None, &[("x-loom-session", "ws")], &body)
        .await;
    assert_eq!(r.status(), 200, "{}", text(r).await);
    input.extend(output.as_array().unwrap().iter().cloned());
    input.push(json!({"type": "message", "role": "user", "content": "thanks"}));
    let body = json!({"model": "gpt-4o", "tools": [{"type": "web_search"}], "input": input});
    let r = s
        .post("/v1/responses", None, &[("x-loom-session", "ws")], &body)
        .await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("x-loom-diverged").is_none());
    assert_eq!(s.store().sessions().unwrap().len(), 1);
    let log = events(&s, "ws");
    assert!(
        !log.iter()
            .any(|e| matches!(e.body, EventBody::Rewrite { .. })),
        "{log:?}"
    );
}

/// A client's side requests under its own session id (opencode's title request, a sub-agent)
/// have their own system prompt: each is its own session, and the main conversation never forks.
#[tokio::test]
async fn side_requests_under_a_clients_session_id_are_sessions_of_their_own() {
    let s = start(AuthMode::None, ProxyMode::Observe).await;
    let headers = [("x-session-id", "oc-1")];
    let title = json!({"model": "gpt-4.1", "messages": [
        {"role": "system", "content": "You are a title generator."},
        {"role": "user", "content": "fix calc.py"}
    ]});
    let r = s.post("/v1/chat/completions", None, &headers, &title).await;
    assert_eq!(r.status(), 200);
    let mut messages = vec![
        json!({"role": "system", "content": "You are opencode."}),
        json!({"role": "user", "content": "fix calc.py"}),
    ];
    for turn in 0..3 {
        let body = json!({"model": "gpt-4.1", "messages": messages});
        let r = s.post("/v1/chat/completions", None, &headers, &body).await;
        assert_eq!(r.status(), 200);
        assert!(r.headers().get("x-loom-diverged").is_none(), "turn {turn}");
        let reply: Value = r.json().await.unwrap();
        messages.push(reply["choices"][0]["message"].clone());
        messages.push(json!({"role": "user", "content": format!("next {turn}")}));
    }
    let sessions: Vec<String> = s
        .store()
        .sessions()
        .unwrap()
        .into_iter()
        .map(|i| i.id.to_string())
        .collect();
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    assert!(sessions
        .iter()
        .all(|i| i.starts_with("client-oc-1.") && !i.contains('~')));
}

/// What a client changes in its own prefix within one conversation does not make it another
/// conversation: Claude Code's billing header in its first system block (its version suffix
/// changes after a compaction), Codex's per-request metadata on its developer item (a
/// `create_time` there one request and gone the next).
#[tokio::test]
async fn a_clients_churn_in_its_own_prefix_keeps_the_conversations_session() {
    let s = start(AuthMode::None, ProxyMode::Observe).await;
    let claude = |version: &str, messages: &[Value]| {
        json!({"model": "claude-opus-5-5", "max_tokens": 1024,
            "system": [
                {"type": "text", "text": format!("x-anthropic-billing-header: cc_version=2.1.332.{version}; cc_entrypoint=cli")},
                {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}
            ],
            "messages": messages})
    };
    let headers = [("x-claude-code-session-id", "cc-churn")];
    // In `fit` too, where the upstream gets the client's current header.
    let f = start(AuthMode::None, ProxyMode::Fit).await;
    for server in [&s, &f] {
        let mut messages = vec![json!({"role": "user", "content": "fix calc.py"})];
        let mut sessions = Vec::new();
        for version in ["832", "cf6"] {
            let r = server
                .post("/v1/messages", None, &headers, &claude(version, &messages))
                .await;
            assert_eq!(r.status(), 200);
            sessions.push(r.headers()["x-loom-session"].to_str().unwrap().to_owned());
            let sent = server.mock.requests().last().unwrap().body.clone();
            let header = sent["system"][0]["text"].as_str().unwrap().to_owned();
            assert!(header.contains(&format!("2.1.332.{version};")), "{header}");
            let reply: Value = r.json().await.unwrap();
            messages.push(json!({"role": "assistant", "content": reply["content"].clone()}));
            messages.push(json!({"role": "user", "content": "go on"}));
        }
        assert_eq!(sessions[0], sessions[1], "Claude Code's billing header");
    }

    let codex = |create_time: Option<u64>, input: &[Value]| {
        let mut developer = json!({"type": "message", "role": "developer",
            "content": [{"type": "input_text", "text": "You are Codex."}]});
        if let Some(t) = create_time {
            developer["internal_chat_message_metadata_passthrough"] = json!({"create_time": t});
        }
        let mut all = vec![developer];
        all.extend_from_slice(input);
        json!({"model": "gpt-5.5", "input": all, "stream": false})
    };
    let headers = [("session-id", "cx-churn")];
    let mut input = vec![json!({"type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "fix calc.py"}]})];
    let mut sessions = Vec::new();
    for create_time in [Some(1_765_000_000), None] {
        let r = s
            .post("/v1/responses", None, &headers, &codex(create_time, &input))
            .await;
        assert_eq!(r.status(), 200);
        sessions.push(r.headers()["x-loom-session"].to_str().unwrap().to_owned());
        let reply: Value = r.json().await.unwrap();
        input.extend(reply["output"].as_array().unwrap().iter().cloned());
        input.push(json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "go on"}]}));
    }
    assert_eq!(sessions[0], sessions[1], "Codex's per-request metadata");
}

/// Every header in which a client names its session is read: each names a session of its own
/// (opencode's `x-session-id` and `x-opencode-session`, Codex's `session-id` and `session_id`,
/// Claude Code's `x-claude-code-session-id`).
#[tokio::test]
async fn every_clients_session_header_names_its_session() {
    let s = start(AuthMode::None, ProxyMode::Observe).await;
    let names = [
        "x-claude-code-session-id",
        "x-session-id",
        "x-opencode-session",
        "session-id",
        "session_id",
    ];
    for (n, name) in names.iter().enumerate() {
        let id = format!("conv-{n}");
        let mut messages = vec![
            json!({"role": "system", "content": "You are a coding agent."}),
            json!({"role": "user", "content": "fix calc.py"}),
        ];
        for turn in 0..2 {
            let body = json!({"model": "gpt-4.1", "messages": messages});
            let r = s
                .post("/v1/chat/completions", None, &[(*name, id.as_str())], &body)
                .await;
            assert_eq!(r.status(), 200, "{name}");
            let session = r.headers()["x-loom-session"].to_str().unwrap().to_owned();
            assert!(
                session.starts_with(&format!("client-{id}.")),
                "{name} turn {turn}: {session}"
            );
            let reply: Value = r.json().await.unwrap();
            messages.push(reply["choices"][0]["message"].clone());
            messages.push(json!({"role": "user", "content": format!("next {turn}")}));
        }
    }
    assert_eq!(s.store().sessions().unwrap().len(), names.len());
}

/// Sends `body` at a 6,000-token budget and returns what reached the upstream, checking that
/// Loom answered and did not fall back to the client's unfitted request.
async fn fitted_at_6000(s: &Server, path: &str, body: &Value) -> Value {
    let r = s.post(path, None, &[("x-loom-budget", "6000")], body).await;
    let warning = r
        .headers()
        .get("x-loom-warning")
        .map(|w| w.to_str().unwrap().to_owned());
    assert_eq!(r.status(), 200, "{path}");
    assert!(
        warning.as_deref().is_none_or(|w| !w.contains("unfitted")),
        "{path}: {warning:?}"
    );
    s.mock.requests().last().unwrap().body.clone()
}

/// Once Loom renders, the client's own messages go back as it wrote them — a string `system`,
/// string contents, Responses messages without a `type` — and the fitted request still passes
/// Loom's own check (no fallback to the client's unfitted request).
#[tokio::test]
async fn restored_client_messages_in_their_short_forms_pass_the_check() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let big = "output line\n".repeat(1500);
    let mut messages = vec![json!({"role": "user", "content": "read the files"})];
    for i in 0..6 {
        messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": format!("t{i}"), "name": "read", "input": {"i": i}}]}));
        messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("t{i}"), "content": big}]}));
        messages.push(json!({"role": "assistant", "content": format!("read {i}")}));
        messages.push(json!({"role": "user", "content": format!("next {i}")}));
    }
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": "Be careful.", "messages": messages});
    let sent = fitted_at_6000(&s, "/v1/messages", &body).await;
    assert_eq!(sent["system"], "Be careful.");
    assert!(sent.to_string().len() < body.to_string().len() / 2);

    let mut input = vec![json!({"role": "user", "content": "read the files"})];
    for i in 0..6 {
        input.push(json!({"type": "function_call", "call_id": format!("c{i}"), "name": "read", "arguments": "{}"}));
        input.push(
            json!({"type": "function_call_output", "call_id": format!("c{i}"), "output": big}),
        );
        input.push(json!({"role": "assistant", "content": format!("read {i}")}));
        input.push(json!({"role": "user", "content": format!("next {i}")}));
    }
    let body = json!({"model": "gpt-4o", "instructions": "Be careful.", "input": input});
    let sent = fitted_at_6000(&s, "/v1/responses", &body).await;
    assert_eq!(sent["instructions"], "Be careful.");
    assert_eq!(
        sent["input"][0],
        json!({"role": "user", "content": "read the files"})
    );
}

/// Once Loom rewrites the conversation, what it keeps goes upstream as the client wrote it:
/// Codex's `developer` item stays `developer` with its id and metadata, and a `system` message
/// inside Claude Code's `messages` (its environment block) stays a `system` message in place.
#[tokio::test]
async fn fit_keeps_the_clients_roles_and_fields_after_a_rewrite() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let big = "output line\n".repeat(1500);
    let developer = json!({"type": "message", "id": "msg_dev1", "role": "developer",
        "content": [{"type": "input_text", "text": "<permissions instructions>full</permissions instructions>"}],
        "internal_chat_message_metadata_passthrough": {"turn": 1}});
    let mut input = vec![
        developer.clone(),
        json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "read the files"}]}),
    ];
    for i in 0..6 {
        input.push(json!({"type": "function_call", "call_id": format!("c{i}"), "name": "read", "arguments": "{}"}));
        input.push(
            json!({"type": "function_call_output", "call_id": format!("c{i}"), "output": big}),
        );
        input.push(
            json!({"type": "message", "role": "assistant", "id": format!("msg_a{i}"),
            "content": [{"type": "output_text", "text": format!("read {i}")}]}),
        );
        input.push(json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": format!("next {i}")}]}));
    }
    let body = json!({"model": "gpt-5.5", "instructions": "You are Codex.", "input": input});
    let sent = fitted_at_6000(&s, "/v1/responses", &body).await;
    assert!(sent.to_string().len() < body.to_string().len() / 2);
    let roles: Vec<&str> = sent["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["role"].as_str())
        .collect();
    assert!(!roles.contains(&"system"), "{roles:?} {}", sent["input"][0]);
    assert_eq!(sent["input"][0], developer, "{}", sent["input"]);

    let environment =
        json!({"role": "system", "content": "# Environment\nWorking directory: /tmp/p"});
    let mut messages = vec![
        json!({"role": "user", "content": "read the files"}),
        environment.clone(),
    ];
    for i in 0..6 {
        messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": format!("t{i}"), "name": "read", "input": {"i": i}}]}));
        messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("t{i}"), "content": big}]}));
        messages.push(json!({"role": "assistant", "content": format!("read {i}")}));
        messages.push(json!({"role": "user", "content": format!("next {i}")}));
    }
    // Claude Code keeps a reminder as the last message, moved there on every request.
    let reminder =
        json!({"role": "system", "content": "<system-reminder>todo list empty</system-reminder>"});
    messages.push(reminder.clone());
    let body = json!({"model": "claude-opus-5-5", "max_tokens": 1024,
        "system": [{"type": "text", "text": "You are Claude Code."}], "messages": messages});
    let sent = fitted_at_6000(&s, "/v1/messages", &body).await;
    assert!(sent.to_string().len() < body.to_string().len() / 2);
    let kept: Vec<&Value> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "system")
        .collect();
    assert_eq!(kept, [&environment, &reminder], "{}", sent["messages"]);
    assert!(
        !sent.to_string().contains("[system]"),
        "{}",
        sent["messages"]
    );
}

/// Claude Code's auto-compact, twice, as it goes on the wire: a summary request (the history
/// without its newest reply, then "CRITICAL: Respond with TEXT ONLY…", tools still offered), then
/// a window opening "This session is being continued…" with the summary. One session, no fork,
/// in `observe` and `fit`; the log holds each compaction as one; `fit` offers no `loom_recall`
/// in the summary request.
#[tokio::test]
async fn claude_codes_auto_compact_twice_keeps_one_session() {
    for mode in [ProxyMode::Observe, ProxyMode::Fit] {
        let s = start(AuthMode::None, mode).await;
        let headers = [("x-claude-code-session-id", "cc-auto")];
        let tools = json!([{"name": "Read", "description": "Reads a file.",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]);
        let body = |messages: &[Value]| {
            json!({"model": "claude-opus-5-5", "max_tokens": 1024,
                "system": [{"type": "text", "text": "You are Claude Code."}],
                "tools": tools, "messages": messages})
        };
        let mut messages = vec![json!({"role": "user", "content": "fix calc.py"})];
        let mut sessions = std::collections::BTreeSet::new();
        for compaction in 0..2 {
            for turn in 0..3 {
                let r = s
                    .post("/v1/messages", None, &headers, &body(&messages))
                    .await;
                assert_eq!(r.status(), 200, "{mode:?} {compaction}.{turn}");
                assert!(r.headers().get("x-loom-diverged").is_none());
                sessions.insert(r.headers()["x-loom-session"].to_str().unwrap().to_owned());
                let reply: Value = r.json().await.unwrap();
                messages.push(json!({"role": "assistant", "content": reply["content"]}));
                let mut answer: Vec<Value> = reply["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|b| b["type"] == "tool_use")
                    .map(
                        |b| json!({"type": "tool_result", "tool_use_id": b["id"], "content": "ok"}),
                    )
                    .collect();
                answer.push(json!({"type": "text", "text": format!("step {compaction}.{turn}")}));
                messages.push(json!({"role": "user", "content": answer}));
            }
            // The summary request: the newest reply and the message after it left out.
            let mut asked = messages[..messages.len() - 2].to_vec();
            asked.push(json!({"role": "user", "content": [{"type": "text", "text":
                "Your task is to create a detailed summary of the conversation so far.\n\nCRITICAL: Respond with TEXT ONLY. Do NOT call any tools."}]}));
            let r = s.post("/v1/messages", None, &headers, &body(&asked)).await;
            assert_eq!(r.status(), 200, "{mode:?} summary {compaction}");
            assert!(
                r.headers().get("x-loom-diverged").is_none(),
                "{mode:?}: the summary request forked"
            );
            assert!(r.headers().get("x-loom-recall").is_none(), "{mode:?}");
            let sent = s.mock.requests().last().unwrap().body.clone();
            assert!(!sent.to_string().contains("loom_recall"), "{mode:?}");
            sessions.insert(r.headers()["x-loom-session"].to_str().unwrap().to_owned());
            let summary: Value = r.json().await.unwrap();
            let summary = summary["content"][0]["text"]
                .as_str()
                .unwrap_or("done")
                .to_owned();
            // As Claude Code sends it: its context reminder first, in the same message.
            messages = vec![
                json!({"role": "user", "content": [
                    {"type": "text", "text": "<system-reminder>\n# gitStatus\nclean\n</system-reminder>"},
                    {"type": "text", "text": format!("This session is being continued from a previous conversation that ran out of context. The summary below covers the earlier portion of the conversation.\n\n{summary} (summary {compaction})")}
                ]}),
                json!({"role": "user", "content": format!("go on after compaction {compaction}")}),
            ];
        }
        let r = s
            .post("/v1/messages", None, &headers, &body(&messages))
            .await;
        assert_eq!(r.status(), 200);
        assert!(r.headers().get("x-loom-diverged").is_none());
        sessions.insert(r.headers()["x-loom-session"].to_str().unwrap().to_owned());
        assert_eq!(sessions.len(), 1, "{mode:?}: {sessions:?}");
        assert_eq!(s.store().sessions().unwrap().len(), 1, "{mode:?}");
        let id = sessions.into_iter().next().unwrap();
        let compactions = events(&s, &id)
            .iter()
            .filter(|e| {
                matches!(
                    e.body,
                    EventBody::Rewrite {
                        compaction: true,
                        ..
                    }
                )
            })
            .count();
        // Each compaction: the summary request, then the window continuing from it.
        assert_eq!(compactions, 4, "{mode:?}");
    }
}

/// Claude Code moves its cache breakpoint to the newest message on every request, so the message
/// that ended the previous request comes again without it. That is still a continuation: only the
/// new messages are read, and the log is the one a whole read gives.
#[tokio::test]
async fn claude_codes_moving_breakpoint_takes_the_continuation_path() {
    let s = start(AuthMode::None, ProxyMode::Observe).await;
    let headers = [("x-claude-code-session-id", "cc-fast")];
    let marked = |m: &Value| {
        let mut m = m.clone();
        let blocks = match m["content"].take() {
            Value::String(text) => vec![json!({"type": "text", "text": text})],
            Value::Array(blocks) => blocks,
            _ => Vec::new(),
        };
        let mut blocks = blocks;
        if let Some(last) = blocks.last_mut() {
            last["cache_control"] = json!({"type": "ephemeral"});
        }
        m["content"] = Value::Array(blocks);
        m
    };
    let mut messages =
        vec![json!({"role": "user", "content": [{"type": "text", "text": "fix calc.py"}]})];
    let turns = 8;
    for turn in 0..turns {
        let mut sent = messages.clone();
        let last = sent.len() - 1;
        sent[last] = marked(&sent[last]);
        let body = json!({"model": "claude-opus-5-5", "max_tokens": 1024,
            "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
            "messages": sent});
        let r = s.post("/v1/messages", None, &headers, &body).await;
        assert_eq!(r.status(), 200, "turn {turn}");
        let reply: Value = r.json().await.unwrap();
        messages.push(json!({"role": "assistant", "content": reply["content"]}));
        let mut answer: Vec<Value> = reply["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .map(|b| json!({"type": "tool_result", "tool_use_id": b["id"], "content": format!("out {turn}")}))
            .collect();
        answer.push(json!({"type": "text", "text": format!("step {turn}")}));
        messages.push(json!({"role": "user", "content": answer}));
    }
    let metrics = text(s.get("/metrics", None).await).await;
    assert!(
        metrics.contains("loom_proxy_histories_total{read=\"whole\"} 1")
            && metrics.contains(&format!(
                "loom_proxy_histories_total{{read=\"continuation\"}} {}",
                turns - 1
            )),
        "{metrics}"
    );
    // The log holds what the client said, once, in order.
    let id = client_session(&s, "cc-fast");
    let log = events(&s, &id);
    let said = log
        .iter()
        .filter(|e| matches!(e.body, EventBody::User { .. } | EventBody::Assistant { .. }))
        .count();
    assert_eq!(said, 2 * turns, "{log:#?}");
}

/// A Chat client routing to an Anthropic model marks its newest message the same way, turning
/// its string content into one text block with the breakpoint and back into a string once the
/// mark moves on: still a continuation, with the log a whole read gives.
#[tokio::test]
async fn a_chat_clients_moving_breakpoint_takes_the_continuation_path() {
    let s = start(AuthMode::None, ProxyMode::Observe).await;
    let headers = [("x-loom-session", "chat-fast")];
    let mut messages = vec![
        json!({"role": "system", "content": "You build things."}),
        json!({"role": "user", "content": "fix calc.py"}),
    ];
    let turns = 8;
    for turn in 0..turns {
        let mut sent = messages.clone();
        let last = sent.len() - 1;
        let text = sent[last]["content"].take();
        sent[last]["content"] =
            json!([{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]);
        let body = json!({"model": "anthropic/claude-opus-5-5", "messages": sent});
        let r = s.post("/v1/chat/completions", None, &headers, &body).await;
        assert_eq!(r.status(), 200, "turn {turn}");
        let reply: Value = r.json().await.unwrap();
        messages.push(reply["choices"][0]["message"].clone());
        messages.push(json!({"role": "user", "content": format!("step {turn}")}));
    }
    let metrics = text(s.get("/metrics", None).await).await;
    assert!(
        metrics.contains("loom_proxy_histories_total{read=\"whole\"} 1")
            && metrics.contains(&format!(
                "loom_proxy_histories_total{{read=\"continuation\"}} {}",
                turns - 1
            )),
        "{metrics}"
    );
    let log = events(&s, "chat-fast");
    let said = log
        .iter()
        .filter(|e| matches!(e.body, EventBody::User { .. } | EventBody::Assistant { .. }))
        .count();
    assert_eq!(said, 2 * turns, "{log:#?}");
    assert!(
        !log.iter()
            .any(|e| matches!(e.body, EventBody::Rewrite { .. })),
        "{log:#?}"
    );
}

/// opencode compacts by asking its summarization agent, then goes on from "What did we do so
/// far?" and the summary, replaying its latest call and result (same ids) after them. That is
/// the client's compaction of the one session, not a fork.
#[tokio::test]
async fn opencodes_compaction_replaying_its_latest_call_keeps_one_session() {
    for mode in [ProxyMode::Observe, ProxyMode::Fit] {
        opencode_compacts(mode).await;
    }
}

async fn opencode_compacts(mode: ProxyMode) {
    let s = start(AuthMode::None, mode).await;
    let headers = [("x-session-id", "ses_oc")];
    let system = json!({"role": "system", "content": "You are opencode, an agent."});
    let tools = json!([{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]);
    let mut sessions = std::collections::BTreeSet::new();
    // Sends `messages`, and appends the reply and a result for each call it makes.
    async fn turn(
        s: &Server,
        headers: &[(&str, &str)],
        tools: &Value,
        messages: &mut Vec<Value>,
        sessions: &mut std::collections::BTreeSet<String>,
    ) -> Vec<Value> {
        let body = json!({"model": "gpt-4.1", "messages": messages, "tools": tools});
        let r = s.post("/v1/chat/completions", None, headers, &body).await;
        assert_eq!(r.status(), 200);
        assert!(
            r.headers().get("x-loom-diverged").is_none(),
            "forked at {}",
            messages.len()
        );
        sessions.insert(r.headers()["x-loom-session"].to_str().unwrap().to_owned());
        let reply: Value = r.json().await.unwrap();
        let reply = reply["choices"][0]["message"].clone();
        let mut added = vec![reply.clone()];
        for c in reply["tool_calls"].as_array().into_iter().flatten() {
            added.push(json!({"role": "tool", "tool_call_id": c["id"], "content": "done"}));
        }
        if added.len() == 1 {
            added.push(json!({"role": "user", "content": "go on"}));
        }
        messages.extend(added.iter().cloned());
        added
    }
    let mut messages = vec![
        system.clone(),
        json!({"role": "user", "content": "fix calc.py"}),
    ];
    let mut latest = Vec::new();
    // The mock calls a tool after a user message and answers a result in text: the third turn
    // is a call.
    for _ in 0..3 {
        latest = turn(&s, &headers, &tools, &mut messages, &mut sessions).await;
    }
    assert_eq!(
        latest[1]["role"], "tool",
        "the latest step is a call: {latest:?}"
    );
    // The window after opencode's compaction: the summary, then its latest step replayed.
    let mut window = vec![
        system.clone(),
        json!({"role": "user", "content": "What did we do so far?"}),
        json!({"role": "assistant", "content": "## Objective\n- fix calc.py\n## Work State\n- four steps done"}),
    ];
    window.extend(latest);
    for _ in 0..2 {
        turn(&s, &headers, &tools, &mut window, &mut sessions).await;
    }
    assert_eq!(sessions.len(), 1, "{mode:?}: {sessions:?}");
}
