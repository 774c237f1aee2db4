//! A session's render state in memory: the log as held, its projection (pushed one event at a
//! time), the steps derived from its results with the ingest that numbers them, and the render's
//! cost memo.
//!
//! A server's live session ([`crate::Live`]) holds one over the store; `loom replay` holds one
//! per trajectory and feeds it the trajectory's events one by one, as a live agent's log would
//! grow. Both render from it the same way ([`SessionState::view`]), so what a replay measures is
//! what a live session sends.

use std::borrow::Cow;

use loom_core::render::{Audience, CostMemo, Projection, StepIndex};
use loom_core::{Event, EventBody, Ingest, Seq, Step};

/// The log, its projection and steps, and the cost memo, as a render reads them.
#[derive(Debug, Default)]
pub struct SessionState {
    events: Vec<Event>,
    projection: Projection,
    /// A direct message with a time to live was seen: which messages are included depends on
    /// the render's clock, so the projection is rebuilt for each render.
    has_ttl: bool,
    ingest: Ingest,
    steps: StepIndex,
    memo: CostMemo,
}

/// What a render reads from a [`SessionState`], borrowed apart: the log, the steps, the
/// projection at the render's audience, and the cost memo (the one thing a render updates).
#[derive(Debug)]
pub struct View<'s> {
    /// The log, in seq order.
    pub events: &'s [Event],
    /// Steps by call id.
    pub steps: &'s StepIndex,
    /// The log as units, for this audience.
    pub projection: Cow<'s, Projection>,
    /// Token costs kept across renders.
    pub memo: &'s mut CostMemo,
}

impl SessionState {
    /// An empty session.
    pub fn new() -> Self {
        Self::default()
    }

    /// The log, in seq order.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The steps derived so far, by call id.
    pub fn steps(&self) -> &StepIndex {
        &self.steps
    }

    /// The seq of the last event held.
    pub fn last_seq(&self) -> Seq {
        self.events.last().map_or(0, |e| e.seq)
    }

    /// The time of the last event held.
    pub fn last_ms(&self) -> Option<i64> {
        self.events.last().map(|e| e.ts_ms)
    }

    /// The ingest that numbers results as they arrive, for deriving the steps of the next
    /// events before they are pushed.
    pub fn ingest(&mut self) -> &mut Ingest {
        &mut self.ingest
    }

    /// Adds a derived step.
    pub fn insert_step(&mut self, step: Step) {
        self.steps.insert(step.call_id.clone(), step);
    }

    /// Adds the log's next event, projected for `audience`.
    pub fn push(&mut self, event: Event, audience: &Audience) {
        if let EventBody::DirectMessage {
            ttl_seconds: Some(_),
            ..
        } = event.body
        {
            self.has_ttl = true;
        }
        self.projection.push(&event, audience);
        self.events.push(event);
    }

    /// What a render reads, for `audience`.
    pub fn view(&mut self, audience: &Audience) -> View<'_> {
        let projection = if self.has_ttl {
            Cow::Owned(Projection::build(&self.events, audience))
        } else {
            Cow::Borrowed(&self.projection)
        };
        View {
            events: &self.events,
            steps: &self.steps,
            projection,
            memo: &mut self.memo,
        }
    }
}
