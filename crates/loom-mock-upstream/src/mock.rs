//! The mock server: its shared state (recorded requests, queued faults, the simulated prompt
//! cache), its routes, and the control API that lets other processes drive it.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::{Json, Router};
use bytes::Bytes;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::behaviour::{self, Ids};
use crate::chat::ChatReply;
use crate::embeddings;
use crate::error::{self, Flavor, MockError};
use crate::fault::Fault;
use crate::gemini::GeminiReply;
use crate::messages::MessagesReply;
use crate::request::{self, Api, GeminiTarget};
use crate::responses::ResponsesReply;
use crate::wire::Outgoing;

/// The models `GET /v1/models` lists: enough for a client that checks a name exists.
const MODELS: &[&str] = &[
    "gpt-4o",
    "gpt-4o-mini",
    "o3-mini",
    "claude-sonnet-4-5",
    "claude-haiku-4-5",
];

/// A mock model provider. Cloning shares the state, so the [`Router`] from
/// [`Mock::router`] and the clone kept by a test see the same requests and faults.
///
/// Replies are deterministic: a request whose last message is a user turn and that offers
/// function tools gets a call to the first tool with arguments `{"query": "<first words>"}`
/// (the first two tools, in parallel, when the user text has the word `parallel`); anything
/// else gets the text `ok: <n> messages, last: <first words of the last message>`. Thinking
/// (Anthropic `thinking`, Responses `reasoning`) adds a reasoning block with a signature
/// derived from its text. Cached input tokens are the bytes shared with the previous request
/// to the same endpoint (tools, system, conversation, in that order), counted with the same
/// bytes-per-token ratio as the input.
#[derive(Clone, Debug, Default)]
pub struct Mock {
    state: Arc<Mutex<Inner>>,
}

/// The mutable state behind a [`Mock`].
#[derive(Debug, Default)]
struct Inner {
    requests: Vec<Recorded>,
    faults: VecDeque<Fault>,
    default_fault: Option<Fault>,
    /// The cache key of the previous well-formed request on each endpoint.
    previous: BTreeMap<Api, Vec<u8>>,
    /// Numbers replies, for unique ids.
    serial: u64,
    /// Input counts are this many times the mock's own ([`Mock::set_input_scale`]).
    input_scale: Option<f64>,
    /// Tool call ids numbered within each reply ([`Mock::set_call_ids_per_reply`]).
    ids_per_reply: bool,
}

/// One request as the mock received it, so tests can check exactly what a client sent.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Recorded {
    /// The HTTP method.
    pub method: String,
    /// The path, without the query string.
    pub path: String,
    /// The query string, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// The body's bytes exactly as they arrived, for byte-for-byte comparisons.
    #[serde(skip)]
    pub raw: Vec<u8>,
    /// Every header in arrival order, names lowercase, values decoded lossily.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON; a body that is not JSON is kept as a string (lossily decoded),
    /// and an empty body is `null`.
    pub body: serde_json::Value,
}

impl Recorded {
    /// The first value of header `name` (any case), as tests most often want one.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A running mock server. Dropping it stops the server.
#[derive(Debug)]
pub struct MockHandle {
    /// The address the server listens on.
    pub addr: SocketAddr,
    mock: Mock,
    task: JoinHandle<()>,
}

impl Mock {
    /// A mock with nothing recorded and no faults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Binds 127.0.0.1 on a free port and serves in a background task.
    pub async fn spawn() -> std::io::Result<MockHandle> {
        Self::new()
            .serve(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
    }

    /// Binds `addr` and serves this mock in a background task (the binary uses this to honour
    /// `--listen`).
    pub async fn serve(self, addr: SocketAddr) -> std::io::Result<MockHandle> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let app = self.router();
        let task = tokio::spawn(async move {
            // The server only ends with an I/O error on the listener; a test then sees
            // connection errors, which say more than anything logged here could.
            let _ = axum::serve(listener, app).await;
        });
        Ok(MockHandle {
            addr,
            mock: self,
            task,
        })
    }

    /// The mock's routes, for in-process use (`tower::ServiceExt::oneshot`) or for serving
    /// on a listener of the caller's choosing.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/v1/chat/completions", generate(Api::OpenaiChat))
            .route("/v1/responses", generate(Api::OpenaiResponses))
            .route("/v1/messages", generate(Api::Anthropic))
            .route("/v1beta/models/{target}", post(gemini_route))
            .route("/v1/embeddings", post(embeddings_route))
            .route("/v1/models", get(models))
            .route(
                "/_mock/requests",
                get(control_requests).delete(control_clear),
            )
            .route(
                "/_mock/faults",
                post(control_push_fault).delete(control_clear_faults),
            )
            .route("/_mock/default_fault", post(control_default_fault))
            .route("/_mock/reset", post(control_reset))
            .fallback(unknown)
            // Agents send whole histories; a mock must never be the reason a large request fails.
            .layer(DefaultBodyLimit::disable())
            .with_state(self.clone())
    }

    /// Every request received on a provider path, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.lock().requests.clone()
    }

    /// Forgets the recorded requests (faults and the simulated cache stay).
    pub fn clear(&self) {
        self.lock().requests.clear();
    }

    /// Queues a fault for the next request that has none queued before it.
    pub fn push_fault(&self, fault: Fault) {
        self.lock().faults.push_back(fault);
    }

    /// Sets (or with `None` removes) the fault applied to every request when the queue is
    /// empty.
    pub fn set_default_fault(&self, fault: Option<Fault>) {
        self.lock().default_fault = fault;
    }

    /// Counts input (cached and written tokens too) `scale` times as the mock's own
    /// bytes-per-token rule does: a provider whose tokenizer counts more (or fewer) tokens than
    /// a client's estimate, as Claude's does against any open tokenizer.
    pub fn set_input_scale(&self, scale: f64) {
        self.lock().input_scale = (scale > 0.0 && scale.is_finite()).then_some(scale);
    }

    /// Numbers the tool calls of each reply from 0 (`call_0`, `call_1`, ... in every reply), as
    /// some OpenAI-compatible servers do, instead of ids unique over the mock's life. The ids
    /// of messages, responses and items stay unique.
    pub fn set_call_ids_per_reply(&self, per_reply: bool) {
        self.lock().ids_per_reply = per_reply;
    }

    /// Back to a fresh mock: no requests, no faults, an empty simulated cache. Ids keep
    /// counting so that they stay unique over the mock's life.
    pub fn reset(&self) {
        let mut inner = self.lock();
        inner.requests.clear();
        inner.faults.clear();
        inner.default_fault = None;
        inner.previous.clear();
        inner.input_scale = None;
        inner.ids_per_reply = false;
    }

    /// The state, even if a panicking holder poisoned the lock: every update is a single
    /// push or assignment, so the data is never half-written.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a request and takes the fault that applies to it.
    fn receive(&self, recorded: Recorded) -> Fault {
        let mut inner = self.lock();
        inner.requests.push(recorded);
        match inner.faults.pop_front() {
            Some(fault) => fault,
            None => inner.default_fault.clone().unwrap_or_default(),
        }
    }

    /// Records a request that faults do not apply to.
    fn receive_unfaulted(&self, recorded: Recorded) {
        self.lock().requests.push(recorded);
    }

    /// Stores `key` as the endpoint's latest cache key; returns the length of the prefix it
    /// shares with the previous one, and a fresh reply serial.
    fn remember(&self, api: Api, key: &[u8]) -> (usize, u64) {
        let mut inner = self.lock();
        let common = inner
            .previous
            .get(&api)
            .map(|prev| prev.iter().zip(key).take_while(|(a, b)| a == b).count())
            .unwrap_or(0);
        inner.previous.insert(api, key.to_vec());
        inner.serial += 1;
        (common, inner.serial)
    }

    /// A fresh reply serial, for replies that do not touch the cache.
    fn next_serial(&self) -> u64 {
        let mut inner = self.lock();
        inner.serial += 1;
        inner.serial
    }

    /// Answers one generation request: record, take the fault, wait, reply. A Gemini request
    /// comes with the `target` its path names.
    async fn answer(
        &self,
        api: Api,
        target: Option<GeminiTarget>,
        method: Method,
        uri: Uri,
        headers: HeaderMap,
        body: Bytes,
    ) -> Response {
        let parsed = parse_body(&body);
        let fault = self.receive(record(&method, &uri, &headers, &parsed, &body));
        delay(&fault).await;
        let flavor = match api {
            Api::Anthropic => Flavor::Anthropic,
            Api::OpenaiChat | Api::OpenaiResponses => Flavor::OpenAi,
            Api::Gemini => Flavor::Google,
        };
        // Gemini streams as server-sent events only with `alt=sse`.
        let sse = uri
            .query()
            .is_some_and(|q| q.split('&').any(|kv| kv == "alt=sse"));
        let outgoing = match fault.status {
            Some(status) => {
                let reply = error::fault_reply(flavor, status, &request_id(self.next_serial()));
                match &fault.retry_after {
                    Some(value) => reply
                        .without_header("retry-after-ms")
                        .header("retry-after", value),
                    None => reply,
                }
            }
            None => match &fault.body {
                Some(raw) => Outgoing::raw(StatusCode::OK, raw.clone()),
                None => self.generate(api, target.as_ref(), sse, parsed, flavor),
            },
        };
        outgoing.into_response(&fault)
    }

    /// The reply to a well-formed request, or the provider's 400 for a malformed one.
    fn generate(
        &self,
        api: Api,
        target: Option<&GeminiTarget>,
        sse: bool,
        parsed: Result<Value, MockError>,
        flavor: Flavor,
    ) -> Outgoing {
        let read =
            parsed.and_then(|body| request::parse(api, &body, target).map(|prompt| (body, prompt)));
        let (body, prompt) = match read {
            Ok(read) => read,
            Err(err) => return error::bad_request(flavor, &err, &request_id(self.next_serial())),
        };
        let (common, serial) = self.remember(api, &prompt.cache_key);
        let reply = behaviour::decide(&prompt);
        let mut usage = behaviour::usage(&prompt, common, &reply);
        let (scale, per_reply) = {
            let inner = self.lock();
            (inner.input_scale, inner.ids_per_reply)
        };
        if let Some(scale) = scale {
            usage.scale_input(scale);
        }
        let ids = Ids::new(serial, per_reply);
        let created = unix_seconds();
        let rid = request_id(serial);
        match api {
            Api::OpenaiChat => ChatReply {
                prompt: &prompt,
                reply: &reply,
                usage,
                ids,
                created,
            }
            .render()
            .header("x-request-id", &rid),
            Api::OpenaiResponses => ResponsesReply {
                body: &body,
                prompt: &prompt,
                reply: &reply,
                usage,
                ids,
                created,
            }
            .render()
            .header("x-request-id", &rid),
            Api::Anthropic => MessagesReply {
                prompt: &prompt,
                reply: &reply,
                usage,
                ids,
            }
            .render()
            .header("request-id", &rid),
            Api::Gemini => GeminiReply {
                prompt: &prompt,
                reply: &reply,
                usage,
                ids,
                sse,
            }
            .render(),
        }
    }
}

impl MockHandle {
    /// The server's root URL, `http://127.0.0.1:PORT`, to which clients append `/v1/...`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The mock behind this server, for what the handle does not forward.
    pub fn mock(&self) -> &Mock {
        &self.mock
    }

    /// Every request received on a provider path, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.mock.requests()
    }

    /// Forgets the recorded requests (faults and the simulated cache stay).
    pub fn clear(&self) {
        self.mock.clear();
    }

    /// Queues a fault for the next request that has none queued before it.
    pub fn push_fault(&self, fault: Fault) {
        self.mock.push_fault(fault);
    }

    /// Sets (or with `None` removes) the fault applied to every request when the queue is
    /// empty.
    pub fn set_default_fault(&self, fault: Option<Fault>) {
        self.mock.set_default_fault(fault);
    }

    /// Back to a fresh mock: no requests, no faults, an empty simulated cache.
    pub fn reset(&self) {
        self.mock.reset();
    }
}

impl Drop for MockHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The route of one generation endpoint.
fn generate(api: Api) -> MethodRouter<Mock> {
    post(
        move |State(mock): State<Mock>,
              method: Method,
              uri: Uri,
              headers: HeaderMap,
              body: Bytes| async move {
            mock.answer(api, None, method, uri, headers, body).await
        },
    )
}

/// `POST /v1beta/models/{model}:{method}`: Gemini's `generateContent`,
/// `streamGenerateContent` and `countTokens` (answered with the mock's own count).
async fn gemini_route(
    State(mock): State<Mock>,
    axum::extract::Path(target): axum::extract::Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (model, action) = target.rsplit_once(':').unwrap_or((target.as_str(), ""));
    match action {
        "generateContent" | "streamGenerateContent" if !model.is_empty() => {
            let target = GeminiTarget {
                model: model.to_owned(),
                stream: action == "streamGenerateContent",
            };
            mock.answer(Api::Gemini, Some(target), method, uri, headers, body)
                .await
        }
        "countTokens" if !model.is_empty() => {
            let parsed = parse_body(&body);
            mock.receive_unfaulted(record(&method, &uri, &headers, &parsed, &body));
            let tokens = body.len().div_ceil(4).max(1);
            Outgoing::json(StatusCode::OK, &json!({ "totalTokens": tokens }))
                .into_response(&Fault::default())
        }
        _ => {
            let parsed = parse_body(&body);
            mock.receive_unfaulted(record(&method, &uri, &headers, &parsed, &body));
            error::not_found(
                Flavor::Google,
                method.as_str(),
                uri.path(),
                &request_id(mock.next_serial()),
            )
            .into_response(&Fault::default())
        }
    }
}

/// `POST /v1/embeddings`: OpenAI's shape, vectors from the text (see [`crate::embeddings`]).
async fn embeddings_route(
    State(mock): State<Mock>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed = parse_body(&body);
    let fault = mock.receive(record(&method, &uri, &headers, &parsed, &body));
    delay(&fault).await;
    let rid = request_id(mock.next_serial());
    let outgoing = match (fault.status, &fault.body) {
        (Some(status), _) => error::fault_reply(Flavor::OpenAi, status, &rid),
        (None, Some(raw)) => Outgoing::raw(StatusCode::OK, raw.clone()),
        (None, None) => match parsed.and_then(|body| embeddings::parse(&body)) {
            Ok(request) => embeddings::reply(&request),
            Err(err) => error::bad_request(Flavor::OpenAi, &err, &rid),
        },
    };
    outgoing.header("x-request-id", &rid).into_response(&fault)
}

/// `GET /v1/models`, in OpenAI's list shape, or Anthropic's when the client sends
/// `anthropic-version` (both SDKs call this path).
async fn models(
    State(mock): State<Mock>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let parsed = parse_body(&Bytes::new());
    let fault = mock.receive(record(&method, &uri, &headers, &parsed, &Bytes::new()));
    delay(&fault).await;
    let anthropic = headers.contains_key("anthropic-version");
    let flavor = if anthropic {
        Flavor::Anthropic
    } else {
        Flavor::OpenAi
    };
    let rid = request_id(mock.next_serial());
    let outgoing = match fault.status {
        Some(status) => error::fault_reply(flavor, status, &rid),
        None if anthropic => {
            let data: Vec<Value> = MODELS
                .iter()
                .map(|id| json!({ "type": "model", "id": id, "display_name": id, "created_at": "2025-01-01T00:00:00Z" }))
                .collect();
            let body = json!({
                "data": data,
                "has_more": false,
                "first_id": MODELS.first(),
                "last_id": MODELS.last(),
            });
            Outgoing::json(StatusCode::OK, &body).header("request-id", &rid)
        }
        None => {
            let data: Vec<Value> = MODELS
                .iter()
                .map(|id| json!({ "id": id, "object": "model", "created": 1_700_000_000, "owned_by": "loom-mock" }))
                .collect();
            Outgoing::json(StatusCode::OK, &json!({ "object": "list", "data": data }))
                .header("x-request-id", &rid)
        }
    };
    outgoing.into_response(&fault)
}

/// Any other path: recorded (a client calling the wrong URL is worth seeing), then a 404 in
/// the provider's shape.
async fn unknown(
    State(mock): State<Mock>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed = parse_body(&body);
    mock.receive_unfaulted(record(&method, &uri, &headers, &parsed, &body));
    let flavor = if headers.contains_key("anthropic-version") {
        Flavor::Anthropic
    } else {
        Flavor::OpenAi
    };
    error::not_found(
        flavor,
        method.as_str(),
        uri.path(),
        &request_id(mock.next_serial()),
    )
    .into_response(&Fault::default())
}

/// `GET /_mock/requests`
async fn control_requests(State(mock): State<Mock>) -> Json<Vec<Recorded>> {
    Json(mock.requests())
}

/// `DELETE /_mock/requests`
async fn control_clear(State(mock): State<Mock>) -> StatusCode {
    mock.clear();
    StatusCode::NO_CONTENT
}

/// `POST /_mock/faults` with a [`Fault`] as JSON.
async fn control_push_fault(State(mock): State<Mock>, body: Bytes) -> Response {
    match parse_fault(&body) {
        Ok(Some(fault)) => {
            mock.push_fault(fault);
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(None) => control_error("fault: expected a JSON object, got null"),
        Err(message) => control_error(&message),
    }
}

/// `DELETE /_mock/faults`: empties the queue.
async fn control_clear_faults(State(mock): State<Mock>) -> StatusCode {
    mock.lock().faults.clear();
    StatusCode::NO_CONTENT
}

/// `POST /_mock/default_fault` with a [`Fault`] as JSON, or `null` to remove it.
async fn control_default_fault(State(mock): State<Mock>, body: Bytes) -> Response {
    match parse_fault(&body) {
        Ok(fault) => {
            mock.set_default_fault(fault);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(message) => control_error(&message),
    }
}

/// `POST /_mock/reset`
async fn control_reset(State(mock): State<Mock>) -> StatusCode {
    mock.reset();
    StatusCode::NO_CONTENT
}

/// Reads a fault (or `null`) sent to the control API, checking that its status is one HTTP
/// can carry.
fn parse_fault(body: &[u8]) -> Result<Option<Fault>, String> {
    let fault: Option<Fault> = serde_json::from_slice(body)
        .map_err(|e| format!("fault: not a valid fault object: {e}"))?;
    if let Some(status) = fault.as_ref().and_then(|f| f.status) {
        if StatusCode::from_u16(status).is_err() {
            return Err(format!(
                "fault: field `status`: {status} is not an HTTP status (100 to 999)"
            ));
        }
    }
    Ok(fault)
}

/// A control API error: 400 with `{"error": message}`.
fn control_error(message: &str) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({ "error": message }))).into_response()
}

/// The body as JSON, `null` when empty, or the parse error.
fn parse_body(body: &Bytes) -> Result<Value, MockError> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(body).map_err(|e| MockError::NotJson {
        record: "request",
        reason: e.to_string(),
    })
}

/// What gets recorded of a request.
fn record(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    parsed: &Result<Value, MockError>,
    body: &Bytes,
) -> Recorded {
    let headers = headers
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let raw = body.to_vec();
    let body = match parsed {
        Ok(value) => value.clone(),
        Err(_) => Value::String(String::from_utf8_lossy(body).into_owned()),
    };
    Recorded {
        method: method.as_str().to_owned(),
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        raw,
        headers,
        body,
    }
}

/// Sleeps for the fault's `delay_ms`, if any.
async fn delay(fault: &Fault) {
    if let Some(ms) = fault.delay_ms {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// A request id in the providers' style.
fn request_id(serial: u64) -> String {
    format!("req_{serial:020}")
}

/// Now, in Unix seconds (0 if the clock is before 1970).
fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
