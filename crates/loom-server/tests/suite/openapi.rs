//! `/openapi.json` describes the API as it answers: every operation is exercised, and every
//! response body is checked against the schema the description gives for its status.

use std::collections::BTreeSet;

use loom_server::AuthMode;
use loom_store::ProxyMode;
use loom_testkit::OpenApi;
use serde_json::{json, Value};

use super::support::{start, Server};

struct Checker {
    doc: Value,
    api: OpenApi,
    seen: BTreeSet<(String, String)>,
}

impl Checker {
    /// Checks one response against the description of (method, path template).
    async fn check(&mut self, method: &str, template: &str, response: reqwest::Response) -> Value {
        let status = response.status().as_u16().to_string();
        let op = &self.doc["paths"][template][method];
        assert!(op.is_object(), "{method} {template} is not described");
        let described = &op["responses"][&status];
        assert!(
            described.is_object(),
            "{method} {template} answered {status}, which is not described"
        );
        let (media, schema) = described["content"]
            .as_object()
            .unwrap()
            .iter()
            .next()
            .unwrap();
        let name = schema["schema"]["$ref"]
            .as_str()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap()
            .to_owned();
        let bytes = response.bytes().await.unwrap();
        let body = if media == "application/json" {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("{method} {template}: not JSON: {e}"))
        } else {
            Value::String(String::from_utf8_lossy(&bytes).into_owned())
        };
        if let Err(errors) = self.api.validate(&name, &body) {
            panic!(
                "{method} {template} {status}: the body does not match {name}: {errors:?}\n{body}"
            );
        }
        self.seen.insert((method.to_owned(), template.to_owned()));
        body
    }
}

#[tokio::test]
async fn every_endpoint_answers_as_the_description_says() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let doc: Value = s.get("/openapi.json", None).await.json().await.unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let api = OpenApi::from_value(doc.clone()).unwrap();
    // The check can fail: a body that breaks a schema is refused.
    assert!(api.validate("Session", &json!({"id": 3})).is_err());
    let mut c = Checker {
        doc,
        api,
        seen: BTreeSet::new(),
    };
    run(&s, &mut c).await;
    let described: BTreeSet<(String, String)> = c.doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, ops)| {
            ops.as_object()
                .unwrap()
                .keys()
                .map(move |m| (m.clone(), path.clone()))
        })
        .collect();
    let missed: Vec<_> = described.difference(&c.seen).collect();
    assert!(missed.is_empty(), "operations never exercised: {missed:?}");
}

async fn run(s: &Server, c: &mut Checker) {
    let big = "entry\n".repeat(20_000);
    let sha = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(big.as_bytes()))
    };
    let r = s.post("/loom/v1/sessions", None, &[], &json!({"id": "s1", "events": [
        {"ts_ms": 1, "kind": "user", "content": "List."},
        {"ts_ms": 2, "kind": "assistant", "tool_calls": [{"id": "c1", "name": "bash", "arguments": "{\"command\":\"ls\"}"}]},
    ]})).await;
    c.check("post", "/loom/v1/sessions", r).await;
    let r = s
        .post("/loom/v1/sessions", None, &[], &json!({"id": "s1"}))
        .await;
    c.check("post", "/loom/v1/sessions", r).await;
    let r = s.post("/loom/v1/sessions/s1/events", None, &[], &json!({"events": [
        {"ts_ms": 3, "kind": "tool_result", "call_id": "c1", "tool_name": "bash", "content": {"text": big},
         "stats": {"bytes": big.len(), "lines": 20_000, "sha256": sha, "content_type": "text"}},
    ]})).await;
    c.check("post", "/loom/v1/sessions/{id}/events", r).await;
    let r = s
        .post(
            "/loom/v1/sessions/s1/events",
            None,
            &[],
            &json!({"events": [{"ts_ms": 4, "kind": "bogus"}]}),
        )
        .await;
    c.check("post", "/loom/v1/sessions/{id}/events", r).await;
    c.check(
        "get",
        "/loom/v1/sessions",
        s.get("/loom/v1/sessions", None).await,
    )
    .await;
    c.check(
        "get",
        "/loom/v1/sessions/{id}",
        s.get("/loom/v1/sessions/s1", None).await,
    )
    .await;
    c.check(
        "get",
        "/loom/v1/sessions/{id}",
        s.get("/loom/v1/sessions/none", None).await,
    )
    .await;
    c.check(
        "get",
        "/loom/v1/sessions/{id}/events",
        s.get("/loom/v1/sessions/s1/events?from=1&to=2", None).await,
    )
    .await;
    c.check(
        "get",
        "/loom/v1/sessions/{id}/events",
        s.get("/loom/v1/sessions/s1/events?from=x", None).await,
    )
    .await;
    let r = s
        .post(
            "/loom/v1/sessions/s1/render",
            None,
            &[],
            &json!({"model": "gpt-4o", "budget": 3000}),
        )
        .await;
    c.check("post", "/loom/v1/sessions/{id}/render", r).await;
    let r = s
        .post(
            "/loom/v1/sessions/s1/render",
            None,
            &[],
            &json!({"model": 7}),
        )
        .await;
    c.check("post", "/loom/v1/sessions/{id}/render", r).await;
    let steps = c
        .check(
            "get",
            "/loom/v1/sessions/{id}/steps",
            s.get("/loom/v1/sessions/s1/steps", None).await,
        )
        .await;
    let reference = steps["steps"][0]["outcome_ref"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = s
        .get(
            &format!("/loom/v1/sessions/s1/recall?ref={reference}"),
            None,
        )
        .await;
    c.check("get", "/loom/v1/sessions/{id}/recall", r).await;
    c.check(
        "get",
        "/loom/v1/sessions/{id}/recall",
        s.get("/loom/v1/sessions/s1/recall?ref=outputs/none.txt", None)
            .await,
    )
    .await;
    c.check(
        "get",
        "/loom/v1/sessions/{id}/explain",
        s.get("/loom/v1/sessions/s1/explain?event=3", None).await,
    )
    .await;
    c.check(
        "get",
        "/loom/v1/sessions/{id}/explain",
        s.get("/loom/v1/sessions/s1/explain?event=99", None).await,
    )
    .await;
    let r = s
        .post(
            "/loom/v1/sessions/s1/usage",
            None,
            &[],
            &json!({"call": 1, "input_tokens": 10}),
        )
        .await;
    c.check("post", "/loom/v1/sessions/{id}/usage", r).await;
    let r = s
        .post(
            "/loom/v1/sessions/s1/usage",
            None,
            &[],
            &json!({"call": 5, "input_tokens": 10}),
        )
        .await;
    c.check("post", "/loom/v1/sessions/{id}/usage", r).await;
    c.check(
        "get",
        "/loom/v1/sessions/{id}/receipts",
        s.get("/loom/v1/sessions/s1/receipts", None).await,
    )
    .await;
    c.check(
        "get",
        "/loom/v1/sessions/{id}/receipts/{call}",
        s.get("/loom/v1/sessions/s1/receipts/1", None).await,
    )
    .await;
    c.check(
        "get",
        "/loom/v1/sessions/{id}/receipts/{call}",
        s.get("/loom/v1/sessions/s1/receipts/2", None).await,
    )
    .await;
    for (template, path) in [
        ("/loom/v1/inspect/sessions", "/loom/v1/inspect/sessions"),
        (
            "/loom/v1/inspect/sessions/{id}",
            "/loom/v1/inspect/sessions/s1",
        ),
        (
            "/loom/v1/inspect/sessions/{id}",
            "/loom/v1/inspect/sessions/s1?limit=0",
        ),
        (
            "/loom/v1/inspect/sessions/{id}",
            "/loom/v1/inspect/sessions/none",
        ),
        (
            "/loom/v1/inspect/sessions/{id}/calls/{call}",
            "/loom/v1/inspect/sessions/s1/calls/1",
        ),
        (
            "/loom/v1/inspect/sessions/{id}/calls/{call}",
            "/loom/v1/inspect/sessions/s1/calls/9",
        ),
        ("/loom/v1/inspect/usage", "/loom/v1/inspect/usage"),
        (
            "/loom/v1/inspect/usage",
            "/loom/v1/inspect/usage?bucket_ms=1",
        ),
    ] {
        c.check("get", template, s.get(path, None).await).await;
    }
    let history = json!({"messages": [{"role": "user", "content": "hi"}]});
    let r = s
        .post("/loom/v1/import?session=imp", None, &[], &history)
        .await;
    c.check("post", "/loom/v1/import", r).await;
    let r = s
        .post("/loom/v1/import?session=imp", None, &[], &history)
        .await;
    c.check("post", "/loom/v1/import", r).await;
    let r = s
        .post(
            "/loom/v1/import?session=imp",
            None,
            &[],
            &json!({"messages": [{"role": "user", "content": "other"}]}),
        )
        .await;
    c.check("post", "/loom/v1/import", r).await;
    // The next items of a history: a call, then (in a later batch) its result; an orphan.
    let batches = [
        (
            json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [
                {"id": "h1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}),
            200,
        ),
        (
            json!({"messages": [{"role": "tool", "tool_call_id": "h1", "content": "out"}]}),
            200,
        ),
        (
            json!({"messages": [{"role": "tool", "tool_call_id": "nope", "content": "x"}]}),
            400,
        ),
    ];
    for (batch, status) in batches {
        let r = s
            .post(
                "/loom/v1/sessions/imp/history?format=openai",
                None,
                &[],
                &batch,
            )
            .await;
        assert_eq!(r.status(), status, "{batch}");
        c.check("post", "/loom/v1/sessions/{id}/history", r).await;
    }
    memory(s, c).await;
}

/// The memory and knowledge-base endpoints, each with a success and a refusal.
async fn memory(s: &Server, c: &mut Checker) {
    s.indexed().await;
    let search =
        |body: Value| async move { s.post("/loom/v1/memory/search", None, &[], &body).await };
    let hits = c
        .check(
            "post",
            "/loom/v1/memory/search",
            search(json!({"query": "list", "agent": "agent"})).await,
        )
        .await;
    assert_eq!(
        hits["hits"][0]["text"], "List.",
        "indexed on create: {hits}"
    );
    let r = search(json!({"query": "list", "agent": "agent", "tier": "L9"})).await;
    assert_eq!(r.status(), 400);
    c.check("post", "/loom/v1/memory/search", r).await;
    let r = s
        .post(
            "/loom/v1/memory/items",
            None,
            &[],
            &json!({"text": "the listing is long", "session": "s1", "ttl_seconds": 60}),
        )
        .await;
    let saved = c.check("post", "/loom/v1/memory/items", r).await;
    let id = saved["id"].as_i64().unwrap();
    let r = s
        .post(
            "/loom/v1/memory/items",
            None,
            &[],
            &json!({"text": "x", "session": "none"}),
        )
        .await;
    assert_eq!(r.status(), 404);
    c.check("post", "/loom/v1/memory/items", r).await;
    let item = c
        .check(
            "get",
            "/loom/v1/memory/items/{id}",
            s.get(&format!("/loom/v1/memory/items/{id}"), None).await,
        )
        .await;
    assert_eq!(item["tier"], "L2");
    assert_eq!(item["sources"][0]["session"], "s1");
    let r = s.get("/loom/v1/memory/items/abc", None).await;
    assert_eq!(r.status(), 400);
    c.check("get", "/loom/v1/memory/items/{id}", r).await;
    c.check(
        "delete",
        "/loom/v1/memory/items/{id}",
        s.delete(&format!("/loom/v1/memory/items/{id}"), None).await,
    )
    .await;
    let r = s.delete(&format!("/loom/v1/memory/items/{id}"), None).await;
    assert_eq!(r.status(), 404);
    c.check("delete", "/loom/v1/memory/items/{id}", r).await;

    let r = s
        .post(
            "/loom/v1/sessions",
            None,
            &[],
            &json!({"id": "doomed", "events": [
                {"ts_ms": 1, "kind": "user", "content": "short-lived"},
            ]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    c.check(
        "delete",
        "/loom/v1/sessions/{id}",
        s.delete("/loom/v1/sessions/doomed", None).await,
    )
    .await;
    let r = s.delete("/loom/v1/sessions/doomed", None).await;
    assert_eq!(r.status(), 404);
    c.check("delete", "/loom/v1/sessions/{id}", r).await;

    let file = json!({"path": "guide.md", "content": "# Listing\n\nUse ls -la to list.\n"});
    c.check(
        "post",
        "/loom/v1/kb/files",
        s.post("/loom/v1/kb/files", None, &[], &file).await,
    )
    .await;
    let r = s
        .post(
            "/loom/v1/kb/files",
            None,
            &[],
            &json!({"path": "bad.json", "content": "{"}),
        )
        .await;
    assert_eq!(r.status(), 400);
    c.check("post", "/loom/v1/kb/files", r).await;
    let files = c
        .check(
            "get",
            "/loom/v1/kb/files",
            s.get("/loom/v1/kb/files", None).await,
        )
        .await;
    assert_eq!(files["files"][0]["path"], "guide.md");
    let hits = c
        .check(
            "post",
            "/loom/v1/kb/search",
            s.post("/loom/v1/kb/search", None, &[], &json!({"query": "list"}))
                .await,
        )
        .await;
    assert_eq!(hits["hits"][0]["from_line"], 1);
    let r = s
        .post(
            "/loom/v1/kb/search",
            None,
            &[],
            &json!({"query": "list", "budget": 0}),
        )
        .await;
    assert_eq!(r.status(), 400);
    c.check("post", "/loom/v1/kb/search", r).await;
    c.check(
        "post",
        "/loom/v1/kb/remove",
        s.post(
            "/loom/v1/kb/remove",
            None,
            &[],
            &json!({"path": "guide.md"}),
        )
        .await,
    )
    .await;
    let r = s
        .post(
            "/loom/v1/kb/remove",
            None,
            &[],
            &json!({"path": "guide.md"}),
        )
        .await;
    assert_eq!(r.status(), 404);
    c.check("post", "/loom/v1/kb/remove", r).await;
}

/// Every request body the description declares is closed (the server refuses unknown fields),
/// and every optional field of one takes `null` (the server reads it as absent) unless it has a
/// default; every path parameter is required.
#[tokio::test]
async fn the_description_declares_what_the_server_enforces() {
    let s = start(AuthMode::None, ProxyMode::Fit).await;
    let doc: Value = s.get("/openapi.json", None).await.json().await.unwrap();
    let schemas = &doc["components"]["schemas"];
    let mut bodies = 0;
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            for p in op["parameters"].as_array().into_iter().flatten() {
                if p["in"] == "path" {
                    assert_eq!(p["required"], true, "{method} {path}: {p}");
                }
            }
            let Some(reference) = op.pointer("/requestBody/content/application~1json/schema/$ref")
            else {
                continue;
            };
            let name = reference.as_str().unwrap().rsplit('/').next().unwrap();
            let schema = &schemas[name];
            if schema["type"] != "object" {
                continue; // a provider's history: any object or list
            }
            bodies += 1;
            assert_eq!(schema["additionalProperties"], false, "{name} is open");
            let required: Vec<&str> = schema["required"]
                .as_array()
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            for (field, prop) in schema["properties"].as_object().unwrap() {
                if required.contains(&field.as_str()) || ["events", "history"].contains(&&**field) {
                    continue;
                }
                let nullable = prop["type"]
                    .as_array()
                    .is_some_and(|t| t.iter().any(|t| t == "null"))
                    || prop["oneOf"]
                        .as_array()
                        .is_some_and(|t| t.iter().any(|t| t["type"] == "null"));
                assert!(
                    nullable,
                    "{name}.{field} is optional but not nullable: {prop}"
                );
            }
        }
    }
    assert!(bodies >= 9, "only {bodies} request bodies found");
}
