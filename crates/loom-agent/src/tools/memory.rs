//! `memory:search` and `memory:save`: an agent's own memory as Level-1 tools.
//!
//! Both act on the memory of the agent that calls them (never another's). `memory:search`
//! looks in the current session's working memory (L2) and summaries (L3) and in long-term memory
//! (L4) across sessions, or in one tier; `memory:save` writes a note into L2 with the call's
//! turn as its provenance and an optional time to live. Unlike the other tools they need the
//! caller's session, so the loop runs them (see `Runner`), not [`super::Actions::execute`].

use loom_core::{AgentId, Seq, SessionId};
use loom_memory::{recall, Memory, NewNote, Recall, Tier, MAX_NOTE_BYTES};
use loom_store::Store;
use serde_json::{json, Value};

use super::{arg_str, Outcome, ToolDef};

/// The seed name of the search tool (`memory__search` on the wire).
pub const SEARCH: &str = "memory:search";

/// The seed name of the save tool (`memory__save` on the wire).
pub const SAVE: &str = "memory:save";

/// The budget of a search that names none, in tokens.
const DEFAULT_BUDGET: u64 = 800;

/// The largest budget a search may ask for: what it returns lands in the context.
const MAX_BUDGET: u64 = 8_000;

/// The memory tools, as the model sees them.
pub fn defs() -> Vec<ToolDef> {
    vec![
        ToolDef {
            name: SEARCH.into(),
            description: "Search your memory: notes you saved in this session, its summaries, and \
                          what you learned in earlier sessions. Returns the best matches with \
                          where they came from."
                .into(),
            parameters: json!({"type": "object", "properties": {
                "query": {"type": "string", "minLength": 1},
                "tier": {"type": "string", "enum": ["L1", "L2", "L3", "L4"],
                    "description": "only this tier: L1 recent events, L2 notes, L3 summaries, L4 long-term"},
                "budget": {"type": "integer", "minimum": 1, "maximum": MAX_BUDGET,
                    "description": "the most tokens to return"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                "since": {"type": "string",
                    "description": "only memories from this time on (YYYY-MM-DD or RFC 3339)"},
                "until": {"type": "string",
                    "description": "only memories from before this time (YYYY-MM-DD or RFC 3339)"}},
                "required": ["query"], "additionalProperties": false}),
            requires_approval: false,
        },
        ToolDef {
            name: SAVE.into(),
            description: "Save a short note (a fact, a decision, a lead) to this session's \
                          working memory, optionally for a limited time."
                .into(),
            parameters: json!({"type": "object", "properties": {
                "text": {"type": "string", "minLength": 1, "maxLength": MAX_NOTE_BYTES},
                "ttl_seconds": {"type": "integer", "minimum": 1}},
                "required": ["text"], "additionalProperties": false}),
            requires_approval: false,
        },
    ]
}

/// Whose memory, and where a call stands.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    /// The agent calling.
    pub agent: &'a AgentId,
    /// Its session.
    pub session: &'a SessionId,
    /// The seq of the turn that made the call.
    pub seq: Seq,
    /// The clock, UTC milliseconds.
    pub now_ms: i64,
}

/// Runs a memory tool for `caller` (arguments not yet checked against the schema).
pub fn run(
    memory: &dyn Memory,
    store: &dyn Store,
    caller: &Caller<'_>,
    tool: &ToolDef,
    args: &Value,
) -> Outcome {
    if let Err(e) = super::schema::check(&tool.parameters, args) {
        return Outcome::error(format!("bad arguments for {}: {e}", tool.name));
    }
    let result = match tool.name.as_str() {
        SEARCH => search(memory, store, caller, args),
        SAVE => save(memory, caller, args),
        other => Err(format!("unknown memory tool `{other}`")),
    };
    match result {
        Ok(text) => Outcome::ok(text),
        Err(e) => Outcome::error(e),
    }
}

/// An optional time argument (`YYYY-MM-DD` or RFC 3339) as UTC milliseconds.
fn time_arg(args: &Value, name: &str) -> Result<Option<i64>, String> {
    match args.get(name).and_then(Value::as_str) {
        None => Ok(None),
        Some(text) => loom_runtime::task::parse_utc_ms(text)
            .map(|(ms, _)| Some(ms))
            .map_err(|e| format!("`{name}`: {e}")),
    }
}

fn search(
    memory: &dyn Memory,
    store: &dyn Store,
    caller: &Caller<'_>,
    args: &Value,
) -> Result<String, String> {
    let query = arg_str(args, "query")?.to_owned();
    let tier = match args.get("tier").and_then(Value::as_str) {
        Some(t) => Some(t.parse::<Tier>().map_err(|e| e.to_string())?),
        None => None,
    };
    let budget = args
        .get("budget")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_BUDGET);
    let limit = args
        .get("limit")
        .and_then(Value::as_u64)
        .map_or(loom_memory::limit_for(budget), |n| {
            usize::try_from(n).unwrap_or(usize::MAX)
        });
    let hits = recall(
        memory,
        Some(store),
        &Recall {
            query,
            agent: caller.agent.clone(),
            session: Some(caller.session.clone()),
            tier,
            budget,
            limit,
            history: false,
            from_ms: time_arg(args, "since")?,
            to_ms: time_arg(args, "until")?,
        },
    )
    .map_err(|e| e.to_string())?;
    if hits.is_empty() {
        return Ok("no memories match".into());
    }
    serde_json::to_string(&json!({ "hits": hits })).map_err(|e| e.to_string())
}

fn save(memory: &dyn Memory, caller: &Caller<'_>, args: &Value) -> Result<String, String> {
    let text = arg_str(args, "text")?.to_owned();
    let ttl_ms = args
        .get("ttl_seconds")
        .and_then(Value::as_u64)
        .map(|s| i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX));
    let saved = memory
        .save(&NewNote {
            agent: caller.agent.clone(),
            text,
            session: caller.session.clone(),
            seq: caller.seq,
            saved_ms: caller.now_ms,
            ttl_ms,
        })
        .map_err(|e| e.to_string())?;
    let verb = if saved.created {
        "saved"
    } else {
        "already saved"
    };
    Ok(match saved.expires_ms {
        Some(at) => format!(
            "{verb} note #{} (expires in {} s)",
            saved.id,
            (at - caller.now_ms).max(0) / 1000
        ),
        None => format!("{verb} note #{}", saved.id),
    })
}
