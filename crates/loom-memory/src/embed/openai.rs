//! An OpenAI-compatible `/v1/embeddings` endpoint as an [`Embedder`], over the project's one
//! HTTP client (retries, timeouts and errors as for generation calls).

use std::sync::atomic::{AtomicUsize, Ordering};

use loom_core::Api;
use loom_provider::client::{Client, ProviderConfig};

use super::{normalize, EmbedError, Embedder};

/// Texts sent per request: well under OpenAI's 2,048 inputs, and small enough that one slow
/// request does not hold a whole index run.
const BATCH: usize = 128;

/// Environment variable for the embeddings base URL, read before `OPENAI_BASE_URL` (an
/// embedding server is often not the chat provider).
pub(crate) const BASE_URL_ENV: &str = "LOOM_EMBED_BASE_URL";

/// Environment variable for the embeddings key, read before `OPENAI_API_KEY`.
pub(crate) const API_KEY_ENV: &str = "LOOM_EMBED_API_KEY";

/// Embeddings from an OpenAI-compatible endpoint.
#[derive(Debug)]
pub struct OpenAiEmbedder {
    client: Client,
    id: String,
    /// Sent as `dimensions` when set (models that can shorten their vectors honour it).
    requested: Option<usize>,
    /// The vector length, fixed by the first reply (0 until then) unless requested.
    dimensions: AtomicUsize,
}

impl OpenAiEmbedder {
    /// An embedder for `config` (its base URL, key, model and limits); `dimensions`, when
    /// given, is asked of the server and checked on every reply.
    pub fn new(config: ProviderConfig, dimensions: Option<usize>) -> Result<Self, EmbedError> {
        let model = config.model.clone().unwrap_or_default();
        let id = match dimensions {
            Some(d) => format!("openai:{model}/{d}"),
            None => format!("openai:{model}"),
        };
        let client = Client::new(config).map_err(|e| EmbedError::Call {
            model: id.clone(),
            source: Box::new(e),
        })?;
        Ok(Self {
            client,
            id,
            requested: dimensions,
            dimensions: AtomicUsize::new(dimensions.unwrap_or(0)),
        })
    }

    /// `model` at the endpoint the environment names: base URL from `LOOM_EMBED_BASE_URL`, else
    /// `OPENAI_BASE_URL`, else OpenAI's; key from `LOOM_EMBED_API_KEY`, else `OPENAI_API_KEY`
    /// (none is sent when neither is set, as local servers need none).
    pub fn from_env(model: &str) -> Result<Self, EmbedError> {
        let id = format!("openai:{model}");
        let call = |e| EmbedError::Call {
            model: id.clone(),
            source: Box::new(e),
        };
        let mut config = ProviderConfig::from_env(Api::OpenaiChat, model).map_err(call)?;
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        if let Some(url) = var(BASE_URL_ENV) {
            config.base_url = url;
        }
        if let Some(key) = var(API_KEY_ENV) {
            config.api_key = Some(key);
        }
        Self::new(config, None)
    }
}

impl Embedder for OpenAiEmbedder {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn dimensions(&self) -> Option<usize> {
        match self.dimensions.load(Ordering::Relaxed) {
            0 => None,
            d => Some(d),
        }
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for batch in texts.chunks(BATCH) {
            let input: Vec<String> = batch
                .iter()
                .map(|t| {
                    // The API refuses an empty string; a space embeds as "nothing".
                    if t.trim().is_empty() {
                        " ".to_owned()
                    } else {
                        (*t).to_owned()
                    }
                })
                .collect();
            let reply =
                self.client
                    .embed(&input, self.requested)
                    .map_err(|e| EmbedError::Call {
                        model: self.id.clone(),
                        source: Box::new(e),
                    })?;
            for mut v in reply.vectors {
                let expected = self.dimensions.load(Ordering::Relaxed);
                if expected == 0 {
                    self.dimensions.store(v.len(), Ordering::Relaxed);
                } else if v.len() != expected {
                    return Err(EmbedError::Dimensions {
                        model: self.id.clone(),
                        expected,
                        got: v.len(),
                    });
                }
                // Not every server normalizes (TEI may not); stored vectors always are.
                normalize(&mut v);
                out.push(v);
            }
        }
        Ok(out)
    }
}
