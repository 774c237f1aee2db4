//! A small pool of PostgreSQL connections, each with its own cache of prepared statements.
//!
//! A checkout waits at most the configured time for a connection to come free and then fails
//! with [`StoreError::Unavailable`], so that a server under more load than its pool answers 503
//! in time instead of queueing requests without bound. Connections that the server closed (a
//! restart, a dropped link) are noticed when they come back or are handed out, and replaced; a
//! connect that fails is tried again until the checkout's time is up, so a request that arrives
//! while the database restarts waits for it rather than failing at once.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use postgres::{Client, NoTls, Statement};

use crate::{Result, StoreError};

/// The first pause before connecting again after a failed connect; it doubles up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(25);
const MAX_BACKOFF: Duration = Duration::from_millis(400);

/// One connection and the statements prepared on it, by their SQL text.
pub(super) struct Conn {
    pub(super) client: Client,
    pub(super) stmts: HashMap<&'static str, Statement>,
    /// The pool's count of round trips, which every statement on this connection adds to.
    pub(super) trips: Arc<AtomicU64>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("closed", &self.client.is_closed())
            .field("statements", &self.stmts.len())
            .finish()
    }
}

#[derive(Debug, Default)]
struct Slots {
    idle: Vec<Conn>,
    /// Connections handed out or idle, and connects under way.
    open: usize,
}

/// Connections to one database.
pub(super) struct Pool {
    config: postgres::Config,
    size: usize,
    checkout_timeout: Duration,
    slots: Mutex<Slots>,
    freed: Condvar,
    trips: Arc<AtomicU64>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The config holds the password; it is not shown.
        f.debug_struct("Pool")
            .field("size", &self.size)
            .field("checkout_timeout", &self.checkout_timeout)
            .finish_non_exhaustive()
    }
}

impl Pool {
    pub(super) fn new(
        mut config: postgres::Config,
        size: usize,
        checkout_timeout: Duration,
    ) -> Self {
        // A connect that hangs (a host that drops packets) must not outlast the checkout.
        config.connect_timeout(checkout_timeout);
        config.keepalives(true);
        Self {
            config,
            size: size.max(1),
            checkout_timeout,
            slots: Mutex::new(Slots::default()),
            freed: Condvar::new(),
            trips: Arc::new(AtomicU64::new(0)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Slots> {
        // The slots are a list and a counter, each changed in one step: a panic elsewhere cannot
        // leave them half-updated.
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A connection, waiting at most the checkout timeout for one to come free.
    pub(super) fn get(&self, action: &'static str) -> Result<Pooled<'_>> {
        let deadline = Instant::now() + self.checkout_timeout;
        let mut backoff = FIRST_BACKOFF;
        let mut slots = self.lock();
        loop {
            while let Some(conn) = slots.idle.pop() {
                if conn.client.is_closed() {
                    slots.open -= 1;
                    continue;
                }
                return Ok(Pooled {
                    pool: self,
                    conn: Some(conn),
                });
            }
            if slots.open < self.size {
                slots.open += 1;
                drop(slots);
                match self.config.connect(NoTls) {
                    Ok(client) => {
                        return Ok(Pooled {
                            pool: self,
                            conn: Some(Conn {
                                client,
                                stmts: HashMap::new(),
                                trips: Arc::clone(&self.trips),
                            }),
                        })
                    }
                    Err(e) => {
                        self.release(None);
                        // A database that is restarting comes back within moments: keep trying
                        // until the checkout's time is up, then give up with the last reason.
                        if Instant::now() + backoff >= deadline {
                            return Err(StoreError::Unavailable {
                                action,
                                reason: format!("cannot connect to PostgreSQL: {e}"),
                            });
                        }
                        std::thread::sleep(backoff);
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        slots = self.lock();
                        continue;
                    }
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(StoreError::Unavailable {
                    action,
                    reason: format!(
                        "all {} connections to PostgreSQL are in use and none came free within \
                         {} ms",
                        self.size,
                        self.checkout_timeout.as_millis()
                    ),
                });
            }
            slots = self
                .freed
                .wait_timeout(slots, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Round trips to the database so far (statements, and the begin and end of transactions;
    /// not the handshakes of new connections).
    pub(super) fn round_trips(&self) -> u64 {
        self.trips.load(Ordering::Relaxed)
    }

    /// Closes every idle connection: after one broke (a restart), the others most likely did
    /// too, and finding that out one failed statement at a time would waste a caller's retries.
    pub(super) fn clear_idle(&self) {
        let mut slots = self.lock();
        let idle = std::mem::take(&mut slots.idle);
        slots.open = slots.open.saturating_sub(idle.len());
        drop(slots);
        drop(idle);
        self.freed.notify_all();
    }

    /// Takes back a connection (`None`: one that is gone) and wakes one waiter.
    fn release(&self, conn: Option<Conn>) {
        let mut slots = self.lock();
        match conn {
            Some(conn) if !conn.client.is_closed() => slots.idle.push(conn),
            _ => slots.open = slots.open.saturating_sub(1),
        }
        drop(slots);
        self.freed.notify_one();
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Closing a connection blocks on its own small runtime, which panics on a thread that
        // drives an async runtime, and the last server handle may well be dropped on one: the
        // connections are closed on a thread of their own.
        let idle = std::mem::take(&mut self.lock().idle);
        if idle.is_empty() {
            return;
        }
        std::thread::scope(|scope| {
            scope.spawn(move || drop(idle));
        });
    }
}

/// A checked-out connection; it goes back to the pool when dropped.
#[derive(Debug)]
pub(super) struct Pooled<'a> {
    pool: &'a Pool,
    conn: Option<Conn>,
}

impl Pooled<'_> {
    /// Drops the connection instead of returning it: after an error that may have left it in a
    /// state nobody can tell (a failed commit), a fresh one is safer.
    pub(super) fn discard(mut self) {
        self.conn = None;
    }
}

impl Deref for Pooled<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        // `conn` is only `None` after `discard` or `drop`, which consume the guard.
        match &self.conn {
            Some(conn) => conn,
            None => unreachable!("a pooled connection is used after it was given back"),
        }
    }
}

impl DerefMut for Pooled<'_> {
    fn deref_mut(&mut self) -> &mut Conn {
        match &mut self.conn {
            Some(conn) => conn,
            None => unreachable!("a pooled connection is used after it was given back"),
        }
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        self.pool.release(self.conn.take());
    }
}
