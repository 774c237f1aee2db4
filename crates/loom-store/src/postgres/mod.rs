//! The PostgreSQL backend: one database shared by any number of `loom serve` processes.
//!
//! Durability: every write is one transaction, and PostgreSQL acknowledges a commit once its WAL
//! is flushed (with the server's default `synchronous_commit`), so an `Ok` means the write
//! survives a crash of the database server. Concurrency: each write locks the row of the session
//! it changes (`SELECT ... FOR UPDATE`) before reading anything it depends on, so writers to one
//! session take turns across processes while writers to different sessions run side by side.
//! A transaction that PostgreSQL aborts because it ran beside another (a deadlock, a
//! serialisation failure) is run again, a bounded number of times; so is one whose connection
//! broke before its commit was sent (the server rolled it back), on a new connection, and one
//! whose commit's answer was lost, once the server says it did not commit ([`tx`] says what each
//! outcome means).
//!
//! Connections come from a small pool ([`pool`]); a checkout that cannot be served in time is
//! [`StoreError::Unavailable`]. The blobs live in the same database ([`PgBlobStore`]).

mod blob;
mod db;
mod keys;
mod log;
mod pool;
mod schema;
mod turn;
mod tx;

use std::ops::RangeInclusive;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use loom_core::{AgentId, BlobRef, Event, NewEvent, Seq, SessionId, SessionInfo};

use crate::records::{
    ModelCall, NewModelCall, NewSession, NewSummary, StepRecord, Summary, ToolCallRecord, Usage,
};
use crate::{rules, ApiKey, BlobAlias, KeyStore, NewApiKey, Result, Store, StoreError};
pub use blob::PgBlobStore;
use db::{corrupt, seq_bound, Cols};
use log::{model_call, require_session};
use pool::Pool;

/// Connections a store opens at most, unless the URL says otherwise (`pool_size`).
const DEFAULT_POOL_SIZE: usize = 16;

/// How long a call waits for a free connection before it fails, unless the URL says otherwise
/// (`checkout_timeout_ms`).
const DEFAULT_CHECKOUT_TIMEOUT: Duration = Duration::from_secs(5);

/// The log and its derived records in a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: Arc<Pool>,
    schema_version: i64,
}

/// What a database URL says, Loom's own parameters taken out.
struct Settings {
    config: postgres::Config,
    pool_size: usize,
    checkout_timeout: Duration,
}

/// The URL with its password, if any, hidden, for error messages.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) if userinfo.contains(':') => {
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{host}{tail}")
        }
        _ => url.to_owned(),
    }
}

fn parse_url(url: &str) -> Result<Settings> {
    let refuse = |reason: String| StoreError::UnsupportedDatabase {
        db: redact(url),
        reason,
    };
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut pool_size = DEFAULT_POOL_SIZE;
    let mut checkout_timeout = DEFAULT_CHECKOUT_TIMEOUT;
    let mut schema = None;
    let mut passed = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "pool_size" => {
                pool_size = value.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                    refuse(format!(
                        "pool_size `{value}`: expected a whole number above 0"
                    ))
                })?;
            }
            "checkout_timeout_ms" => {
                checkout_timeout = value.parse().map(Duration::from_millis).map_err(|_| {
                    refuse(format!(
                        "checkout_timeout_ms `{value}`: expected a whole number of milliseconds"
                    ))
                })?;
            }
            "schema" => {
                let valid = !value.is_empty()
                    && value.len() <= 63
                    && value.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
                    && value
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
                if !valid {
                    return Err(refuse(format!(
                        "schema `{value}`: expected a lowercase SQL name ([a-z_][a-z0-9_]*)"
                    )));
                }
                schema = Some(value.to_owned());
            }
            _ => passed.push(pair),
        }
    }
    let rest = if passed.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", passed.join("&"))
    };
    let mut config = postgres::Config::from_str(&rest).map_err(|e| refuse(e.to_string()))?;
    if let Some(schema) = schema {
        let options = match config.get_options() {
            Some(given) => format!("{given} -c search_path={schema}"),
            None => format!("-c search_path={schema}"),
        };
        config.options(&options);
    }
    config.application_name("loom");
    Ok(Settings {
        config,
        pool_size,
        checkout_timeout,
    })
}

/// The driver configuration a database URL describes, with its `schema` applied and Loom's own
/// parameters (`pool_size`, `checkout_timeout_ms`) taken out: for components that keep their own
/// tables in the same database as the log (long-term memory), so that one URL means one place.
pub fn postgres_config(url: &str) -> Result<postgres::Config> {
    Ok(parse_url(url)?.config)
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user@host:port/dbname`) and brings its
    /// schema up to date.
    ///
    /// Besides the driver's own parameters, the URL may carry `pool_size` (connections opened at
    /// most), `checkout_timeout_ms` (how long a call waits for a free connection before it is
    /// [`StoreError::Unavailable`]) and `schema` (the PostgreSQL schema Loom's tables live in,
    /// which must exist; by default the user's search path decides). Fails with
    /// [`StoreError::SchemaTooNew`] when the database was written by a newer build.
    pub fn open(url: &str) -> Result<Self> {
        let settings = parse_url(url)?;
        let pool = Arc::new(Pool::new(
            settings.config,
            settings.pool_size,
            settings.checkout_timeout,
        ));
        let schema_version = {
            let mut conn = pool.get("opening the database")?;
            schema::migrate(&mut conn.client)?
        };
        Ok(Self {
            pool,
            schema_version,
        })
    }

    /// The schema version this build writes.
    pub fn schema_version() -> i64 {
        schema::latest_version()
    }

    /// The schema version of the database, once opened (migrated to [`Self::schema_version`]).
    pub fn database_version(&self) -> i64 {
        self.schema_version
    }

    /// How many round trips to the database this store (and its blob store) has made so far:
    /// statements, and the begin and end of transactions, not the handshakes of new
    /// connections. Each call's cost in round trips is what bounds a server's rate on a distant
    /// database; clones of a store share the count.
    pub fn round_trips(&self) -> u64 {
        self.pool.round_trips()
    }

    /// The blob store in the same database, sharing this store's connections.
    pub fn blobs(&self) -> PgBlobStore {
        PgBlobStore::new(Arc::clone(&self.pool))
    }
}

fn session_info(row: &Cols<'_>) -> Result<SessionInfo> {
    Ok(SessionInfo {
        id: row.session_id(0)?,
        agent: AgentId::new(row.get::<String>(1)?).map_err(|e| corrupt("sessions", e))?,
        parent: match row.get::<Option<String>>(2)? {
            Some(_) => Some(row.session_id(2)?),
            None => None,
        },
        created_ms: row.get(3)?,
        event_count: row.seq(4)?,
    })
}

macro_rules! session_columns {
    () => {
        "SELECT id, agent, parent, created_ms, last_seq FROM sessions"
    };
}

impl Store for PgStore {
    fn create_session(&self, session: &NewSession, events: &[NewEvent]) -> Result<SessionInfo> {
        tx::write(&self.pool, "creating a session", |db| {
            rules::create(db, session, events)
        })
    }

    fn create_sessions(
        &self,
        sessions: &[(NewSession, Vec<NewEvent>)],
    ) -> Result<Vec<SessionInfo>> {
        // One transaction for the batch: a failure leaves none of it behind.
        tx::write(&self.pool, "creating sessions", |db| {
            sessions
                .iter()
                .map(|(session, events)| rules::create(db, session, events))
                .collect()
        })
    }

    fn delete_session(&self, id: &SessionId) -> Result<bool> {
        tx::write(&self.pool, "deleting a session", |db| rules::delete(db, id))
    }

    fn session(&self, id: &SessionId) -> Result<Option<SessionInfo>> {
        tx::read(&self.pool, "reading a session", |db| {
            Ok(db
                .all(
                    concat!(session_columns!(), " WHERE id = $1"),
                    &[&id.as_str()],
                    ("sessions", "reading a session"),
                    session_info,
                )?
                .into_iter()
                .next())
        })
    }

    fn sessions(&self) -> Result<Vec<SessionInfo>> {
        tx::read(&self.pool, "listing sessions", |db| {
            db.all(
                concat!(session_columns!(), " ORDER BY id"),
                &[],
                ("sessions", "listing sessions"),
                session_info,
            )
        })
    }

    fn append(&self, session: &SessionId, events: &[NewEvent]) -> Result<RangeInclusive<Seq>> {
        tx::write(&self.pool, "appending events", |db| {
            rules::append(db, session, events)
        })
    }

    fn append_reply(
        &self,
        session: &SessionId,
        events: &[NewEvent],
        usage: Option<(u64, &Usage)>,
    ) -> Result<RangeInclusive<Seq>> {
        // One transaction: the reply and its usage are both stored or neither.
        tx::write(&self.pool, "appending a reply", |db| {
            rules::append_reply(db, session, events, usage)
        })
    }

    fn read(&self, session: &SessionId, range: RangeInclusive<Seq>) -> Result<Vec<Event>> {
        // One statement, so one round trip: the session's row is joined to its events, and a
        // session with none in the range still gives one row (with NULL columns).
        let (from, to) = (seq_bound(*range.start()), seq_bound(*range.end()));
        tx::read(&self.pool, "reading events", |db| {
            let rows = db.all(
                "SELECT e.seq, e.ts_ms, e.body FROM sessions s
                 LEFT JOIN events e ON e.session = s.pk AND e.seq BETWEEN $2 AND $3
                 WHERE s.id = $1 ORDER BY e.seq",
                &[&session.as_str(), &from, &to],
                ("events", "reading events"),
                |row| {
                    let Some(seq) = row.opt_seq(0)? else {
                        return Ok(None);
                    };
                    Ok(Some(Event {
                        seq,
                        ts_ms: row.get(1)?,
                        body: row.json(2)?,
                    }))
                },
            )?;
            if rows.is_empty() {
                return Err(StoreError::SessionNotFound(session.clone()));
            }
            Ok(rows.into_iter().flatten().collect())
        })
    }

    fn latest_seq(&self, session: &SessionId) -> Result<Seq> {
        tx::read(&self.pool, "reading a session", |db| {
            Ok(require_session(db, session)?.last_seq)
        })
    }

    fn tool_calls(&self, session: &SessionId) -> Result<Vec<ToolCallRecord>> {
        tx::read(&self.pool, "listing tool calls", |db| {
            db.records_of(
                "SELECT t.session IS NOT NULL, t.call_id, t.tool_name, t.call_seq, t.status,
                        t.result_seq
                 FROM sessions s LEFT JOIN tool_calls t ON t.session = s.pk
                 WHERE s.id = $1 ORDER BY t.call_seq, t.call_id",
                &[&session.as_str()],
                ("tool_calls", "listing tool calls"),
                |row| {
                    Ok(ToolCallRecord {
                        call_id: row.get(0)?,
                        tool_name: row.get(1)?,
                        call_seq: row.seq(2)?,
                        status: crate::calls::parse_status(row.get(3)?)?,
                        result_seq: row.opt_seq(4)?,
                    })
                },
            )?
            .ok_or_else(|| StoreError::SessionNotFound(session.clone()))
        })
    }

    fn expire_tool_call(&self, session: &SessionId, call_id: &str) -> Result<()> {
        tx::write(&self.pool, "expiring a tool call", |db| {
            rules::expire_call(db, session, call_id)
        })
    }

    fn put_summary(&self, summary: &NewSummary) -> Result<Summary> {
        tx::write(&self.pool, "storing a summary", |db| {
            rules::put_summary(db, summary)
        })
    }

    fn summaries(&self, session: &SessionId) -> Result<Vec<Summary>> {
        tx::read(&self.pool, "listing summaries", |db| {
            db.records_of(
                "SELECT m.session IS NOT NULL, m.version, m.from_seq, m.to_seq, m.content,
                        m.producer, m.created_ms
                 FROM sessions s LEFT JOIN summaries m ON m.session = s.pk
                 WHERE s.id = $1 ORDER BY m.version",
                &[&session.as_str()],
                ("summaries", "listing summaries"),
                |row| {
                    let version: i64 = row.get(0)?;
                    Ok(Summary {
                        version: u32::try_from(version).map_err(|_| {
                            corrupt("summaries", format!("version {version} out of range"))
                        })?,
                        summary: NewSummary {
                            session: session.clone(),
                            from_seq: row.seq(1)?,
                            to_seq: row.seq(2)?,
                            content: row.get(3)?,
                            producer: row.get(4)?,
                            created_ms: row.get(5)?,
                        },
                    })
                },
            )?
            .ok_or_else(|| StoreError::SessionNotFound(session.clone()))
        })
    }

    fn record_model_call(&self, call: &NewModelCall) -> Result<ModelCall> {
        tx::write(&self.pool, "recording a model call", |db| {
            rules::record_model_call(db, call)
        })
    }

    fn catch_up(&self, session: &SessionId, known: crate::Known) -> Result<crate::CatchUp> {
        tx::read(&self.pool, "catching up with a session", |db| {
            turn::catch_up(db, session, known)
        })
    }

    fn write_turn(&self, turn: &crate::Turn<'_>) -> Result<crate::Written> {
        // One statement, outside any transaction (it is one on its own). Run again after a
        // broken connection it cannot apply twice: a turn that did apply moved the log on, so
        // the second run is refused as `Moved` and the caller reads what is there. Only a turn
        // with no events and a receipt could be recorded twice, as two receipts.
        tx::read(&self.pool, "writing a turn", |db| {
            turn::write_turn(db, turn)
        })
    }

    fn model_calls(&self, session: &SessionId) -> Result<Vec<ModelCall>> {
        tx::read(&self.pool, "listing model calls", |db| {
            db.records_of(
                "SELECT m.session IS NOT NULL, m.id, m.at_seq, m.created_ms, m.receipt, m.usage
                 FROM sessions s LEFT JOIN model_calls m ON m.session = s.pk
                 WHERE s.id = $1 ORDER BY m.id",
                &[&session.as_str()],
                ("model_calls", "listing model calls"),
                |row| model_call(row, session),
            )?
            .ok_or_else(|| StoreError::SessionNotFound(session.clone()))
        })
    }

    fn model_calls_after(&self, session: &SessionId, after: u64) -> Result<Vec<ModelCall>> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        tx::read(&self.pool, "listing model calls", |db| {
            // The session's row is joined so that an unknown session is told from one with no
            // receipt after `after`.
            db.records_of(
                "SELECT m.session IS NOT NULL, m.id, m.at_seq, m.created_ms, m.receipt, m.usage
                 FROM sessions s LEFT JOIN model_calls m ON m.session = s.pk AND m.id > $2
                 WHERE s.id = $1 ORDER BY m.id",
                &[&session.as_str(), &after],
                ("model_calls", "listing model calls"),
                |row| model_call(row, session),
            )?
            .ok_or_else(|| StoreError::SessionNotFound(session.clone()))
        })
    }

    fn last_model_call(&self, session: &SessionId) -> Result<Option<ModelCall>> {
        tx::read(&self.pool, "reading the last model call", |db| {
            // The session's row joined to its newest receipt only (by the primary key's index).
            let found = db
                .records_of(
                    "SELECT m.session IS NOT NULL, m.id, m.at_seq, m.created_ms, m.receipt,
                            m.usage
                     FROM sessions s LEFT JOIN LATERAL (
                         SELECT * FROM model_calls WHERE session = s.pk ORDER BY id DESC LIMIT 1
                     ) m ON true
                     WHERE s.id = $1",
                    &[&session.as_str()],
                    ("model_calls", "reading the last model call"),
                    |row| model_call(row, session),
                )?
                .ok_or_else(|| StoreError::SessionNotFound(session.clone()))?;
            Ok(found.into_iter().next())
        })
    }

    fn report_usage(&self, session: &SessionId, call: u64, usage: &Usage) -> Result<ModelCall> {
        tx::write(&self.pool, "recording a model call's usage", |db| {
            rules::report_usage(db, session, call, usage)
        })
    }

    fn put_steps(&self, session: &SessionId, steps: &[StepRecord]) -> Result<()> {
        tx::write(&self.pool, "storing steps", |db| {
            rules::put_steps(db, session, steps)
        })
    }

    fn steps(&self, session: &SessionId) -> Result<Vec<StepRecord>> {
        self.steps_after(session, 0)
    }

    fn steps_after(&self, session: &SessionId, after: Seq) -> Result<Vec<StepRecord>> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        tx::read(&self.pool, "listing steps", |db| {
            db.records_of(
                "SELECT t.session IS NOT NULL, t.id, t.call_id, t.result_seq, t.body
                 FROM sessions s LEFT JOIN steps t ON t.session = s.pk AND t.result_seq > $2
                 WHERE s.id = $1 ORDER BY t.result_seq, t.id",
                &[&session.as_str(), &after],
                ("steps", "listing steps"),
                |row| {
                    Ok(StepRecord {
                        id: row.get(0)?,
                        call_id: row.get(1)?,
                        result_seq: row.seq(2)?,
                        body: row.json(3)?,
                    })
                },
            )?
            .ok_or_else(|| StoreError::SessionNotFound(session.clone()))
        })
    }

    fn put_alias(&self, session: &SessionId, alias: &BlobAlias, blob: &BlobRef) -> Result<()> {
        tx::write(&self.pool, "storing an alias", |db| {
            rules::put_alias(db, session, alias, blob)
        })
    }

    fn resolve_alias(&self, session: &SessionId, alias: &BlobAlias) -> Result<Option<BlobRef>> {
        tx::read(&self.pool, "resolving an alias", |db| {
            let found = db
                .records_of(
                    "SELECT a.session IS NOT NULL, a.blob
                     FROM sessions s LEFT JOIN aliases a ON a.session = s.pk AND a.alias = $2
                     WHERE s.id = $1",
                    &[&session.as_str(), &alias.as_str()],
                    ("aliases", "resolving an alias"),
                    |row| {
                        BlobRef::try_from(row.get::<String>(0)?).map_err(|e| corrupt("aliases", e))
                    },
                )?
                .ok_or_else(|| StoreError::SessionNotFound(session.clone()))?;
            Ok(found.into_iter().next())
        })
    }
}

impl KeyStore for PgStore {
    fn create_key(&self, key: &NewApiKey) -> Result<ApiKey> {
        tx::write(&self.pool, "storing an api key", |db| {
            crate::keys::create(db, key)
        })
    }

    fn key_by_hash(&self, hash: &str) -> Result<Option<ApiKey>> {
        tx::read(&self.pool, "looking up an api key", |db| {
            keys::by_hash(db, hash)
        })
    }

    fn keys(&self) -> Result<Vec<ApiKey>> {
        tx::read(&self.pool, "listing api keys", keys::all)
    }

    fn revoke_key(&self, id: &str, now_ms: i64) -> Result<ApiKey> {
        tx::write(&self.pool, "revoking an api key", |db| {
            crate::keys::revoke(db, id, now_ms)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact("postgres://loom:secret@db:5432/loom?schema=x"),
            "postgres://loom:***@db:5432/loom?schema=x"
        );
        assert_eq!(redact("postgres://loom@db/loom"), "postgres://loom@db/loom");
        assert_eq!(redact("postgres://db"), "postgres://db");
    }

    #[test]
    fn loom_parameters_are_taken_out_of_the_url() {
        let s =
            parse_url("postgres://u@h:1/d?pool_size=3&checkout_timeout_ms=250&schema=t_1").unwrap();
        assert_eq!(s.pool_size, 3);
        assert_eq!(s.checkout_timeout, Duration::from_millis(250));
        assert_eq!(s.config.get_options(), Some("-c search_path=t_1"));
        assert_eq!(s.config.get_dbname(), Some("d"));
        for bad in [
            "postgres://u@h/d?pool_size=0",
            "postgres://u@h/d?checkout_timeout_ms=soon",
            "postgres://u@h/d?schema=Bad;drop",
            "postgres://u@h/d?no_such_parameter=1",
        ] {
            let err = parse_url(bad).err().unwrap();
            assert!(
                matches!(err, StoreError::UnsupportedDatabase { .. }),
                "{bad}: {err}"
            );
        }
    }
}
