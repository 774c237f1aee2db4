//! The runtime's hooks around a turn: the pre-hooks' injections (or a halt) before the render,
//! the post-hooks after the reply, and the summary worker's turn between turns.

use super::*;

/// What can fail in a turn's render: the pre-hooks, or the render itself.
enum TurnError {
    Hooks(loom_runtime::RuntimeError),
    Render(AgentError),
}

impl From<loom_runtime::RuntimeError> for TurnError {
    fn from(e: loom_runtime::RuntimeError) -> Self {
        Self::Hooks(e)
    }
}

impl Runner<'_> {
    /// The turn's request: the pre-hooks' injections (or their halt), then one render of the
    /// session with them, in the runtime's turn sequence ([`run_turn`]) — the same as an
    /// embedder's [`loom_runtime::render_turn`], rendered by the session engine from the store.
    /// The body is the bytes sent (its `model` is the spec's): a value tree of the whole
    /// request every turn cost more than the rest of the turn.
    pub(super) fn render_turn(
        &self,
        agent: &Agent,
        mut spec: RenderSpec,
    ) -> Result<Result<RenderOutcome<Vec<u8>>, Stop>> {
        let session = &agent.session;
        let failed = |message: String| AgentError::Render {
            session: session.clone(),
            message,
        };
        let (meter, policy) = self
            .env
            .engine
            .prepare(&spec)
            .map_err(|e| failed(e.message))?;
        let format = spec.format;
        let mut render = move |injections: Vec<Injection>| -> std::result::Result<_, TurnError> {
            spec.injections = injections;
            self.env
                .engine
                .render_session_bytes(self.env.backend(), session, &spec)
                .map_err(|e| TurnError::Render(failed(e.message)))?
                .ok_or_else(|| TurnError::Render(AgentError::session(session, "no such session")))
        };
        let outcome = match self.hooks {
            None => render(Vec::new()).map(|rendered| Turned::Ready {
                rendered,
                outcomes: Vec::new(),
            }),
            Some(hooks) => {
                let audience = Audience {
                    agent: Some(agent.name.clone()),
                    now_ms: now_ms(),
                };
                let view = self.events(session, |events| {
                    TurnView::of(events, Some(session.clone()), &audience)
                })?;
                let budget = InjectionBudget {
                    format,
                    meter: &meter,
                    reserve: policy.budget().injection_reserve,
                };
                run_turn(hooks, &view, &[], &budget, render)
            }
        };
        match outcome {
            Ok(Turned::Ready { rendered, .. }) => Ok(Ok(rendered)),
            Ok(Turned::Halted { halt, .. }) => {
                Ok(Err(Stop::Halted(format!("{}: {}", halt.hook, halt.reason))))
            }
            Err(TurnError::Hooks(e)) => Err(failed(format!("the pre-hooks: {e}"))),
            Err(TurnError::Render(e)) => Err(e),
        }
    }

    /// The post-hooks after a reply.
    pub(super) fn post_hooks(
        &self,
        agent: &Agent,
        receipt: &loom_core::render::Receipt,
    ) -> Result<()> {
        let Some(hooks) = self.hooks else {
            return Ok(());
        };
        self.events(&agent.session, |events| {
            if let Some(assistant) = events.last() {
                hooks.run_post(&PostTurn {
                    session: Some(&agent.session),
                    events,
                    assistant,
                    receipt: Some(receipt),
                });
            }
        })
    }

    /// The summary worker's turn: fold what is due into the session's summary.
    pub(super) fn summarize(&mut self, agent: &Agent) -> Result<()> {
        let Some((summarizer, config)) = self.summary else {
            return Ok(());
        };
        let state = self
            .env
            .store
            .last_model_call(&agent.session)?
            .and_then(|c| {
                use serde::Deserialize;
                CompactionState::deserialize(c.call.receipt.get("state")?).ok()
            })
            .unwrap_or_default();
        let job = Job {
            session: agent.session.clone(),
            state,
            now_ms: now_ms(),
        };
        // A summarizer that fails leaves the run as it was: the render compacts without it.
        if let Err(e) = catch_up(self.env.store.as_ref(), summarizer, config, &job) {
            self.observer.progress(&Progress::Tool {
                agent: agent.name.as_str(),
                tool: "summary worker",
                note: &e.to_string(),
                is_error: true,
            });
        }
        Ok(())
    }
}
