//! The `api_keys` table: finding and listing keys, and the rows `crate::keys`'s rules store and
//! revoke them with, inside the caller's transaction.

use loom_core::AgentId;
use rusqlite::{params, Connection};

use super::backend;
use super::log::Rows;
use super::rows::{corrupt, query_all, Cols};
use crate::keys::KeyRows;
use crate::{ApiKey, NewApiKey, ProxyMode, Result, TenantId};

/// The columns [`api_key`] decodes, as a literal so that `concat!` can build whole statements.
macro_rules! key_columns {
    () => {
        "SELECT id, hash, tenant, agent, mode, created_ms, revoked_ms FROM api_keys"
    };
}

/// An `api_keys` row selected with [`key_columns!`].
fn api_key(row: &Cols<'_, '_>) -> Result<ApiKey> {
    let agent = row
        .get::<Option<String>>(3)?
        .map(|a| AgentId::new(a).map_err(|e| corrupt("api_keys", e)))
        .transpose()?;
    let mode = row
        .get::<Option<String>>(4)?
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

/// The two columns a key is found by; both are indexed (primary key, unique).
#[derive(Debug, Clone, Copy)]
enum By {
    Id,
    Hash,
}

impl By {
    /// The column's name.
    #[cfg(test)]
    fn field(self) -> &'static str {
        match self {
            Self::Id => "id",
            Self::Hash => "hash",
        }
    }

    /// The lookup by this column.
    fn sql(self) -> &'static str {
        match self {
            Self::Id => concat!(key_columns!(), " WHERE id = ?1"),
            Self::Hash => concat!(key_columns!(), " WHERE hash = ?1"),
        }
    }
}

/// The key whose `by` column equals `value`.
fn find(conn: &Connection, by: By, value: &str, action: &'static str) -> Result<Option<ApiKey>> {
    let found = query_all(conn, by.sql(), [value], ("api_keys", action), api_key)?;
    Ok(found.into_iter().next())
}

impl KeyRows for Rows<'_> {
    fn key(&mut self, id: &str) -> Result<Option<ApiKey>> {
        find(self.0, By::Id, id, "reading an api key")
    }

    fn insert_key(&mut self, key: &NewApiKey) -> Result<bool> {
        for (by, value) in [(By::Id, &key.id), (By::Hash, &key.hash)] {
            if find(self.0, by, value, "checking a new api key")?.is_some() {
                return Ok(false);
            }
        }
        self.0
            .prepare_cached(
                "INSERT INTO api_keys (id, hash, tenant, agent, mode, created_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    key.id,
                    key.hash,
                    key.tenant.as_str(),
                    key.agent.as_ref().map(AgentId::as_str),
                    key.mode.map(ProxyMode::as_str),
                    key.created_ms,
                ])
            })
            .map_err(backend("storing an api key"))?;
        Ok(true)
    }

    fn set_revoked(&mut self, id: &str, now_ms: i64) -> Result<()> {
        self.0
            .prepare_cached("UPDATE api_keys SET revoked_ms = ?2 WHERE id = ?1")
            .and_then(|mut stmt| stmt.execute(params![id, now_ms]))
            .map_err(backend("revoking an api key"))?;
        Ok(())
    }
}

pub(super) fn by_hash(conn: &Connection, hash: &str) -> Result<Option<ApiKey>> {
    find(conn, By::Hash, hash, "looking up an api key")
}

pub(super) fn all(conn: &Connection) -> Result<Vec<ApiKey>> {
    query_all(
        conn,
        concat!(key_columns!(), " ORDER BY created_ms, id"),
        [],
        ("api_keys", "listing api keys"),
        api_key,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every authenticated request looks its key up by hash: that must stay an index search,
    /// never a scan of the table.
    #[test]
    fn lookups_by_hash_and_id_use_an_index() {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::schema::migrate(&mut conn).unwrap();
        for by in [By::Id, By::Hash] {
            let plan: Vec<String> = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {}", by.sql()))
                .unwrap()
                .query_map(["x"], |row| row.get::<_, String>(3))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            assert_eq!(plan.len(), 1, "{by:?}: {plan:?}");
            assert!(
                plan[0].starts_with("SEARCH api_keys USING"),
                "{by:?}: {plan:?}"
            );
            assert!(
                plan[0].contains(&format!("({}=?)", by.field())),
                "{by:?}: {plan:?}"
            );
        }
    }
}
