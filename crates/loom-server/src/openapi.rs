//! `GET /openapi.json`: the OpenAPI 3.1 description of the HTTP API, generated from the
//! handlers' own request and response types and their `#[utoipa::path]` annotations, so it
//! cannot drift from what the server parses and answers. A test drives every operation and
//! checks each response against the schema given for its status; the schema-driven fuzzer
//! (`tests/fuzz/run.sh`) checks the server enforces every constraint declared here.

use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;
use utoipa::openapi::security::SecurityRequirement;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::api::{self, explain, inspect, memory, schema};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Loom HTTP API",
        description = "Everything the loom CLI does, for programs. Errors are \
            {\"error\": {\"type\", \"message\", \"field\"}}; a method a path does not list here is \
            a 405 in that shape. See docs/serve.md.",
    ),
    paths(
        api::list_sessions,
        api::create_session,
        api::get_session,
        api::delete_session,
        api::read_events,
        api::append_events,
        api::import::history,
        api::import::import,
        api::render,
        explain::explain,
        api::steps,
        api::recall,
        api::usage,
        api::receipts,
        api::receipt,
        inspect::sessions,
        inspect::session,
        inspect::request::call,
        inspect::usage,
        memory::search,
        memory::save,
        memory::get_item,
        memory::forget_item,
        memory::kb_list,
        memory::kb_add,
        memory::kb_remove,
        memory::kb_search,
    ),
    components(schemas(crate::error::ErrorBody, schema::Event, schema::NewEvent)),
    modifiers(&Security),
)]
struct Description;

/// Every operation takes a Loom key (with `--auth keys`) as a bearer token or in `x-api-key`.
struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("A Loom key (--auth keys)"))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "apiKey",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "x-api-key",
                "A Loom key (--auth keys)",
            ))),
        );
        let either = vec![
            SecurityRequirement::new("bearer", Vec::<String>::new()),
            SecurityRequirement::new("apiKey", Vec::<String>::new()),
        ];
        for item in openapi.paths.paths.values_mut() {
            for op in [
                &mut item.get,
                &mut item.post,
                &mut item.delete,
                &mut item.put,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                op.security = Some(either.clone());
            }
        }
    }
}

/// The whole description.
pub(crate) fn document() -> Value {
    let mut doc = Description::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").to_owned();
    serde_json::to_value(doc).unwrap_or(Value::Null)
}

pub(crate) async fn serve() -> Response {
    Json(document()).into_response()
}
