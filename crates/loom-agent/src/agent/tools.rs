//! The tools the runtime answers itself rather than through the action space: `loom_recall`
//! (what a render left out, from the agent's own session) and memory (`memory:search`,
//! `memory:save`, on the agent's own memory).

use super::*;

impl Runner<'_> {
    /// `loom_recall`: the original of a reference a render left in the agent's context, from
    /// its own session only, at most the share of the budget one output may take.
    pub(super) fn recall_tool(&self, agent: &Agent, args: &Value) -> Result<Outcome> {
        let args: loom_store::recall::RecallArgs = match serde_json::from_value(args.clone()) {
            Ok(a) => a,
            Err(e) => return Ok(Outcome::error(format!("loom_recall: {e}"))),
        };
        let probe = RenderSpec {
            model: self.spec.model.clone(),
            budget: self.spec.budget,
            format: Format::OPENAI_CHAT,
            tools: Vec::new(),
            always_record: false,
            injections: Vec::new(),
            limits: Default::default(),
            recall: None,
        };
        let (meter, policy) = self
            .env
            .engine
            .prepare(&probe)
            .map_err(|e| AgentError::config("the model", e.message))?;
        let cap = loom_store::recall::answer_cap(
            loom_store::recall::DEFAULT_MAX_TOKENS,
            policy.budget().oversized,
        );
        let a = loom_store::recall::answer(
            self.env.store.as_ref(),
            self.env.blobs.as_ref(),
            &self.env.engine.reduce,
            &agent.session,
            &args,
            cap,
            &meter,
        )?;
        Ok(if a.is_error {
            Outcome::error(a.text)
        } else {
            Outcome::ok(a.text)
        })
    }

    /// `memory:search` and `memory:save`, on the calling agent's own memory; a note points back
    /// to the turn that made the call.
    pub(super) fn memory_tool(
        &self,
        agent: &Agent,
        call: &ToolCall,
        tool: &ToolDef,
        args: &Value,
    ) -> Result<Outcome> {
        let Some(memory) = &self.env.memory else {
            return Ok(Outcome::error("this run has no memory"));
        };
        let seq = self.events(&agent.session, |events| {
            events
                .iter()
                .rev()
                .find(|e| match &e.body {
                    EventBody::Assistant { tool_calls, .. } => {
                        tool_calls.iter().any(|c| c.id == call.id)
                    }
                    _ => false,
                })
                .or(events.last())
                .map_or(1, |e| e.seq)
        })?;
        let caller = crate::tools::memory::Caller {
            agent: &agent.name,
            session: &agent.session,
            seq,
            now_ms: now_ms(),
        };
        Ok(crate::tools::memory::run(
            memory.as_ref(),
            self.env.store.as_ref(),
            &caller,
            tool,
            args,
        ))
    }
}
