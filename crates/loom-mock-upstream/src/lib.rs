//! A mock model provider that speaks the wire formats of OpenAI Chat Completions, OpenAI
//! Responses and Anthropic Messages, streaming and not, so that `loom serve` and the official
//! SDKs can be tested with no network and no API key.
//!
//! Replies are a deterministic function of the request (see [`Mock`] for the rules), usage
//! figures mimic a prompt cache (the common prefix with the previous request on the same
//! endpoint counts as cached), and [`Fault`]s inject provider errors, slow or fragmented
//! streams and dropped connections on demand. Tests in Rust drive it through [`MockHandle`];
//! other processes drive the same controls over HTTP under `/_mock/`.

mod behaviour;
mod chat;
mod error;
mod fault;
mod messages;
mod mock;
mod request;
mod responses;
mod rules;
mod wire;

pub use fault::Fault;
pub use mock::{Mock, MockHandle, Recorded};
