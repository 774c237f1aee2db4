//! A trace collector on loopback (OTLP over HTTP, protobuf), for tests and benchmarks of Loom's
//! spans.
//!
//! It runs on a thread and a one-thread Tokio runtime of its own, so a plain test thread, an
//! async test and a benchmark can all use it without lending it their runtime; it lives as long
//! as the process (each test binary starts a few).
//!
//! Every batch is decoded with the protocol's own types and its spans counted;
//! [`Collector::start`] also keeps them, [`Collector::sink`] drops them (a benchmark's millions
//! of spans would otherwise be held until the process ends).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
pub use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
pub use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// A span as received, with the name of the service that sent it (`service.name`).
#[derive(Debug, Clone)]
pub struct Received {
    /// The resource's `service.name` (empty when it has none).
    pub service: String,
    /// The span.
    pub span: Span,
}

#[derive(Debug, Default)]
struct Inbox {
    spans: Vec<Received>,
    /// Spans received (kept or not).
    count: u64,
    /// Batches received.
    batches: u64,
    /// Batches that did not decode.
    malformed: u64,
}

type Shared = Arc<(Mutex<Inbox>, bool)>;

/// A collector accepting `POST /v1/traces` on `127.0.0.1`.
#[derive(Debug, Clone)]
pub struct Collector {
    url: String,
    inbox: Shared,
}

impl Collector {
    /// A collector that decodes every batch and keeps its spans.
    pub fn start() -> Result<Self, String> {
        Self::spawn(true)
    }

    /// A collector that counts every batch's spans and drops them.
    pub fn sink() -> Result<Self, String> {
        Self::spawn(false)
    }

    fn spawn(keep: bool) -> Result<Self, String> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|e| format!("binding the collector: {e}"))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("the collector's socket: {e}"))?;
        let url = format!(
            "http://{}",
            listener
                .local_addr()
                .map_err(|e| format!("the collector's address: {e}"))?
        );
        let inbox: Shared = Arc::new((Mutex::new(Inbox::default()), keep));
        let app = axum::Router::new()
            .route("/v1/traces", post(receive))
            .with_state(Arc::clone(&inbox));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("the collector's runtime: {e}"))?;
        std::thread::Builder::new()
            .name("otlp-collector".into())
            .spawn(move || {
                runtime.block_on(async move {
                    if let Ok(listener) = tokio::net::TcpListener::from_std(listener) {
                        let _ = axum::serve(listener, app).await;
                    }
                });
            })
            .map_err(|e| format!("the collector's thread: {e}"))?;
        Ok(Self { url, inbox })
    }

    /// Its base URL (`http://127.0.0.1:PORT`; the exporter adds `/v1/traces`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The spans received so far, in the order they arrived.
    pub fn spans(&self) -> Vec<Received> {
        self.inbox
            .0
            .lock()
            .map(|i| i.spans.clone())
            .unwrap_or_default()
    }

    /// Spans received so far, kept or not.
    pub fn count(&self) -> u64 {
        self.inbox.0.lock().map(|i| i.count).unwrap_or_default()
    }

    /// Batches received so far, and of them those that did not decode as OTLP.
    pub fn batches(&self) -> (u64, u64) {
        self.inbox
            .0
            .lock()
            .map(|i| (i.batches, i.malformed))
            .unwrap_or_default()
    }

    /// Waits (blocking the calling thread) until at least `n` spans have arrived or `timeout`
    /// has passed, and returns what has arrived.
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Received> {
        let until = Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if spans.len() >= n || Instant::now() >= until {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

async fn receive(
    State(inbox): State<Shared>,
    body: Bytes,
) -> ([(&'static str, &'static str); 1], Vec<u8>) {
    let (inbox, keep) = &*inbox;
    let decoded = ExportTraceServiceRequest::decode(body).map(spans_of);
    if let Ok(mut i) = inbox.lock() {
        i.batches += 1;
        match decoded {
            Ok(spans) => {
                i.count += spans.len() as u64;
                if *keep {
                    i.spans.extend(spans);
                }
            }
            Err(_) => i.malformed += 1,
        }
    }
    // An empty ExportTraceServiceResponse: all accepted.
    ([("content-type", "application/x-protobuf")], Vec::new())
}

fn spans_of(request: ExportTraceServiceRequest) -> Vec<Received> {
    let mut out = Vec::new();
    for rs in request.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|res| &res.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| kv.value.as_ref()?.value.clone());
        let service = match service {
            Some(Any::StringValue(s)) => s,
            _ => String::new(),
        };
        for ss in rs.scope_spans {
            out.extend(ss.spans.into_iter().map(|span| Received {
                service: service.clone(),
                span,
            }));
        }
    }
    out
}

/// A span's attributes by key, as text (numbers and booleans written out, arrays as their
/// debug form).
pub fn attributes(span: &Span) -> BTreeMap<String, String> {
    span.attributes
        .iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.clone()) {
                Some(Any::StringValue(s)) => s,
                Some(Any::IntValue(i)) => i.to_string(),
                Some(Any::BoolValue(b)) => b.to_string(),
                Some(Any::DoubleValue(d)) => d.to_string(),
                Some(Any::ArrayValue(a)) => format!("{:?}", a.values),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}
