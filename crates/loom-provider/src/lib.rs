//! The providers' wire formats and the one HTTP client that speaks them: OpenAI Chat
//! Completions, OpenAI Responses, Anthropic Messages.
//!
//! The parsers are pure (no I/O, no async), so that the proxy, the agent runtime and the
//! summarizers share one reading of each format; [`client`] sends requests and reads replies
//! through them, for the agent loop and the summarizers, and names each API's URL and credential
//! headers for the proxy:
//!
//! - [`SseParser`] turns a streamed body into events, whatever the chunk boundaries;
//! - [`parse_reply`] and [`StreamAssembler`] read the assistant turn of a reply, whole or
//!   streamed, with the provider's usage;
//! - [`check_request`] refuses a client request that the provider would refuse, naming the field,
//!   before anything is forwarded or stored;
//! - [`error_body`] shapes Loom's own errors the way each provider's SDKs expect them;
//! - [`client::Client`] calls a provider, streaming or not, retrying only before a reply starts,
//!   with one typed error, [`client::CallError`].
//!
//! The proxy's side of a streamed reply: the bytes go to the client untouched, and the same
//! chunks go through the parser into the assembler; only a finished turn is logged.
//!
//! ```
//! use loom_core::Api;
//! use loom_provider::{SseParser, StreamAssembler};
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
//! # Ok::<(), loom_provider::ProviderError>(())
//! ```

mod check;
pub mod client;
mod error;
mod error_body;
mod json;
mod reply;
mod sse;

pub use check::{check_continuation, check_request, CallIds, RequestError};
pub use error::{ProviderError, Result};
pub use error_body::error_body;
pub use reply::{parse_reply, AssistantReply, ProviderUsage, StreamAssembler};
pub use sse::{SseEvent, SseParser};
