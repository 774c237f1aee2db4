//! Preparing a proxied call before the upstream sees it: the session it belongs to (named, or
//! derived from the key and the conversation's opening), the client's history synced into the
//! log, and in `fit` mode the render and the body that replaces the client's conversation.

use super::*;

/// Checks the request, syncs its history into the log, and renders it in `fit` mode.
pub(super) async fn prepare(
    state: &Arc<AppState>,
    api: Api,
    path_model: Option<String>,
    principal: &Principal,
    headers: &HeaderMap,
    raw: Bytes,
) -> Result<Prepared, ApiError> {
    loom_headers_are_text(headers)?;
    let split = Instant::now();
    let body = Arc::new(ingest::RequestBody::parse(api, raw)?.with_model(path_model));
    state.metrics.phase(Phase::Split, split.elapsed());
    let client = &body.fields;
    let model = body.model().to_owned();
    let mut warnings: Vec<String> = Vec::new();
    let mut mode = match header(headers, "x-loom-mode") {
        Some(text) => text.parse::<ProxyMode>().map_err(|_| {
            ApiError::invalid_field("X-Loom-Mode", format!("`{text}`: expected fit or observe"))
        })?,
        None => principal.mode.unwrap_or(state.config.default_mode),
    };
    let budget = match header(headers, "x-loom-budget") {
        Some(text) => Some(text.parse::<u64>().ok().filter(|b| *b > 0).ok_or_else(|| {
            ApiError::invalid_field(
                "X-Loom-Budget",
                format!("`{text}`: expected a positive number of tokens"),
            )
        })?),
        None => state.config.default_budget,
    };
    let server_state = loom_wire::dialect(api).server_state_fields();
    if mode == ProxyMode::Fit && server_state.iter().any(|f| client.contains_key(*f)) {
        mode = ProxyMode::Observe;
        warnings.push(
            "the request relies on server-side state (previous_response_id or conversation): \
             forwarded unfitted"
                .into(),
        );
    }
    let tools = match client.get("tools") {
        Some(list) if mode == ProxyMode::Fit => budget_tools(list),
        _ => Vec::new(),
    };
    let client_session = match header(headers, "x-loom-session") {
        Some(id) => id.to_owned(),
        None => match client_session_id(headers, client) {
            Some(id) => client_conversation(id, &body),
            None => derived_session(principal, api, &body, state).await?,
        },
    };
    let base = principal.scope(&client_session, "X-Loom-Session")?;
    let agent = match &principal.agent {
        Some(a) => a.clone(),
        None => AgentId::new(loom_session::history::DEFAULT_AGENT)
            .map_err(|e| ApiError::invalid(e.to_string()))?,
    };
    let offers_recall = mode == ProxyMode::Fit && recall::may_offer(state, api, client);
    let mut spec = RenderSpec {
        model: model.clone(),
        budget,
        format: loom_core::render::Format::from(api),
        tools,
        always_record: true,
        injections: Vec::new(),
        limits: limits(api, client, headers),
        recall: None,
    };
    if let Some(note) = state.engine.model_note(&model) {
        warnings.push(note);
    }
    if mode == ProxyMode::Fit {
        // An unknown model or an impossible budget is refused before anything is stored.
        state.engine.prepare(&spec)?;
    }
    if offers_recall {
        recall::count_in(state, &base, &mut spec);
    }
    let lock = state.session_locks.get(&base).lock_owned().await;
    let unread_raw = body.raw().clone();
    let unread_session = base.clone();
    let observe_receipt = json!({"observe": {"model": model, "api": route(api)}});
    let synced_body = Arc::clone(&body);
    let render_spec = spec.clone();
    let synced = state
        .blocking("syncing the conversation", move |s| {
            // The history's new events are held by the live session and written with the
            // call's receipt as one turn. A turn the store refuses because another writer moved
            // the session on meanwhile is prepared again from what the store holds.
            let mut attempt = 1;
            loop {
                let started = Instant::now();
                let synced = sync::sync(s.backend(), &base, &agent, &synced_body)?;
                s.metrics.phase(Phase::Sync, started.elapsed());
                s.metrics.history_read(synced.continued);
                tracing::debug!("{base}: {} new events", synced.appended);
                let mut live = loom_session::live::lock_live(&synced.live);
                let (outcome, receipt) = if mode == ProxyMode::Fit {
                    let started = Instant::now();
                    let counted;
                    let spec = if offers_recall && recall::past_a_point(&live) {
                        counted = recall::counted(render_spec.clone());
                        &counted
                    } else {
                        &render_spec
                    };
                    match s.engine.render(&mut live, spec) {
                        Ok((outcome, receipt)) => {
                            s.metrics.phase(Phase::Render, started.elapsed());
                            (Some(outcome), receipt)
                        }
                        Err(e) => {
                            // The one 4xx after which something is stored (docs/serve.md,
                            // "Errors"): the history, so that the session shows what could
                            // not be fitted.
                            live.commit(s.backend(), None, None)?;
                            return Err(e
                                .context("not forwarded (the history is logged in the session)")
                                .into());
                        }
                    }
                } else {
                    let receipt = NewModelCall {
                        session: live.id().clone(),
                        at_seq: live.last_seq(),
                        created_ms: now_ms(),
                        receipt: observe_receipt.clone(),
                    };
                    (None, Some(receipt))
                };
                let started = Instant::now();
                match live.commit(s.backend(), receipt.as_ref(), None) {
                    Ok(call) => {
                        s.metrics.phase(Phase::Record, started.elapsed());
                        let session = live.id().clone();
                        drop(live);
                        let stubs = outcome.as_ref().is_some_and(|o| !whole(&o.receipt));
                        if let (true, Some(loom_core::render::RecallRefs::Files { dir })) =
                            (stubs, &render_spec.recall)
                        {
                            // The stubs name these files: they exist before the model reads them.
                            // (A whole render names none: the client's own bytes go.)
                            if let Err(e) = crate::recall_files::write_outputs(
                                s.store.as_ref(),
                                s.blobs.as_ref(),
                                &s.engine.reduce,
                                &session,
                                dir,
                            ) {
                                tracing::warn!("{session}: offloaded outputs not written: {e}");
                            }
                        }
                        return Ok(((session, synced.diverged_from), outcome, call, synced.live));
                    }
                    Err(StoreError::Moved { .. })
                        if attempt < loom_session::live::TURN_ATTEMPTS =>
                    {
                        tracing::debug!("{base}: the session moved on; preparing the call again");
                        attempt += 1;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        })
        .await;
    let (synced, outcome, call, live) = match synced {
        Ok(s) => s,
        // `observe` forwards what the provider would judge: a history Loom cannot read is
        // forwarded as it came, unlogged, and says so.
        Err(e)
            if mode == ProxyMode::Observe
                && e.status.is_client_error()
                && provider_accepts(api, &unread_raw) =>
        {
            state
                .metrics
                .upstream_error(upstream::provider(api), "observe_unread");
            let why = format!(
                "the history could not be read into the log ({}): forwarded unlogged",
                e.message
            );
            tracing::warn!("{unread_session}: {why}");
            let mut reply_headers = HeaderMap::new();
            set(&mut reply_headers, "x-loom-warning", &why);
            return Ok(Prepared {
                body: unread_raw,
                model,
                mode,
                target: LogTarget {
                    session: unread_session,
                    call: None,
                    live: None,
                    guard: Some(lock),
                    logged: false,
                    span: Default::default(),
                    attempt: Default::default(),
                },
                reply_headers,
                recall: None,
                facts: Vec::new(),
            });
        }
        Err(e) => return Err(e),
    };
    let (session, diverged_from) = synced;
    // What the call's span says of the render (only built when spans are recorded).
    let facts = if state.telemetry.is_on() {
        let mut facts = Vec::new();
        if let Some(out) = &outcome {
            facts = loom_telemetry::attr::receipt(&out.receipt);
        }
        if let Some(max) = spec.limits.reserve {
            facts.push(loom_telemetry::Attribute::new(
                loom_telemetry::attr::REQUEST_MAX_TOKENS,
                loom_telemetry::attr::n(max),
            ));
        }
        if let Some(budget) = budget {
            facts.push(loom_telemetry::Attribute::new(
                loom_telemetry::attr::REQUESTED_BUDGET,
                loom_telemetry::attr::n(budget),
            ));
        }
        facts
    } else {
        Vec::new()
    };
    let with_facts = |mut prepared: Prepared| {
        prepared.facts = facts;
        prepared
    };
    // The history's new events become memory off the request path.
    state.index_later(principal, &session);
    // How much more the provider counts than Loom's estimate: the budget was divided by it.
    let anchor = outcome.as_ref().and_then(|o| o.anchor);
    let anchored = |mut prepared: Prepared| {
        if let Some(factor) = anchor {
            set(
                &mut prepared.reply_headers,
                "x-loom-anchor",
                &format!("{factor:.4}"),
            );
        }
        prepared
    };
    let mut rounds = None;
    let body = match outcome {
        Some(out) => {
            let assembling = Instant::now();
            if out.receipt.compaction.is_some() {
                state.metrics.compaction_point();
            }
            if whole(&out.receipt) {
                // Nothing was left out or changed: the client's own bytes go, in its own shape
                // (its system blocks and cache breakpoints, ids, fields Loom does not model).
                state.metrics.phase(Phase::Assemble, assembling.elapsed());
                return finish(
                    state,
                    principal,
                    body.raw().clone(),
                    model,
                    mode,
                    session,
                    diverged_from,
                    call,
                    live,
                    lock,
                    warnings,
                )
                .map(anchored)
                .map(with_facts);
            }
            let offer = offers_recall.then_some(&spec);
            match assemble(api, &body, &live, &out.body, offer) {
                Ok(bytes) => {
                    state.metrics.phase(Phase::Assemble, assembling.elapsed());
                    if offers_recall {
                        rounds = Some(recall::Rounds::new(state, spec.clone(), Arc::clone(&body)));
                    }
                    bytes
                }
                Err(why) => {
                    tracing::error!("{session}: the fitted request failed its check ({why}); forwarding the client's own");
                    state
                        .metrics
                        .upstream_error(upstream::provider(api), "fit_check_failed");
                    warnings.push(format!(
                        "the fitted request failed Loom's check ({why}): forwarded unfitted"
                    ));
                    mode = ProxyMode::Observe;
                    body.raw().clone()
                }
            }
        }
        None => body.raw().clone(),
    };
    finish(
        state,
        principal,
        body,
        model,
        mode,
        session,
        diverged_from,
        call,
        live,
        lock,
        warnings,
    )
    .map(|mut p| {
        if let Some(r) = rounds {
            set(&mut p.reply_headers, "x-loom-recall", "offered");
            p.recall = Some(r);
        }
        p
    })
    .map(anchored)
    .map(with_facts)
}

/// The request to send for a render that is not the client's own: the render merged into the
/// client's request (its fields Loom does not model, its items where they are unchanged), with
/// the recall tool when `offer` gives the spec that counted it; checked against Loom's and the
/// provider's rules. The error says which check failed.
pub(super) fn assemble(
    api: Api,
    body: &ingest::RequestBody,
    live: &Arc<Mutex<loom_session::live::Live>>,
    rendered: &Value,
    offer: Option<&RenderSpec>,
) -> Result<Bytes, String> {
    let mut merged = fit::merge(api, &body.fields, rendered);
    {
        let mut held = loom_session::live::lock_live(live);
        let mut items = ClientItems {
            body,
            memo: &mut held.meanings,
        };
        fit::restore(api, &body.fields, &mut items, &mut merged);
    }
    if offer.is_some() {
        recall::offer(api, &mut merged);
    }
    // The render pairs every call with its result by construction; this check is the net under
    // it. Should it ever fail, the client's own (valid) request goes instead of a malformed
    // one, and the failure is loud.
    loom_core::render::check_request(api.into(), &merged)
        .map_err(|v| v.to_string())
        .and_then(|()| check_request(api, &merged).map_err(|e| e.to_string()))?;
    serde_json::to_vec(&merged)
        .map(Bytes::from)
        .map_err(|e| format!("serialising the request: {e}"))
}

/// A request's items for [`fit::restore`], with the session's memo of what each says.
pub(super) struct ClientItems<'a> {
    body: &'a ingest::RequestBody,
    memo: &'a mut HashMap<u128, u64>,
}

impl fit::Items for ClientItems<'_> {
    fn len(&self) -> usize {
        self.body.item_count()
    }

    fn meaning(&mut self, i: usize) -> Option<u64> {
        let raw = self.body.item_hash(i)?;
        if let Some(&h) = self.memo.get(&raw) {
            return Some(h);
        }
        let h = fit::meaning_hash(&self.body.item_value(i)?);
        self.memo.insert(raw, h);
        Some(h)
    }

    fn value(&self, i: usize) -> Option<Value> {
        self.body.item_value(i)
    }
}

/// Whether the provider's published rules accept `raw` (Loom's check of them): what `observe`
/// forwards even when Loom cannot read it into its log.
pub(super) fn provider_accepts(api: Api, raw: &[u8]) -> bool {
    serde_json::from_slice::<Value>(raw).is_ok_and(|body| check_request(api, &body).is_ok())
}

/// Whether a render sent every event of the client's conversation as it is: nothing stubbed,
/// folded, summarised or dropped (what the client replaced itself aside), and no compaction
/// point yet.
pub(super) fn whole(receipt: &loom_core::render::Receipt) -> bool {
    receipt.points == 0
        && receipt
            .lists()
            .iter()
            .all(|(name, runs)| matches!(*name, "verbatim" | "replaced") || runs.is_empty())
}

/// The prepared call: its body, the reply's headers and what the reply is logged against.
#[expect(
    clippy::too_many_arguments,
    reason = "the parts of one call, each used once"
)]
pub(super) fn finish(
    state: &Arc<AppState>,
    principal: &Principal,
    body: Bytes,
    model: String,
    mode: ProxyMode,
    session: SessionId,
    diverged_from: Option<SessionId>,
    call: Option<u64>,
    live: Arc<std::sync::Mutex<loom_session::live::Live>>,
    lock: tokio::sync::OwnedMutexGuard<()>,
    warnings: Vec<String>,
) -> Result<Prepared, ApiError> {
    let mut reply_headers = HeaderMap::new();
    let shown = principal
        .unscope(&session)
        .unwrap_or(session.as_str())
        .to_owned();
    set(&mut reply_headers, "x-loom-session", &shown);
    if let Some(call) = call {
        set(&mut reply_headers, "x-loom-call", &call.to_string());
    }
    if let Some(from) = &diverged_from {
        state.metrics.diverged();
        set(
            &mut reply_headers,
            "x-loom-diverged",
            principal.unscope(from).unwrap_or(from.as_str()),
        );
    }
    if !warnings.is_empty() {
        for w in &warnings {
            tracing::warn!("{shown}: {w}");
        }
        set(&mut reply_headers, "x-loom-warning", &warnings.join("; "));
    }
    Ok(Prepared {
        body,
        model,
        mode,
        target: LogTarget {
            session,
            call,
            live: Some(live),
            guard: Some(lock),
            logged: true,
            span: Default::default(),
            attempt: Default::default(),
        },
        reply_headers,
        recall: None,
        facts: Vec::new(),
    })
}

/// The client's tools as the render budgets them. Tools go upstream exactly as the client sent
/// them; here they are only counted. A tool Loom does not model (Codex's `namespace` tools, a
/// provider's built-in `web_search`, a kind added later) is counted as the JSON it is.
pub(super) fn budget_tools(list: &Value) -> Vec<ToolSpec> {
    if let Ok(tools) = ToolSpec::parse_list(list) {
        return tools;
    }
    let Some(list) = list.as_array() else {
        return Vec::new();
    };
    list.iter()
        .enumerate()
        .map(
            |(i, entry)| match ToolSpec::parse_list(&Value::Array(vec![entry.clone()])) {
                Ok(mut one) if one.len() == 1 => one.remove(0),
                _ => ToolSpec {
                    name: format!(
                        "{}_{i}",
                        entry.get("type").and_then(Value::as_str).unwrap_or("tool")
                    ),
                    description: String::new(),
                    parameters: entry.clone(),
                },
            },
        )
        .collect()
}

/// The window Anthropic's 1M-context beta gives.
pub(super) const ONE_MILLION: u64 = 1_000_000;

/// What the request says of its model's limits: the reply it asks for (its reserve) and a
/// larger window when it opts into one.
pub(super) fn limits(
    api: Api,
    client: &serde_json::Map<String, Value>,
    headers: &HeaderMap,
) -> ModelLimits {
    let dialect = loom_wire::dialect(api);
    let reserve = dialect.asked_output(client);
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
        .collect();
    let one_million = dialect.million_token_window(&headers);
    ModelLimits {
        reserve,
        window: one_million.then_some(ONE_MILLION),
    }
}

pub(super) fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
        .map(str::trim)
}

/// Refuses an `X-Loom-*` header that is not UTF-8 text: ignoring it would log the call in a
/// session (or a mode) the client did not ask for.
pub(super) fn loom_headers_are_text(headers: &HeaderMap) -> Result<(), ApiError> {
    for (name, value) in headers {
        let name = name.as_str();
        if name.starts_with("x-loom-") && std::str::from_utf8(value.as_bytes()).is_err() {
            return Err(ApiError::invalid_field(
                shown_header(name),
                "is not UTF-8 text",
            ));
        }
    }
    Ok(())
}

/// A header's name as the documentation writes it (`X-Loom-Session`).
pub(super) fn shown_header(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or_else(String::new, |c| {
                c.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// Headers in which clients name their own session: Claude Code, opencode (`x-session-id`, and
/// `x-opencode-session` in other versions), Codex (`session-id`, and `session_id` in older
/// versions).
pub(super) const CLIENT_SESSION_HEADERS: [&str; 5] = [
    "x-claude-code-session-id",
    "x-session-id",
    "x-opencode-session",
    "session-id",
    "session_id",
];

/// The session id a client gives its conversation itself, in a header or in the body's
/// `client_metadata.session_id` (Codex), prefixed with where it came from so that ids of
/// different clients never meet. Each run of a client has its own, so parallel runs of one task
/// are separate sessions.
pub(super) fn client_session_id(
    headers: &HeaderMap,
    client: &serde_json::Map<String, Value>,
) -> Option<String> {
    let valid = |id: &str| {
        let id = id.trim();
        (!id.is_empty() && id.len() <= 200 && !id.chars().any(char::is_control))
            .then(|| id.to_owned())
    };
    for name in CLIENT_SESSION_HEADERS {
        if let Some(id) = header(headers, name).and_then(valid) {
            return Some(format!("client-{id}"));
        }
    }
    client
        .get("client_metadata")
        .and_then(|m| m.get("session_id"))
        .and_then(Value::as_str)
        .and_then(valid)
        .map(|id| format!("client-{id}"))
}

/// The session of one of a client's conversations under its own session id: the id and the
/// conversation's system prompt, hashed. A client sends side requests under the same id (a
/// title, a summary, a sub-agent), each with a system prompt of its own: each is its own
/// session, and none is taken for a departure of the main conversation.
///
/// The system prompt is hashed by what it says ([`fit::meaning_hash`]: cache breakpoints, ids
/// and the string-or-blocks form aside), from the body's own fields and leading items, so this
/// reads nothing but the body and costs no import on a client's every call.
pub(super) fn client_conversation(id: String, body: &ingest::RequestBody) -> String {
    let mut h = Sha256::new();
    for key in ["system", "instructions"] {
        if let Some(v) = body.fields.get(key).filter(|v| !v.is_null()) {
            h.update(fit::meaning_hash(&loom_wire::without_churn(v)).to_le_bytes());
        }
    }
    for i in 0..body.item_count() {
        let Some(item) = body.item_value(i) else {
            break;
        };
        // The leading system and developer items (Codex's `additional_tools` among them).
        if !matches!(
            item.get("role").and_then(Value::as_str),
            Some("system" | "developer")
        ) {
            break;
        }
        h.update(fit::meaning_hash(&loom_wire::without_churn(&item)).to_le_bytes());
    }
    format!("{id}.{}", &hex::encode(h.finalize())[..8])
}

pub(super) async fn derived_session(
    principal: &Principal,
    api: Api,
    body: &Arc<ingest::RequestBody>,
    state: &Arc<AppState>,
) -> Result<String, ApiError> {
    let body = Arc::clone(body);
    let opening = state
        .blocking("reading the conversation", move |s| {
            let opening = body.opening(s.backend())?;
            serde_json::to_vec(&opening).map_err(|_| ApiError::internal("hashing the conversation"))
        })
        .await?;
    let mut h = Sha256::new();
    h.update(principal.key_id.as_deref().unwrap_or("local").as_bytes());
    h.update([0]);
    h.update(route(api).as_bytes());
    h.update([0]);
    h.update(&opening);
    Ok(format!("auto-{}", &hex::encode(h.finalize())[..16]))
}
