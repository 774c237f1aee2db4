//! Scenarios on API keys: creating, listing, finding by hash, revoking, refusing duplicates and
//! malformed records, and persistence.

use loom_core::AgentId;
use loom_store::{
    hash_api_key, new_api_key, ApiKey, KeyStore, NewApiKey, ProxyMode, Store, StoreError, TenantId,
};

use crate::suite::support::{with_session, StoreHarness};

fn tenant(name: &str) -> TenantId {
    TenantId::new(name).unwrap()
}

/// A key with a fixed id, secret and creation time, so that ordering can be checked.
fn key(id: &str, tenant_name: &str, created_ms: i64) -> (String, NewApiKey) {
    let secret = format!("lk_secret_of_{id}");
    let key = NewApiKey {
        id: id.into(),
        tenant: tenant(tenant_name),
        agent: None,
        mode: None,
        hash: hash_api_key(&secret),
        created_ms,
    };
    (secret, key)
}

fn ids(keys: &[ApiKey]) -> Vec<&str> {
    keys.iter().map(|k| k.key.id.as_str()).collect()
}

pub(crate) fn keys_are_created_listed_and_found<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    assert!(store.keys().unwrap().is_empty());
    let (secret, fresh) = new_api_key(
        tenant("acme"),
        Some(AgentId::new("coder").unwrap()),
        Some(ProxyMode::Observe),
        1_700_000_000_500,
    )
    .unwrap();
    let stored = store.create_key(&fresh).unwrap();
    assert_eq!(stored.key, fresh);
    assert_eq!(stored.revoked_ms, None);
    let (_, late) = key("key_b", "acme", 1_700_000_000_900);
    let (_, early_b) = key("key_b0", "other", 1_700_000_000_100);
    let (_, early_a) = key("key_a9", "other", 1_700_000_000_100);
    for k in [&late, &early_b, &early_a] {
        store.create_key(k).unwrap();
    }
    // Ordered by creation time, then id; whatever order they were created in.
    assert_eq!(
        ids(&store.keys().unwrap()),
        ["key_a9", "key_b0", fresh.id.as_str(), "key_b"]
    );
    assert_eq!(
        store.key_by_hash(&hash_api_key(&secret)).unwrap(),
        Some(stored)
    );
    let (other_secret, _) = key("key_b", "acme", 0);
    assert_eq!(
        store
            .key_by_hash(&hash_api_key(&other_secret))
            .unwrap()
            .map(|k| k.key.id),
        Some("key_b".to_owned())
    );
    // The secret itself is not a hash, and an unknown hash finds nothing.
    assert_eq!(store.key_by_hash(&secret).unwrap(), None);
    assert_eq!(store.key_by_hash(&hash_api_key("lk_nope")).unwrap(), None);
    assert_eq!(store.key_by_hash("").unwrap(), None);
    // Keys live beside sessions without touching them.
    with_session(store, "s");
    assert_eq!(store.keys().unwrap().len(), 4);
    assert_eq!(store.sessions().unwrap().len(), 1);
}

pub(crate) fn revoked_keys_are_still_found<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let (secret, k) = key("key_1", "acme", 10);
    let (_, kept) = key("key_2", "acme", 11);
    store.create_key(&k).unwrap();
    store.create_key(&kept).unwrap();
    let revoked = store.revoke_key("key_1", 500).unwrap();
    assert_eq!(revoked.key, k);
    assert_eq!(revoked.revoked_ms, Some(500));
    assert!(revoked.is_revoked());
    // Found by its hash, with the time it was revoked, so the caller can refuse it.
    assert_eq!(
        store.key_by_hash(&hash_api_key(&secret)).unwrap(),
        Some(revoked.clone())
    );
    // Revoking again keeps the first time.
    assert_eq!(store.revoke_key("key_1", 900).unwrap(), revoked);
    let listed = store.keys().unwrap();
    assert_eq!(listed[0], revoked);
    assert_eq!(listed[1].revoked_ms, None, "only the named key is revoked");
}

pub(crate) fn unknown_key_is_not_revoked<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let (_, k) = key("key_1", "acme", 10);
    store.create_key(&k).unwrap();
    for unknown in ["key_2", "", "KEY_1", "key_1 "] {
        let err = store.revoke_key(unknown, 5).unwrap_err();
        assert!(err.is_bad_input(), "{err}");
        assert!(
            matches!(&err, StoreError::KeyNotFound(id) if id == unknown),
            "{err:?}"
        );
        assert!(err.to_string().contains("not found"), "{err}");
    }
    assert_eq!(store.keys().unwrap()[0].revoked_ms, None);
}

pub(crate) fn duplicate_keys_change_nothing<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let (_, first) = key("key_1", "acme", 10);
    store.create_key(&first).unwrap();
    store.revoke_key("key_1", 20).unwrap();
    let before = store.keys().unwrap();
    let (_, other) = key("key_2", "acme", 30);
    let same_id = NewApiKey {
        hash: other.hash.clone(),
        ..first.clone()
    };
    let same_hash = NewApiKey {
        id: "key_2".into(),
        tenant: tenant("elsewhere"),
        ..first.clone()
    };
    for (dup, field) in [(&first, "id"), (&same_id, "id"), (&same_hash, "hash")] {
        let err = store.create_key(dup).unwrap_err();
        assert!(err.is_bad_input(), "{err}");
        assert!(
            matches!(&err, StoreError::KeyExists { id, field: f } if *id == dup.id && *f == field),
            "{err:?}"
        );
        assert!(err.to_string().contains(&dup.id), "{err}");
    }
    assert_eq!(
        store.keys().unwrap(),
        before,
        "a refused key writes nothing"
    );
    assert_eq!(store.key_by_hash(&other.hash).unwrap(), None);
    // The refused id is still free for a key of its own.
    store.create_key(&other).unwrap();
    assert_eq!(ids(&store.keys().unwrap()), ["key_1", "key_2"]);
}

pub(crate) fn malformed_keys_are_refused<H: StoreHarness>(h: &mut H) {
    let store = h.store();
    let (secret, good) = key("key_1", "acme", 10);
    let bad = [
        (
            NewApiKey {
                hash: secret.clone(),
                ..good.clone()
            },
            "hash",
        ),
        (
            NewApiKey {
                hash: good.hash.to_uppercase(),
                ..good.clone()
            },
            "hash",
        ),
        (
            NewApiKey {
                id: "key 1".into(),
                ..good.clone()
            },
            "id",
        ),
        (
            NewApiKey {
                id: String::new(),
                ..good.clone()
            },
            "id",
        ),
    ];
    for (k, field) in &bad {
        let err = store.create_key(k).unwrap_err();
        assert!(err.is_bad_input(), "{err}");
        assert!(
            matches!(&err, StoreError::InvalidKey { field: f, .. } if f == field),
            "{err:?}"
        );
        assert!(!err.to_string().contains(&secret), "{err}");
    }
    assert!(store.keys().unwrap().is_empty());
    store.create_key(&good).unwrap();
}

pub(crate) fn keys_survive_reopen<H: StoreHarness>(h: &mut H) {
    let (secret, fresh) = new_api_key(
        tenant("acme"),
        Some(AgentId::new("coder").unwrap()),
        Some(ProxyMode::Fit),
        1_700_000_000_000,
    )
    .unwrap();
    {
        let store = h.store();
        store.create_key(&fresh).unwrap();
        let (_, plain) = key("key_plain", "t.2", 5);
        store.create_key(&plain).unwrap();
        store.revoke_key("key_plain", 6).unwrap();
    }
    let before = h.store().keys().unwrap();
    h.reopen();
    let store = h.store();
    assert_eq!(store.keys().unwrap(), before);
    let found = store.key_by_hash(&hash_api_key(&secret)).unwrap().unwrap();
    assert_eq!(found.key, fresh);
    assert_eq!(found.revoked_ms, None);
    assert_eq!(store.keys().unwrap()[0].revoked_ms, Some(6));
    // The reopened store still refuses the same duplicates and revokes the rest.
    let err = store.create_key(&fresh).unwrap_err();
    assert!(matches!(err, StoreError::KeyExists { .. }), "{err:?}");
    assert_eq!(store.revoke_key(&fresh.id, 7).unwrap().revoked_ms, Some(7));
}
