//! `GET /openapi.json`: the OpenAPI 3.1 description of the HTTP API, built from the endpoint
//! table below, which sits beside the routes it describes. A test drives every endpoint of the
//! table and checks each response against the schema the table gives for its status, and that
//! every `/loom/v1` route of the router is in the table.

use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

/// One operation: method, path, summary, request body schema, and response schemas by status.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Operation {
    pub(crate) method: &'static str,
    pub(crate) path: &'static str,
    pub(crate) summary: &'static str,
    pub(crate) query: &'static [(&'static str, &'static str, bool)],
    pub(crate) request: Option<&'static str>,
    pub(crate) responses: &'static [(u16, &'static str)],
}

const ERRORS: [(u16, &str); 3] = [(400, "Error"), (401, "Error"), (404, "Error")];

macro_rules! responses {
    ($(($status:expr, $schema:expr)),* $(,)?) => {
        &[$(($status, $schema),)* ERRORS[0], ERRORS[1], ERRORS[2]]
    };
}

/// Every operation of the HTTP API.
pub(crate) const OPERATIONS: &[Operation] = &[
    Operation {
        method: "get",
        path: "/loom/v1/sessions",
        summary: "List the tenant's sessions",
        query: &[],
        request: None,
        responses: responses![(200, "SessionList")],
    },
    Operation {
        method: "post",
        path: "/loom/v1/sessions",
        summary: "Create a session, optionally with its first events",
        query: &[],
        request: Some("CreateSession"),
        responses: responses![(201, "Session"), (409, "Error")],
    },
    Operation {
        method: "get",
        path: "/loom/v1/sessions/{id}",
        summary: "One session",
        query: &[],
        request: None,
        responses: responses![(200, "Session")],
    },
    Operation {
        method: "get",
        path: "/loom/v1/sessions/{id}/events",
        summary: "Read the log (seqs from..=to)",
        query: &[("from", "seq0", false), ("to", "seq0", false)],
        request: None,
        responses: responses![(200, "EventList")],
    },
    Operation {
        method: "post",
        path: "/loom/v1/sessions/{id}/events",
        summary: "Append events in Loom's JSON form (all or nothing)",
        query: &[],
        request: Some("AppendEvents"),
        responses: responses![(200, "Appended")],
    },
    Operation {
        method: "post",
        path: "/loom/v1/sessions/{id}/history",
        summary: "Append the next messages or items of a provider history (only the new ones; \
                  results may answer calls already logged), creating the session if needed",
        query: &[("format", "format", false), ("agent", "id", false)],
        request: Some("History"),
        responses: responses![(200, "Appended")],
    },
    Operation {
        method: "post",
        path: "/loom/v1/import",
        summary: "Import an OpenAI Chat, Anthropic Messages or OpenAI Responses history",
        query: &[
            ("session", "id", true),
            ("format", "format", false),
            ("agent", "id", false),
            ("extend", "boolean", false),
        ],
        request: Some("History"),
        responses: responses![(200, "ImportReport"), (201, "ImportReport"), (409, "Error")],
    },
    Operation {
        method: "post",
        path: "/loom/v1/sessions/{id}/render",
        summary:
            "Render the next model call's request (body and receipt), recorded as a model call",
        query: &[],
        request: Some("RenderRequest"),
        responses: responses![(200, "Rendered")],
    },
    Operation {
        method: "get",
        path: "/loom/v1/sessions/{id}/explain",
        summary: "What happened to one event in each recorded model call",
        query: &[("event", "seq", true)],
        request: None,
        responses: responses![(200, "Explanation")],
    },
    Operation {
        method: "get",
        path: "/loom/v1/sessions/{id}/steps",
        summary: "The session's tool results as reduced steps",
        query: &[],
        request: None,
        responses: responses![(200, "StepList")],
    },
    Operation {
        method: "get",
        path: "/loom/v1/sessions/{id}/recall",
        summary: "The original bytes behind a reference (outputs/... or sha256:...)",
        query: &[("ref", "ref", true)],
        request: None,
        responses: responses![(200, "Bytes")],
    },
    Operation {
        method: "post",
        path: "/loom/v1/sessions/{id}/usage",
        summary: "Record the usage a provider reported for a model call",
        query: &[],
        request: Some("UsageReport"),
        responses: responses![(200, "ModelCall"), (409, "Error")],
    },
    Operation {
        method: "get",
        path: "/loom/v1/sessions/{id}/receipts",
        summary: "Every model call's receipt and usage",
        query: &[],
        request: None,
        responses: responses![(200, "ModelCallList")],
    },
    Operation {
        method: "get",
        path: "/loom/v1/sessions/{id}/receipts/{call}",
        summary: "One model call's receipt and usage",
        query: &[],
        request: None,
        responses: responses![(200, "ModelCall")],
    },
    Operation {
        method: "post",
        path: "/loom/v1/memory/search",
        summary: "Search an agent's memory by tier (L1 recent log, L2 notes, L3 summaries, L4 long-term) within a token budget",
        query: &[],
        request: Some("MemorySearch"),
        responses: responses![(200, "MemoryHits"), (503, "Error")],
    },
    Operation {
        method: "post",
        path: "/loom/v1/memory/items",
        summary: "Save a note into a session's working memory (L2), optionally with a time to live",
        query: &[],
        request: Some("SaveNote"),
        responses: responses![(200, "SavedNote"), (409, "Error"), (503, "Error")],
    },
    Operation {
        method: "get",
        path: "/loom/v1/memory/items/{id}",
        summary: "One memory item with its provenance",
        query: &[],
        request: None,
        responses: responses![(200, "MemoryItem"), (503, "Error")],
    },
    Operation {
        method: "delete",
        path: "/loom/v1/memory/items/{id}",
        summary: "Forget a memory item (the only delete); returns it as it was",
        query: &[],
        request: None,
        responses: responses![(200, "Forgotten"), (503, "Error")],
    },
    Operation {
        method: "get",
        path: "/loom/v1/kb/files",
        summary: "The knowledge base's files",
        query: &[],
        request: None,
        responses: responses![(200, "KbFileList"), (503, "Error")],
    },
    Operation {
        method: "post",
        path: "/loom/v1/kb/files",
        summary: "Add (or replace) a file of the knowledge base, chunked on its structure",
        query: &[],
        request: Some("KbFile"),
        responses: responses![(200, "KbAdded"), (503, "Error")],
    },
    Operation {
        method: "post",
        path: "/loom/v1/kb/remove",
        summary: "Remove a file of the knowledge base",
        query: &[],
        request: Some("KbRemove"),
        responses: responses![(200, "KbRemoved"), (503, "Error")],
    },
    Operation {
        method: "post",
        path: "/loom/v1/kb/search",
        summary: "Search the knowledge base within a token budget",
        query: &[],
        request: Some("KbSearch"),
        responses: responses![(200, "KbHits"), (503, "Error")],
    },
];

fn schemas() -> Value {
    let obj = |props: Value, required: &[&str]| json!({"type": "object", "properties": props, "required": required});
    let nullable = |t: &str| json!({"type": [t, "null"]});
    let mut all = json!({
        "Error": obj(json!({"error": obj(json!({
            "type": {"type": "string"},
            "message": {"type": "string"},
            "field": nullable("string"),
        }), &["type", "message", "field"])}), &["error"]),
        "Session": obj(json!({
            "id": {"type": "string"},
            "agent": {"type": "string"},
            "parent": nullable("string"),
            "created_ms": {"type": "integer"},
            "event_count": {"type": "integer", "minimum": 0},
        }), &["id", "agent", "parent", "created_ms", "event_count"]),
        "SessionList": obj(json!({"sessions": {"type": "array", "items": {"$ref": "#/components/schemas/Session"}}}), &["sessions"]),
        "Event": {
            "type": "object",
            "description": "A log event; its fields by kind are documented in docs/formats.md",
            "properties": {
                "seq": {"type": "integer", "minimum": 1},
                "ts_ms": {"type": "integer"},
                "kind": {"type": "string", "enum": ["system", "user", "assistant", "tool_result", "direct_message", "spawn", "agent_result", "pin", "rewrite", "repeat"]},
            },
            "required": ["seq", "ts_ms", "kind"],
        },
        "NewEvent": {
            "type": "object",
            "description": "An event to append; its fields by kind are documented in docs/formats.md",
            "properties": {
                "ts_ms": {"type": "integer"},
                "kind": {"type": "string", "enum": ["system", "user", "assistant", "tool_result", "direct_message", "spawn", "agent_result", "pin", "rewrite", "repeat"]},
            },
            "required": ["ts_ms", "kind"],
        },
        "EventList": obj(json!({"events": {"type": "array", "items": {"$ref": "#/components/schemas/Event"}}}), &["events"]),
        "CreateSession": obj(json!({
            "id": param("id"),
            "agent": param("id"),
            "parent": param("id"),
            "events": {"type": "array", "items": {"$ref": "#/components/schemas/NewEvent"}},
        }), &["id"]),
        "AppendEvents": obj(json!({"events": {"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/NewEvent"}}}), &["events"]),
        "Appended": obj(json!({"first_seq": {"type": "integer"}, "last_seq": {"type": "integer"}}), &["first_seq", "last_seq"]),
        "History": {"description": "A conversation in a provider's form: a message list, or an object with `messages` (and `system`) or `input` (and `instructions`)", "type": ["object", "array"]},
        "ImportReport": obj(json!({"sessions": {"type": "array", "items": obj(json!({
            "id": {"type": "string"},
            "outcome": {"type": "string", "enum": ["imported", "unchanged", "extended"]},
            "events": {"type": "integer"},
            "blobs": {"type": "integer"},
        }), &["id", "outcome", "events", "blobs"])}}), &["sessions"]),
        "RenderRequest": obj(json!({
            "model": {"type": "string", "minLength": 1},
            "budget": {"type": "integer", "minimum": 1, "maximum": MAX_U64},
            "format": {"type": "string", "enum": ["openai-chat", "openai-responses", "anthropic", "react"]},
            "tools": {"type": "array", "items": {"type": "object"}},
        }), &["model"]),
        "Receipt": {"type": "object", "required": ["model", "format", "at_seq", "estimate", "verbatim", "stubbed", "grouped", "summarized", "dropped"]},
        "Rendered": obj(json!({
            "body": {"type": "object"},
            "receipt": {"$ref": "#/components/schemas/Receipt"},
            "model_call": nullable("integer"),
        }), &["body", "receipt", "model_call"]),
        "Explanation": obj(json!({
            "event": {"type": "integer"},
            "kind": {"type": "string"},
            "calls": {"type": "array", "items": obj(json!({
                "call": {"type": "integer"},
                "at_seq": {"type": "integer"},
                "fate": {"type": "string"},
            }), &["call", "at_seq", "fate"])},
            "original": {"type": "object"},
        }), &["event", "kind", "calls", "original"]),
        "StepList": obj(json!({"steps": {"type": "array", "items": {"type": "object", "required": ["id", "observation", "success"]}}}), &["steps"]),
        "Bytes": {"type": "string", "contentMediaType": "application/octet-stream"},
        "UsageReport": obj(json!({
            "call": {"type": "integer", "minimum": 1, "maximum": MAX_U64},
            "input_tokens": {"type": "integer", "minimum": 0, "maximum": MAX_U64},
            "cached_input_tokens": {"type": "integer", "minimum": 0, "maximum": MAX_U64},
            "output_tokens": {"type": "integer", "minimum": 0, "maximum": MAX_U64},
        }), &["call", "input_tokens"]),
        "Usage": {"type": ["object", "null"]},
        "ModelCall": obj(json!({
            "id": {"type": "integer"},
            "session": {"type": "string"},
            "at_seq": {"type": "integer"},
            "created_ms": {"type": "integer"},
            "receipt": {},
            "usage": {"$ref": "#/components/schemas/Usage"},
        }), &["id", "session", "at_seq", "created_ms", "receipt", "usage"]),
        "ModelCallList": obj(json!({"receipts": {"type": "array", "items": {"$ref": "#/components/schemas/ModelCall"}}}), &["receipts"]),
    });
    if let (Some(all), Value::Object(more)) = (all.as_object_mut(), memory_schemas()) {
        all.extend(more);
    }
    for name in REQUESTS {
        close_request(&mut all[name]);
    }
    all
}

/// The schemas of the memory and knowledge-base endpoints.
fn memory_schemas() -> Value {
    let obj = |props: Value, required: &[&str]| json!({"type": "object", "properties": props, "required": required});
    let nullable = |t: &str| json!({"type": [t, "null"]});
    json!({
        "MemorySearch": obj(json!({
            "query": {"type": "string"},
            "agent": {"type": "string", "minLength": 1, "maxLength": 1024, "pattern": ID_PATTERN, "description": "default: the key's agent, else `agent` (the agent a session gets when none is named)"},
            "session": {"type": "string", "minLength": 1, "maxLength": 1024, "pattern": ID_PATTERN, "description": "the current session: L1 and L2 need one"},
            "tier": {"type": "string", "enum": ["L1", "L2", "L3", "L4"]},
            "budget": {"type": "integer", "minimum": 1, "maximum": 100_000},
            "limit": {"type": "integer", "minimum": 0},
            "history": {"type": "boolean"},
            "from_ms": {"type": "integer", "description": "only items valid from this time on (UTC milliseconds)"},
            "to_ms": {"type": "integer", "description": "only items that became valid at or before this time (UTC milliseconds)"},
        }), &["query"]),
        "MemoryHit": obj(json!({
            "id": {"type": "integer", "description": "absent for L1 hits (the log itself)"},
            "text": {"type": "string"},
            "tokens": {"type": "integer"},
            "score": {"type": "number"},
            "tier": {"type": "string", "enum": ["L1", "L2", "L3", "L4"]},
            "sources": {"type": "array", "items": obj(json!({
                "session": {"type": "string"}, "seq": {"type": "integer"}, "to_seq": {"type": "integer"},
            }), &["session", "seq"])},
        }), &["text", "tokens", "score", "tier", "sources"]),
        "MemoryHits": obj(json!({"hits": {"type": "array", "items": {"$ref": "#/components/schemas/MemoryHit"}}}), &["hits"]),
        "SaveNote": obj(json!({
            "text": {"type": "string", "minLength": 1, "pattern": TEXT_PATTERN},
            "session": param("id"),
            "agent": param("id"),
            "seq": {"type": "integer", "minimum": 1, "description": "default: the session's last event"},
            "ttl_seconds": {"type": "integer", "minimum": 1},
        }), &["text", "session"]),
        "SavedNote": obj(json!({
            "id": {"type": "integer"},
            "created": {"type": "boolean"},
            "expires_ms": nullable("integer"),
        }), &["id", "created", "expires_ms"]),
        "MemoryItem": obj(json!({
            "id": {"type": "integer"},
            "agent": {"type": "string"},
            "tier": {"type": "string"},
            "kind": {"type": "string"},
            "text": {"type": "string"},
            "tokens": {"type": "integer"},
            "valid_from": {"type": "integer"},
            "valid_to": nullable("integer"),
            "superseded_by": nullable("integer"),
            "expires_ms": nullable("integer"),
            "sources": {"type": "array", "items": obj(json!({
                "session": {"type": "string"}, "from_seq": {"type": "integer"},
                "to_seq": {"type": "integer"}, "ts_ms": {"type": "integer"},
            }), &["session", "from_seq", "to_seq", "ts_ms"])},
        }), &["id", "agent", "tier", "kind", "text", "tokens", "sources"]),
        "Forgotten": obj(json!({
            "forgotten": {"$ref": "#/components/schemas/MemoryItem"},
            "restored": {"type": "array", "items": {"type": "integer"}},
        }), &["forgotten", "restored"]),
        "KbFile": obj(json!({"path": param("text"), "content": {"type": "string"}}), &["path", "content"]),
        "KbAdded": obj(json!({
            "path": {"type": "string"},
            "kind": {"type": "string", "enum": ["markdown", "code", "json", "text"]},
            "chunks": {"type": "integer"},
            "replaced": {"type": "integer"},
            "unchanged": {"type": "boolean"},
        }), &["path", "kind", "chunks", "replaced", "unchanged"]),
        "KbFileList": obj(json!({"files": {"type": "array", "items": obj(json!({
            "path": {"type": "string"}, "kind": {"type": "string"}, "chunks": {"type": "integer"},
            "tokens": {"type": "integer"}, "added_ms": {"type": "integer"},
        }), &["path", "kind", "chunks", "tokens", "added_ms"])}}), &["files"]),
        "KbRemove": obj(json!({"path": param("text")}), &["path"]),
        "KbRemoved": obj(json!({"removed": {"type": "integer"}}), &["removed"]),
        "KbSearch": obj(json!({
            "query": {"type": "string"},
            "budget": {"type": "integer", "minimum": 1, "maximum": 100_000},
            "limit": {"type": "integer", "minimum": 0},
        }), &["query"]),
        "KbHits": obj(json!({"hits": {"type": "array", "items": obj(json!({
            "path": {"type": "string"}, "from_line": {"type": "integer"}, "to_line": {"type": "integer"},
            "heading": {"type": "string"}, "text": {"type": "string"}, "tokens": {"type": "integer"},
            "score": {"type": "number"},
        }), &["path", "from_line", "to_line", "text", "tokens", "score"])}}), &["hits"]),
    })
}

/// A session or agent id as the server takes it: not blank, no control characters, no leading
/// or trailing whitespace, at most 1,024 bytes (`Principal::scope`, `SessionId::new`).
const ID_PATTERN: &str =
    r"^[^\s\x00-\x1f\x7f-\x9f]([^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f])?$";

/// A reference a recall takes: an output's alias (`outputs/shell_001.log`) or a blob's hash
/// (`sha256:...`).
const REF_PATTERN: &str = concat!(
    r"^(sha256:[0-9a-f]{64}|",
    // Path components of letters, digits, `.`, `_` and `-`, none of them `.` or `..`.
    r"(\.\.[A-Za-z0-9._-]+|\.[A-Za-z0-9_-][A-Za-z0-9._-]*|[A-Za-z0-9_-][A-Za-z0-9._-]*)",
    r"(/(\.\.[A-Za-z0-9._-]+|\.[A-Za-z0-9_-][A-Za-z0-9._-]*|[A-Za-z0-9_-][A-Za-z0-9._-]*))*)$"
);

/// Text the server needs something in: at least one character that is not whitespace.
const TEXT_PATTERN: &str = r"\S";

/// The largest seq, call or count the server reads (an unsigned 64-bit integer).
const MAX_U64: u64 = u64::MAX;

/// The schema of a parameter of a kind the endpoint table names.
fn param(kind: &str) -> Value {
    match kind {
        "id" => json!({"type": "string", "minLength": 1, "maxLength": 1024, "pattern": ID_PATTERN}),
        "seq" => json!({"type": "integer", "minimum": 1, "maximum": MAX_U64}),
        "seq0" => json!({"type": "integer", "minimum": 0, "maximum": MAX_U64}),
        "item" => json!({"type": "integer", "minimum": 1, "maximum": i64::MAX}),
        "text" => json!({"type": "string", "minLength": 1, "pattern": TEXT_PATTERN}),
        "ref" => {
            json!({"type": "string", "minLength": 1, "maxLength": 512, "pattern": REF_PATTERN})
        }
        "format" => json!({"type": "string", "enum": loom_import::FORMAT_NAMES}),
        other => json!({"type": other}),
    }
}

/// The request bodies: the server refuses any field they do not name
/// (`deny_unknown_fields`), and takes `null` for an optional field as its absence, except the
/// fields listed, which have a default instead.
const REQUESTS: [&str; 9] = [
    "CreateSession",
    "AppendEvents",
    "RenderRequest",
    "UsageReport",
    "MemorySearch",
    "SaveNote",
    "KbFile",
    "KbRemove",
    "KbSearch",
];

/// Optional request fields that take a default, not `null`.
const NOT_NULLABLE: [&str; 2] = ["events", "history"];

/// Closes a request schema: no other field, `null` for the optional ones.
fn close_request(schema: &mut Value) {
    let required: Vec<String> = schema["required"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    schema["additionalProperties"] = Value::Bool(false);
    if let Some(props) = schema["properties"].as_object_mut() {
        for (name, prop) in props.iter_mut() {
            if required.contains(name) || NOT_NULLABLE.contains(&name.as_str()) {
                continue;
            }
            if let Some(ty) = prop.get("type").and_then(Value::as_str).map(str::to_owned) {
                prop["type"] = json!([ty, "null"]);
                if let Some(Value::Array(values)) = prop.get_mut("enum") {
                    values.push(Value::Null);
                }
            }
        }
    }
}

/// The whole description.
pub(crate) fn document() -> Value {
    let mut paths = Map::new();
    for op in OPERATIONS {
        let mut parameters: Vec<Value> = Vec::new();
        for segment in op.path.split('/') {
            if let Some(name) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                let kind = match (name, op.path.starts_with("/loom/v1/memory/items")) {
                    ("call", _) => "seq",
                    ("id", true) => "item",
                    _ => "id",
                };
                parameters.push(json!({
                    "name": name, "in": "path", "required": true, "schema": param(kind),
                }));
            }
        }
        for (name, kind, required) in op.query {
            parameters.push(
                json!({"name": name, "in": "query", "required": required, "schema": param(kind)}),
            );
        }
        let mut responses = Map::new();
        for (status, schema) in op.responses {
            let media = if *schema == "Bytes" {
                "application/octet-stream"
            } else {
                "application/json"
            };
            responses.insert(
                status.to_string(),
                json!({
                    "description": if *status < 300 { "success" } else { "error" },
                    "content": {media: {"schema": {"$ref": format!("#/components/schemas/{schema}")}}},
                }),
            );
        }
        let mut operation = json!({
            "summary": op.summary,
            "parameters": parameters,
            "responses": responses,
            "security": [{"bearer": []}, {"apiKey": []}],
        });
        if let Some(schema) = op.request {
            operation["requestBody"] = json!({
                "required": true,
                "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}},
            });
        }
        let entry = paths
            .entry(op.path.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        entry[op.method] = operation;
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Loom HTTP API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Everything the loom CLI does, for programs. Errors are {\"error\": {\"type\", \"message\", \"field\"}}; a method a path does not list here is a 405 in that shape. See docs/serve.md.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas(),
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "A Loom key (--auth keys)"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key", "description": "A Loom key (--auth keys)"},
            },
        },
    })
}

pub(crate) async fn serve() -> Response {
    Json(document()).into_response()
}
