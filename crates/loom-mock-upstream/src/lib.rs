//! A mock model provider that speaks the wire formats of OpenAI Chat Completions, OpenAI
//! Responses and Anthropic Messages, streaming and not, so that `loom serve` and the official
//! SDKs can be tested with no network and no API key.
//!
//! Replies are a deterministic function of the request (see [`Mock`] for the rules), usage
//! figures mimic a prompt cache (the common prefix with the previous request on the same
//! endpoint counts as cached), and [`Fault`]s inject provider errors, slow or fragmented
//! streams and dropped connections on demand. Tests in Rust drive it through [`MockHandle`];
//! other processes drive the same controls over HTTP under `/_mock/`.
//!
//! | route | what it does |
//! |---|---|
//! | `POST /v1/chat/completions`, `POST /v1/responses`, `POST /v1/messages` | generate; SSE when the body has `"stream": true` |
//! | `POST /v1/embeddings` | OpenAI's embeddings: deterministic unit vectors from the words of each input (64 numbers unless `dimensions` says) |
//! | `GET /v1/models` | OpenAI's list shape, or Anthropic's when `anthropic-version` is sent |
//! | `GET /_mock/requests` | every recorded request: `[{"method", "path", "headers": [[name, value], ...], "body"}]` |
//! | `DELETE /_mock/requests` | forget them |
//! | `POST /_mock/faults` | queue a [`Fault`] (JSON) for the next request |
//! | `DELETE /_mock/faults` | empty the queue |
//! | `POST /_mock/default_fault` | a [`Fault`] for every request when the queue is empty, or `null` |
//! | `POST /_mock/reset` | no requests, no faults, an empty simulated cache |
//!
//! Requests that a provider would refuse get its 400 in its shape: missing or mistyped fields,
//! and tool calls without their results (or results without their calls). The binary
//! `loom-mock-upstream [--listen ADDR]` prints `listening on http://ADDR` once bound and serves
//! until SIGINT or SIGTERM.

mod behaviour;
mod chat;
mod embeddings;
mod error;
mod fault;
mod gemini;
mod messages;
mod mock;
mod request;
mod responses;
mod rules;
mod wire;

pub use fault::Fault;
pub use mock::{Mock, MockHandle, Recorded};
