//! Reading one memory item with its provenance.

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, ToSql};

use loom_core::{AgentId, SessionId};

use crate::error::{backend, MemoryError, Result};
use crate::item::{Item, ItemId, ItemKind, Provenance};

pub(crate) fn corrupt(id: ItemId, reason: String) -> MemoryError {
    MemoryError::Corrupt {
        record: format!("item {id}"),
        reason,
    }
}

/// The provenance of item `id`, oldest first.
pub(crate) fn sources(conn: &Connection, id: ItemId) -> Result<Vec<Provenance>> {
    let rows: Vec<(String, i64, i64, i64)> = conn
        .prepare_cached(
            "SELECT session, from_seq, to_seq, ts_ms FROM memory_sources WHERE item = ?1
             ORDER BY ts_ms, session, from_seq",
        )
        .and_then(|mut st| {
            st.query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect()
        })
        .map_err(backend("reading a memory item's provenance"))?;
    rows.into_iter()
        .map(|(session, from, to, ts_ms)| {
            let session = SessionId::new(session).map_err(|e| corrupt(id, e.to_string()))?;
            let seq = |n: i64| u64::try_from(n).map_err(|_| corrupt(id, format!("seq {n}")));
            Ok(Provenance {
                session,
                from_seq: seq(from)?,
                to_seq: seq(to)?,
                ts_ms,
            })
        })
        .collect()
}

/// Item `id` with its provenance; [`MemoryError::ItemNotFound`] when there is none.
pub(crate) fn load_item(conn: &Connection, id: ItemId) -> Result<Item> {
    type Row = (
        String,
        String,
        String,
        String,
        i64,
        String,
        i64,
        Option<i64>,
        Option<i64>,
    );
    let row: Option<Row> = conn
        .prepare_cached(
            "SELECT agent, tier, kind, text, tokens, hash, valid_from, valid_to, superseded_by
             FROM memory_items WHERE id = ?1",
        )
        .and_then(|mut st| {
            st.query_row([id], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                ))
            })
            .optional()
        })
        .map_err(backend("reading a memory item"))?;
    let (agent, tier, kind, text, tokens, hash, valid_from, valid_to, superseded_by) =
        row.ok_or(MemoryError::ItemNotFound(id))?;
    Ok(Item {
        id,
        agent: AgentId::new(agent).map_err(|e| corrupt(id, e.to_string()))?,
        tier: tier
            .parse()
            .map_err(|_| corrupt(id, format!("tier `{tier}`")))?,
        kind: ItemKind::parse(&kind).ok_or_else(|| corrupt(id, format!("kind `{kind}`")))?,
        text,
        tokens: u64::try_from(tokens).map_err(|_| corrupt(id, format!("tokens {tokens}")))?,
        hash,
        valid_from,
        valid_to,
        superseded_by,
        sources: sources(conn, id)?,
    })
}

/// Runs `sql` with the filter arguments plus `extra`, collecting one value per row.
pub(crate) fn query_ids<T: rusqlite::types::FromSql>(
    conn: &Connection,
    sql: &str,
    args: &[(&'static str, Value)],
    extra: &[(&'static str, Value)],
    action: &'static str,
) -> Result<Vec<(ItemId, T)>> {
    let all: Vec<(&str, &dyn ToSql)> = args
        .iter()
        .chain(extra)
        .map(|(n, v)| (*n, v as &dyn ToSql))
        .collect();
    conn.prepare_cached(sql)
        .and_then(|mut st| {
            st.query_map(all.as_slice(), |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect()
        })
        .map_err(backend(action))
}
