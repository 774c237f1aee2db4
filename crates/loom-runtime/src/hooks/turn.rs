//! One turn: pre-hooks, then exactly one render with their injections.
//!
//! The render pipeline decides compaction before it places injections, so running the hooks
//! first and rendering once afterwards is what keeps compaction from being re-entered after
//! hooks (seed 004: reduction and injection share only the budget).

use loom_core::render::{
    render, Audience, CompactionState, CostMemo, Injection, RenderInput, Rendered,
};
use loom_core::{AgentId, Event, EventBody, Seq, SessionId};

use super::{Decision, Halt, HookOutcome, Hooks, InjectionBudget};
use crate::error::Result;

/// What pre-hooks see of the turn. Owned, so parallel hooks can read it from their threads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnView {
    /// The session.
    pub session: Option<SessionId>,
    /// The agent whose turn it is.
    pub agent: Option<AgentId>,
    /// Last seq of the log.
    pub at_seq: Seq,
    /// The turn's clock, UTC milliseconds (an input, so replays see the same time).
    pub now_ms: i64,
    /// Text of the latest user message, the usual query for retrieval hooks.
    pub user_message: Option<String>,
}

impl TurnView {
    /// The view of the turn that follows `events`.
    pub fn of(events: &[Event], session: Option<SessionId>, audience: &Audience) -> Self {
        let user_message = events.iter().rev().find_map(|e| match &e.body {
            EventBody::User { content, .. } => Some(content.text().into_owned()),
            _ => None,
        });
        Self {
            session,
            agent: audience.agent.clone(),
            at_seq: events.last().map_or(0, |e| e.seq),
            now_ms: audience.now_ms,
            user_message,
        }
    }
}

/// The outcome of a turn's hooks and its one render, whatever made it.
#[derive(Debug, Clone, PartialEq)]
pub enum Turned<R> {
    /// A hook halted the turn; nothing was rendered.
    Halted {
        /// Who and why.
        halt: Halt,
        /// Every hook's outcome.
        outcomes: Vec<HookOutcome>,
    },
    /// The request to send (injections at its end, listed in its receipt's `injected`).
    Ready {
        /// The render.
        rendered: R,
        /// Every hook's outcome.
        outcomes: Vec<HookOutcome>,
    },
}

/// The outcome of [`render_turn`]: a render of a log in memory.
pub type TurnRender = Turned<Box<Rendered>>;

/// Runs the pre-hooks for the turn, then `render` exactly once with their injections (after
/// `given`, content injected before the hooks, which runs through the same reserve check); a
/// halt renders nothing. The one turn sequence, whatever renders: [`render_turn`] renders a log
/// held in memory, `loom run` a stored session through the session engine. Errors of the hooks
/// become the renderer's error type.
pub fn run_turn<R, E: From<crate::RuntimeError>>(
    hooks: &Hooks,
    turn: &TurnView,
    given: &[Injection],
    budget: &InjectionBudget<'_>,
    render: impl FnOnce(Vec<Injection>) -> std::result::Result<R, E>,
) -> std::result::Result<Turned<R>, E> {
    let pre = hooks.run_pre(turn, given, budget)?;
    Ok(match pre.decision {
        Decision::Halt(halt) => Turned::Halted {
            halt,
            outcomes: pre.outcomes,
        },
        Decision::Proceed(injections) => Turned::Ready {
            rendered: render(injections)?,
            outcomes: pre.outcomes,
        },
    })
}

/// Runs the pre-hooks for the turn, then renders once with their injections.
///
/// `input.injections`, if any, are content injected before the hooks (they run through the
/// same reserve check). Injected content goes to the request and the receipt, never to the log.
pub fn render_turn(
    hooks: &Hooks,
    input: &RenderInput<'_>,
    turn: &TurnView,
    prev: &CompactionState,
    memo: &mut CostMemo,
) -> Result<TurnRender> {
    let budget = InjectionBudget {
        format: input.format,
        meter: input.meter,
        reserve: input.policy.budget().injection_reserve,
    };
    run_turn(hooks, turn, input.injections, &budget, |injections| {
        let with = RenderInput {
            injections: &injections,
            ..*input
        };
        Ok(Box::new(render(&with, prev, memo)?))
    })
}
