//! The runtime's hooks around a turn: the pre-hooks' injections (or a halt) before the render,
//! the post-hooks after the reply, and the summary worker's turn between turns.

use super::*;

impl Runner<'_> {
    /// The pre-hooks' injections for the next turn, or the halt.
    pub(super) fn pre_hooks(
        &self,
        agent: &Agent,
        spec: &RenderSpec,
    ) -> Result<Result<Vec<Injection>, Stop>> {
        let Some(hooks) = self.hooks else {
            return Ok(Ok(Vec::new()));
        };
        let (meter, policy) = self
            .env
            .engine
            .prepare(spec)
            .map_err(|e| AgentError::Render {
                session: agent.session.clone(),
                message: e.message,
            })?;
        let audience = Audience {
            agent: Some(agent.name.clone()),
            now_ms: now_ms(),
        };
        let view = self.events(&agent.session, |events| {
            TurnView::of(events, Some(agent.session.clone()), &audience)
        })?;
        let budget = InjectionBudget {
            format: spec.format,
            meter: &meter,
            reserve: policy.budget().injection_reserve,
        };
        let pre = hooks
            .run_pre(&view, &[], &budget)
            .map_err(|e| AgentError::Render {
                session: agent.session.clone(),
                message: format!("the pre-hooks: {e}"),
            })?;
        Ok(match pre.decision {
            Decision::Proceed(injections) => Ok(injections),
            Decision::Halt(h) => Err(Stop::Halted(format!("{}: {}", h.hook, h.reason))),
        })
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
