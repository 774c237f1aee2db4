//! Embedders: text in, one fixed-length vector out, behind one trait, so that memory search can
//! add vector similarity to full-text ranking (issue 18, item 5).
//!
//! - none: the default; memory is searched by full text only and nothing is installed;
//! - [`OpenAiEmbedder`]: any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, vLLM, Ollama,
//!   TEI), through the project's one HTTP client ([`loom_provider::client::Client`]);
//! - [`LocalEmbedder`]: a model read from a folder, never downloaded at run time: a BERT-style
//!   sentence-transformers model (safetensors + `tokenizer.json`, mean pooling) or a static
//!   Model2Vec model (one row per token, averaged).
//!
//! Every vector is stored with its embedder's [`Embedder::model_id`], so that a change of model
//! is seen: vectors of another model are neither compared nor mixed, and `loom memory index`
//! embeds the items again.

mod bert;
mod local;
mod openai;

use std::path::PathBuf;
use std::sync::Arc;

pub use local::LocalEmbedder;
pub use openai::OpenAiEmbedder;

/// A model that turns texts into vectors of one length, comparable by cosine similarity.
pub trait Embedder: Send + Sync + std::fmt::Debug {
    /// What identifies the model and the settings that change its vectors
    /// (`openai:text-embedding-3-small`, `local:all-MiniLM-L6-v2@…`): stored with each vector,
    /// so vectors of different models are never compared.
    fn model_id(&self) -> &str;

    /// The length of its vectors, when known before the first call (a remote model's is learnt
    /// from its first reply).
    fn dimensions(&self) -> Option<usize>;

    /// One vector per text, in order, each of the same length.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// Why an embedder could not be set up or could not embed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    /// The `--embedder` value (or config key) cannot be read.
    #[error("embedder `{spec}`: {reason}")]
    Spec {
        /// What was given.
        spec: String,
        /// What was expected.
        reason: String,
    },
    /// A local model folder that cannot be used: a file missing or unreadable, a tensor of the
    /// wrong shape.
    #[error("embedding model at {}: {file}: {reason}", path.display())]
    Model {
        /// The model folder.
        path: PathBuf,
        /// The file at fault (`model.safetensors`, `tokenizer.json`, `config.json`).
        file: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The embeddings endpoint failed (after its retries) or sent something unusable.
    #[error("embedding with `{model}`: {source}")]
    Call {
        /// The model id.
        model: String,
        /// What the client said.
        #[source]
        source: Box<loom_provider::client::CallError>,
    },
    /// Vectors of another length than the model's (a server that changed model under the same
    /// name, or stored vectors of another configuration).
    #[error("embedding with `{model}`: vectors of {got} numbers, expected {expected}")]
    Dimensions {
        /// The model id.
        model: String,
        /// The length expected.
        expected: usize,
        /// The length received.
        got: usize,
    },
    /// A text the model cannot take (the tokenizer refused it).
    #[error("embedding with `{model}`: text {index}: {reason}")]
    Input {
        /// The model id.
        model: String,
        /// Which text of the batch.
        index: usize,
        /// Why.
        reason: String,
    },
}

/// The embedder a `--embedder` value names: `none` (no embedder), `openai:MODEL` or
/// `local:PATH`. For `openai:` the endpoint and key come from the environment: see
/// [`OpenAiEmbedder::from_env`].
pub fn embedder_from_spec(spec: &str) -> Result<Option<Arc<dyn Embedder>>, EmbedError> {
    let bad = |reason: &str| EmbedError::Spec {
        spec: spec.to_owned(),
        reason: reason.to_owned(),
    };
    let spec = spec.trim();
    if spec.is_empty() || spec.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    match spec.split_once(':') {
        Some(("openai", model)) if !model.trim().is_empty() => {
            Ok(Some(Arc::new(OpenAiEmbedder::from_env(model.trim())?)))
        }
        Some(("local", path)) if !path.trim().is_empty() => {
            Ok(Some(Arc::new(LocalEmbedder::load(path.trim())?)))
        }
        _ => Err(bad(
            "expected `none`, `openai:MODEL` or `local:PATH` (a model folder)",
        )),
    }
}

/// Scales `v` to length 1 (a zero vector stays zero), so that a dot product is the cosine.
pub(crate) fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// The dot product of two vectors of one length.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight partial sums, so that the compiler can keep them in vector registers.
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// A vector as stored: little-endian `f32`s.
pub(crate) fn to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A stored vector read back; `None` when the blob's length is not a whole number of `f32`s.
pub(crate) fn from_blob(blob: &[u8]) -> Option<Vec<f32>> {
    if blob.len() % 4 != 0 {
        return None;
    }
    Some(
        blob.chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        assert!(embedder_from_spec("none").unwrap().is_none());
        assert!(embedder_from_spec("").unwrap().is_none());
        for bad in ["openai:", "local:", "bert", "foo:bar"] {
            assert!(
                matches!(embedder_from_spec(bad), Err(EmbedError::Spec { .. })),
                "{bad}"
            );
        }
        let missing = embedder_from_spec("local:/nonexistent/model").unwrap_err();
        assert!(
            missing.to_string().contains("/nonexistent/model"),
            "{missing}"
        );
    }

    #[test]
    fn blobs_round_trip_and_dot_is_cosine_of_unit_vectors() {
        let mut v = vec![3.0, 4.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1e-9];
        normalize(&mut v);
        assert!((dot(&v, &v) - 1.0).abs() < 1e-6);
        assert_eq!(from_blob(&to_blob(&v)).unwrap(), v);
        assert!(from_blob(&[0, 1, 2]).is_none());
        let mut zero = vec![0.0; 3];
        normalize(&mut zero);
        assert_eq!(zero, [0.0; 3]);
    }
}
