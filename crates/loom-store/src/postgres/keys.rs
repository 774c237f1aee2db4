//! The `api_keys` table: finding and listing keys (on a plain connection), and the rows
//! `crate::keys`'s rules store and revoke them with, inside the caller's transaction.

use loom_core::AgentId;
use postgres::GenericClient;

use super::db::{corrupt, Cols, Db};
use crate::keys::KeyRows;
use crate::{ApiKey, NewApiKey, ProxyMode, Result, TenantId};

/// The columns [`api_key`] decodes, as a literal so that `concat!` can build whole statements.
macro_rules! key_columns {
    () => {
        "SELECT id, hash, tenant, agent, mode, created_ms, revoked_ms FROM api_keys"
    };
}

/// An `api_keys` row selected with [`key_columns!`].
fn api_key(row: &Cols<'_>) -> Result<ApiKey> {
    let agent = row
        .get::<Option<String>>(3)?
        .map(|a| AgentId::new(a).map_err(|e| corrupt("api_keys", e)))
        .transpose()?;
    let mode = row
        .get::<Option<&str>>(4)?
        .map(|m| m.parse::<ProxyMode>().map_err(|e| corrupt("api_keys", e)))
        .transpose()?;
    Ok(ApiKey {
        key: NewApiKey {
            id: row.get(0)?,
            hash: row.get(1)?,
            tenant: TenantId::new(row.get::<String>(2)?).map_err(|e| corrupt("api_keys", e))?,
            agent,
            mode,
            created_ms: row.get(5)?,
        },
        revoked_ms: row.get(6)?,
    })
}

fn first(found: Vec<ApiKey>) -> Option<ApiKey> {
    found.into_iter().next()
}

impl<C: GenericClient> KeyRows for Db<'_, C> {
    fn key(&mut self, id: &str) -> Result<Option<ApiKey>> {
        Ok(first(self.all(
            concat!(key_columns!(), " WHERE id = $1 FOR UPDATE"),
            &[&id],
            ("api_keys", "reading an api key"),
            api_key,
        )?))
    }

    /// No error on a taken id or hash, so the transaction stays usable to say which one it
    /// was; a concurrent insert of the same key waits for this one and then finds it.
    fn insert_key(&mut self, key: &NewApiKey) -> Result<bool> {
        let inserted = self.execute(
            "INSERT INTO api_keys (id, hash, tenant, agent, mode, created_ms)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
            &[
                &key.id,
                &key.hash,
                &key.tenant.as_str(),
                &key.agent.as_ref().map(AgentId::as_str),
                &key.mode.map(ProxyMode::as_str),
                &key.created_ms,
            ],
            "storing an api key",
        )?;
        Ok(inserted == 1)
    }

    fn set_revoked(&mut self, id: &str, now_ms: i64) -> Result<()> {
        self.execute(
            "UPDATE api_keys SET revoked_ms = $2 WHERE id = $1",
            &[&id, &now_ms],
            "revoking an api key",
        )?;
        Ok(())
    }
}

pub(super) fn by_hash(db: &mut Db<'_, impl GenericClient>, hash: &str) -> Result<Option<ApiKey>> {
    Ok(first(db.all(
        concat!(key_columns!(), " WHERE hash = $1"),
        &[&hash],
        ("api_keys", "looking up an api key"),
        api_key,
    )?))
}

pub(super) fn all(db: &mut Db<'_, impl GenericClient>) -> Result<Vec<ApiKey>> {
    db.all(
        concat!(key_columns!(), " ORDER BY created_ms, id"),
        &[],
        ("api_keys", "listing api keys"),
        api_key,
    )
}
