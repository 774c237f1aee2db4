//! A model loaded from a folder, with no download at run time: `model.safetensors` and
//! `tokenizer.json` (and, for BERT, `config.json`), as sentence-transformers and Model2Vec save
//! them.
//!
//! Which kind the folder holds is read from its tensors: an `embeddings` matrix alone is a
//! static Model2Vec model (a text's vector is the mean of its tokens' rows); BERT's
//! `embeddings.word_embeddings.weight` and `encoder.layer.N.…` make an encoder (the mean of its
//! last layer's token states). Either way the vector is normalized.

use std::path::Path;

use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokenizers::{Tokenizer, TruncationParams};

use super::bert::{Bert, Layer, Linear, Norm};
use super::{normalize, EmbedError, Embedder};

const WEIGHTS: &str = "model.safetensors";
const TOKENIZER: &str = "tokenizer.json";
const CONFIG: &str = "config.json";

/// Tokens kept of a text when the model does not say (sentence-transformers' default for
/// MiniLM); the rest of a long text is not embedded.
const DEFAULT_MAX_TOKENS: usize = 256;

/// Texts embedded per thread at least: fewer are not worth a thread.
const MIN_PER_THREAD: usize = 4;

/// Tokens BERT takes in one stacked group: enough that each weight matrix read serves many
/// rows, few enough that a group's activations stay in cache.
const GROUP_TOKENS: usize = 512;

/// The most threads one batch uses.
const MAX_THREADS: usize = 4;

#[derive(Debug)]
enum Model {
    /// One row per token id: `[vocab][dims]`.
    Static {
        rows: Vec<f32>,
        dims: usize,
    },
    Bert(Box<Bert>),
}

/// A local embedding model; see the module documentation.
#[derive(Debug)]
pub struct LocalEmbedder {
    id: String,
    /// The folder it was loaded from, which errors name.
    path: std::path::PathBuf,
    dims: usize,
    tokenizer: Tokenizer,
    model: Model,
}

impl LocalEmbedder {
    /// Loads the model in folder `path`; nothing is fetched.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, EmbedError> {
        let path = path.as_ref();
        let fail = |file: &'static str, reason: String| EmbedError::Model {
            path: path.to_path_buf(),
            file,
            reason,
        };
        let bytes = std::fs::read(path.join(WEIGHTS)).map_err(|e| fail(WEIGHTS, e.to_string()))?;
        let tensors = SafeTensors::deserialize(&bytes).map_err(|e| fail(WEIGHTS, e.to_string()))?;
        let mut tokenizer = Tokenizer::from_file(path.join(TOKENIZER))
            .map_err(|e| fail(TOKENIZER, e.to_string()))?;
        tokenizer.with_padding(None);
        let names: Vec<String> = tensors.names().into_iter().cloned().collect();
        let prefix = ["", "bert.", "model."].into_iter().find(|p| {
            names
                .iter()
                .any(|n| *n == format!("{p}embeddings.word_embeddings.weight"))
        });
        let loader = Loader {
            tensors: &tensors,
            path,
        };
        let (model, dims, max_tokens) = match prefix {
            Some(prefix) => {
                let config = read_config(path)?;
                let bert = load_bert(&loader, prefix, &config)?;
                let max = sentence_max_tokens(path).unwrap_or(DEFAULT_MAX_TOKENS);
                let max = max.min(bert.max_tokens());
                let dims = bert.hidden;
                (Model::Bert(Box::new(bert)), dims, max)
            }
            None => {
                let (rows, shape) = loader.matrix("embeddings", None)?;
                (
                    Model::Static {
                        rows,
                        dims: shape[1],
                    },
                    shape[1],
                    usize::MAX,
                )
            }
        };
        if max_tokens != usize::MAX {
            tokenizer
                .with_truncation(Some(TruncationParams {
                    max_length: max_tokens,
                    ..TruncationParams::default()
                }))
                .map_err(|e| fail(TOKENIZER, e.to_string()))?;
        } else {
            tokenizer
                .with_truncation(None)
                .map_err(|e| fail(TOKENIZER, e.to_string()))?;
        }
        // The id names the folder and fingerprints the weights (their header, which lists every
        // tensor's name, shape and offsets, and the file's size), so that a different model
        // under the same folder name is still told apart.
        let mut hasher = Sha256::new();
        hasher.update(bytes.len().to_le_bytes());
        let header_len = bytes
            .get(..8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map_or(0, |b| usize::try_from(u64::from_le_bytes(b)).unwrap_or(0));
        hasher.update(bytes.get(..8 + header_len).unwrap_or(&bytes));
        let digest = hex::encode(&hasher.finalize()[..6]);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into());
        Ok(Self {
            id: format!("local:{name}@{digest}"),
            path: path.to_path_buf(),
            dims,
            tokenizer,
            model,
        })
    }

    /// The token ids of text `index` (special tokens added for BERT, as it was trained).
    fn tokens(&self, index: usize, text: &str) -> Result<Vec<u32>, EmbedError> {
        let special = matches!(self.model, Model::Bert(_));
        let encoding = self
            .tokenizer
            .encode(text, special)
            .map_err(|e| EmbedError::Input {
                model: self.id.clone(),
                index,
                reason: e.to_string(),
            })?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The normalized vectors of `texts` (`first` is the first's index in the caller's batch),
    /// in order. BERT takes them in groups of about [`GROUP_TOKENS`] tokens, stacked, each
    /// product split over `threads` threads.
    fn embed_part(
        &self,
        first: usize,
        texts: &[&str],
        threads: usize,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let ids = texts
            .iter()
            .enumerate()
            .map(|(i, t)| self.tokens(first + i, t))
            .collect::<Result<Vec<_>, _>>()?;
        let mut out = Vec::with_capacity(texts.len());
        match &self.model {
            Model::Static { rows, dims } => {
                let vocab = rows.len() / dims.max(&1);
                for ids in &ids {
                    let mut sum = vec![0.0f32; *dims];
                    let mut n = 0usize;
                    for &id in ids {
                        let id = id as usize;
                        if id < vocab {
                            for (s, r) in sum.iter_mut().zip(&rows[id * dims..(id + 1) * dims]) {
                                *s += r;
                            }
                            n += 1;
                        }
                    }
                    sum.iter_mut().for_each(|s| *s /= n.max(1) as f32);
                    out.push(sum);
                }
            }
            Model::Bert(bert) => {
                let mut group: Vec<&[u32]> = Vec::new();
                let mut tokens = 0;
                for ids in &ids {
                    if !group.is_empty() && tokens + ids.len() > GROUP_TOKENS {
                        out.extend(self.bert_group(bert, &group, threads)?);
                        group.clear();
                        tokens = 0;
                    }
                    group.push(ids);
                    tokens += ids.len();
                }
                out.extend(self.bert_group(bert, &group, threads)?);
            }
        }
        out.iter_mut().for_each(|v| normalize(v));
        Ok(out)
    }

    /// BERT's vectors of a group of token lists; an empty list (no tokens) gets zeros.
    fn bert_group(
        &self,
        bert: &Bert,
        group: &[&[u32]],
        threads: usize,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let filled: Vec<&[u32]> = group.iter().copied().filter(|g| !g.is_empty()).collect();
        let mut vectors = bert
            .mean_pooled_on(&filled, threads)
            .map_err(|e| EmbedError::Model {
                path: self.path.clone(),
                file: WEIGHTS,
                reason: format!("a layer's shapes do not fit: {e}"),
            })?
            .into_iter();
        Ok(group
            .iter()
            .map(|g| match g.is_empty() {
                true => vec![0.0; self.dims],
                false => vectors.next().unwrap_or_else(|| vec![0.0; self.dims]),
            })
            .collect())
    }
}

impl Embedder for LocalEmbedder {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn dimensions(&self) -> Option<usize> {
        Some(self.dims)
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .min(MAX_THREADS)
            .min(texts.len().div_ceil(MIN_PER_THREAD))
            .max(1);
        if texts.len() == 1 {
            // One text (a query): its products split over the cores instead.
            let cores = std::thread::available_parallelism()
                .map_or(1, usize::from)
                .min(MAX_THREADS);
            return self.embed_part(0, texts, cores);
        }
        if threads == 1 {
            return self.embed_part(0, texts, 1);
        }
        // Contiguous parts, one per thread, each a stack of groups.
        let per = texts.len().div_ceil(threads);
        let chunks: Vec<&[&str]> = texts.chunks(per).collect();
        let parts = crate::par::each(chunks.len(), |k| self.embed_part(k * per, chunks[k], 1));
        let mut out = Vec::with_capacity(texts.len());
        for part in parts {
            out.extend(part?);
        }
        Ok(out)
    }
}

/// Reads tensors of one file as `f32`, checking their shapes.
struct Loader<'a> {
    tensors: &'a SafeTensors<'a>,
    path: &'a Path,
}

impl Loader<'_> {
    fn fail(&self, reason: String) -> EmbedError {
        EmbedError::Model {
            path: self.path.to_path_buf(),
            file: WEIGHTS,
            reason,
        }
    }

    /// Tensor `name` as `f32` with its shape; its shape must be `want` where given.
    fn matrix(
        &self,
        name: &str,
        want: Option<&[usize]>,
    ) -> Result<(Vec<f32>, Vec<usize>), EmbedError> {
        let t = self
            .tensors
            .tensor(name)
            .map_err(|e| self.fail(format!("tensor `{name}`: {e}")))?;
        let shape = t.shape().to_vec();
        if let Some(want) = want {
            if shape != want {
                return Err(self.fail(format!(
                    "tensor `{name}`: shape {shape:?}, expected {want:?}"
                )));
            }
        } else if shape.len() != 2 || shape[1] == 0 {
            return Err(self.fail(format!(
                "tensor `{name}`: shape {shape:?}, expected a matrix"
            )));
        }
        let data = t.data();
        let values = match t.dtype() {
            Dtype::F32 => data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::F16 => data
                .chunks_exact(2)
                .map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]])))
                .collect(),
            other => {
                return Err(self.fail(format!(
                    "tensor `{name}`: {other:?} numbers; F32 and F16 are supported"
                )))
            }
        };
        Ok((values, shape))
    }

    fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, EmbedError> {
        Ok(self.matrix(name, Some(&[len]))?.0)
    }

    fn linear(&self, name: &str, outputs: usize, inputs: usize) -> Result<Linear, EmbedError> {
        Ok(Linear {
            w: self
                .matrix(&format!("{name}.weight"), Some(&[outputs, inputs]))?
                .0,
            b: self.vector(&format!("{name}.bias"), outputs)?,
            inputs,
            outputs,
        })
    }

    fn norm(&self, name: &str, width: usize) -> Result<Norm, EmbedError> {
        Ok(Norm {
            w: self.vector(&format!("{name}.weight"), width)?,
            b: self.vector(&format!("{name}.bias"), width)?,
        })
    }
}

/// An IEEE half-precision number as `f32`.
fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let frac = u32::from(h & 0x3ff);
    let bits = match (exp, frac) {
        (0, 0) => sign,
        (0, _) => {
            // Subnormal: normalise it.
            let mut e = 127 - 15 + 1;
            let mut f = frac;
            while f & 0x400 == 0 {
                f <<= 1;
                e -= 1;
            }
            sign | (e << 23) | ((f & 0x3ff) << 13)
        }
        (0x1f, _) => sign | 0x7f80_0000 | (frac << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (frac << 13),
    };
    f32::from_bits(bits)
}

fn read_config(path: &Path) -> Result<Value, EmbedError> {
    let fail = |reason: String| EmbedError::Model {
        path: path.to_path_buf(),
        file: CONFIG,
        reason,
    };
    let text = std::fs::read_to_string(path.join(CONFIG)).map_err(|e| fail(e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| fail(e.to_string()))
}

/// `max_seq_length` of sentence-transformers' `sentence_bert_config.json`, when there is one.
fn sentence_max_tokens(path: &Path) -> Option<usize> {
    let text = std::fs::read_to_string(path.join("sentence_bert_config.json")).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    usize::try_from(v.get("max_seq_length")?.as_u64()?).ok()
}

fn load_bert(loader: &Loader<'_>, prefix: &str, config: &Value) -> Result<Bert, EmbedError> {
    let num = |key: &str| {
        config
            .get(key)
            .and_then(Value::as_u64)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n > 0)
            .ok_or_else(|| EmbedError::Model {
                path: loader.path.to_path_buf(),
                file: CONFIG,
                reason: format!("`{key}`: missing or not a positive integer"),
            })
    };
    let (hidden, heads, layers, inner) = (
        num("hidden_size")?,
        num("num_attention_heads")?,
        num("num_hidden_layers")?,
        num("intermediate_size")?,
    );
    if hidden % heads != 0 {
        return Err(EmbedError::Model {
            path: loader.path.to_path_buf(),
            file: CONFIG,
            reason: format!("hidden_size {hidden} is not a multiple of {heads} heads"),
        });
    }
    if let Some(act) = config.get("hidden_act").and_then(Value::as_str) {
        if act != "gelu" {
            return Err(EmbedError::Model {
                path: loader.path.to_path_buf(),
                file: CONFIG,
                reason: format!("hidden_act `{act}`: only `gelu` is supported"),
            });
        }
    }
    let eps = config
        .get("layer_norm_eps")
        .and_then(Value::as_f64)
        .unwrap_or(1e-12) as f32;
    let p = |name: &str| format!("{prefix}{name}");
    let (words, wshape) = loader.matrix(&p("embeddings.word_embeddings.weight"), None)?;
    if wshape[1] != hidden {
        return Err(loader.fail(format!(
            "word embeddings of width {}, but hidden_size is {hidden}",
            wshape[1]
        )));
    }
    let (positions, _) = loader.matrix(&p("embeddings.position_embeddings.weight"), None)?;
    let (types, _) = loader.matrix(&p("embeddings.token_type_embeddings.weight"), None)?;
    let mut built = Vec::with_capacity(layers);
    for n in 0..layers {
        let l = |name: &str| p(&format!("encoder.layer.{n}.{name}"));
        let (q, k, v) = (
            loader.linear(&l("attention.self.query"), hidden, hidden)?,
            loader.linear(&l("attention.self.key"), hidden, hidden)?,
            loader.linear(&l("attention.self.value"), hidden, hidden)?,
        );
        let qkv = Linear {
            w: [q.w, k.w, v.w].concat(),
            b: [q.b, k.b, v.b].concat(),
            inputs: hidden,
            outputs: 3 * hidden,
        };
        built.push(Layer {
            qkv,
            attn_out: loader.linear(&l("attention.output.dense"), hidden, hidden)?,
            attn_norm: loader.norm(&l("attention.output.LayerNorm"), hidden)?,
            up: loader.linear(&l("intermediate.dense"), inner, hidden)?,
            down: loader.linear(&l("output.dense"), hidden, inner)?,
            out_norm: loader.norm(&l("output.LayerNorm"), hidden)?,
        });
    }
    Ok(Bert {
        hidden,
        heads,
        eps,
        words,
        positions,
        token_type: types.get(..hidden).map(<[f32]>::to_vec).unwrap_or_default(),
        embed_norm: loader.norm(&p("embeddings.LayerNorm"), hidden)?,
        layers: built,
    })
}
