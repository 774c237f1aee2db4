//! A server and a mock upstream for one test.

use std::sync::Arc;

use loom_mock_upstream::{Mock, MockHandle};
use loom_server::{AppState, AuthMode, Engine, ServeArgs, ServeConfig};
use loom_store::{new_api_key, ProxyMode, Store, TenantId, Workspace};
use serde_json::Value;
use tokio::sync::oneshot;

/// A running `loom serve` against a mock upstream.
pub(crate) struct Server {
    pub(crate) url: String,
    pub(crate) state: Arc<AppState>,
    pub(crate) mock: MockHandle,
    pub(crate) http: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

/// The configuration of a test server on `db` in front of `mock`, with the server's own
/// upstream key in the environment it reads.
pub(crate) fn config(db: &str, mock: &MockHandle, auth: AuthMode) -> ServeConfig {
    ServeConfig::resolve(
        ServeArgs {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            db: db.into(),
            config: None,
            upstream_openai: Some(format!("{}/v1", mock.base_url())),
            upstream_anthropic: Some(mock.base_url()),
            upstream_gemini: Some(mock.base_url()),
            auth: Some(auth),
        },
        &|name| match name {
            "LOOM_UPSTREAM_OPENAI_KEY" => Some("sk-upstream".to_owned()),
            "LOOM_UPSTREAM_ANTHROPIC_KEY" => Some("sk-ant-upstream".to_owned()),
            _ => None,
        },
    )
    .unwrap()
}

/// The engine with the built-in registry and the default policy.
pub(crate) fn engine() -> Engine {
    Engine {
        registry: loom_tokens::Registry::built_in().unwrap(),
        policy: loom_core::render::Policy::default(),
        reduce: loom_core::ReduceConfig::default(),
    }
}

pub(crate) async fn start(auth: AuthMode, mode: ProxyMode) -> Server {
    start_with(auth, mode, |_| {}).await
}

/// [`start`], with the configuration changed by `adjust` first (its limits, say).
pub(crate) async fn start_with(
    auth: AuthMode,
    mode: ProxyMode,
    adjust: impl FnOnce(&mut ServeConfig),
) -> Server {
    let mock = Mock::spawn().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("loom.db");
    let mut config = config(&db.to_string_lossy(), &mock, auth);
    config.default_mode = mode;
    adjust(&mut config);
    let ws = Workspace::open(&db).unwrap();
    // Memory beside the log, as `loom serve` keeps it on SQLite.
    let memory = Arc::new(loom_memory::SqliteMemory::open(&db).unwrap());
    let state = loom_server::state_with_memory(
        config,
        Arc::new(ws.store),
        Arc::new(ws.blobs),
        engine(),
        Some(memory),
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(
        loom_server::serve(Arc::clone(&state), listener, async {
            let _ = stopped.await;
        })
        .map_unit(),
    );
    Server {
        url,
        state,
        mock,
        http: reqwest::Client::new(),
        stop: Some(stop),
        task: Some(task),
        _dir: dir,
    }
}

trait MapUnit {
    fn map_unit(self) -> impl std::future::Future<Output = ()> + Send;
}

impl<F, T> MapUnit for F
where
    F: std::future::Future<Output = T> + Send,
{
    async fn map_unit(self) {
        let _ = self.await;
    }
}

impl Server {
    pub(crate) fn store(&self) -> &dyn Store {
        self.state.store.as_ref()
    }

    /// A new key for `tenant`.
    pub(crate) fn key(&self, tenant: &str) -> String {
        let (secret, key) = new_api_key(TenantId::new(tenant).unwrap(), None, None, 1).unwrap();
        self.store().create_key(&key).unwrap();
        secret
    }

    pub(crate) async fn post(
        &self,
        path: &str,
        key: Option<&str>,
        headers: &[(&str, &str)],
        body: &Value,
    ) -> reqwest::Response {
        let mut req = self.http.post(format!("{}{path}", self.url)).json(body);
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        req.send().await.unwrap()
    }

    pub(crate) async fn delete(&self, path: &str, key: Option<&str>) -> reqwest::Response {
        let mut req = self.http.delete(format!("{}{path}", self.url));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        req.send().await.unwrap()
    }

    /// Waits until the sessions appended so far are indexed into memory.
    pub(crate) async fn indexed(&self) {
        let state = Arc::clone(&self.state);
        tokio::task::spawn_blocking(move || {
            if let Some(i) = &state.indexer {
                i.flush();
            }
        })
        .await
        .unwrap();
    }

    pub(crate) async fn get(&self, path: &str, key: Option<&str>) -> reqwest::Response {
        let mut req = self.http.get(format!("{}{path}", self.url));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        req.send().await.unwrap()
    }

    /// Stops the server and waits for in-flight requests.
    pub(crate) async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap();
        }
    }
}

/// Reads an SSE body whole.
pub(crate) async fn text(r: reqwest::Response) -> String {
    r.text().await.unwrap()
}

/// OpenAI's published API description, or `None` (said loudly) when `../shared` is absent.
#[expect(clippy::print_stderr, reason = "a skipped check says so")]
pub(crate) fn openai_spec() -> Option<loom_testkit::OpenApi> {
    match loom_testkit::OpenApi::load() {
        Ok(api) => Some(api),
        Err(e) => {
            eprintln!("SKIPPED: validating forwarded bodies against OpenAI's description: {e}");
            None
        }
    }
}

/// Every body the mock received on `path` is valid against `schema` of OpenAI's description.
pub(crate) fn assert_forwarded_valid(s: &Server, path: &str, schema: &str) {
    let Some(api) = openai_spec() else { return };
    let mut checked = 0;
    for r in s.mock.requests().iter().filter(|r| r.path == path) {
        if let Err(errors) = api.validate(schema, &r.body) {
            panic!(
                "a forwarded {path} body is invalid against {schema}: {errors:?}\n{}",
                r.body
            );
        }
        checked += 1;
    }
    assert!(checked > 0, "no {path} request was forwarded");
}
