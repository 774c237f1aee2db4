//! OpenTelemetry traces of model calls, for `loom serve` and `loom run`.
//!
//! A [`Telemetry`] is either off (the default: no tracer exists, and every method below is one
//! branch on an `Option`) or exports over OTLP/HTTP (protobuf) to a collector. Each model call is
//! a [`Call`] span with the GenAI semantic conventions (`gen_ai.*`), the session as `session.id`
//! and Loom's own facts under `loom.*` (mode, budget, estimate, compaction point, what the render
//! did to the log's events, the receipt's id); each request sent upstream for it is an
//! [`Attempt`], a child span with the HTTP status. Attribute names are in [`attr`].
//!
//! The request path only records: ended spans go to the SDK's batch processor, whose own thread
//! sends them in batches. The HTTP requests themselves run on a one-thread Tokio runtime owned
//! here, so exporting never runs on, or waits for, the threads that serve requests or run turns;
//! and it reuses the workspace's `reqwest` (the exporter's own HTTP client features would bring a
//! second major version of it).

pub mod attr;
mod export;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

pub use opentelemetry::KeyValue as Attribute;

/// Why telemetry could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// The endpoint is not an http(s) URL.
    #[error("telemetry endpoint `{0}`: expected an http:// or https:// URL")]
    Endpoint(String),
    /// The exporter, its HTTP client or its runtime could not be built.
    #[error("starting the OTLP exporter: {0}")]
    Exporter(String),
}

/// Where spans go: nowhere (off), or an OTLP/HTTP collector.
#[derive(Debug, Clone, Default)]
pub struct Telemetry {
    on: Option<Arc<On>>,
}

#[derive(Debug)]
struct On {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    /// Runs the exporter's HTTP requests; shut down after the provider has flushed.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for On {
    fn drop(&mut self) {
        // What is still queued is sent before the runtime that sends it goes. A runtime may be
        // dropped on an async thread only in the background.
        let _ = self.provider.shutdown_with_timeout(Duration::from_secs(5));
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Telemetry {
    /// No telemetry: no tracer, no thread, no work.
    pub fn off() -> Self {
        Self::default()
    }

    /// Spans of `service` (`loom-serve`, `loom-run`) exported to the collector at `endpoint`:
    /// its base URL (`http://127.0.0.1:4318`, to which `/v1/traces` is added) or the full URL of
    /// its traces path.
    pub fn otlp(endpoint: &str, service: &'static str) -> Result<Self, TelemetryError> {
        let url = traces_url(endpoint)?;
        let (exporter, runtime) = export::exporter(&url)?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(
                opentelemetry_sdk::Resource::builder()
                    .with_service_name(service)
                    .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
                    .build(),
            )
            .build();
        use opentelemetry::trace::TracerProvider as _;
        let tracer = provider.tracer("loom");
        Ok(Self {
            on: Some(Arc::new(On {
                provider,
                tracer,
                runtime: Some(runtime),
            })),
        })
    }

    /// Whether spans are recorded.
    pub fn is_on(&self) -> bool {
        self.on.is_some()
    }

    /// Starts the span of one model call, begun at `started`: `operation` is the GenAI
    /// operation (`chat`), `system` the provider (`openai`, `anthropic`), `model` the model asked
    /// for (empty when the request could not be read); `kind` says whether Loom serves the call
    /// ([`CallKind::Server`], the proxy) or makes it ([`CallKind::Client`], `loom run`). `more`
    /// gives further attributes, and is called only when telemetry is on.
    pub fn call(
        &self,
        kind: CallKind,
        operation: &'static str,
        system: &'static str,
        model: &str,
        started: SystemTime,
        more: impl FnOnce() -> Vec<KeyValue>,
    ) -> Call {
        let Some(on) = &self.on else {
            return Call::default();
        };
        let mut attributes = vec![
            KeyValue::new(attr::OPERATION, operation),
            KeyValue::new(attr::SYSTEM, system),
            KeyValue::new(attr::PROVIDER, system),
        ];
        let name = if model.is_empty() {
            operation.to_owned()
        } else {
            attributes.push(KeyValue::new(attr::REQUEST_MODEL, model.to_owned()));
            format!("{operation} {model}")
        };
        attributes.extend(more());
        let span = on
            .tracer
            .span_builder(name)
            .with_kind(match kind {
                CallKind::Server => SpanKind::Server,
                CallKind::Client => SpanKind::Client,
            })
            .with_start_time(started)
            .with_attributes(attributes)
            .start(&on.tracer);
        Call {
            on: Some((Arc::clone(on), Context::new().with_span(span))),
        }
    }

    /// Sends what is queued now, and waits for it (tests, and before a process exits).
    pub fn flush(&self) {
        if let Some(on) = &self.on {
            let _ = on.provider.force_flush();
        }
    }
}

/// Whether Loom serves a call or makes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// A client's call that Loom receives (the proxy).
    Server,
    /// A call Loom makes itself (`loom run`).
    Client,
}

/// The span of one model call; inert when telemetry is off. It ends when [`Call::end`] is called
/// or it is dropped.
#[derive(Debug, Default)]
pub struct Call {
    on: Option<(Arc<On>, Context)>,
}

impl Call {
    /// Whether this call is recorded (to skip preparing attributes that would be dropped).
    pub fn is_on(&self) -> bool {
        self.on.is_some()
    }

    /// Adds attributes, built only when the call is recorded.
    pub fn set(&self, attributes: impl FnOnce() -> Vec<KeyValue>) {
        if let Some((_, cx)) = &self.on {
            cx.span().set_attributes(attributes());
        }
    }

    /// Adds what the render's receipt says (see [`attr::receipt`]) and the id of the model call
    /// it is stored as.
    pub fn receipt(&self, receipt: &loom_core::render::Receipt, call: Option<u64>) {
        self.set(|| {
            let mut a = attr::receipt(receipt);
            if let Some(id) = call {
                a.push(KeyValue::new(attr::RECEIPT, id as i64));
            }
            a
        });
    }

    /// Adds what the reply said: the model that answered, its id, why it stopped, and the usage
    /// the provider reported (input tokens, of them read from its cache, output tokens).
    pub fn reply(&self, reply: &Reply<'_>) {
        self.set(|| reply.attributes());
    }

    /// Marks the call failed: `error_type` is a short, low-cardinality name (`timeout`,
    /// `connect`, `dropped_stream`, an HTTP status code).
    pub fn fail(&self, error_type: &str) {
        if let Some((_, cx)) = &self.on {
            let span = cx.span();
            span.set_attribute(KeyValue::new(attr::ERROR_TYPE, error_type.to_owned()));
            span.set_status(Status::error(error_type.to_owned()));
        }
    }

    /// Starts the span of one request sent upstream for this call.
    pub fn attempt(&self, name: &'static str) -> Attempt {
        let Some((on, cx)) = &self.on else {
            return Attempt::default();
        };
        let span = on
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .start_with_context(&on.tracer, cx);
        Attempt {
            cx: Some(Context::new().with_span(span)),
        }
    }

    /// Ends the span now.
    pub fn end(self) {
        if let Some((_, cx)) = &self.on {
            cx.span().end();
        }
    }
}

/// The span of one upstream request; inert when telemetry is off. It ends when [`Attempt::end`]
/// is called or it is dropped.
#[derive(Debug, Default)]
pub struct Attempt {
    cx: Option<Context>,
}

impl Attempt {
    /// The upstream's HTTP status (`http.response.status_code`); a status of 400 or more also
    /// marks the attempt failed with the status as its `error.type`.
    pub fn status(&self, status: u16) {
        if let Some(cx) = &self.cx {
            let span = cx.span();
            span.set_attribute(KeyValue::new(attr::HTTP_STATUS, i64::from(status)));
            if status >= 400 {
                span.set_attribute(KeyValue::new(attr::ERROR_TYPE, status.to_string()));
                span.set_status(Status::error(status.to_string()));
            }
        }
    }

    /// Adds attributes, built only when the attempt is recorded.
    pub fn set(&self, attributes: impl FnOnce() -> Vec<KeyValue>) {
        if let Some(cx) = &self.cx {
            cx.span().set_attributes(attributes());
        }
    }

    /// Marks the attempt failed (see [`Call::fail`]).
    pub fn fail(&self, error_type: &str) {
        if let Some(cx) = &self.cx {
            let span = cx.span();
            span.set_attribute(KeyValue::new(attr::ERROR_TYPE, error_type.to_owned()));
            span.set_status(Status::error(error_type.to_owned()));
        }
    }

    /// Ends the span now.
    pub fn end(self) {
        if let Some(cx) = &self.cx {
            cx.span().end();
        }
    }
}

/// What a reply tells about a call, for [`Call::reply`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Reply<'a> {
    /// The model that answered.
    pub model: Option<&'a str>,
    /// The provider's id of the reply.
    pub id: Option<&'a str>,
    /// Why generation stopped.
    pub finish_reason: Option<&'a str>,
    /// Input tokens, as the provider counted them.
    pub input_tokens: Option<u64>,
    /// Of them, read from the provider's prompt cache.
    pub cached_input_tokens: Option<u64>,
    /// Output tokens.
    pub output_tokens: Option<u64>,
}

impl<'a> Reply<'a> {
    /// What a provider's reply, as Loom parsed it, says.
    pub fn of(reply: &'a loom_wire::AssistantReply) -> Self {
        let usage = reply.usage.as_ref();
        Self {
            model: reply.model.as_deref(),
            id: reply.id.as_deref(),
            finish_reason: reply.finish_reason.as_deref(),
            input_tokens: usage.map(|u| u.input_tokens),
            cached_input_tokens: usage.and_then(|u| u.cached_input_tokens),
            output_tokens: usage.and_then(|u| u.output_tokens),
        }
    }
}

impl Reply<'_> {
    fn attributes(&self) -> Vec<KeyValue> {
        let mut a = Vec::with_capacity(6);
        if let Some(m) = self.model {
            a.push(KeyValue::new(attr::RESPONSE_MODEL, m.to_owned()));
        }
        if let Some(id) = self.id {
            a.push(KeyValue::new(attr::RESPONSE_ID, id.to_owned()));
        }
        if let Some(r) = self.finish_reason {
            a.push(KeyValue::new(
                attr::FINISH_REASONS,
                opentelemetry::Value::Array(
                    vec![opentelemetry::StringValue::from(r.to_owned())].into(),
                ),
            ));
        }
        for (key, n) in [
            (attr::INPUT_TOKENS, self.input_tokens),
            (attr::CACHE_READ_TOKENS, self.cached_input_tokens),
            (attr::OUTPUT_TOKENS, self.output_tokens),
        ] {
            if let Some(n) = n {
                a.push(KeyValue::new(key, i64::try_from(n).unwrap_or(i64::MAX)));
            }
        }
        a
    }
}

/// The collector's traces URL: `/v1/traces` added to a base URL, a full one kept.
fn traces_url(endpoint: &str) -> Result<String, TelemetryError> {
    let e = endpoint.trim();
    if !(e.starts_with("http://") || e.starts_with("https://")) {
        return Err(TelemetryError::Endpoint(endpoint.to_owned()));
    }
    let e = e.trim_end_matches('/');
    Ok(if e.ends_with("/v1/traces") {
        e.to_owned()
    } else {
        format!("{e}/v1/traces")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_added_to_a_base_url_only() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://otel.example/v1/traces/").unwrap(),
            "https://otel.example/v1/traces"
        );
        assert!(traces_url("127.0.0.1:4318").is_err());
    }

    #[test]
    fn off_records_nothing_and_builds_no_attributes() {
        let t = Telemetry::off();
        let call = t.call(
            CallKind::Server,
            "chat",
            "openai",
            "gpt-4o",
            SystemTime::now(),
            || unreachable!("attributes are not built when telemetry is off"),
        );
        assert!(!call.is_on());
        call.set(|| unreachable!("not built either"));
        let attempt = call.attempt("upstream");
        attempt.status(500);
        attempt.end();
        call.end();
    }
}
