//! The shapes the API's types take in `/openapi.json` where a Rust type says less than the
//! server enforces: ids, seqs, references, format names, and the values defined by other crates
//! (events, receipts, steps). The handlers' request and response types name these with
//! `#[schema(schema_with = ...)]` or `value_type`; everything else is derived from the types.

use std::borrow::Cow;

use serde::Serialize;
use utoipa::openapi::schema::{ArrayBuilder, Object, ObjectBuilder, Schema, SchemaType, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

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

/// The kinds of event the log holds.
const EVENT_KINDS: [&str; 11] = [
    "system",
    "user",
    "assistant",
    "tool_result",
    "direct_message",
    "spawn",
    "agent_result",
    "pin",
    "rewrite",
    "repeat",
    "hidden",
];

fn typed(ty: Type) -> ObjectBuilder {
    ObjectBuilder::new().schema_type(ty)
}

fn or_null(ty: Type) -> ObjectBuilder {
    ObjectBuilder::new().schema_type(SchemaType::from_iter([ty, Type::Null]))
}

fn id_of(builder: ObjectBuilder) -> Object {
    builder
        .min_length(Some(1))
        .max_length(Some(crate::auth::CLIENT_ID_LEN))
        .pattern(Some(ID_PATTERN))
        .build()
}

/// A session or agent id.
pub(crate) fn id() -> Object {
    id_of(typed(Type::String))
}

/// An optional session or agent id in a body.
pub(crate) fn id_or_null() -> Object {
    id_of(or_null(Type::String))
}

/// An event's seq (seqs start at 1).
pub(crate) fn seq() -> Object {
    typed(Type::Integer)
        .minimum(Some(1usize))
        .maximum(Some(u64::MAX as usize))
        .build()
}

/// An optional seq in a body.
pub(crate) fn seq_or_null() -> Object {
    or_null(Type::Integer)
        .minimum(Some(1usize))
        .maximum(Some(u64::MAX as usize))
        .build()
}

/// A bound of a range of seqs (0 reads from the start).
pub(crate) fn seq_bound() -> Object {
    typed(Type::Integer)
        .minimum(Some(0usize))
        .maximum(Some(u64::MAX as usize))
        .build()
}

/// A count (of tokens, hits) in a body.
pub(crate) fn count() -> Object {
    typed(Type::Integer)
        .minimum(Some(0usize))
        .maximum(Some(u64::MAX as usize))
        .build()
}

/// A positive amount (a budget in tokens, a time to live in seconds), when given.
pub(crate) fn positive_or_null() -> Object {
    or_null(Type::Integer)
        .minimum(Some(1usize))
        .maximum(Some(u64::MAX as usize))
        .build()
}

/// A count (of tokens, hits) in a body, when given.
pub(crate) fn count_or_null() -> Object {
    or_null(Type::Integer)
        .minimum(Some(0usize))
        .maximum(Some(u64::MAX as usize))
        .build()
}

/// A memory item's id.
pub(crate) fn item_id() -> Object {
    typed(Type::Integer)
        .minimum(Some(1usize))
        .maximum(Some(i64::MAX as usize))
        .build()
}

/// Text that must hold something besides whitespace.
pub(crate) fn text() -> Object {
    typed(Type::String)
        .min_length(Some(1))
        .pattern(Some(TEXT_PATTERN))
        .build()
}

/// A reference to recall.
pub(crate) fn reference() -> Object {
    typed(Type::String)
        .min_length(Some(1))
        .max_length(Some(512))
        .pattern(Some(REF_PATTERN))
        .build()
}

/// The name of a history's format (`?format=`).
pub(crate) fn format_name() -> Object {
    typed(Type::String)
        .enum_values(Some(loom_import::FORMAT_NAMES.iter().copied()))
        .build()
}

/// The format a render writes, when named.
pub(crate) fn render_format_or_null() -> Object {
    let mut names: Vec<Option<&str>> = loom_core::Api::ALL
        .iter()
        .map(|a| Some(a.as_str()))
        .collect();
    names.push(Some("react"));
    names.push(None);
    or_null(Type::String).enum_values(Some(names)).build()
}

/// A memory tier, when named.
pub(crate) fn tier_or_null() -> Object {
    or_null(Type::String)
        .enum_values(Some([Some("L1"), Some("L2"), Some("L3"), Some("L4"), None]))
        .build()
}

/// A memory tier.
pub(crate) fn tier() -> Object {
    typed(Type::String)
        .enum_values(Some(["L1", "L2", "L3", "L4"]))
        .build()
}

/// A search's budget in tokens, when given.
pub(crate) fn search_budget_or_null() -> Object {
    or_null(Type::Integer)
        .minimum(Some(1usize))
        .maximum(Some(super::memory::MAX_BUDGET as usize))
        .build()
}

/// The kind of an event.
fn event_kind() -> Object {
    typed(Type::String).enum_values(Some(EVENT_KINDS)).build()
}

/// Declares a type whose schema is written here, under its own name in the description.
macro_rules! described {
    ($(#[$doc:meta])* $name:ident => $schema:expr) => {
        $(#[$doc])*
        pub(crate) struct $name;

        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                RefOr::T(Schema::Object($schema))
            }
        }

        impl ToSchema for $name {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed(stringify!($name))
            }
        }
    };
}

described! {
    /// A log event; its fields by kind are documented in docs/formats.md.
    Event => typed(Type::Object)
        .description(Some("A log event; its fields by kind are documented in docs/formats.md"))
        .property("seq", seq())
        .property("ts_ms", typed(Type::Integer))
        .property("kind", event_kind())
        .required("seq")
        .required("ts_ms")
        .required("kind")
        .build()
}

described! {
    /// An event to append; its fields by kind are documented in docs/formats.md.
    NewEvent => typed(Type::Object)
        .description(Some("An event to append; its fields by kind are documented in docs/formats.md"))
        .property("ts_ms", typed(Type::Integer))
        .property("kind", event_kind())
        .required("ts_ms")
        .required("kind")
        .build()
}

described! {
    /// A conversation in a provider's form.
    History => ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Object, Type::Array]))
        .description(Some("A conversation in a provider's form: a message list, or an object with \
            `messages` (and `system`) or `input` (and `instructions`)"))
        .build()
}

described! {
    /// What a render did with each event of the log (docs/formats.md, "Receipts").
    Receipt => ["model", "format", "at_seq", "estimate", "verbatim", "stubbed", "grouped", "summarized", "dropped"]
        .into_iter()
        .fold(typed(Type::Object), ObjectBuilder::required)
        .description(Some("What a render did with each event of the log (docs/formats.md)"))
        .build()
}

described! {
    /// A tool result as a reduced step.
    Step => ["id", "observation", "success"]
        .into_iter()
        .fold(typed(Type::Object), ObjectBuilder::required)
        .description(Some("A tool result as a reduced step (docs/formats.md)"))
        .build()
}

described! {
    /// The usage a provider reported for a model call, if any yet.
    Usage => typed(Type::Object)
        .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
        .property("input_tokens", typed(Type::Integer).minimum(Some(0usize)))
        .property("cached_input_tokens", typed(Type::Integer).minimum(Some(0usize)))
        .property("output_tokens", typed(Type::Integer).minimum(Some(0usize)))
        .property("reported_ms", typed(Type::Integer))
        .build()
}

described! {
    /// The original bytes of an output.
    Bytes => typed(Type::String)
        .content_media_type("application/octet-stream")
        .build()
}

/// A list of events to append.
pub(crate) fn new_events(min_items: usize) -> utoipa::openapi::schema::Array {
    ArrayBuilder::new()
        .items(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
            NewEvent::name(),
        )))
        .min_items(Some(min_items))
        .build()
}

/// At least one event.
pub(crate) fn some_new_events() -> utoipa::openapi::schema::Array {
    new_events(1)
}

/// Events to start a session with, if any.
pub(crate) fn first_events() -> utoipa::openapi::schema::Array {
    new_events(0)
}

/// The errors every endpoint may answer: a malformed request (400), a missing or unknown key
/// (401), and what the caller's tenant does not have (404).
pub(crate) struct Errors;

impl utoipa::IntoResponses for Errors {
    fn responses() -> std::collections::BTreeMap<String, RefOr<utoipa::openapi::response::Response>>
    {
        [
            (400, "malformed"),
            (401, "no key, or an unknown one"),
            (404, "not found"),
        ]
        .into_iter()
        .map(|(status, description)| {
            let response = utoipa::openapi::ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    utoipa::openapi::ContentBuilder::new()
                        .schema(Some(utoipa::openapi::Ref::from_schema_name(
                            crate::error::ErrorBody::name(),
                        )))
                        .build(),
                )
                .build();
            (status.to_string(), RefOr::T(response))
        })
        .collect()
    }
}

// Parameters take these as `value_type` (inlined): a parameter's schema cannot come from a
// function without losing whether it is required.

described! {
    /// A session or agent id in a path or query.
    Id => id()
}

described! {
    /// A seq or a model call's number in a path or query.
    Seq => seq()
}

described! {
    /// A bound of a range of seqs in a query.
    SeqBound => seq_bound()
}

described! {
    /// A memory item's id in a path.
    ItemId => item_id()
}

described! {
    /// A reference to recall, in a query.
    Reference => reference()
}

described! {
    /// The name of a history's format, in a query.
    FormatName => format_name()
}

/// The seqs an append gave (`first_seq > last_seq` when it added none).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Appended {
    first_seq: u64,
    last_seq: u64,
}

impl Appended {
    pub(crate) fn of(seqs: &std::ops::RangeInclusive<u64>) -> Self {
        Self {
            first_seq: *seqs.start(),
            last_seq: *seqs.end(),
        }
    }
}
