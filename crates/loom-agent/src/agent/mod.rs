//! The loop: append the goal, render, call the model, append its turn, run its tool calls,
//! append their results, and again, until the model answers without a call or a limit stops it.
//!
//! Everything the loop knows is in the log, so a run stopped anywhere — a limit, a pause for
//! approval, a crash — resumes from it ([`Runner::resume`]): calls the log holds without a result
//! are settled first (run, asked, or denied), in call order, each result appended as soon as it
//! exists. A call killed mid-run has no result, so it runs again on resume; a result is never
//! appended twice. A failed model call appends nothing.

use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use loom_core::render::{Audience, CompactionState, Format, Injection};
use loom_core::{
    AgentId, ContentStats, Event, EventBody, MessageContent, NewEvent, SessionId, ToolCall,
    ToolOutput,
};
use loom_runtime::{
    catch_up, run_turn, Hooks, InjectionBudget, Job, PostTurn, Summarizer, TurnView, Turned,
    WorkerConfig,
};
use loom_session::engine::RenderSpec;
use loom_session::{Backend, LiveSessions};
use loom_session::{Engine, RenderOutcome};
use loom_store::{BlobStore, NewSession, Store, Usage};
use serde_json::Value;

use crate::approval::{self, Answer};
use crate::error::{AgentError, Result};
use crate::model::Model;
use crate::now_ms;
use crate::tools::{Actions, Approval, Gate, Outcome, ToolDef};

mod children;
mod hooks;
mod tools;

/// What every agent of a run shares: the store, the blobs and the engine.
pub struct Env {
    /// The log.
    pub store: Arc<dyn Store>,
    /// Offloaded outputs.
    pub blobs: Arc<dyn BlobStore>,
    /// Renders.
    pub engine: Engine,
    /// The render state kept between turns.
    pub live: LiveSessions,
    /// Memory (notes, long-term items, the knowledge base): when set, agents get the
    /// `memory:search` and `memory:save` tools, each on its own memory.
    pub memory: Option<Arc<dyn loom_memory::Memory>>,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env").finish_non_exhaustive()
    }
}

impl Env {
    /// A run over an opened store.
    pub fn new(store: Arc<dyn Store>, blobs: Arc<dyn BlobStore>) -> Result<Self> {
        Ok(Self {
            store,
            blobs,
            engine: Engine::built_in()
                .map_err(|e| AgentError::config("the model registry", e.to_string()))?,
            live: LiveSessions::new(64),
            memory: None,
        })
    }

    fn backend(&self) -> Backend<'_> {
        Backend {
            store: self.store.as_ref(),
            blobs: self.blobs.as_ref(),
            reduce: &self.engine.reduce,
            live: &self.live,
        }
    }
}

/// Limits on a run; any reached stops it (the log keeps everything: `--resume` goes on).
#[derive(Debug, Clone, Default)]
pub struct Limits {
    /// Model calls, all agents together.
    pub max_turns: Option<u32>,
    /// Wall-clock time.
    pub max_wall: Option<Duration>,
    /// Input plus output tokens, all agents together.
    pub max_tokens: Option<u64>,
    /// Cost in US dollars, at [`Prices`].
    pub max_cost_usd: Option<f64>,
}

/// Prices per million tokens, for the cost shown and its limit.
#[derive(Debug, Clone, Copy, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    /// Uncached input.
    pub input: f64,
    /// Input read from the provider's cache.
    pub cached_input: f64,
    /// Output.
    pub output: f64,
}

/// How a run is made.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The model (its tokenizer counts the budget).
    pub model: String,
    /// The request budget in input tokens (the model's window less the reserve when absent).
    pub budget: Option<u64>,
    /// The approval policy.
    pub approval: Approval,
    /// The limits.
    pub limits: Limits,
    /// Prices, for cost.
    pub prices: Option<Prices>,
    /// The system prompt every agent starts with.
    pub system: String,
    /// The top agent's name.
    pub agent: AgentId,
    /// How deep children may nest (0: no `agent:spawn`).
    pub max_depth: u32,
}

/// The system prompt when the configuration gives none.
pub const DEFAULT_SYSTEM: &str = "You are an agent working in a workspace folder through the \
tools you are given. Work step by step: look before you change, check what you changed, and \
answer with a short summary of what you did when the goal is reached (without calling a tool).";

/// Why a run stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    /// The model answered without a tool call: the run is done.
    Answered(String),
    /// A call waits for `loom approve`.
    Paused {
        /// The session whose call it is (a child's, when a child asks).
        session: SessionId,
        /// The call.
        call_id: String,
        /// Its tool.
        tool: String,
        /// Why it asks.
        reason: String,
    },
    /// A limit was reached.
    Limit(String),
    /// A pre-hook halted the turn (its name and reason).
    Halted(String),
}

/// Token and cost totals of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    /// Model calls.
    pub turns: u32,
    /// Input tokens (the provider's count when it gave one, Loom's estimate otherwise).
    pub input: u64,
    /// Of which read from the provider's cache.
    pub cached: u64,
    /// Output tokens.
    pub output: u64,
    /// Cost at the configured prices.
    pub cost_usd: f64,
}

/// What a run ended with.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The top agent's session.
    pub session: SessionId,
    /// Why it stopped.
    pub stop: Stop,
    /// Totals, all agents together.
    pub totals: Totals,
}

/// What the terminal shows as a run goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress<'a> {
    /// A model call was made.
    Turn {
        /// The agent.
        agent: &'a str,
        /// Its depth (0: the top agent).
        depth: u32,
        /// The run's totals after it.
        totals: Totals,
        /// This call's input tokens and the part cached.
        input: u64,
        /// Cached.
        cached: u64,
    },
    /// Reply text as it arrives.
    Text(&'a str),
    /// A tool call ran, was denied, or asks.
    Tool {
        /// The agent.
        agent: &'a str,
        /// The tool's seed name.
        tool: &'a str,
        /// One line about the outcome.
        note: &'a str,
        /// Whether it failed.
        is_error: bool,
    },
}

/// Receives [`Progress`].
pub trait Observer {
    /// One step of the run.
    fn progress(&mut self, p: &Progress<'_>);
}

/// An observer that shows nothing.
#[derive(Debug, Default)]
pub struct Quiet;

impl Observer for Quiet {
    fn progress(&mut self, _: &Progress<'_>) {}
}

/// One agent of a run: its session, action space and depth.
pub struct Agent {
    /// Its session.
    pub session: SessionId,
    /// Its name (direct messages are addressed by it).
    pub name: AgentId,
    /// Its tools.
    pub actions: Actions,
    /// 0 for the top agent.
    pub depth: u32,
    /// Its parent's name, when it has one (it may message it).
    pub parent: Option<(AgentId, SessionId)>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("session", &self.session)
            .field("name", &self.name)
            .field("depth", &self.depth)
            .finish()
    }
}

/// Makes a child's action space from its parent's (its own workspace, the parent's readable).
pub type ChildActions<'a> = dyn FnMut(&Actions, &std::path::Path) -> Actions + 'a;

/// Runs agents.
pub struct Runner<'a> {
    env: &'a Env,
    model: &'a mut dyn Model,
    observer: &'a mut dyn Observer,
    spec: RunSpec,
    child_actions: &'a mut ChildActions<'a>,
    hooks: Option<&'a Hooks>,
    summary: Option<(&'a dyn Summarizer, &'a WorkerConfig)>,
    started: Instant,
    totals: Totals,
    /// Spans of the model calls (off unless the run's `[telemetry]` names a collector).
    telemetry: loom_telemetry::Telemetry,
}

impl std::fmt::Debug for Runner<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

/// The provider a run's API names, as `gen_ai.system` says it.
fn system(api: loom_core::Api) -> &'static str {
    loom_wire::dialect(api).provider().as_str()
}

/// What a turn's span says beyond the GenAI basics: the session and agent, the turn, and the
/// render's receipt.
fn turn_attributes(
    agent: &Agent,
    turn: u32,
    rendered: &RenderOutcome<Vec<u8>>,
) -> Vec<loom_telemetry::Attribute> {
    use loom_telemetry::{attr, Attribute};
    let mut a = attr::receipt(&rendered.receipt);
    a.push(Attribute::new(
        attr::SESSION,
        agent.session.as_str().to_owned(),
    ));
    a.push(Attribute::new("loom.agent", agent.name.as_str().to_owned()));
    a.push(Attribute::new("loom.agent.depth", i64::from(agent.depth)));
    a.push(Attribute::new("loom.turn", i64::from(turn)));
    if let Some(id) = rendered.model_call {
        a.push(Attribute::new(attr::RECEIPT, attr::n(id)));
    }
    a
}

/// Where the log stands for the loop.
enum Next {
    /// Calls of the last assistant turn without a result, in order.
    Settle(Vec<ToolCall>),
    /// The model's turn.
    Call,
    /// The last assistant turn made no call: its text is the answer.
    Done(String),
}

fn next(events: &[Event]) -> Next {
    let Some(at) = events
        .iter()
        .rposition(|e| matches!(e.body, EventBody::Assistant { .. }))
    else {
        return Next::Call;
    };
    let EventBody::Assistant {
        content,
        tool_calls,
        ..
    } = &events[at].body
    else {
        return Next::Call;
    };
    if tool_calls.is_empty() {
        // Only messages outside the agent's view (approvals) may follow a final answer.
        let later_input = events[at + 1..].iter().any(|e| match &e.body {
            EventBody::DirectMessage { source, .. } => {
                source != approval::RUNTIME && source != approval::USER
            }
            _ => true,
        });
        if later_input {
            return Next::Call;
        }
        let text = match content {
            Some(MessageContent::Text(t)) => t.clone(),
            Some(other) => serde_json::to_string(other).unwrap_or_default(),
            None => String::new(),
        };
        return Next::Done(text);
    }
    let answered: Vec<&str> = events[at + 1..]
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::ToolResult { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    let pending: Vec<ToolCall> = tool_calls
        .iter()
        .filter(|c| !answered.contains(&c.id.as_str()))
        .cloned()
        .collect();
    if pending.is_empty() {
        Next::Call
    } else {
        Next::Settle(pending)
    }
}

impl<'a> Runner<'a> {
    /// A runner for `spec`; `child_actions` makes a spawned child's tools.
    pub fn new(
        env: &'a Env,
        model: &'a mut dyn Model,
        observer: &'a mut dyn Observer,
        spec: RunSpec,
        child_actions: &'a mut ChildActions<'a>,
    ) -> Self {
        Self {
            env,
            model,
            observer,
            spec,
            child_actions,
            hooks: None,
            summary: None,
            started: Instant::now(),
            totals: Totals::default(),
            telemetry: loom_telemetry::Telemetry::off(),
        }
    }

    /// Records a span per model call in `telemetry` (each agent's turns, children's included).
    pub fn with_telemetry(mut self, telemetry: loom_telemetry::Telemetry) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// Runs `hooks` around every turn: the pre-hooks before each render (what they inject goes
    /// at the request's tail, under the injection reserve, and into the receipt; a halt stops the
    /// run), the post-hooks after each reply.
    pub fn with_hooks(mut self, hooks: &'a Hooks) -> Self {
        self.hooks = Some(hooks);
        self
    }

    /// Runs the summary worker between turns with `summarizer`: the session's summary is brought
    /// up to date before each render that needs it, so a compaction point can fold into it.
    pub fn with_summarizer(
        mut self,
        summarizer: &'a dyn Summarizer,
        config: &'a WorkerConfig,
    ) -> Self {
        self.summary = Some((summarizer, config));
        self
    }

    /// Starts a run of `goal` in a new session (`session`, or a generated id).
    pub fn start(
        &mut self,
        goal: &str,
        session: Option<SessionId>,
        actions: Actions,
    ) -> Result<Report> {
        let id = match session {
            Some(id) => id,
            None => SessionId::new(format!("run-{}", now_ms()))
                .map_err(|e| AgentError::config("session", e.to_string()))?,
        };
        // Approval requests and answers travel between these two names, outside every agent's
        // view; an agent that took one of them would see them.
        if [approval::RUNTIME, approval::USER].contains(&self.spec.agent.as_str()) {
            return Err(AgentError::config(
                "agent",
                format!(
                    "`{}` is reserved for approvals; name the agent otherwise",
                    self.spec.agent
                ),
            ));
        }
        self.open_session(&id, &self.spec.agent, None, goal)?;
        let name = self.spec.agent.clone();
        self.run_top(id, name, actions)
    }

    /// Creates an agent's session: the system prompt, then its task as the user's message.
    fn open_session(
        &self,
        id: &SessionId,
        agent: &AgentId,
        parent: Option<&SessionId>,
        task: &str,
    ) -> Result<()> {
        self.env.store.create_session(
            &NewSession {
                id: id.clone(),
                agent: agent.clone(),
                parent: parent.cloned(),
                created_ms: now_ms(),
            },
            &[
                NewEvent::new(
                    now_ms(),
                    EventBody::System {
                        content: MessageContent::from(self.spec.system.as_str()),
                    },
                ),
                NewEvent::new(
                    now_ms(),
                    EventBody::User {
                        content: MessageContent::from(task),
                        name: None,
                    },
                ),
            ],
        )?;
        Ok(())
    }

    /// Continues a stopped run from its log.
    pub fn resume(&mut self, session: &SessionId, actions: Actions) -> Result<Report> {
        let info = self
            .env
            .store
            .session(session)?
            .ok_or_else(|| AgentError::session(session, "no such session"))?;
        self.run_top(session.clone(), info.agent, actions)
    }

    /// Drives the top agent of a run until it stops.
    fn run_top(&mut self, session: SessionId, name: AgentId, actions: Actions) -> Result<Report> {
        let agent = Agent {
            session,
            name,
            actions,
            depth: 0,
            parent: None,
        };
        let stop = self.drive(&agent)?;
        Ok(Report {
            session: agent.session,
            stop,
            totals: self.totals,
        })
    }

    /// The log as the render state holds it.
    fn events<T>(&self, id: &SessionId, f: impl FnOnce(&[Event]) -> T) -> Result<T> {
        let live = self
            .env
            .live
            .get(self.env.backend(), id)
            .map_err(|e| AgentError::session(id, e.message))?
            .ok_or_else(|| AgentError::session(id, "no such session"))?;
        let guard = live.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(f(guard.events()))
    }

    fn limit(&self) -> Option<String> {
        let l = &self.spec.limits;
        let t = &self.totals;
        if l.max_turns.is_some_and(|m| t.turns >= m) {
            return Some(format!("{} model calls (--max-turns)", t.turns));
        }
        if l.max_wall.is_some_and(|m| self.started.elapsed() >= m) {
            return Some(format!(
                "{:.0} s of wall time",
                self.started.elapsed().as_secs_f64()
            ));
        }
        if l.max_tokens.is_some_and(|m| t.input + t.output >= m) {
            return Some(format!("{} tokens", t.input + t.output));
        }
        if l.max_cost_usd.is_some_and(|m| t.cost_usd >= m) {
            return Some(format!("${:.4} of cost", t.cost_usd));
        }
        None
    }

    /// Runs one agent until it answers, pauses or a limit stops it.
    fn drive(&mut self, agent: &Agent) -> Result<Stop> {
        let api = self.model.api();
        // The tool list is fixed for a run: built once, not per call.
        let mut tools = agent.actions.tools();
        let mut specs = agent.actions.specs();
        if self.env.memory.is_some() {
            let memory = crate::tools::memory::defs();
            specs.extend(memory.iter().map(|t| loom_core::render::ToolSpec {
                name: crate::names::wire(&t.name),
                description: t.description.clone(),
                parameters: t.parameters.clone(),
            }));
            tools.extend(memory);
        }
        loop {
            match self.events(&agent.session, next)? {
                Next::Done(answer) => return Ok(Stop::Answered(answer)),
                Next::Settle(calls) => {
                    if let Some(stop) = self.settle(agent, &tools, &calls)? {
                        return Ok(stop);
                    }
                    continue;
                }
                Next::Call => {}
            }
            if let Some(why) = self.limit() {
                return Ok(Stop::Limit(why));
            }
            self.summarize(agent)?;
            let spec = RenderSpec {
                model: self.spec.model.clone(),
                budget: self.spec.budget,
                format: Format::from(api),
                tools: specs.clone(),
                always_record: true,
                injections: Vec::new(),
                limits: Default::default(),
                // Agents have `loom_recall`: every stub says how to call it.
                recall: Some(loom_core::render::RecallRefs::Tool),
            };
            let rendered = match self.render_turn(agent, spec)? {
                Ok(rendered) => rendered,
                Err(halt) => return Ok(halt),
            };
            let span = self.telemetry.call(
                loom_telemetry::CallKind::Client,
                "chat",
                system(api),
                &self.spec.model,
                std::time::SystemTime::now(),
                || turn_attributes(agent, self.totals.turns + 1, &rendered),
            );
            let observer = &mut *self.observer;
            let reply = self
                .model
                .call(&rendered.body, &mut |text| {
                    observer.progress(&Progress::Text(text))
                })
                .map_err(|message| {
                    span.fail("model_call");
                    AgentError::Model {
                        session: agent.session.clone(),
                        turn: self.totals.turns + 1,
                        message,
                    }
                })?;
            if span.is_on() {
                span.reply(&loom_telemetry::Reply::of(&reply));
            }
            span.end();
            let usage = reply.usage;
            let event = loom_session::history::assistant_event(api, reply);
            self.env.store.append(&agent.session, &[event])?;
            self.post_hooks(agent, &rendered.receipt)?;
            // The provider's count when it gave one; Loom's own otherwise.
            let (input, cached, output) = match usage {
                Some(u) => (
                    u.input_tokens,
                    u.cached_input_tokens.unwrap_or(0),
                    u.output_tokens.unwrap_or(0),
                ),
                None => (rendered.receipt.estimate, 0, 0),
            };
            if let (Some(call), Some(u)) = (rendered.model_call, usage) {
                self.env.store.report_usage(
                    &agent.session,
                    call,
                    &Usage {
                        input_tokens: u.input_tokens,
                        cached_input_tokens: u.cached_input_tokens,
                        output_tokens: u.output_tokens,
                        reported_ms: now_ms(),
                    },
                )?;
            }
            self.totals.turns += 1;
            self.totals.input += input;
            self.totals.cached += cached;
            self.totals.output += output;
            if let Some(p) = self.spec.prices {
                self.totals.cost_usd += ((input - cached.min(input)) as f64 * p.input
                    + cached as f64 * p.cached_input
                    + output as f64 * p.output)
                    / 1e6;
            }
            self.observer.progress(&Progress::Turn {
                agent: agent.name.as_str(),
                depth: agent.depth,
                totals: self.totals,
                input,
                cached,
            });
        }
    }

    /// Settles the calls of the last turn in order; `Some` when the run must pause.
    fn settle(
        &mut self,
        agent: &Agent,
        tools: &[ToolDef],
        calls: &[ToolCall],
    ) -> Result<Option<Stop>> {
        let ledger = self.events(&agent.session, approval::Ledger::read)?;
        for call in calls {
            let seed = crate::names::seed(&call.name);
            let Some(tool) = tools
                .iter()
                .find(|t| t.name == seed || t.name == call.name)
                .cloned()
            else {
                self.result(
                    agent,
                    call,
                    "?",
                    Outcome::error(format!("unknown tool `{}`", call.name)),
                )?;
                continue;
            };
            let args: Value = match serde_json::from_str(&call.arguments) {
                Ok(v @ Value::Object(_)) => v,
                Ok(_) | Err(_) if call.arguments.trim().is_empty() => {
                    Value::Object(Default::default())
                }
                Ok(other) => {
                    let out =
                        Outcome::error(format!("arguments must be a JSON object, not {other}"));
                    self.result(agent, call, &tool.name, out)?;
                    continue;
                }
                Err(e) => {
                    let out = Outcome::error(format!("arguments are not JSON: {e}"));
                    self.result(agent, call, &tool.name, out)?;
                    continue;
                }
            };
            let gate = if tool.name.starts_with("agent:") {
                Gate::Run
            } else {
                agent
                    .actions
                    .gate(&tool, &args, self.spec.approval, &ledger.granted)
            };
            let gate = match gate {
                Gate::Ask(reason) => match ledger.answered.get(&call.id) {
                    Some(Answer::Once | Answer::Session) => Gate::Run,
                    Some(Answer::Deny) => Gate::Deny(format!("denied by the user: {reason}")),
                    None => {
                        if !ledger.requested.contains_key(&call.id) {
                            let grant = grant_key(&tool, &args);
                            let request =
                                approval::request(now_ms(), &call.id, &tool.name, &grant, &reason);
                            self.env.store.append(&agent.session, &[request])?;
                        }
                        self.observer.progress(&Progress::Tool {
                            agent: agent.name.as_str(),
                            tool: &tool.name,
                            note: &format!("waits for approval: {reason}"),
                            is_error: false,
                        });
                        return Ok(Some(Stop::Paused {
                            session: agent.session.clone(),
                            call_id: call.id.clone(),
                            tool: tool.name.clone(),
                            reason,
                        }));
                    }
                },
                other => other,
            };
            let out = match gate {
                Gate::Deny(reason) => Outcome::error(reason),
                Gate::Ask(_) => continue, // answered above
                Gate::Run => match tool.name.as_str() {
                    "agent:spawn" => match self.spawn(agent, &args)? {
                        Ok(out) => out,
                        // A child waits for approval: the whole run pauses, the spawn call
                        // stays open, and resuming the parent resumes the child.
                        Err(stop) => return Ok(Some(stop)),
                    },
                    "agent:send_message" => self.send(agent, &args)?,
                    crate::tools::memory::SEARCH | crate::tools::memory::SAVE => {
                        self.memory_tool(agent, call, &tool, &args)?
                    }
                    loom_core::render::RECALL_TOOL => self.recall_tool(agent, &args)?,
                    _ => agent.actions.execute(&tool, &args),
                },
            };
            self.result(agent, call, &tool.name, out)?;
        }
        Ok(None)
    }

    /// Appends a call's result; a cut output is kept whole in the blob store, named in the text.
    fn result(&mut self, agent: &Agent, call: &ToolCall, tool: &str, out: Outcome) -> Result<()> {
        let mut text = out.text;
        let stats = match &out.whole {
            Some(whole) => {
                let info = self.env.blobs.put(whole)?;
                text.push_str(&format!(
                    "\n[the whole output ({} bytes) is kept as {}]",
                    whole.len(),
                    info.blob
                ));
                info.stats
            }
            None => ContentStats::of(text.as_bytes()),
        };
        let first = text
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(100)
            .collect::<String>();
        self.observer.progress(&Progress::Tool {
            agent: agent.name.as_str(),
            tool,
            note: &first,
            is_error: out.is_error,
        });
        let event = NewEvent::new(
            now_ms(),
            EventBody::ToolResult {
                call_id: call.id.clone(),
                tool_name: call.name.clone(),
                content: ToolOutput::Text(text),
                is_error: out.is_error,
                stats,
            },
        );
        self.env.store.append(&agent.session, &[event])?;
        Ok(())
    }
}

/// What a `--session` approval grants: the tool, or for shell the exact command.
fn grant_key(tool: &ToolDef, args: &Value) -> String {
    match (
        tool.name.as_str(),
        args.get("command").and_then(Value::as_str),
    ) {
        ("system:shell", Some(command)) => format!("{} {command}", tool.name),
        _ => tool.name.clone(),
    }
}
