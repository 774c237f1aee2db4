//! The crate's one error type.

use std::path::PathBuf;

/// What went wrong while counting tokens, loading a tokenizer or resolving a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The model is in no registry; `near` lists the closest known names.
    #[error("unknown model `{model}`{}", near_list(.near))]
    UnknownModel {
        /// The name that was asked for.
        model: String,
        /// Known names that look like it, closest first.
        near: Vec<String>,
    },
    /// A registry file (built-in or the user's) is malformed.
    #[error("model registry {origin}: {reason}")]
    Registry {
        /// Which file: `built-in` or the user file's path.
        origin: String,
        /// What is wrong, naming the model and field.
        reason: String,
    },
    /// A `tokenizer.json` file could not be read or parsed.
    #[error("tokenizer file {}: {reason}", .path.display())]
    TokenizerFile {
        /// The file.
        path: PathBuf,
        /// Why it was refused.
        reason: String,
    },
    /// A model that needs a local tokenizer file has none configured.
    #[error("model `{model}` is counted with a local tokenizer.json, but no `tokenizer_file` is configured for it")]
    MissingTokenizerFile {
        /// The model.
        model: String,
    },
    /// A provider request body does not have the shape its format requires.
    #[error("{format} request: field `{field}`: {reason}")]
    Request {
        /// The wire format being counted.
        format: &'static str,
        /// JSON path of the offending field.
        field: String,
        /// What was expected.
        reason: String,
    },
    /// The tokenizer itself failed on some input (only `tokenizer.json` models can).
    #[error("tokenizer `{tokenizer}` failed: {reason}")]
    Tokenize {
        /// The tokenizer's id.
        tokenizer: String,
        /// Its message.
        reason: String,
    },
}

fn near_list(near: &[String]) -> String {
    if near.is_empty() {
        "; no known model is close (add it to a user registry file)".to_owned()
    } else {
        format!("; did you mean: {}?", near.join(", "))
    }
}

/// Result with [`TokenError`].
pub type Result<T, E = TokenError> = std::result::Result<T, E>;
