//! Children and messages (seed 001 §3): `agent:spawn` starts a child with its goal only (and,
//! when asked, an extract of the parent's steps) in its own session and workspace;
//! `agent:send_message` writes a direct message into another agent's log. Nothing else of
//! either log crosses to the other.

use super::*;

impl Runner<'_> {
    /// `agent:spawn`: a child with its goal only (and, when asked, an extract of the parent's
    /// steps), its own session, workspace and step counter; only its result comes back.
    pub(super) fn spawn(&mut self, parent: &Agent, args: &Value) -> Result<Result<Outcome, Stop>> {
        if parent.depth >= self.spec.max_depth {
            return Ok(Ok(Outcome::error(format!(
                "agents may nest {} deep; this one cannot spawn",
                self.spec.max_depth
            ))));
        }
        let Some(goal) = args
            .get("goal")
            .and_then(Value::as_str)
            .filter(|g| !g.trim().is_empty())
        else {
            return Ok(Ok(Outcome::error("missing argument `goal`")));
        };
        let n = self.events(&parent.session, |events| {
            events
                .iter()
                .filter(|e| matches!(e.body, EventBody::Spawn { .. }))
                .count()
        })? + 1;
        let child_session = SessionId::new(format!("{}.{n}", parent.session))
            .map_err(|e| AgentError::config("session", e.to_string()))?;
        let child_name = AgentId::new(format!("{}.{n}", parent.name))
            .map_err(|e| AgentError::config("agent", e.to_string()))?;
        let extract = if args.get("extract").and_then(Value::as_bool) == Some(true) {
            Some(self.extract(parent)?)
        } else {
            None
        };
        let workspace = parent
            .actions
            .workspace
            .join(".agents")
            .join(format!("{n}"));
        std::fs::create_dir_all(&workspace).map_err(|e| {
            AgentError::config(
                workspace.display().to_string(),
                format!("cannot create the child's workspace: {e}"),
            )
        })?;
        // A child resumed after a crash keeps its session: only its log is new work.
        let exists = self.env.store.session(&child_session)?.is_some();
        if !exists {
            self.env.store.append(
                &parent.session,
                &[NewEvent::new(
                    now_ms(),
                    EventBody::Spawn {
                        child: child_session.clone(),
                        agent: child_name.clone(),
                        goal: goal.to_owned(),
                        extract: extract.clone(),
                    },
                )],
            )?;
            let mut task = goal.to_owned();
            if let Some(x) = &extract {
                task.push_str("\n\nWhat your parent agent has done so far:\n");
                task.push_str(x);
            }
            self.open_session(&child_session, &child_name, Some(&parent.session), &task)?;
        }
        let mut actions = (self.child_actions)(&parent.actions, &workspace);
        actions.can_spawn = parent.depth + 1 < self.spec.max_depth;
        let child = Agent {
            session: child_session.clone(),
            name: child_name.clone(),
            actions,
            depth: parent.depth + 1,
            parent: Some((parent.name.clone(), parent.session.clone())),
        };
        let (result, success) = match self.drive(&child)? {
            Stop::Answered(text) => (text, true),
            Stop::Limit(why) => (format!("stopped before finishing: {why}"), false),
            Stop::Halted(why) => (format!("halted by a hook: {why}"), false),
            paused @ Stop::Paused { .. } => return Ok(Err(paused)),
        };
        self.env.store.append(
            &parent.session,
            &[NewEvent::new(
                now_ms(),
                EventBody::AgentResult {
                    child: child_session.clone(),
                    agent: child_name.clone(),
                    result,
                    success,
                },
            )],
        )?;
        let text = format!(
            "agent {child_name} (session {child_session}) {}; its result follows",
            if success { "finished" } else { "stopped" }
        );
        Ok(Ok(if success {
            Outcome::ok(text)
        } else {
            Outcome::error(text)
        }))
    }

    /// The parent's steps, compacted, for a child that is given them.
    pub(super) fn extract(&self, parent: &Agent) -> Result<String> {
        let off = loom_store::Offloader::new(
            self.env.store.as_ref(),
            self.env.blobs.as_ref(),
            &self.env.engine.reduce,
        );
        let steps = off.steps(&parent.session)?;
        let lines: Vec<String> = steps
            .iter()
            .map(|s| {
                let args = serde_json::to_string(&s.minimal_args).unwrap_or_default();
                format!(
                    "- {} {} {args}: {}",
                    s.id,
                    crate::names::seed(&s.tool_name),
                    s.observation
                )
            })
            .collect();
        Ok(if lines.is_empty() {
            "(no steps yet)".into()
        } else {
            lines.join("\n")
        })
    }

    /// `agent:send_message`: a direct message into the target agent's log.
    pub(super) fn send(&mut self, agent: &Agent, args: &Value) -> Result<Outcome> {
        let (Some(to), Some(content)) = (
            args.get("to").and_then(Value::as_str),
            args.get("content").and_then(Value::as_str),
        ) else {
            return Ok(Outcome::error("expected `to` and `content`"));
        };
        // The agents this one knows: its parent, and the children it spawned.
        let mut known: Vec<(String, SessionId)> = Vec::new();
        if let Some((name, session)) = &agent.parent {
            known.push((name.as_str().to_owned(), session.clone()));
        }
        let children = self.events(&agent.session, |events| {
            events
                .iter()
                .filter_map(|e| match &e.body {
                    EventBody::Spawn { child, agent, .. } => {
                        Some((agent.as_str().to_owned(), child.clone()))
                    }
                    _ => None,
                })
                .collect::<Vec<_>>()
        })?;
        known.extend(children);
        let Some((_, session)) = known.iter().find(|(name, _)| name == to) else {
            let names: Vec<&str> = known.iter().map(|(n, _)| n.as_str()).collect();
            return Ok(Outcome::error(format!(
                "no agent `{to}` to message (known: {})",
                if names.is_empty() {
                    "none".into()
                } else {
                    names.join(", ")
                }
            )));
        };
        let priority = args.get("priority").and_then(Value::as_f64).unwrap_or(0.5);
        let ttl_seconds = args.get("ttl_seconds").and_then(Value::as_u64);
        self.env.store.append(
            session,
            &[NewEvent::new(
                now_ms(),
                EventBody::DirectMessage {
                    source: agent.name.as_str().to_owned(),
                    target: to.to_owned(),
                    content: content.to_owned(),
                    priority,
                    ttl_seconds,
                    parent_task_id: Some(agent.session.as_str().to_owned()),
                    metadata: Default::default(),
                },
            )],
        )?;
        Ok(Outcome::ok(format!("sent to {to}")))
    }
}
