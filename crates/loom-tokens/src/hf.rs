//! Local HuggingFace `tokenizer.json` files (Llama, Qwen, Mistral and other open models).
//!
//! Loaded from a path only: the `tokenizers` crate is built without its `http` (hub download)
//! and `onig` (C regex) features, so nothing is fetched and nothing native is compiled. Counts
//! are the model's own (`encode` without adding special tokens); special-token strings that
//! the file lists as added tokens are matched as the model's server would match them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Result, TokenError};

/// A tokenizer loaded from a `tokenizer.json` file; cheap to clone.
#[derive(Clone)]
pub struct TokenizerFile {
    path: PathBuf,
    inner: Arc<tokenizers::Tokenizer>,
}

impl std::fmt::Debug for TokenizerFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenizerFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl TokenizerFile {
    /// Loads a `tokenizer.json`.
    pub fn open(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| TokenError::TokenizerFile {
            path: path.to_owned(),
            reason: format!("cannot read: {e}"),
        })?;
        let inner =
            tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| TokenError::TokenizerFile {
                path: path.to_owned(),
                reason: format!("not a tokenizer.json: {e}"),
            })?;
        Ok(Self {
            path: path.to_owned(),
            inner: Arc::new(inner),
        })
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of tokens in `text`.
    pub fn count(&self, text: &str) -> Result<usize> {
        self.inner
            .encode_fast(text, false)
            .map(|e| e.len())
            .map_err(|e| TokenError::Tokenize {
                tokenizer: self.path.display().to_string(),
                reason: e.to_string(),
            })
    }
}
