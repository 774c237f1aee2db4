//! Memory through the HTTP API under tenants: appended sessions are indexed off the request
//! path, and one tenant's memory, notes and knowledge base are never another's; bad input is a
//! 4xx naming the field, never a 5xx.

use loom_server::AuthMode;
use loom_store::ProxyMode;
use serde_json::{json, Value};

use super::support::{start, Server};

async fn session(s: &Server, key: &str, id: &str, text: &str) {
    let r = s
        .post(
            "/loom/v1/sessions",
            Some(key),
            &[],
            &json!({"id": id, "agent": "support", "events": [
                {"ts_ms": 1, "kind": "user", "content": text},
                {"ts_ms": 2, "kind": "assistant", "content": "noted"},
            ]}),
        )
        .await;
    assert_eq!(r.status(), 201);
}

async fn search(s: &Server, key: &str, body: Value) -> Value {
    let r = s
        .post("/loom/v1/memory/search", Some(key), &[], &body)
        .await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

fn texts(hits: &Value) -> Vec<String> {
    hits["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["text"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn tenants_never_see_each_others_memory_notes_or_knowledge() {
    let s = start(AuthMode::Keys, ProxyMode::Observe).await;
    let a = s.key("tenant-a");
    let b = s.key("tenant-b");
    // Same session id, same agent name, in two tenants.
    session(&s, &a, "s", "my locker code is 4471").await;
    session(&s, &b, "s", "the locker code of B is 9090").await;
    s.indexed().await;
    let q = json!({"query": "locker code", "agent": "support"});
    let own_a = texts(&search(&s, &a, q.clone()).await);
    let own_b = texts(&search(&s, &b, q.clone()).await);
    assert!(own_a.iter().any(|t| t.contains("4471")), "{own_a:?}");
    assert!(own_a.iter().all(|t| !t.contains("9090")), "{own_a:?}");
    assert!(own_b.iter().all(|t| !t.contains("4471")), "{own_b:?}");
    // Sources are in the tenant's own names.
    let hits = search(&s, &a, q.clone()).await;
    assert_eq!(hits["hits"][0]["sources"][0]["session"], "s");

    // A note of A's, by id: B cannot read or forget it, nor find it in its own L2.
    let r = s
        .post(
            "/loom/v1/memory/items",
            Some(&a),
            &[],
            &json!({"text": "locker is on floor three", "session": "s"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let id = r.json::<Value>().await.unwrap()["id"].as_i64().unwrap();
    let path = format!("/loom/v1/memory/items/{id}");
    assert_eq!(s.get(&path, Some(&b)).await.status(), 404);
    assert_eq!(s.delete(&path, Some(&b)).await.status(), 404);
    let l2 = json!({"query": "locker floor", "agent": "support", "tier": "L2", "session": "s"});
    assert!(texts(&search(&s, &b, l2.clone()).await).is_empty());
    assert_eq!(
        texts(&search(&s, &a, l2).await),
        ["locker is on floor three"]
    );
    let item: Value = s.get(&path, Some(&a)).await.json().await.unwrap();
    assert_eq!(item["agent"], "support");
    assert_eq!(item["sources"][0]["session"], "s");
    // L1 of a session is its tenant's only.
    let l1 = json!({"query": "locker", "agent": "support", "tier": "L1", "session": "s"});
    let mine = texts(&search(&s, &a, l1.clone()).await);
    assert_eq!(mine, ["my locker code is 4471"]);

    // The knowledge base is per tenant.
    let file = json!({"path": "doc.md", "content": "# Lockers\n\nLockers reset monthly.\n"});
    assert_eq!(
        s.post("/loom/v1/kb/files", Some(&a), &[], &file)
            .await
            .status(),
        200
    );
    let kb_b: Value = s
        .post(
            "/loom/v1/kb/search",
            Some(&b),
            &[],
            &json!({"query": "lockers"}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(kb_b["hits"], json!([]));
    let listed: Value = s
        .get("/loom/v1/kb/files", Some(&b))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["files"], json!([]));
    s.stop().await;
}

#[tokio::test]
async fn appends_imports_and_histories_are_indexed_and_bad_input_is_a_4xx_naming_the_field() {
    let s = start(AuthMode::None, ProxyMode::Observe).await;
    let history =
        json!({"messages": [{"role": "user", "content": "The kiln fires at 1200 degrees"}]});
    let r = s
        .post(
            "/loom/v1/import?session=pots&agent=potter",
            None,
            &[],
            &history,
        )
        .await;
    assert_eq!(r.status(), 201);
    let next =
        json!({"messages": [{"role": "assistant", "content": "Glaze melts near the kiln peak"}]});
    let r = s
        .post(
            "/loom/v1/sessions/pots/history?format=openai",
            None,
            &[],
            &next,
        )
        .await;
    assert_eq!(r.status(), 200);
    let r = s
        .post(
            "/loom/v1/sessions/pots/events",
            None,
            &[],
            &json!({"events": [{"ts_ms": 9, "kind": "user", "content": "kiln shelves crack when cooled fast"}]}),
        )
        .await;
    assert_eq!(r.status(), 200);
    s.indexed().await;
    let found = texts(
        &search(
            &s,
            "",
            json!({"query": "kiln", "agent": "potter", "tier": "L4"}),
        )
        .await,
    );
    assert_eq!(found.len(), 3, "{found:?}");
    // Without an agent (and a key that names none), the agent a session gets when none is named.
    let r = s
        .post(
            "/loom/v1/memory/search",
            None,
            &[],
            &json!({"query": "kiln"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert!(
        r.json::<Value>().await.unwrap()["hits"]
            .as_array()
            .unwrap()
            .is_empty(),
        "agent `agent` keeps no memory here"
    );

    for (body, field) in [
        (json!({"agent": "potter"}), "query"),
        (
            json!({"query": "kiln", "agent": "potter", "tier": "L9"}),
            "tier",
        ),
        (
            json!({"query": "kiln", "agent": "potter", "budget": 0}),
            "budget",
        ),
        (
            json!({"query": "kiln", "agent": "potter", "tier": "L2"}),
            "session",
        ),
        (json!({"query": "kiln", "agent": "potter", "bogus": 1}), ""),
    ] {
        let r = s.post("/loom/v1/memory/search", None, &[], &body).await;
        assert_eq!(r.status(), 400, "{body}");
        let e: Value = r.json().await.unwrap();
        if !field.is_empty() {
            assert!(
                e["error"]["field"] == field
                    || e["error"]["message"].as_str().unwrap().contains(field),
                "{body}: {e}"
            );
        }
    }
    for (body, status) in [
        (
            json!({"text": "x", "session": "pots", "ttl_seconds": 0}),
            400,
        ),
        (json!({"text": " ", "session": "pots"}), 400),
        // A seq the session does not have is not found; an agent that is not the session's
        // contradicts what is stored.
        (json!({"text": "x", "session": "pots", "seq": 99}), 404),
        (
            json!({"text": "x", "session": "pots", "agent": "someone"}),
            409,
        ),
        (json!({"text": "x", "session": "nowhere"}), 404),
        (json!({"session": "pots"}), 400),
    ] {
        let r = s.post("/loom/v1/memory/items", None, &[], &body).await;
        assert_eq!(r.status(), status, "{body}");
    }
    assert_eq!(s.get("/loom/v1/memory/items/-3", None).await.status(), 400);
    assert_eq!(
        s.get("/loom/v1/memory/items/123456", None).await.status(),
        404
    );
    s.stop().await;
}

#[tokio::test]
async fn deleting_a_session_removes_its_log_and_the_memory_only_it_gave() {
    let s = start(AuthMode::Keys, ProxyMode::Observe).await;
    let a = s.key("tenant-a");
    let b = s.key("tenant-b");
    session(&s, &a, "s", "my locker code is 4471").await;
    session(&s, &a, "t", "the printer on floor two is jammed").await;
    session(&s, &b, "s", "the locker code of B is 9090").await;
    s.indexed().await;
    // Another tenant's key cannot delete it: the session is not theirs (404, as for any id).
    let r = s.delete("/loom/v1/sessions/s", Some(&b)).await;
    assert_eq!(r.status(), 200, "b deletes its own `s`");
    let r = s.delete("/loom/v1/sessions/t", Some(&b)).await;
    assert_eq!(r.status(), 404);
    let r = s.delete("/loom/v1/sessions/s", Some(&a)).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["id"], "s");
    assert_eq!(v["events"], 2);
    assert!(v["memory_items_forgotten"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(s.get("/loom/v1/sessions/s", Some(&a)).await.status(), 404);
    assert_eq!(
        s.delete("/loom/v1/sessions/s", Some(&a)).await.status(),
        404
    );
    let q = json!({"query": "locker code printer", "agent": "support"});
    let left = texts(&search(&s, &a, q).await);
    assert!(left.iter().all(|t| !t.contains("4471")), "{left:?}");
    assert!(left.iter().any(|t| t.contains("printer")), "{left:?}");
    // The id starts a new log, indexed from its start.
    session(&s, &a, "s", "the new locker code is 1234").await;
    s.indexed().await;
    let q = json!({"query": "locker code", "agent": "support"});
    let now = texts(&search(&s, &a, q).await);
    assert!(now.iter().any(|t| t.contains("1234")), "{now:?}");
}

#[tokio::test]
async fn a_limit_of_u64_max_or_an_overlong_agent_is_answered_not_a_500() {
    let s = start(AuthMode::Keys, ProxyMode::Observe).await;
    let a = s.key("tenant-a");
    session(&s, &a, "s", "the deploy key lives in the vault").await;
    s.indexed().await;
    let r = s
        .post(
            "/loom/v1/memory/search",
            Some(&a),
            &[],
            &json!({"query": "deploy key", "agent": "support", "limit": u64::MAX}),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let long = "a".repeat(1025);
    let r = s
        .post(
            "/loom/v1/sessions",
            Some(&a),
            &[],
            &json!({"id": "t", "agent": long}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["field"], "agent");
}
