//! The one HTTP client for the three provider APIs (OpenAI Chat Completions, OpenAI Responses,
//! Anthropic Messages): [`client::Client`] calls a provider, streaming or not, retrying only
//! before a reply starts, with one typed error, [`client::CallError`], and names each API's URL
//! and credential headers for the proxy. What it sends and reads is the wire layer's
//! (`loom-wire`): request checks, replies and streams, SSE.

pub mod client;
