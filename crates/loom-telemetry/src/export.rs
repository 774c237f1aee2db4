//! The OTLP/HTTP exporter, over the workspace's `reqwest` on a runtime of its own.
//!
//! The SDK's batch processor calls the exporter from its own thread, outside any Tokio runtime,
//! while `reqwest` needs one: each request is spawned on a one-thread runtime owned by
//! [`crate::Telemetry`] and awaited from the processor's thread.

use std::time::Duration;

use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig, WithHttpConfig};

use crate::TelemetryError;

/// How long one export may take before it is given up (the batch is dropped, never the
/// request path held).
const TIMEOUT: Duration = Duration::from_secs(10);

/// The span exporter for `url` (the collector's traces path) and the runtime its requests run
/// on.
pub(crate) fn exporter(
    url: &str,
) -> Result<(SpanExporter, tokio::runtime::Runtime), TelemetryError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("loom-otlp")
        .enable_all()
        .build()
        .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    let http = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .build()
        .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    let client = Client {
        http,
        runtime: runtime.handle().clone(),
    };
    let exporter = SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(TIMEOUT)
        .with_http_client(client)
        .build()
        .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    Ok((exporter, runtime))
}

#[derive(Debug)]
struct Client {
    http: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let http = self.http.clone();
        let sent = self.runtime.spawn(async move {
            let reply = http
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body)
                .send()
                .await?;
            let status = reply.status();
            let headers = reply.headers().clone();
            let body = reply.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, body))
        });
        let (status, headers, body) = sent.await??;
        let mut response = Response::builder().status(status).body(body)?;
        *response.headers_mut() = headers;
        Ok(response)
    }
}
