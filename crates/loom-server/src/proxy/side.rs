//! The endpoints beside the conversation: `count_tokens` answered locally (anchored on what the
//! provider reported), `models` and `responses/compact` forwarded as they came.

use super::*;

/// `POST /v1/messages/count_tokens`, answered locally: Loom's calibrated estimate for Claude
/// models (which have no public tokenizer), exact counts for models that have one.
///
/// The estimate is anchored on what the provider reported for the conversation: when the
/// session's last call was rendered by Loom (its receipt holds Loom's estimate of what it sent)
/// and its usage is known, the estimate is scaled by the provider's count over Loom's for that
/// call, so the answer tracks the provider's own tokenizer as the conversation goes. The factor
/// used is returned in `X-Loom-Anchor`.
pub(super) async fn count_tokens(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    raw: Bytes,
) -> Response {
    let api = Api::Anthropic;
    let principal = match state.authenticate(&headers).await {
        Ok(p) => p,
        Err(e) => return provider_error(api, &e),
    };
    let counted = (|| {
        let value: Value = serde_json::from_slice(&raw)
            .map_err(|e| ApiError::invalid(format!("the body is not valid JSON: {e}")))?;
        let model = value
            .get("model")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::invalid_field("model", "model: expected a string"))?;
        if !value.get("messages").is_some_and(Value::is_array) {
            return Err(ApiError::invalid_field(
                "messages",
                "messages: expected a list",
            ));
        }
        // The rules `/v1/messages` holds the same conversation to (pairing, duplicate ids, the
        // fields' types); the count needs no `max_tokens`, so a stand-in one is checked.
        let mut probe = value.clone();
        if let Some(map) = probe.as_object_mut() {
            map.entry("max_tokens").or_insert(Value::from(1));
        }
        check_request(api, &probe).map_err(|e| {
            ApiError::invalid_field(e.field.clone(), format!("{}: {}", e.field, e.reason))
        })?;
        let (tokenizer, _) = state.engine.model(model, "model", false)?;
        let images = state.engine.model_info(model)?.image;
        let count =
            loom_tokens::count_request(loom_core::Api::Anthropic, &value, &tokenizer, &images)
                .map_err(|e| ApiError::invalid(e.to_string()))?;
        Ok((
            count.messages + count.tool_calls + count.tools + count.images + count.overhead,
            count.exact,
        ))
    })();
    let (estimate, exact) = match counted {
        Ok(c) => c,
        Err(e) => return provider_error(api, &e),
    };
    let anchor = if exact {
        None
    } else {
        anchor(&state, &principal, &headers, &raw).await
    };
    let tokens = anchor.map_or(estimate, |f| (estimate as f64 * f).ceil() as u64);
    let mut response = Json(json!({ "input_tokens": tokens })).into_response();
    if let Some(f) = anchor {
        set(response.headers_mut(), "x-loom-anchor", &format!("{f:.4}"));
    }
    response
}

/// The provider's count over Loom's estimate for the conversation's last rendered call.
pub(super) async fn anchor(
    state: &Arc<AppState>,
    principal: &Principal,
    headers: &HeaderMap,
    raw: &Bytes,
) -> Option<f64> {
    let id = match header(headers, "x-loom-session") {
        Some(id) => id.to_owned(),
        None => {
            let body = Arc::new(ingest::RequestBody::parse(Api::Anthropic, raw.clone()).ok()?);
            derived_session(principal, Api::Anthropic, &body, state)
                .await
                .ok()?
        }
    };
    let session = principal.scope(&id, "X-Loom-Session").ok()?;
    let last = state
        .blocking("reading the last call", move |s| {
            if s.store.session(&session)?.is_none() {
                return Ok(None);
            }
            Ok(s.store.last_model_call(&session)?)
        })
        .await
        .ok()??;
    loom_session::engine::reported_ratio(&last)
}

/// `GET /v1/models`, forwarded to the OpenAI upstream (to Anthropic's with its version header).
pub(super) async fn models(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    // Anthropic's SDKs list models at the same path, with their version header.
    let (api, url) = if headers.contains_key("anthropic-version") {
        (
            Api::Anthropic,
            format!("{}/v1/models", state.config.anthropic.base_url),
        )
    } else {
        (
            Api::OpenaiChat,
            format!("{}/models", state.config.openai.base_url),
        )
    };
    passthrough(&state, api, url, None, headers, None).await
}

/// `POST /v1/responses/compact`, OpenAI's compaction of a conversation (Codex's remote
/// compaction), forwarded as it came: the provider compacts, and the `compaction` item it returns
/// comes back in later requests, where Loom keeps it as it came and never compacts it again.
pub(super) async fn responses_compact(
    State(state): State<Arc<AppState>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let url = format!("{}/responses/compact", state.config.openai.base_url);
    passthrough(
        &state,
        Api::OpenaiResponses,
        url,
        uri.query(),
        headers,
        Some(body),
    )
    .await
}

/// `POST /v1beta/models/{model}:countTokens`, Gemini's count, forwarded as it came: the provider
/// counts with its own tokenizer, which no open one matches.
pub(super) async fn gemini_count_tokens(
    state: Arc<AppState>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let tail = uri
        .path()
        .strip_prefix(loom_wire::GEMINI_VERSION_PATH)
        .unwrap_or_else(|| uri.path());
    let base = state.config.gemini.base_url.trim_end_matches('/');
    let base = base
        .strip_suffix(loom_wire::GEMINI_VERSION_PATH)
        .unwrap_or(base);
    let url = format!("{base}{}{tail}", loom_wire::GEMINI_VERSION_PATH);
    passthrough(&state, Api::Gemini, url, uri.query(), headers, Some(body)).await
}

/// Forwards a request Loom neither logs nor fits (a GET without a body, or a POST with one), with
/// the client's headers and the deployment's credentials, and relays the answer.
pub(super) async fn passthrough(
    state: &Arc<AppState>,
    api: Api,
    mut url: String,
    query: Option<&str>,
    headers: HeaderMap,
    body: Option<Bytes>,
) -> Response {
    let principal = match state.authenticate(&headers).await {
        Ok(p) => p,
        Err(e) => return provider_error(api, &e),
    };
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        url.push('?');
        url.push_str(q);
    }
    let mut req = match body {
        Some(body) => state
            .http
            .post(url)
            .header("content-type", "application/json")
            .body(body),
        None => state.http.get(url),
    };
    for (name, value) in &headers {
        if upstream::forwarded(name.as_str()) {
            req = req.header(name.as_str(), value.as_bytes());
        }
    }
    let req = match credentials(state, api, &principal, &headers, req) {
        Ok(r) => r,
        Err(e) => return provider_error(api, &e),
    };
    match tokio::time::timeout(state.config.limits.request_timeout, req.send()).await {
        Ok(Ok(r)) => {
            let status =
                StatusCode::from_u16(r.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            let content_type = r.headers().get("content-type").cloned();
            match r.bytes().await {
                Ok(body) => {
                    let mut response = (status, body).into_response();
                    if let Some(ct) = content_type {
                        response.headers_mut().insert("content-type", ct);
                    }
                    response
                }
                Err(e) => provider_error(
                    api,
                    &ApiError::upstream(
                        StatusCode::BAD_GATEWAY,
                        format!("reading the upstream's answer: {}", without_url(&e)),
                    ),
                ),
            }
        }
        Ok(Err(e)) => {
            state
                .metrics
                .upstream_error(upstream::provider(api), "connect");
            provider_error(
                api,
                &ApiError::upstream(
                    StatusCode::BAD_GATEWAY,
                    format!("the upstream could not be reached: {}", without_url(&e)),
                ),
            )
        }
        Err(_) => provider_error(
            api,
            &ApiError::upstream(
                StatusCode::GATEWAY_TIMEOUT,
                "the upstream did not answer in time",
            ),
        ),
    }
}
