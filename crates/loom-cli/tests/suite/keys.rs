//! `loom keys`: a secret shown once and never again, listings without secrets or hashes,
//! revocation, and bad input (tenant names, modes, unknown ids, a missing database).

use loom_store::{hash_api_key, KeyStore, SqliteStore};

use super::Loom;

/// The 48 lowercase hex digits after `lk_`, or a panic naming what was printed.
fn assert_secret(secret: &str) {
    let digits = secret
        .strip_prefix("lk_")
        .unwrap_or_else(|| panic!("not a secret: {secret:?}"));
    assert_eq!(digits.len(), 48, "{secret}");
    assert!(
        digits
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{secret}"
    );
}

#[test]
fn create_prints_the_secret_once_and_stores_only_its_hash() {
    let loom = Loom::new();
    let run = loom.run(["keys", "create", "--tenant", "acme"]).ok();
    let stdout = run.stdout();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "the secret alone: {stdout}");
    let secret = lines[0];
    assert_secret(secret);
    let id = run
        .stderr
        .strip_prefix("key ")
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("stderr names no key: {}", run.stderr));
    assert!(
        run.stderr.contains("for tenant acme created") && run.stderr.contains("shown once"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains(secret));

    // The database holds the hash, under the id stderr named; never the secret.
    let store = SqliteStore::open(loom.db()).unwrap();
    let found = store.key_by_hash(&hash_api_key(secret)).unwrap().unwrap();
    assert_eq!(found.key.id, id);
    assert_eq!(found.key.tenant.as_str(), "acme");
    assert_eq!((found.key.agent, found.key.mode), (None, None));
    drop(store);
    let bytes = std::fs::read(loom.db()).unwrap();
    let wal = std::fs::read(loom.dir.path().join("loom.db-wal")).unwrap_or_default();
    for file in [&bytes, &wal] {
        assert!(
            !file.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "the secret reached the database"
        );
    }

    // Neither listing shows the secret or the hash.
    for args in [&["keys", "list"][..], &["keys", "list", "--json"]] {
        let out = loom.run(args).ok().stdout();
        assert!(out.contains(id), "{out}");
        assert!(!out.contains(secret), "{out}");
        assert!(!out.contains(&found.key.hash), "{out}");
    }
}

#[test]
fn create_json_carries_the_key_and_its_settings() {
    let loom = Loom::new();
    let run = loom
        .run([
            "keys", "create", "--tenant", "t.1", "--agent", "coder", "--mode", "observe", "--json",
        ])
        .ok();
    let v = run.json();
    let secret = v["key"].as_str().unwrap();
    assert_secret(secret);
    let fields: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let mut sorted = fields.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        ["agent", "created_ms", "id", "key", "mode", "tenant"],
        "{v}"
    );
    assert!(v["id"].as_str().unwrap().starts_with("key_"), "{v}");
    assert_eq!(v["tenant"], "t.1");
    assert_eq!(v["agent"], "coder");
    assert_eq!(v["mode"], "observe");
    assert!(v["created_ms"].as_i64().unwrap() > 1_600_000_000_000, "{v}");

    let listed = loom.run(["keys", "list", "--json"]).ok().json();
    assert_eq!(
        listed,
        serde_json::json!([{
            "id": v["id"],
            "tenant": "t.1",
            "agent": "coder",
            "mode": "observe",
            "created_ms": v["created_ms"],
            "revoked_ms": null,
        }])
    );
}

#[test]
fn list_shows_every_key_and_revoke_marks_one() {
    let loom = Loom::new();
    let first = loom
        .run(["keys", "create", "--tenant", "a", "--json"])
        .ok()
        .json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = loom
        .run(["keys", "create", "--tenant", "b", "--mode", "fit", "--json"])
        .ok()
        .json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(first, second);

    let revoked = loom.run(["keys", "revoke", &first]).ok().stdout();
    assert!(
        revoked.contains(&first) && revoked.contains("revoked"),
        "{revoked}"
    );
    let again = loom.run(["keys", "revoke", &first, "--json"]).ok().json();
    let when = again["revoked_ms"].as_i64().unwrap();

    let listed = loom.run(["keys", "list", "--json"]).ok().json();
    let by_id = |id: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["id"] == id)
            .unwrap_or_else(|| panic!("{id} not listed: {listed}"))
            .clone()
    };
    assert_eq!(
        by_id(&first)["revoked_ms"],
        when,
        "revoking twice keeps the first time"
    );
    assert_eq!(by_id(&second)["revoked_ms"], serde_json::Value::Null);
    assert_eq!(by_id(&second)["mode"], "fit");

    let table = loom.run(["keys", "list"]).ok().stdout();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[0].starts_with("ID"), "{table}");
    let row = |id: &str| lines.iter().find(|l| l.starts_with(id)).copied().unwrap();
    assert!(row(&first).contains(" a "), "{table}");
    assert!(!row(&first).trim_end().ends_with('-'), "revoked: {table}");
    assert!(row(&second).contains(" fit "), "{table}");
    assert!(
        row(&second).trim_end().ends_with('-'),
        "not revoked: {table}"
    );
}

#[test]
fn bad_input_exits_2_and_says_what_is_wrong() {
    let loom = Loom::new();
    for tenant in ["", "a/b", "acme corp", &"x".repeat(65)] {
        let run = loom.run(["keys", "create", "--tenant", tenant]);
        assert_eq!(run.code, 2, "{tenant:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("--tenant"),
            "names the flag: {}",
            run.stderr
        );
        assert!(
            run.stderr.contains("A-Z, a-z, 0-9"),
            "names the rule: {}",
            run.stderr
        );
        assert!(run.stdout.is_empty());
    }
    let run = loom.run(["keys", "create", "--tenant", "a", "--mode", "fast"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("--mode"), "{}", run.stderr);
    assert!(run.stdout.is_empty());
    assert!(!loom.db().exists(), "refused input creates no database");

    // Listing or revoking in a database that does not exist is a mistaken --db.
    for args in [
        &["keys", "list"][..],
        &["keys", "revoke", "key_000000000000"],
    ] {
        let run = loom.run(args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains("no database"), "{}", run.stderr);
    }
    assert!(!loom.db().exists());

    loom.run(["keys", "create", "--tenant", "a"]).ok();
    let run = loom.run(["keys", "revoke", "key_nope"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("key_nope") && run.stderr.contains("not found"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.is_empty());
    let listed = loom.run(["keys", "list", "--json"]).ok().json();
    assert_eq!(listed[0]["revoked_ms"], serde_json::Value::Null);
}

#[test]
fn a_database_without_keys_lists_none() {
    let loom = Loom::with_chat();
    assert_eq!(loom.run(["keys", "list"]).ok().stdout(), "no keys\n");
    assert_eq!(
        loom.run(["keys", "list", "--json"]).ok().json(),
        serde_json::json!([])
    );
}
