//! API keys and the tenants they belong to.
//!
//! `loom serve --auth keys` authenticates every request by a Loom key. A key belongs to one
//! tenant, and the tenant owns the sessions, blobs and receipts its keys create. The secret a
//! client presents is shown once, when the key is made, and never stored: the store keeps its
//! SHA-256 and finds the key by that hash, so a leaked database does not leak usable keys.

use std::fmt;
use std::str::FromStr;

use loom_core::AgentId;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{Result, StoreError};

/// What every secret starts with, so that a leaked one is recognisable (secret scanners, logs).
const SECRET_PREFIX: &str = "lk_";
/// Random bytes in a secret: enough that guessing one is hopeless.
const SECRET_BYTES: usize = 24;
/// What every key id starts with, so that an id is never mistaken for a secret.
const ID_PREFIX: &str = "key_";
/// Random bytes in a key id: ids only need to be unique among one store's keys.
const ID_BYTES: usize = 6;
/// Hex digits of a SHA-256.
const HASH_HEX_LEN: usize = 64;

/// Whether `b` may appear in a tenant name or a key id: characters that need no quoting in a
/// namespaced session id, a URL path or a shell.
fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

/// Why `name` breaks the naming rule shared by tenants and key ids, if it does.
fn name_rule_broken(name: &str) -> Option<String> {
    let rule = format!(
        "a name is 1 to {} bytes of A-Z, a-z, 0-9, `_`, `.` and `-`",
        TenantId::MAX_LEN
    );
    if name.is_empty() {
        return Some(format!("it is empty; {rule}"));
    }
    if name.len() > TenantId::MAX_LEN {
        return Some(format!("it is {} bytes long; {rule}", name.len()));
    }
    let bad = name
        .chars()
        .find(|c| !c.is_ascii() || !is_name_byte(*c as u8))?;
    Some(format!("it contains `{}`; {rule}", bad.escape_debug()))
}

/// A tenant name. It appears inside namespaced session ids and URLs, so it is restricted to
/// characters that need no escaping there, and kept short.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TenantId(String);

impl TenantId {
    /// The longest tenant name, in bytes.
    pub const MAX_LEN: usize = 64;

    /// Validates and wraps a tenant name: [`Self::MAX_LEN`] bytes at most, at least one, each
    /// of `A-Z`, `a-z`, `0-9`, `_`, `.` or `-`.
    pub fn new(name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        match name_rule_broken(&name) {
            Some(reason) => Err(StoreError::InvalidTenant {
                tenant: name,
                reason,
            }),
            None => Ok(Self(name)),
        }
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for TenantId {
    type Error = StoreError;
    fn try_from(name: String) -> Result<Self> {
        Self::new(name)
    }
}

impl FromStr for TenantId {
    type Err = StoreError;
    fn from_str(name: &str) -> Result<Self> {
        Self::new(name)
    }
}

impl From<TenantId> for String {
    fn from(tenant: TenantId) -> String {
        tenant.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How the proxy treats a key's requests unless a request says otherwise: an operator can make
/// one client's traffic observed only while others are fitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProxyMode {
    /// Render the request to fit the model's window.
    Fit,
    /// Forward the request unchanged and only record it.
    Observe,
}

impl ProxyMode {
    /// The mode's name, as the CLI, the JSON and the database spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fit => "fit",
            Self::Observe => "observe",
        }
    }
}

impl FromStr for ProxyMode {
    type Err = StoreError;
    fn from_str(name: &str) -> Result<Self> {
        match name {
            "fit" => Ok(Self::Fit),
            "observe" => Ok(Self::Observe),
            other => Err(StoreError::InvalidProxyMode(other.to_owned())),
        }
    }
}

impl fmt::Display for ProxyMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A key to store: who it belongs to and the hash of its secret, never the secret itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewApiKey {
    /// The public id (`key_` and hex digits from [`new_api_key`]): what operators list and
    /// revoke by. Follows the tenant naming rule, so it is safe in URLs and logs.
    pub id: String,
    /// The tenant whose sessions the key reaches.
    pub tenant: TenantId,
    /// The agent the key's sessions are recorded under, when the key pins one.
    #[serde(default)]
    pub agent: Option<AgentId>,
    /// The proxy mode for the key's requests, when the key sets one.
    #[serde(default)]
    pub mode: Option<ProxyMode>,
    /// [`hash_api_key`] of the secret: 64 lowercase hex digits.
    pub hash: String,
    /// When the key was made, UTC milliseconds.
    pub created_ms: i64,
}

/// A stored key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKey {
    /// What was stored.
    #[serde(flatten)]
    pub key: NewApiKey,
    /// When the key was revoked, UTC milliseconds. A revoked key is still found by its hash, so
    /// that the server can say "revoked" instead of "unknown"; it must refuse it.
    #[serde(default)]
    pub revoked_ms: Option<i64>,
}

impl ApiKey {
    /// Whether the key has been revoked and must be refused.
    pub fn is_revoked(&self) -> bool {
        self.revoked_ms.is_some()
    }
}

/// A fresh key: the secret (shown once, never stored) and the record to store (its hash).
///
/// The secret is `lk_` and hex digits of OS randomness; the id is `key_` and hex digits of
/// independent randomness, so knowing an id tells nothing about its secret.
pub fn new_api_key(
    tenant: TenantId,
    agent: Option<AgentId>,
    mode: Option<ProxyMode>,
    now_ms: i64,
) -> Result<(String, NewApiKey)> {
    let secret = format!(
        "{SECRET_PREFIX}{}",
        hex::encode(random::<SECRET_BYTES>("an api key's secret")?)
    );
    let id = format!(
        "{ID_PREFIX}{}",
        hex::encode(random::<ID_BYTES>("an api key's id")?)
    );
    let key = NewApiKey {
        id,
        tenant,
        agent,
        mode,
        hash: hash_api_key(&secret),
        created_ms: now_ms,
    };
    Ok((secret, key))
}

/// The stored form of a secret (SHA-256, lowercase hex). A plain hash suffices: secrets are
/// long random strings, not passwords, so there is nothing for a slow hash to protect.
pub fn hash_api_key(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

fn random<const N: usize>(purpose: &'static str) -> Result<[u8; N]> {
    let mut bytes = [0; N];
    getrandom::fill(&mut bytes).map_err(|source| StoreError::Randomness { purpose, source })?;
    Ok(bytes)
}

/// Checks every backend applies before storing a key, so they all refuse the same records.
///
/// The hash must look like a SHA-256: this is what stops a caller from storing a secret (or
/// anything else) where its hash belongs.
fn check(key: &NewApiKey) -> Result<()> {
    let invalid = |field, reason: String| StoreError::InvalidKey {
        id: key.id.clone(),
        field,
        reason,
    };
    if let Some(reason) = name_rule_broken(&key.id) {
        return Err(invalid("id", reason));
    }
    let hash = &key.hash;
    let is_hex = hash
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if hash.len() != HASH_HEX_LEN || !is_hex {
        let shown = if hash.starts_with(SECRET_PREFIX) {
            "a secret".to_owned()
        } else if hash.len() != HASH_HEX_LEN {
            format!("{} bytes", hash.len())
        } else {
            "characters other than 0-9 and a-f".to_owned()
        };
        return Err(invalid(
            "hash",
            format!(
                "expected the SHA-256 of the secret as {HASH_HEX_LEN} lowercase hex digits, \
                 got {shown}"
            ),
        ));
    }
    Ok(())
}

/// The `api_keys` rows a backend reads and writes inside one of its write transactions; the
/// rules ([`create`], [`revoke`]) are these, the same for every SQL backend.
pub(crate) trait KeyRows {
    /// The key with this id, held until the transaction ends.
    fn key(&mut self, id: &str) -> Result<Option<ApiKey>>;

    /// Stores a checked key; `false` (and nothing written) when its id or hash is taken.
    fn insert_key(&mut self, key: &NewApiKey) -> Result<bool>;

    /// Marks a key revoked at `now_ms`.
    fn set_revoked(&mut self, id: &str, now_ms: i64) -> Result<()>;
}

/// Stores a new key, refusing a malformed one and one whose id or hash is taken (naming which).
pub(crate) fn create(rows: &mut impl KeyRows, key: &NewApiKey) -> Result<ApiKey> {
    check(key)?;
    if !rows.insert_key(key)? {
        let field = if rows.key(&key.id)?.is_some() {
            "id"
        } else {
            "hash"
        };
        return Err(StoreError::KeyExists {
            id: key.id.clone(),
            field,
        });
    }
    Ok(ApiKey {
        key: key.clone(),
        revoked_ms: None,
    })
}

/// Revokes a key; revoking it again keeps the first time.
pub(crate) fn revoke(rows: &mut impl KeyRows, id: &str, now_ms: i64) -> Result<ApiKey> {
    let mut key = rows
        .key(id)?
        .ok_or_else(|| StoreError::KeyNotFound(id.to_owned()))?;
    if key.revoked_ms.is_none() {
        rows.set_revoked(id, now_ms)?;
        key.revoked_ms = Some(now_ms);
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> TenantId {
        TenantId::new(name).unwrap()
    }

    #[test]
    fn tenant_names_follow_the_rule() {
        for good in [
            "a",
            "acme",
            "Acme-Corp_2.eu",
            &"x".repeat(TenantId::MAX_LEN),
        ] {
            assert_eq!(tenant(good).as_str(), good);
        }
        for (bad, says) in [
            ("", "empty"),
            (&*"x".repeat(TenantId::MAX_LEN + 1), "bytes long"),
            ("a/b", "contains `/`"),
            ("a b", "contains ` `"),
            ("tenant:1", "contains `:`"),
            ("é", "contains `é`"),
            ("a\nb", "contains `\\n`"),
        ] {
            let err = TenantId::new(bad).unwrap_err();
            assert!(err.is_bad_input());
            let msg = err.to_string();
            assert!(msg.contains(says), "{bad:?}: {msg}");
            assert!(
                msg.contains("A-Z, a-z, 0-9"),
                "{bad:?} must name the rule: {msg}"
            );
            assert!(!msg.contains('\n'), "{msg}");
        }
    }

    #[test]
    fn tenant_serde_is_a_checked_string() {
        let t = tenant("acme");
        assert_eq!(serde_json::to_string(&t).unwrap(), "\"acme\"");
        assert_eq!(serde_json::from_str::<TenantId>("\"acme\"").unwrap(), t);
        assert!(serde_json::from_str::<TenantId>("\"a/b\"").is_err());
        assert_eq!("acme".parse::<TenantId>().unwrap(), t);
        assert_eq!(t.to_string(), "acme");
    }

    #[test]
    fn proxy_modes_parse_and_print() {
        for mode in [ProxyMode::Fit, ProxyMode::Observe] {
            assert_eq!(mode.as_str().parse::<ProxyMode>().unwrap(), mode);
            assert_eq!(
                serde_json::to_string(&mode).unwrap(),
                format!("\"{}\"", mode.as_str())
            );
            assert_eq!(
                serde_json::from_str::<ProxyMode>(&format!("\"{mode}\"")).unwrap(),
                mode
            );
        }
        let err = "Fit".parse::<ProxyMode>().unwrap_err();
        assert!(err.is_bad_input());
        assert!(err.to_string().contains("`Fit`"), "{err}");
    }

    #[test]
    fn new_keys_have_the_documented_shape() {
        let agent = AgentId::new("coder").unwrap();
        let (secret, key) = new_api_key(
            tenant("acme"),
            Some(agent.clone()),
            Some(ProxyMode::Observe),
            42,
        )
        .unwrap();
        let lower_hex = |s: &str| {
            s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        let digits = secret.strip_prefix(SECRET_PREFIX).unwrap();
        assert_eq!(digits.len(), 2 * SECRET_BYTES);
        assert!(lower_hex(digits), "{secret}");
        let id_digits = key.id.strip_prefix(ID_PREFIX).unwrap();
        assert_eq!(id_digits.len(), 2 * ID_BYTES);
        assert!(lower_hex(id_digits), "{}", key.id);
        assert_eq!(key.hash, hash_api_key(&secret));
        assert_eq!(key.tenant, tenant("acme"));
        assert_eq!(key.agent, Some(agent));
        assert_eq!(key.mode, Some(ProxyMode::Observe));
        assert_eq!(key.created_ms, 42);
        check(&key).unwrap();
        // The id and the secret come from independent draws.
        assert!(!secret.contains(id_digits));
        let (other_secret, other) = new_api_key(tenant("acme"), None, None, 42).unwrap();
        assert_ne!(other_secret, secret);
        assert_ne!(other.id, key.id);
    }

    #[test]
    fn hashes_are_lowercase_sha256() {
        // FIPS 180-2's test vector for "abc".
        assert_eq!(
            hash_api_key("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn stored_json_never_holds_the_secret() {
        let (secret, key) = new_api_key(tenant("acme"), None, None, 7).unwrap();
        let stored = ApiKey {
            key,
            revoked_ms: None,
        };
        let json = serde_json::to_value(&stored).unwrap();
        assert!(!json.to_string().contains(&secret));
        assert_eq!(json["tenant"], "acme");
        assert_eq!(json["agent"], serde_json::Value::Null);
        assert_eq!(json["revoked_ms"], serde_json::Value::Null);
        assert_eq!(serde_json::from_value::<ApiKey>(json).unwrap(), stored);
    }

    #[test]
    fn records_with_a_bad_id_or_hash_are_refused() {
        let (secret, good) = new_api_key(tenant("acme"), None, None, 1).unwrap();
        let with = |id: &str, hash: &str| NewApiKey {
            id: id.into(),
            hash: hash.into(),
            ..good.clone()
        };
        for (key, field, says) in [
            (with("", &good.hash), "id", "empty"),
            (with("key/1", &good.hash), "id", "contains `/`"),
            (with(&good.id, &secret), "hash", "got a secret"),
            (
                with(&good.id, &good.hash.to_uppercase()),
                "hash",
                "lowercase hex",
            ),
            (with(&good.id, &good.hash[1..]), "hash", "got 63 bytes"),
        ] {
            let err = check(&key).unwrap_err();
            assert!(err.is_bad_input());
            assert!(
                matches!(&err, StoreError::InvalidKey { field: f, .. } if *f == field),
                "{err:?}"
            );
            assert!(err.to_string().contains(says), "{err}");
            assert!(!err.to_string().contains(&secret), "{err}");
        }
    }
}
