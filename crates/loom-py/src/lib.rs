//! `loom._loom`: the engine in-process, for the Python package `loom` (crates/loom-py/python).
//!
//! The native layer is small and typed at its edges: records cross it as JSON text (Loom's own
//! JSON forms, the same bytes as the CLI and the HTTP API), which the Python layer turns into
//! dicts. Everything that reads or writes the store, renders or counts runs with the GIL
//! released, and a [`Database`] is shared across threads safely (its state is behind the same
//! locks `loom serve` uses).

mod errors;
mod memory;

use errors::{
    api_error, import_error, invalid, raise, store_error, Conflict, InvalidEvent, InvalidInput,
    LoomError, NotFound, SessionNotFound, StorageError, Unavailable,
};

use std::sync::Arc;

use loom_core::render::{Format, ToolSpec};
use loom_core::{AgentId, NewEvent, SessionId};
use loom_session::engine::RenderSpec;
use loom_session::Engine;
use loom_session::{Backend, LiveSessions};
use loom_store::{BlobStore, NewSession, Offloader, Resolution, Store, StoreError, Usage};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

fn session_id(id: &str) -> PyResult<SessionId> {
    SessionId::new(id).map_err(|e| invalid("session", e.to_string()))
}

fn json_text<T: serde::Serialize>(value: &T) -> PyResult<String> {
    serde_json::to_string(value).map_err(|e| raise::<LoomError>(e.to_string(), None, None, None))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// What a database handle holds: the store, its blobs, the engine and the live sessions (the
/// same cache `loom serve` keeps, so a render costs what is new since the last one).
struct Inner {
    store: Arc<dyn Store>,
    blobs: Arc<dyn BlobStore>,
    engine: Engine,
    live: LiveSessions,
    /// Memory, beside the log: in its SQLite file or PostgreSQL database (in RAM for `:memory:`).
    memory: Option<Arc<dyn loom_memory::Memory>>,
}

impl Inner {
    fn backend(&self) -> Backend<'_> {
        Backend {
            store: self.store.as_ref(),
            blobs: self.blobs.as_ref(),
            reduce: &self.engine.reduce,
            live: &self.live,
        }
    }
}

/// An open Loom database (an SQLite file or a PostgreSQL URL). Safe to share across threads.
#[pyclass(frozen, module = "loom._loom")]
struct Database {
    inner: Arc<Inner>,
}

/// Opens (creating if needed) the database at `db`: an SQLite path or a `postgres://` URL; with
/// `embedder` (`openai:MODEL` or `local:PATH`), memory search fuses vector similarity too, the
/// model loaded once, here.
#[pyfunction]
#[pyo3(signature = (db, embedder=None))]
fn open(py: Python<'_>, db: String, embedder: Option<String>) -> PyResult<Database> {
    let inner = py.detach(move || -> PyResult<Inner> {
        let embedder = loom_memory::embedder_from_spec(embedder.as_deref().unwrap_or("none"))
            .map_err(|e| memory::memory_error(e.into()))?;
        // `:memory:` (as SQLite names it): a store that lives and dies with this handle, for
        // tests, replays and experiments; nothing is written anywhere.
        let (store, blobs): (Arc<dyn Store>, Arc<dyn BlobStore>) = if db == ":memory:" {
            (
                Arc::new(loom_store::MemoryStore::new()),
                Arc::new(loom_store::MemoryBlobStore::new()),
            )
        } else {
            let opened = loom_store::open(&db).map_err(store_error)?;
            (opened.store, opened.blobs)
        };
        let memory: Option<Arc<dyn loom_memory::Memory>> = match loom_store::Database::parse(&db) {
            _ if db == ":memory:" => Some(loom_memory::SqliteMemory::open_in_memory().map(|m| {
                Arc::new(match embedder {
                    Some(e) => m.with_embedder(e),
                    None => m,
                }) as Arc<dyn loom_memory::Memory>
            })),
            Ok(parsed) => Some(loom_memory::open_with(&parsed, embedder).map(Arc::from)),
            Err(_) => None,
        }
        .transpose()
        .map_err(memory::memory_error)?;
        Ok(Inner {
            store,
            blobs,
            engine: Engine::built_in()
                .map_err(|e| raise::<LoomError>(e.to_string(), None, None, None))?,
            live: LiveSessions::new(1_024),
            memory,
        })
    })?;
    Ok(Database {
        inner: Arc::new(inner),
    })
}

/// The tokenizer and image rule of `model`, from the built-in registry.
fn tokenizer(model: &str) -> PyResult<(loom_tokens::Tokenizer, loom_tokens::ImageRule)> {
    let registry = loom_tokens::Registry::built_in()
        .map_err(|e| raise::<LoomError>(e.to_string(), None, None, None))?;
    let info = registry
        .lookup(model)
        .map_err(|e| invalid("model", e.to_string()))?;
    let tokenizer = loom_tokens::Tokenizer::for_model(info)
        .map_err(|e| invalid("model", format!("model `{model}`: {e}")))?;
    Ok((tokenizer, info.image))
}

/// The exact number of tokens `text` is for `model` (its tokenizer from the registry; a model
/// without a public tokenizer is Loom's calibrated estimate).
#[pyfunction]
fn count_tokens(py: Python<'_>, text: String, model: String) -> PyResult<u64> {
    py.detach(move || {
        let (tokenizer, _) = tokenizer(&model)?;
        Ok(loom_tokens::CountTokens::count(&tokenizer, &text))
    })
}

/// The exact number of input tokens a whole request body (JSON) is for `model`, in `format`
/// (`openai-chat`, `openai-responses` or `anthropic`): messages, tool calls, tool definitions,
/// images and the format's framing, as Loom budgets a render.
#[pyfunction]
#[pyo3(signature = (body, model, format="openai-chat".to_owned()))]
fn count_request(py: Python<'_>, body: String, model: String, format: String) -> PyResult<u64> {
    py.detach(move || {
        let wire = loom_core::Api::parse(&format).ok_or_else(|| {
            invalid(
                "format",
                format!(
                    "unknown format `{format}`; expected {}",
                    loom_core::Api::NAMES
                ),
            )
        })?;
        let value: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| invalid("body", e.to_string()))?;
        let (tokenizer, images) = tokenizer(&model)?;
        loom_tokens::count_request(wire, &value, &tokenizer, &images)
            .map(|c| c.total())
            .map_err(|e| invalid("body", e.to_string()))
    })
}

#[pymethods]
impl Database {
    /// Creates an empty session; returns its record as JSON.
    #[pyo3(signature = (session, agent=None))]
    fn create_session(
        &self,
        py: Python<'_>,
        session: String,
        agent: Option<String>,
    ) -> PyResult<String> {
        let inner = Arc::clone(&self.inner);
        py.detach(move || {
            let id = session_id(&session)?;
            let agent = AgentId::new(agent.as_deref().unwrap_or(loom_import::DEFAULT_AGENT))
                .map_err(|e| invalid("agent", e.to_string()))?;
            let info = inner
                .store
                .create_session(
                    &NewSession {
                        id,
                        agent,
                        parent: None,
                        created_ms: now_ms(),
                    },
                    &[],
                )
                .map_err(store_error)?;
            json_text(&info)
        })
    }

    /// Every session, as a JSON list of records ordered by id.
    fn sessions(&self, py: Python<'_>) -> PyResult<String> {
        let inner = Arc::clone(&self.inner);
        py.detach(move || json_text(&inner.store.sessions().map_err(store_error)?))
    }

    /// Deletes a session (its log and everything derived from it, and the memory only it gave);
    /// what was removed, as JSON. SessionNotFound when there is none.
    fn delete_session(&self, py: Python<'_>, session: String) -> PyResult<String> {
        let inner = Arc::clone(&self.inner);
        py.detach(move || {
            let id = session_id(&session)?;
            // Through the session engine: the live state this handle keeps goes too.
            let info =
                loom_session::history::delete_session(inner.backend(), &id).map_err(api_error)?;
            let forgotten = match &inner.memory {
                Some(m) => m
                    .forget_session(&info.agent, &id)
                    .map_err(memory::memory_error)?
                    .len(),
                None => 0,
            };
            json_text(
                &serde_json::json!({"id": session, "events": info.event_count,
                "memory_items_forgotten": forgotten, "files_removed": false}),
            )
        })
    }

    /// The session's record as JSON, or None.
    fn session_info(&self, py: Python<'_>, session: String) -> PyResult<Option<String>> {
        let inner = Arc::clone(&self.inner);
        py.detach(move || {
            let id = session_id(&session)?;
            inner
                .store
                .session(&id)
                .map_err(store_error)?
                .map(|info| json_text(&info))
                .transpose()
        })
    }

    /// Appends events (a JSON list in Loom's event form, without seqs); returns the first and
    /// last seq they were given. A batch that breaks a rule is refused whole.
    fn append(&self, py: Python<'_>, session: String, events: String) -> PyResult<(u64, u64)> {
        let inner = Arc::clone(&self.inner);
        py.detach(move || {
            let id = session_id(&session)?;
            let list: Vec<serde_json::Value> = serde_json::from_str(&events)
                .map_err(|e| invalid("events", format!("not a list: {e}")))?;
            let events = list
                .into_iter()
                .enumerate()
                .map(|(i, value)| {
                    serde_json::from_value::<NewEvent>(value).map_err(|e| {
                        invalid(&format!("events[{i}]"), format!("not a Loom event: {e}"))
                    })
                })
                .collect::<PyResult<Vec<NewEvent>>>()?;
            if events.is_empty() {
                return Err(invalid("events", "no events to append"));
            }
            let seqs = inner.store.append(&id, &events).map_err(store_error)?;
            Ok((*seqs.start(), *seqs.end()))
        })
    }

    /// The events with seqs `first..=last`, as a JSON list.
    fn read(&self, py: Python<'_>, session: String, first: u64, last: u64) -> PyResult<String> {
        let inner = Arc::clone(&self.inner);
        py.detach(move || {
            let id = session_id(&session)?;
            if inner.store.session(&id).map_err(store_error)?.is_none() {
                return Err(store_error(StoreError::SessionNotFound(id)));
            }
            json_text(
                &inner
                    .store
                    .read(&id, first.max(1)..=last)
                    .map_err(store_error)?,
            )
        })
    }

    /// Imports a history (a JSON document as the provider takes it: OpenAI Chat, Anthropic
    /// Messages or OpenAI Responses) into session `session`; returns the import's report as
    /// JSON. An existing session whose log the history extends gets the rest appended.
    #[pyo3(signature = (body, format, session, agent=None))]
    fn import_history(
        &self,
        py: Python<'_>,
        body: String,
        format: String,
        session: String,
        agent: Option<String>,
    ) -> PyResult<String> {
        let inner = Arc::clone(&self.inner);
        py.detach(move || {
            let mut opts = loom_import::ParseOptions::new(now_ms());
            opts.format = loom_import::requested_format(&format)
                .map_err(|e| invalid("format", e.to_string()))?;
            opts.session = Some(session_id(&session)?);
            opts.agent = agent
                .map(|a| AgentId::new(a).map_err(|e| invalid("agent", e.to_string())))
                .transpose()?;
            let sessions = loom_import::parse_slice(
                "history",
                "history",
                body.as_bytes(),
                &opts,
                inner.blobs.as_ref(),
            )
            .map_err(import_error)?;
            // A session that exists takes the rest of a history that extends its log, as the
            // proxy does with a client's next call.
            let plan = loom_session::import::plan_extending(inner.store.as_ref(), sessions)
                .map_err(import_error)?;
            let report = plan
                .commit(
                    inner.store.as_ref(),
                    now_ms(),
                    &mut loom_session::import::NoProgress,
                )
                .map_err(import_error)?;
            let sessions: Vec<serde_json::Value> = report
                .sessions
                .iter()
                .map(|r| {
                    serde_json::json!({
                        "id": r.id,
                        "outcome": r.outcome,
                        "events": r.events,
                        "blobs": r.blobs,
                    })
                })
                .collect();
            json_text(&serde_json::json!({ "sessions": sessions }))
        })
    }

    /// Appends the next items of a provider history (a JSON document holding only the new
    /// messages or items, as the provider takes them) to session `session`, creating it when it
    /// does not exist; returns the first and last seq given (`(n + 1, n)` when the items hold no
    /// event). Results may answer calls the log already holds.
    #[pyo3(signature = (session, body, format, agent=None))]
    fn append_history(
        &self,
        py: Python<'_>,
        session: String,
        body: String,
        format: String,
        agent: Option<String>,
    ) -> PyResult<(u64, u64)> {
        let inner = Arc::clone(&self.inner);
        py.detach(move || {
            let id = session_id(&session)?;
            let format = loom_import::requested_format(&format)
                .map_err(|e| invalid("format", e.to_string()))?;
            let agent = agent
                .map(|a| AgentId::new(a).map_err(|e| invalid("agent", e.to_string())))
                .transpose()?;
            let seqs = loom_session::history::append_history(
                inner.store.as_ref(),
                inner.blobs.as_ref(),
                &id,
                body.as_bytes(),
                format,
                agent,
                now_ms(),
            )
            .map_err(api_error)?;
            Ok((*seqs.start(), *seqs.end()))
        })
    }

    /// Renders the session for `model` within `budget` input tokens in `format`; returns the
    /// request body and the receipt as JSON, and the id of the model call recorded for it (None
    /// when the log has not changed since the last render).
    /// With `recall`, the request counts the `loom_recall` tool (which the caller offers) and
    /// every stub says how to call it.
    #[pyo3(signature = (session, model, budget=None, format="openai-chat".to_owned(), tools=None, recall=false))]
    #[expect(clippy::too_many_arguments, reason = "the Python signature's keywords")]
    fn render(
        &self,
        py: Python<'_>,
        session: String,
        model: String,
        budget: Option<u64>,
        format: String,
        tools: Option<String>,
        recall: bool,
    ) -> PyResult<(Py<PyAny>, Texts, Option<u64>)> {
        let inner = Arc::clone(&self.inner);
        let (body, receipt, call) = py.detach(move || {
            let id = session_id(&session)?;
            let format = Format::parse(&format).ok_or_else(|| {
                invalid(
                    "format",
                    format!(
                        "unknown format `{format}`; expected openai-chat, openai-responses, \
                         anthropic or react"
                    ),
                )
            })?;
            let mut tools = match tools {
                None => Vec::new(),
                Some(text) => {
                    let value: serde_json::Value =
                        serde_json::from_str(&text).map_err(|e| invalid("tools", e.to_string()))?;
                    ToolSpec::parse_list(&value).map_err(|e| invalid("tools", e.to_string()))?
                }
            };
            if recall {
                let (name, description, parameters) = loom_store::recall::tool_definition();
                tools.push(ToolSpec {
                    name: name.to_owned(),
                    description: description.to_owned(),
                    parameters,
                });
            }
            if budget == Some(0) {
                return Err(invalid("budget", "expected a positive number of tokens"));
            }
            let spec = RenderSpec {
                model,
                budget,
                format,
                tools,
                always_record: false,
                injections: Vec::new(),
                limits: Default::default(),
                recall: recall.then_some(loom_core::render::RecallRefs::Tool),
            };
            let out = inner
                .engine
                .render_session(inner.backend(), &id, &spec)
                .map_err(api_error)?
                .ok_or_else(|| store_error(StoreError::SessionNotFound(id)))?;
            Ok((out.body, out.receipt, out.model_call))
        })?;
        // The body is built as Python objects here rather than parsed again from its text: a
        // caller hands it to the provider's SDK on every call. Its text and the receipt are
        // written only when asked for.
        let dict = to_py(py, &body)?.unbind();
        Ok((dict, Texts { body, receipt }, call))
    }

    /// The `loom_recall` tool's definition as JSON: `{"name", "description", "parameters"}`.
    #[staticmethod]
    fn recall_tool() -> String {
        let (name, description, parameters) = loom_store::recall::tool_definition();
        serde_json::json!({"name": name, "description": description, "parameters": parameters})
            .to_string()
    }

    /// Answers the `loom_recall` calls of a provider reply (`reply`, the reply's JSON body in
    /// `format`) and logs them as a hidden round of `session`: the turn with only those calls,
    /// the answers, and the `hidden` record, in one append. The answers are what the proxy gives
    /// (the original, within the share of `budget` one output may take). False when the reply
    /// calls no `loom_recall`.
    #[pyo3(signature = (session, reply, format, model, budget=None))]
    fn recall_round(
        &self,
        py: Python<'_>,
        session: String,
        reply: String,
        format: String,
        model: String,
        budget: Option<u64>,
    ) -> PyResult<bool> {
        let inner = Arc::clone(&self.inner);
        py.detach(move || {
            let id = session_id(&session)?;
            let api = loom_core::Api::parse(&format)
                .ok_or_else(|| invalid("format", format!("unknown API `{format}`")))?;
            let mut turn = loom_wire::parse_reply(api, reply.as_bytes())
                .map_err(|e| invalid("reply", e.to_string()))?;
            turn.tool_calls
                .retain(|c| c.name == loom_core::render::RECALL_TOOL);
            if turn.tool_calls.is_empty() {
                return Ok(false);
            }
            turn.content = None;
            let probe = RenderSpec {
                model,
                budget,
                format: Format::Api(api),
                tools: Vec::new(),
                always_record: false,
                injections: Vec::new(),
                limits: Default::default(),
                recall: None,
            };
            let (meter, policy) = inner.engine.prepare(&probe).map_err(api_error)?;
            let cap = loom_store::recall::answer_cap(
                loom_store::recall::DEFAULT_MAX_TOKENS,
                policy.budget().oversized,
            );
            let last = inner.store.latest_seq(&id).map_err(store_error)?;
            let events = loom_store::recall::hidden_round(
                inner.store.as_ref(),
                inner.blobs.as_ref(),
                &inner.engine.reduce,
                &id,
                loom_session::history::assistant_event(api, turn),
                last,
                cap,
                &meter,
                |_, _| {},
            )
            .map_err(store_error)?;
            inner.store.append(&id, &events).map_err(store_error)?;
            Ok(true)
        })
    }

    /// What happened to event `seq` in each recorded model call, and where its original is, as
    /// JSON.
    fn explain(&self, py: Python<'_>, session: String, seq: u64) -> PyResult<String> {
        let inner = Arc::clone(&self.inner);
        py.detach(move || {
            let id = session_id(&session)?;
            let info = inner
                .store
                .session(&id)
                .map_err(store_error)?
                .ok_or_else(|| store_error(StoreError::SessionNotFound(id.clone())))?;
            if seq == 0 {
                return Err(invalid("seq", "seqs start at 1: expected an event's seq"));
            }
            if seq > info.event_count {
                // As the HTTP API answers it: the session has no such event (404).
                return Err(raise::<NotFound>(
                    format!(
                        "session `{id}` has no event {seq} (it has {})",
                        info.event_count
                    ),
                    None,
                    Some("seq".into()),
                    None,
                ));
            }
            let out = loom_session::explain::explain_event(
                inner.store.as_ref(),
                inner.blobs.as_ref(),
                &inner.engine.reduce,
                &id,
                seq,
            )
            .map_err(api_error)?;
            json_text(&out)
        })
    }

    /// The original bytes a reference names: `sha256:<hex>`, or an alias within `session`
    /// (or, without one, whichever session has it, when only one does).
    #[pyo3(signature = (reference, session=None))]
    fn recall<'py>(
        &self,
        py: Python<'py>,
        reference: String,
        session: Option<String>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let inner = Arc::clone(&self.inner);
        let bytes = py.detach(move || {
            let session = session.as_deref().map(session_id).transpose()?;
            let off = Offloader::new(
                inner.store.as_ref(),
                inner.blobs.as_ref(),
                &inner.engine.reduce,
            );
            match off
                .resolve(session.as_ref(), &reference)
                .map_err(store_error)?
            {
                Resolution::Found(blob) => inner.blobs.get(&blob).map_err(store_error),
                Resolution::Ambiguous(sessions) => Err(invalid(
                    "session",
                    format!(
                        "`{reference}` names different outputs in sessions {}: name the session",
                        sessions
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )),
            }
        })?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Records what the provider said model call `call` used; returns the call as JSON. The
    /// same figures again change nothing; other figures are refused.
    #[pyo3(signature = (session, call, input_tokens, cached_input_tokens=None, output_tokens=None))]
    fn report_usage(
        &self,
        py: Python<'_>,
        session: String,
        call: u64,
        input_tokens: u64,
        cached_input_tokens: Option<u64>,
        output_tokens: Option<u64>,
    ) -> PyResult<String> {
        let inner = Arc::clone(&self.inner);
        py.detach(move || {
            let id = session_id(&session)?;
            let usage = Usage {
                input_tokens,
                cached_input_tokens,
                output_tokens,
                reported_ms: now_ms(),
            };
            let call = inner
                .store
                .report_usage(&id, call, &usage)
                .map_err(store_error)?;
            json_text(&call)
        })
    }

    /// Searches an agent's memory (the session's agent when `agent` is None) within `budget`
    /// tokens: one tier (`L1`..`L4`), or the session's notes and summaries with long-term
    /// memory across sessions. Returns `{"hits": [...]}` as JSON.
    /// `from_ms` / `to_ms` keep the stored items valid within that time range (UTC ms).
    #[pyo3(signature = (query, agent=None, session=None, tier=None, budget=1000, limit=None, from_ms=None, to_ms=None))]
    #[allow(clippy::too_many_arguments)]
    fn memory_search(
        &self,
        py: Python<'_>,
        query: String,
        agent: Option<String>,
        session: Option<String>,
        tier: Option<String>,
        budget: u64,
        limit: Option<usize>,
        from_ms: Option<i64>,
        to_ms: Option<i64>,
    ) -> PyResult<String> {
        let inner = Arc::clone(&self.inner);
        let args = memory::SearchArgs {
            query,
            agent,
            session,
            tier,
            budget,
            limit,
            from_ms,
            to_ms,
        };
        py.detach(move || memory::search(&inner, args))
    }

    /// Saves a note into the session's working memory (L2), pointing at event `seq` (the last
    /// one by default), living `ttl_seconds` when given. Returns `{"id", "created",
    /// "expires_ms"}` as JSON.
    #[pyo3(signature = (session, text, ttl_seconds=None, seq=None))]
    fn memory_save(
        &self,
        py: Python<'_>,
        session: String,
        text: String,
        ttl_seconds: Option<u64>,
        seq: Option<u64>,
    ) -> PyResult<String> {
        let inner = Arc::clone(&self.inner);
        py.detach(move || memory::save(&inner, &session, text, ttl_seconds, seq))
    }

    /// Every model call of the session (receipts and usage), as JSON.
    fn model_calls(&self, py: Python<'_>, session: String) -> PyResult<String> {
        let inner = Arc::clone(&self.inner);
        py.detach(move || {
            let id = session_id(&session)?;
            json_text(&inner.store.model_calls(&id).map_err(store_error)?)
        })
    }
}

/// A render's body and receipt, written as JSON text on demand: most callers need neither (the
/// body goes to the provider as objects, the receipt is looked at when something went wrong).
#[pyclass(frozen, module = "loom._loom")]
struct Texts {
    body: serde_json::Value,
    receipt: loom_core::render::Receipt,
}

#[pymethods]
impl Texts {
    /// The body as the JSON text Loom sends for this render (the same bytes as the HTTP API and
    /// `loom replay --emit-requests`).
    fn body(&self) -> PyResult<String> {
        json_text(&self.body)
    }

    /// The receipt as JSON text.
    fn receipt(&self) -> PyResult<String> {
        json_text(&self.receipt)
    }
}

/// `value` as the Python objects `json.loads` would give for its text.
fn to_py<'py>(py: Python<'py>, value: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    use pyo3::types::{PyDict, PyList};
    use serde_json::Value;
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => pyo3::types::PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_pyobject(py)?.into_any(),
            (None, Some(u)) => u.into_pyobject(py)?.into_any(),
            _ => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Value::String(s) => pyo3::types::PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, to_py(py, v)?)?;
            }
            dict.into_any()
        }
    })
}

#[pymodule]
fn _loom(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Database>()?;
    m.add_class::<Texts>()?;
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_function(wrap_pyfunction!(count_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(count_request, m)?)?;
    m.add("LoomError", py.get_type::<LoomError>())?;
    m.add("InvalidInput", py.get_type::<InvalidInput>())?;
    m.add("InvalidEvent", py.get_type::<InvalidEvent>())?;
    m.add("NotFound", py.get_type::<NotFound>())?;
    m.add("SessionNotFound", py.get_type::<SessionNotFound>())?;
    m.add("Conflict", py.get_type::<Conflict>())?;
    m.add("Unavailable", py.get_type::<Unavailable>())?;
    m.add("StorageError", py.get_type::<StorageError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
