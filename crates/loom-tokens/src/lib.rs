//! Token counting for Loom: counts it can trust, so a request is never sent over budget and
//! budget is never wasted out of caution (DESIGN.md, Token accounting).
//!
//! - [`Encoding`]: exact counts for OpenAI's `o200k_base` and `cl100k_base`, identical to
//!   Python `tiktoken` (`encode_ordinary`), vocabularies compiled in, with an early-stopping
//!   budget check.
//! - [`TokenizerFile`]: a local HuggingFace `tokenizer.json` (Llama, Qwen, Mistral).
//! - [`Estimator`]: a per-content-class estimate for models without a public tokenizer, with a
//!   safety margin from its measured error, learning from provider-reported usage and
//!   re-anchoring on it.
//! - [`count_request`]: request-level counts of OpenAI Chat, OpenAI Responses and Anthropic
//!   Messages bodies (per-message overheads, tool calls, tool schemas, images).
//! - [`Registry`]: model → tokenizer, window, output cap and cache prices; built in and
//!   extendable by a user TOML file.
//! - [`TokenCache`]: each event counted once per tokenizer.
//!
//! [`Tokenizer`] puts the three ways of counting behind [`CountTokens`]; it also implements
//! `loom_core::render::TokenMeter`, so the render pipeline budgets with real counts.

mod bpe;
mod cache;
mod error;
mod estimate;
mod hf;
mod image;
mod registry;
mod request;
mod tokenizer;

pub use bpe::Encoding;
pub use cache::{event_tokens, CacheStats, EventTokens, TokenCache};
pub use error::{Result, TokenError};
pub use estimate::{
    Anchored, Calibration, CalibrationReport, ClassUnits, ContentClass, Estimate, Estimator,
};
pub use hf::TokenizerFile;
pub use image::{data_url_size, image_size, ImageRule, UNKNOWN_SIZE};
pub use registry::{ModelInfo, Registry, TokenizerSpec};
pub use request::{count_request, RequestCount};
pub use tokenizer::{CountTokens, Tokenizer};
