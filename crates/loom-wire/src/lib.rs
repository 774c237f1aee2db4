//! The wire layer: the three provider APIs Loom speaks (OpenAI Chat Completions, OpenAI
//! Responses, Anthropic Messages), as pure functions over their JSON (no I/O, no async), so that
//! the proxy, the HTTP client, the agent runtime and the summarizers share one reading of each:
//!
//! - [`Dialect`] is one API's wire knowledge ([`dialect`] gives it): endpoints, credentials,
//!   the conversation's field, where a conversation may be continued, error bodies;
//! - [`Api`] names the APIs (defined in `loom-core`, whose log events name the API of the
//!   provider items they keep; this is the same enum);
//! - [`check_request`] refuses a client request that the provider would refuse, naming the field,
//!   before anything is forwarded or stored, and refuses nothing the provider's published rules
//!   accept (an item, block, role or field Loom does not model passes);
//! - [`SseParser`] turns a streamed body into events, whatever the chunk boundaries;
//! - [`parse_reply`] and [`StreamAssembler`] read the assistant turn of a reply, whole or
//!   streamed, with the provider's usage, keeping what Loom does not model as it came;
//! - [`error_body`] shapes Loom's own errors the way each provider's SDKs expect them.
//!
//! Requests are read into the log by `loom-import` and written from a render by `loom-core`'s
//! formats; `loom-provider` is the HTTP client that sends them.
//!
//! The proxy's side of a streamed reply: the bytes go to the client untouched, and the same
//! chunks go through the parser into the assembler; only a finished turn is logged.
//!
//! ```
//! use loom_wire::{Api, SseParser, StreamAssembler};
//!
//! let chunks: [&[u8]; 2] = [
//!     b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\"}}\n\nev",
//!     b"ent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
//! ];
//! let mut parser = SseParser::new();
//! let mut turn = StreamAssembler::new(Api::Anthropic);
//! for chunk in chunks {
//!     for event in parser.push(chunk) {
//!         turn.push(&event)?;
//!     }
//! }
//! for event in parser.finish() {
//!     turn.push(&event)?;
//! }
//! let reply = turn.finish()?;
//! assert_eq!(reply.id.as_deref(), Some("msg_1"));
//! # Ok::<(), loom_wire::ProviderError>(())
//! ```

mod check;
mod delta;
mod dialect;
mod error;
mod error_body;
mod json;
mod reply;
mod splice;
mod sse;

pub use check::{check_continuation, check_request, CallIds, RequestError};
pub use delta::{reply_deltas, stream_deltas, Delta};
pub use dialect::{
    api_of_path, content_text, dialect, gemini_max_output_tokens, gemini_target, generate_url,
    without_churn, without_churn_lines, Dialect, GeminiMethod, Header, ItemHead, Provider,
    ProviderEnv, ANTHROPIC_VERSION, CHURN_FIELDS, CHURN_LINES, GEMINI_VERSION_PATH,
};
pub use error::{ProviderError, Result};
pub use error_body::error_body;
pub use json::kind as json_kind;
pub use loom_core::Api;
pub use reply::{parse_reply, AssistantReply, ProviderUsage, StreamAssembler};
pub use splice::{stream_error, Splice};
pub use sse::{SseEvent, SseParser};
