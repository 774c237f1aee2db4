//! Running a call's statements: reads on a plain connection, writes in a transaction, with the
//! retries that make a restart or a conflict invisible to callers.
//!
//! What an outcome means, which is what callers rely on:
//! - `Ok`: the write is committed.
//! - [`StoreError::Unavailable`]: nothing of it was applied (no connection could be had, or it
//!   broke on every attempt before the commit); the same call may succeed later.
//! - any other error: nothing was applied, except a commit whose answer was lost and whose fate
//!   could not be found out (the database stayed out of reach), which says so.
//!
//! A write whose commit's answer is lost with the connection is not simply reported: the
//! transaction's id was read when it began, and a fresh connection asks the server what became of
//! it (`txid_status`), so a committed write still answers `Ok` and an aborted one is run again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use postgres::{Client, SimpleQueryMessage, Statement};

use super::db::{backend, is_conflict, is_disconnect, Db};
use super::pool::{Conn, Pool};
use crate::{Result, StoreError};

/// How many times a call is run in all when PostgreSQL aborts it for a conflict with another
/// transaction, or its connection breaks before it commits.
const ATTEMPTS: u32 = 5;

/// How many times the fate of a commit that may still be running is asked, and the pause
/// between two asks.
const RESOLVE_ASKS: u32 = 20;
const RESOLVE_PAUSE: Duration = Duration::from_millis(100);

/// Runs `f` on a connection outside any transaction: each of its statements sees the data
/// committed when it starts. A connection that turns out to be broken is replaced and `f` run
/// again, since reading twice changes nothing.
pub(super) fn read<T>(
    pool: &Pool,
    action: &'static str,
    mut f: impl FnMut(&mut Db<'_, Client>) -> Result<T>,
) -> Result<T> {
    let mut attempt = 1;
    loop {
        let mut conn = pool.get(action)?;
        let Conn {
            client,
            stmts,
            trips,
        } = &mut *conn;
        match f(&mut Db {
            client,
            stmts,
            trips,
        }) {
            Err(e) if is_disconnect(&e) => {
                drop(conn);
                pool.clear_idle();
                if attempt >= ATTEMPTS {
                    return Err(broke(action, &e));
                }
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Runs `f`, one statement that writes, outside any transaction (it is one on its own, so one
/// round trip), and again on a fresh connection when the connection broke: only for a statement
/// that is safe to run twice (`loom_write_turn` refuses a turn the log already moved past;
/// `loom_put_blob` stores a blob once).
pub(super) fn statement<T>(
    pool: &Pool,
    action: &'static str,
    f: impl FnMut(&mut Db<'_, Client>) -> Result<T>,
) -> Result<T> {
    read(pool, action, f)
}

/// Runs `f` in a transaction and commits it; on `Err` everything `f` did is rolled back.
///
/// `f` may run more than once: again when PostgreSQL aborted the transaction for a conflict with
/// another one, when the connection broke before the commit was sent, or when the commit's
/// answer was lost and the server says the transaction did not commit.
pub(super) fn write<T>(
    pool: &Pool,
    action: &'static str,
    mut f: impl FnMut(&mut Db<'_, Client>) -> Result<T>,
) -> Result<T> {
    let mut attempt = 1;
    loop {
        let mut conn = pool.get(action)?;
        let outcome = {
            let Conn {
                client,
                stmts,
                trips,
            } = &mut *conn;
            transaction(client, stmts, trips, &mut f)
        };
        let retry = match outcome {
            Outcome::Committed(value) => return Ok(value),
            Outcome::Before(e) if is_disconnect(&e) => {
                drop(conn);
                pool.clear_idle();
                e
            }
            Outcome::Before(e) if is_conflict(&e) => e,
            Outcome::Before(e) => return Err(e),
            Outcome::Commit { error, .. } if is_conflict(&error) => error,
            Outcome::Commit { error, txid, value } => {
                conn.discard();
                if !is_disconnect(&error) {
                    return Err(error);
                }
                pool.clear_idle();
                match txid.and_then(|txid| committed(pool, txid)) {
                    Some(true) => return Ok(value),
                    Some(false) => error,
                    None => return Err(in_doubt(error)),
                }
            }
        };
        if attempt >= ATTEMPTS {
            return Err(if is_disconnect(&retry) {
                broke(action, &retry)
            } else {
                retry
            });
        }
        attempt += 1;
    }
}

/// How a transaction ended: committed, failed before its commit was sent (the server rolled it
/// back), or failed at the commit, with what `f` returned and the transaction's id to find out
/// what became of it.
enum Outcome<T> {
    Committed(T),
    Before(StoreError),
    Commit {
        error: StoreError,
        txid: Option<i64>,
        value: T,
    },
}

/// An open transaction on `client`, rolled back when dropped unless it was ended (a panic in
/// `f`, an early return), so that no connection goes back to the pool inside one.
struct Open<'a> {
    client: &'a mut Client,
    trips: &'a AtomicU64,
    open: bool,
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        if self.open {
            self.trips.fetch_add(1, Ordering::Relaxed);
            // A broken connection rolls back on the server's side anyway.
            let _ = self.client.batch_execute("ROLLBACK");
        }
    }
}

fn transaction<T>(
    client: &mut Client,
    stmts: &mut HashMap<&'static str, Statement>,
    trips: &AtomicU64,
    f: &mut impl FnMut(&mut Db<'_, Client>) -> Result<T>,
) -> Outcome<T> {
    let mut tx = Open {
        client,
        trips,
        open: false,
    };
    trips.fetch_add(1, Ordering::Relaxed);
    // One round trip begins the transaction and reads its id, for `committed` to ask about.
    let begun = match tx.client.simple_query("BEGIN; SELECT txid_current()") {
        Ok(begun) => begun,
        Err(e) => return Outcome::Before(backend("starting a transaction")(e)),
    };
    tx.open = true;
    let txid = begun.iter().find_map(|message| match message {
        SimpleQueryMessage::Row(row) => row.get(0).and_then(|id| id.parse::<i64>().ok()),
        _ => None,
    });
    let value = match f(&mut Db {
        client: &mut *tx.client,
        stmts,
        trips,
    }) {
        Ok(value) => value,
        Err(e) => return Outcome::Before(e),
    };
    tx.open = false;
    trips.fetch_add(1, Ordering::Relaxed);
    match tx.client.batch_execute("COMMIT") {
        Ok(()) => Outcome::Committed(value),
        Err(e) => Outcome::Commit {
            error: backend("committing a transaction")(e),
            txid,
            value,
        },
    }
}

/// Whether transaction `txid` committed, asked on a fresh connection; `None` when that cannot be
/// found out (the database stays out of reach, or the transaction is still running after every
/// ask).
fn committed(pool: &Pool, txid: i64) -> Option<bool> {
    for _ in 0..RESOLVE_ASKS {
        // Waits, within the checkout timeout, for the database to take connections again.
        let mut conn = pool.get("finding out whether a commit was applied").ok()?;
        let asked = conn
            .client
            .query_one("SELECT txid_status($1)", &[&txid])
            .and_then(|row| row.try_get::<_, Option<String>>(0));
        match asked {
            Ok(Some(status)) if status == "committed" => return Some(true),
            Ok(Some(status)) if status == "aborted" => return Some(false),
            Ok(Some(status)) if status == "in progress" => {}
            // Too old to be known, or an answer this build does not know.
            Ok(_) => return None,
            // A connection kept from before the break: drop it and the others, and ask again.
            Err(_) => {
                drop(conn);
                pool.clear_idle();
            }
        }
        std::thread::sleep(RESOLVE_PAUSE);
    }
    None
}

/// The error for a call whose connection broke on every attempt: nothing of it was applied, and
/// it may succeed once the database is back.
fn broke(action: &'static str, e: &StoreError) -> StoreError {
    StoreError::Unavailable {
        action,
        reason: format!("the connection to PostgreSQL broke on every attempt ({e})"),
    }
}

/// The error for a commit whose answer was lost and whose fate could not be found out.
fn in_doubt(error: StoreError) -> StoreError {
    match error {
        StoreError::Backend { source, .. } => StoreError::Backend {
            action: "committing a transaction (the connection broke, and whether the commit was \
                     applied could not be found out)",
            source,
        },
        other => other,
    }
}
