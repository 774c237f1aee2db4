//! Builders shared by the tests: small logs, a store holding them with their steps, setups.

use std::collections::HashMap;
use std::sync::Arc;

use loom_core::render::{ApproxMeter, Audience, Format, Policy, StepIndex, ToolSpec};
use loom_core::{
    AgentId, ContentStats, Event, EventBody, Ingest, NewEvent, ReduceConfig, SessionId, ToolCall,
    ToolOutput,
};
use loom_runtime::RenderSetup;
use loom_store::{MemoryStore, NewSession, StepRecord, Store};

/// A log under construction; timestamps are 1 s apart from 1,000,000 ms.
#[derive(Debug, Default, Clone)]
pub(crate) struct Log {
    pub(crate) events: Vec<NewEvent>,
    calls: HashMap<String, ToolCall>,
}

impl Log {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn push(&mut self, body: EventBody) -> u64 {
        let seq = self.events.len() as u64 + 1;
        self.events
            .push(NewEvent::new(1_000_000 + 1_000 * seq as i64, body));
        seq
    }

    pub(crate) fn system(&mut self, text: &str) -> u64 {
        self.push(EventBody::System {
            content: text.into(),
        })
    }

    pub(crate) fn user(&mut self, text: &str) -> u64 {
        self.push(EventBody::User {
            content: text.into(),
            name: None,
        })
    }

    pub(crate) fn assistant(&mut self, text: &str) -> u64 {
        self.push(EventBody::Assistant {
            content: Some(text.into()),
            reasoning: None,
            tool_calls: Vec::new(),
            name: None,
            native: None,
        })
    }

    /// An assistant turn making parallel calls `(id, tool, arguments)`.
    pub(crate) fn calls(&mut self, text: Option<&str>, calls: &[(&str, &str, &str)]) -> u64 {
        let tool_calls: Vec<ToolCall> = calls
            .iter()
            .map(|(id, name, args)| ToolCall {
                id: (*id).into(),
                name: (*name).into(),
                arguments: (*args).into(),
            })
            .collect();
        for c in &tool_calls {
            self.calls.insert(c.id.clone(), c.clone());
        }
        self.push(EventBody::Assistant {
            content: text.map(Into::into),
            reasoning: None,
            tool_calls,
            name: None,
            native: None,
        })
    }

    pub(crate) fn result(&mut self, id: &str, output: &str, is_error: bool) -> u64 {
        let tool = self.calls[id].name.clone();
        self.push(EventBody::ToolResult {
            call_id: id.into(),
            tool_name: tool,
            content: ToolOutput::Text(output.into()),
            is_error,
            stats: ContentStats::of(output.as_bytes()),
        })
    }

    /// One call and its result.
    pub(crate) fn step(&mut self, id: &str, tool: &str, args: &str, output: &str) {
        self.calls(None, &[(id, tool, args)]);
        self.result(id, output, false);
    }

    /// The log with seqs.
    pub(crate) fn log(&self) -> Vec<Event> {
        self.events
            .iter()
            .enumerate()
            .map(|(i, e)| Event {
                seq: i as u64 + 1,
                ts_ms: e.ts_ms,
                body: e.body.clone(),
            })
            .collect()
    }

    /// Steps for every result, reduced by the ingest reducers.
    pub(crate) fn steps(&self) -> Vec<StepRecord> {
        let reduce = ReduceConfig::default();
        let mut ingest = Ingest::new();
        let mut out = Vec::new();
        for e in self.log() {
            if let (Some(r), EventBody::ToolResult { call_id, .. }) =
                (ingest.push(&reduce, &e, None), &e.body)
            {
                out.push(StepRecord {
                    id: r.step.id.clone(),
                    call_id: call_id.clone(),
                    result_seq: e.seq,
                    body: serde_json::to_value(&r.step).unwrap(),
                });
            }
        }
        out
    }

    /// The steps as the render pipeline reads them.
    pub(crate) fn step_index(&self) -> StepIndex {
        self.steps()
            .into_iter()
            .map(|r| (r.call_id, serde_json::from_value(r.body).unwrap()))
            .collect()
    }
}

/// `n` distinct words tagged `tag`.
pub(crate) fn words(n: usize, tag: &str) -> String {
    (0..n).map(|i| format!("{tag}{i} ")).collect()
}

pub(crate) fn session() -> SessionId {
    SessionId::new("s1").unwrap()
}

pub(crate) fn agent() -> AgentId {
    AgentId::new("agent-a").unwrap()
}

pub(crate) fn audience(now_ms: i64) -> Audience {
    Audience {
        agent: Some(agent()),
        now_ms,
    }
}

/// A memory store holding `log` (and its steps) as session `s1`.
pub(crate) fn store_with(log: &Log) -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new());
    store
        .create_session(
            &NewSession {
                id: session(),
                agent: agent(),
                parent: None,
                created_ms: 0,
            },
            &log.events,
        )
        .unwrap();
    store.put_steps(&session(), &log.steps()).unwrap();
    store
}

/// Appends the events of `log` after the first `already` to the store.
pub(crate) fn append_rest(store: &MemoryStore, log: &Log, already: usize) {
    store.append(&session(), &log.events[already..]).unwrap();
    store.put_steps(&session(), &log.steps()).unwrap();
}

pub(crate) fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "bash".into(),
        description: "Run a shell command".into(),
        parameters: serde_json::json!({
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        }),
    }]
}

pub(crate) fn setup(format: Format) -> RenderSetup {
    RenderSetup {
        format,
        model: "test-model".into(),
        tools: tools(),
        meter: Arc::new(ApproxMeter),
    }
}

pub(crate) fn policy(window: u64) -> Policy {
    Policy {
        context_window: window,
        response_reserve: 100,
        ..Policy::default()
    }
}
