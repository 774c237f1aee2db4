//! The render pipeline's token meter over an exact OpenAI encoding.

use loom_core::render::TokenMeter;
use loom_tokens::Encoding;

/// Counts with an exact BPE encoding, as ordinary text.
#[derive(Debug, Clone, Copy)]
pub struct EncodingMeter(pub Encoding);

impl TokenMeter for EncodingMeter {
    fn count(&self, text: &str) -> u64 {
        self.0.count(text) as u64
    }

    fn name(&self) -> &str {
        self.0.name()
    }
}
