//! A server's two conversations with the store per call: catch up with what is new, then write
//! the call's turn at once.
//!
//! A server keeps each live session in memory (a cache over the store). Before a call it asks the
//! store only for what changed since its cached state ([`Store::catch_up`]); after preparing the
//! call it writes everything the call adds — the new part of the history, the steps and aliases
//! derived from it, the call's receipt, or a reply with the usage of the call it answers — as one
//! [`Turn`] ([`Store::write_turn`]). A turn applies only to the log the caller prepared it
//! against: when another writer appended since, it is refused with [`StoreError::Moved`] and
//! nothing of it is written, and the caller starts again from the store.
//!
//! The defaults below compose the store's other methods (each atomic on its own, steps and
//! aliases derivable again); PostgreSQL answers each in one round trip.
//!
//! [`Store::catch_up`]: crate::Store::catch_up
//! [`Store::write_turn`]: crate::Store::write_turn

use std::ops::RangeInclusive;

use loom_core::{BlobRef, Event, Ledger, NewEvent, Seq, SessionId};

use crate::calls::touched_calls;
use crate::records::{ModelCall, NewModelCall, StepRecord, Summary, Usage};
use crate::{validate, BlobAlias, Result, Store, StoreError};

/// What a caller already holds of a session: the catch-up returns only what is newer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Known {
    /// The log's length the caller has read.
    pub seq: Seq,
    /// The newest summary version it has (0: none).
    pub summary_version: u32,
    /// The id of the newest model call it has (0: none).
    pub call: u64,
}

/// What changed in a session since a [`Known`] state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CatchUp {
    /// The log's length now.
    pub last_seq: Seq,
    /// The events after the known length, in seq order.
    pub events: Vec<Event>,
    /// Every summary, oldest version first, when the newest version is not the known one.
    pub summaries: Option<Vec<Summary>>,
    /// The newest model call, when its id is not the known one.
    pub last_call: Option<ModelCall>,
}

/// Everything one call adds to a session, written at once.
#[derive(Debug, Clone, Copy)]
pub struct Turn<'a> {
    /// The session written.
    pub session: &'a SessionId,
    /// The log's length the turn was prepared against: the events are given the seqs after it,
    /// and the turn is refused with [`StoreError::Moved`] when the log is no longer this long.
    pub after: Seq,
    /// The state of the tool calls the events name, as the caller knows them (a call it does
    /// not hold is taken as absent). A backend may check the events against these instead of
    /// reading the stored states, and must then refuse the turn with [`StoreError::Moved`] when
    /// the stored states differ.
    pub calls: &'a Ledger,
    /// The new events.
    pub events: &'a [NewEvent],
    /// Steps derived from the events.
    pub steps: &'a [StepRecord],
    /// Aliases of outputs the steps offloaded (the blobs are stored already).
    pub aliases: &'a [(BlobAlias, BlobRef)],
    /// A receipt to record once the events are in.
    pub receipt: Option<&'a NewModelCall>,
    /// The usage of an earlier call that the events answer (`(call id, usage)`), reported with
    /// them: both or neither.
    pub usage: Option<(u64, &'a Usage)>,
}

/// What a turn was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The seqs of its events (empty when it had none: `after + 1..=after`).
    pub seqs: RangeInclusive<Seq>,
    /// The id of its receipt, when it had one.
    pub call: Option<u64>,
}

/// The error for a turn prepared against a log that has moved on.
pub(crate) fn moved(session: &SessionId, reason: impl Into<String>) -> StoreError {
    StoreError::Moved {
        session: session.clone(),
        reason: reason.into(),
    }
}

/// [`Store::catch_up`] from the store's other reads.
pub(crate) fn catch_up(
    store: &(impl Store + ?Sized),
    session: &SessionId,
    known: Known,
) -> Result<CatchUp> {
    let last_seq = store.latest_seq(session)?;
    let events = if last_seq > known.seq {
        store.read(session, known.seq + 1..=last_seq)?
    } else {
        Vec::new()
    };
    let summaries = store.summaries(session)?;
    let newest = summaries.last().map_or(0, |s| s.version);
    let last_call = store
        .last_model_call(session)?
        .filter(|c| c.id != known.call);
    Ok(CatchUp {
        last_seq,
        events,
        summaries: (newest != known.summary_version).then_some(summaries),
        last_call,
    })
}

/// Checks a turn as far as the caller's ledger allows: its events against the states it gives
/// for their calls, its steps against the calls after the events, its receipt against the log's
/// length after them, its usage's figures. Returns the states of the calls the events name, as
/// the events leave them.
pub(crate) fn check(turn: &Turn<'_>) -> Result<Ledger> {
    let session = turn.session;
    let touched = touched_calls(turn.events);
    let mut ledger = Ledger::from_states(
        touched
            .iter()
            .filter_map(|id| turn.calls.get(id).map(|s| ((*id).to_owned(), s.clone()))),
    );
    validate::events(session, &mut ledger, turn.after + 1, turn.events)?;
    let last = turn.after + turn.events.len() as Seq;
    for step in turn.steps {
        validate::step(session, step, &ledger)?;
    }
    if let Some(receipt) = turn.receipt {
        if &receipt.session != session {
            return Err(StoreError::InvalidRecord {
                session: session.clone(),
                record: "model call".into(),
                reason: format!("it names session `{}`", receipt.session),
            });
        }
        validate::model_call(receipt, last)?;
    }
    if let Some((call, usage)) = turn.usage {
        validate::usage(session, call, None, usage)?;
    }
    Ok(ledger)
}

/// [`Store::write_turn`] from the store's other writes: the turn is checked, then the log's
/// length and the aliases, before anything is written; the append checks the events against the
/// stored ledger itself.
pub(crate) fn write_turn(store: &(impl Store + ?Sized), turn: &Turn<'_>) -> Result<Written> {
    check(turn)?;
    for (alias, blob) in turn.aliases {
        if let Some(old) = store.resolve_alias(turn.session, alias)? {
            if &old != blob {
                return Err(validate::alias_conflict(turn.session, alias, &old, blob));
            }
        }
    }
    let latest = store.latest_seq(turn.session)?;
    if latest != turn.after {
        return Err(moved(
            turn.session,
            format!(
                "the turn was prepared against {} events and the log holds {latest}",
                turn.after
            ),
        ));
    }
    let seqs = if turn.events.is_empty() && turn.usage.is_none() {
        latest + 1..=latest
    } else {
        store.append_reply(turn.session, turn.events, turn.usage)?
    };
    for (alias, blob) in turn.aliases {
        store.put_alias(turn.session, alias, blob)?;
    }
    if !turn.steps.is_empty() {
        store.put_steps(turn.session, turn.steps)?;
    }
    let call = match turn.receipt {
        Some(receipt) => Some(store.record_model_call_id(receipt)?),
        None => None,
    };
    Ok(Written { seqs, call })
}
