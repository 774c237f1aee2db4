//! The one error type of the wire-format parsers: which API, which body or event, which field, why.

use loom_core::Api;

/// A `Result` whose error is a [`ProviderError`].
pub type Result<T, E = ProviderError> = std::result::Result<T, E>;

/// A reply body or stream event that cannot be turned into an assistant turn.
///
/// Every variant names the API and the record (`reply body`, `event 7 (content_block_delta)`) so
/// the proxy can log exactly what the upstream sent that it could not read, and refuse to log a
/// partial or invented turn instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// A body or an event's `data` is not JSON.
    #[error("{api} {record}: malformed JSON: {source}")]
    Json {
        /// The API whose format was being read.
        api: Api,
        /// The body or event, e.g. `event 3 (message_start)`.
        record: String,
        /// What the JSON parser said.
        #[source]
        source: serde_json::Error,
    },
    /// JSON whose shape is not the provider's: a field missing or of the wrong type.
    #[error("{api} {record}: field `{field}`: {reason}")]
    Shape {
        /// The API whose format was being read.
        api: Api,
        /// The body or event.
        record: String,
        /// JSON path of the field, e.g. `choices[0].message.tool_calls[1].id`.
        field: String,
        /// What was expected instead.
        reason: String,
    },
    /// The provider answered with an error (an error body, or an error event mid-stream).
    #[error("{api} {record}: the provider reported an error ({kind}): {message}")]
    Upstream {
        /// The API that reported it.
        api: Api,
        /// The body or event that carried it.
        record: String,
        /// The provider's error type or code (`overloaded_error`, `rate_limit_exceeded`, …).
        kind: String,
        /// The provider's message.
        message: String,
    },
    /// The stream ended before the provider said the reply was complete.
    #[error("{api} stream ended early: {reason}")]
    Incomplete {
        /// The API of the stream.
        api: Api,
        /// What was still missing.
        reason: String,
    },
}
