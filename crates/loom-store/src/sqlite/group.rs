//! Group commit: concurrent writes of one process share one durable commit.
//!
//! A durable commit costs a sync of the WAL, and a disk syncs a few thousand times a second at
//! best, so one commit per write caps a busy server far below what its CPUs can do. As databases
//! do, writers that arrive while a commit is being prepared join it: the first writer of a group
//! (its leader) opens the transaction; every writer runs its own work inside it under a savepoint
//! (a failing write is rolled back to its savepoint alone and reported to its caller, never
//! touching the others'); the leader then commits once and tells every member the outcome. No
//! writer returns before the commit that holds its work is durable, and if that commit fails,
//! every member gets the error: an acknowledged write is still a durable one.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use rusqlite::Connection;

use super::backend;
use crate::{Result, StoreError};

/// The write connection and the state of the group being formed.
#[derive(Debug)]
pub(super) struct Writer {
    state: Mutex<State>,
    committed: Condvar,
}

#[derive(Debug)]
struct State {
    conn: Connection,
    /// A group's transaction is open (its leader has not committed yet).
    open: bool,
    /// Number of the current (or last) group.
    group: u64,
    /// The last group whose commit finished.
    done: u64,
    /// Recent groups whose commit failed, and why (a member may wake after later groups).
    failures: std::collections::VecDeque<(u64, String)>,
}

/// Failed groups remembered for their waking members.
const FAILURES_KEPT: usize = 64;

impl State {
    fn finished(&mut self, group: u64, failure: Option<String>) {
        self.open = false;
        self.done = group;
        if let Some(reason) = failure {
            if self.failures.len() == FAILURES_KEPT {
                self.failures.pop_front();
            }
            self.failures.push_back((group, reason));
        }
    }
}

impl Writer {
    pub(super) fn new(conn: Connection) -> Self {
        Self {
            state: Mutex::new(State {
                conn,
                open: false,
                group: 0,
                done: 0,
                failures: std::collections::VecDeque::new(),
            }),
            committed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` inside the current group's transaction and returns once that transaction is
    /// durably committed (or has failed).
    pub(super) fn write<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let mut state = self.lock();
        let leader = !state.open;
        if leader {
            state
                .conn
                .execute_batch("BEGIN IMMEDIATE")
                .map_err(backend("starting a write transaction"))?;
            state.open = true;
            state.group += 1;
        }
        let group = state.group;
        let mut member = Member {
            writer: self,
            state: Some(state),
            leader,
            group,
            finished: false,
        };
        let out = member.run(f);
        member.finish(out)
    }

    /// Runs `f` inside the current group's transaction like [`Self::write`], but a member that
    /// is not its group's leader returns as soon as its own work is done, without waiting for the
    /// commit. For records derived from the log (steps, aliases), which can be derived again:
    /// the work is durable once its group commits, and since the write-ahead log is written in
    /// order, no later than any write that follows it and did wait. A failed commit loses it
    /// silently, as a crash would.
    pub(super) fn write_deferred<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let state = self.lock();
        if !state.open {
            drop(state);
            return self.write(f);
        }
        let group = state.group;
        let mut member = Member {
            writer: self,
            state: Some(state),
            leader: false,
            group,
            finished: false,
        };
        let out = member.run(f);
        // The leader commits for the group; this member does not wait for it.
        member.finished = true;
        drop(member);
        out
    }
}

/// One writer's part in a group; its `Drop` keeps the group sound if the work panics.
struct Member<'a> {
    writer: &'a Writer,
    state: Option<MutexGuard<'a, State>>,
    leader: bool,
    group: u64,
    finished: bool,
}

impl Member<'_> {
    fn conn(&self) -> &Connection {
        match &self.state {
            Some(s) => &s.conn,
            None => unreachable_state(),
        }
    }

    /// Runs the work under a savepoint; a failure is rolled back to it.
    fn run<T>(&mut self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.conn()
            .execute_batch("SAVEPOINT member")
            .map_err(backend("starting a write"))?;
        let out = f(self.conn());
        let end = match out {
            Ok(_) => "RELEASE member",
            Err(_) => "ROLLBACK TO member; RELEASE member",
        };
        self.conn()
            .execute_batch(end)
            .map_err(backend("ending a write"))?;
        out
    }

    fn finish<T>(mut self, out: Result<T>) -> Result<T> {
        let committed = if self.leader {
            self.commit()
        } else {
            self.wait()
        };
        self.finished = true;
        match (out, committed) {
            (Err(e), _) => Err(e),
            (Ok(_), Err(e)) => Err(e),
            (Ok(v), Ok(())) => Ok(v),
        }
    }

    /// The leader: lets the writers waiting at the lock join, then commits for all.
    fn commit(&mut self) -> Result<()> {
        // Releasing the lock hands it to the writers already waiting for it; each runs its work
        // inside this transaction. The leader then takes the lock back and commits.
        drop(self.state.take());
        std::thread::yield_now();
        let mut state = self.writer.lock();
        let result = state.conn.execute_batch("COMMIT");
        if result.is_err() {
            // A failed COMMIT may leave the transaction open; end it so the next group starts
            // clean. Nothing of this group is in the database.
            let _ = state.conn.execute_batch("ROLLBACK");
        }
        state.finished(self.group, result.as_ref().err().map(ToString::to_string));
        drop(state);
        self.writer.committed.notify_all();
        result.map_err(backend("committing a write"))
    }

    /// A member: waits for its leader's commit.
    fn wait(&mut self) -> Result<()> {
        let mut state = match self.state.take() {
            Some(s) => s,
            None => self.writer.lock(),
        };
        while state.done < self.group {
            state = self
                .writer
                .committed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        match state.failures.iter().find(|(g, _)| *g == self.group) {
            None => Ok(()),
            Some((_, reason)) => Err(StoreError::Backend {
                action: "committing a write",
                source: reason.clone().into(),
            }),
        }
    }
}

impl Drop for Member<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        // The work panicked. Its savepoint is rolled back by ending the transaction; a leader
        // also ends the group, so that its members are told instead of waiting forever.
        let mut state = match self.state.take() {
            Some(s) => s,
            None => self.writer.lock(),
        };
        if self.leader {
            let _ = state.conn.execute_batch("ROLLBACK");
            state.finished(
                self.group,
                Some("a write panicked; its group was rolled back".into()),
            );
            drop(state);
            self.writer.committed.notify_all();
        } else {
            let _ = state
                .conn
                .execute_batch("ROLLBACK TO member; RELEASE member");
        }
    }
}

#[cold]
fn unreachable_state() -> ! {
    // `state` is only taken by `commit`/`wait`, which run after the work; reaching here would be
    // a bug in this module, and a panic is the honest report of it.
    panic!("group commit: the connection was used after it was handed on")
}
