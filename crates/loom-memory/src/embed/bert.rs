//! A BERT encoder's forward pass on the CPU, in plain Rust: enough for small sentence-embedding
//! models (MiniLM and its kind: a few layers, a few hundred dimensions), one text at a time.
//!
//! The layout is Hugging Face's `BertModel`: word + position + token-type embeddings and a
//! layer norm, then layers of self-attention and a GELU feed-forward block, each followed by a
//! residual layer norm. Weights are `[out, in]` as PyTorch stores a `Linear`.

/// A linear layer `y = W x + b`, `W` stored `[out][in]`.
#[derive(Debug)]
pub(crate) struct Linear {
    pub(crate) w: Vec<f32>,
    pub(crate) b: Vec<f32>,
    pub(crate) inputs: usize,
    pub(crate) outputs: usize,
}

impl Linear {
    /// `x` is `[tokens][inputs]`; returns `[tokens][outputs]`. Each weight row is used for every
    /// token while it is in cache, rather than sweeping the whole matrix once per token.
    fn apply(&self, x: &[f32], tokens: usize) -> Vec<f32> {
        let (n, m) = (self.inputs, self.outputs);
        let mut y = vec![0.0f32; tokens * m];
        let token = |t: usize| &x[t * n..(t + 1) * n];
        for (o, row) in self.w.chunks_exact(n).enumerate() {
            let bias = self.b[o];
            let mut t = 0;
            // Four tokens at a time: each weight loaded once serves four dot products.
            while t + 4 <= tokens {
                let d = dot4(row, [token(t), token(t + 1), token(t + 2), token(t + 3)]);
                for (k, v) in d.iter().enumerate() {
                    y[(t + k) * m + o] = v + bias;
                }
                t += 4;
            }
            while t < tokens {
                y[t * m + o] = super::dot(row, token(t)) + bias;
                t += 1;
            }
        }
        y
    }
}

/// The dot products of `w` with four vectors of its length.
fn dot4(w: &[f32], x: [&[f32]; 4]) -> [f32; 4] {
    let mut acc = [[0.0f32; 4]; 4];
    let chunks = w.len() / 4;
    for c in 0..chunks {
        let i = c * 4;
        let wc = &w[i..i + 4];
        for (a, xs) in acc.iter_mut().zip(&x) {
            let xc = &xs[i..i + 4];
            for l in 0..4 {
                a[l] += wc[l] * xc[l];
            }
        }
    }
    let mut out = [0.0f32; 4];
    for (k, (a, xs)) in acc.iter().zip(&x).enumerate() {
        let tail: f32 = w[chunks * 4..]
            .iter()
            .zip(&xs[chunks * 4..])
            .map(|(p, q)| p * q)
            .sum();
        out[k] = a.iter().sum::<f32>() + tail;
    }
    out
}

/// A layer norm's scale and shift.
#[derive(Debug)]
pub(crate) struct Norm {
    pub(crate) w: Vec<f32>,
    pub(crate) b: Vec<f32>,
}

impl Norm {
    fn apply(&self, x: &mut [f32], eps: f32) {
        let width = self.w.len();
        for row in x.chunks_exact_mut(width) {
            let mean = row.iter().sum::<f32>() / width as f32;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / width as f32;
            let inv = 1.0 / (var + eps).sqrt();
            for ((v, w), b) in row.iter_mut().zip(&self.w).zip(&self.b) {
                *v = (*v - mean) * inv * w + b;
            }
        }
    }
}

/// One encoder layer.
#[derive(Debug)]
pub(crate) struct Layer {
    /// Query, key and value projections stacked: `[3 * hidden][hidden]`.
    pub(crate) qkv: Linear,
    pub(crate) attn_out: Linear,
    pub(crate) attn_norm: Norm,
    pub(crate) up: Linear,
    pub(crate) down: Linear,
    pub(crate) out_norm: Norm,
}

/// The whole encoder.
#[derive(Debug)]
pub(crate) struct Bert {
    pub(crate) hidden: usize,
    pub(crate) heads: usize,
    pub(crate) eps: f32,
    /// `[vocab][hidden]`
    pub(crate) words: Vec<f32>,
    /// `[max positions][hidden]`
    pub(crate) positions: Vec<f32>,
    /// Token type 0's row (a single sentence).
    pub(crate) token_type: Vec<f32>,
    pub(crate) embed_norm: Norm,
    pub(crate) layers: Vec<Layer>,
}

impl Bert {
    /// The most tokens a text may have (the position table's length).
    pub(crate) fn max_tokens(&self) -> usize {
        self.positions.len() / self.hidden.max(1)
    }

    /// The mean of the last layer's token states for `ids` (special tokens included, as
    /// sentence-transformers pools them). `ids` must be non-empty, below the vocabulary size and
    /// at most [`Self::max_tokens`] long (the caller truncates).
    pub(crate) fn mean_pooled(&self, ids: &[u32]) -> Vec<f32> {
        let h = self.hidden;
        let n = ids.len().min(self.max_tokens());
        let vocab = self.words.len() / h.max(1);
        let mut x = vec![0.0f32; n * h];
        for (t, &id) in ids.iter().take(n).enumerate() {
            let id = (id as usize).min(vocab.saturating_sub(1));
            let row = &mut x[t * h..(t + 1) * h];
            let word = &self.words[id * h..(id + 1) * h];
            let pos = &self.positions[t * h..(t + 1) * h];
            for i in 0..h {
                row[i] = word[i] + pos[i] + self.token_type[i];
            }
        }
        self.embed_norm.apply(&mut x, self.eps);
        for layer in &self.layers {
            self.layer(layer, &mut x, n);
        }
        let mut pooled = vec![0.0f32; h];
        for row in x.chunks_exact(h) {
            for (p, v) in pooled.iter_mut().zip(row) {
                *p += v;
            }
        }
        pooled.iter_mut().for_each(|p| *p /= n.max(1) as f32);
        pooled
    }

    fn layer(&self, layer: &Layer, x: &mut [f32], n: usize) {
        let h = self.hidden;
        let heads = self.heads.max(1);
        let d = h / heads;
        let scale = 1.0 / (d as f32).sqrt();
        let qkv = layer.qkv.apply(x, n);
        let row = |t: usize, part: usize, head: usize| {
            let start = t * 3 * h + part * h + head * d;
            &qkv[start..start + d]
        };
        let mut context = vec![0.0f32; n * h];
        let mut scores = vec![0.0f32; n];
        for head in 0..heads {
            for i in 0..n {
                let q = row(i, 0, head);
                let mut max = f32::NEG_INFINITY;
                for (j, s) in scores.iter_mut().enumerate() {
                    *s = super::dot(q, row(j, 1, head)) * scale;
                    max = max.max(*s);
                }
                let mut sum = 0.0;
                for s in scores.iter_mut() {
                    *s = (*s - max).exp();
                    sum += *s;
                }
                let out = &mut context[i * h + head * d..i * h + (head + 1) * d];
                for (j, s) in scores.iter().enumerate() {
                    let p = s / sum;
                    for (o, v) in out.iter_mut().zip(row(j, 2, head)) {
                        *o += p * v;
                    }
                }
            }
        }
        let attn = layer.attn_out.apply(&context, n);
        for (v, a) in x.iter_mut().zip(&attn) {
            *v += a;
        }
        layer.attn_norm.apply(x, self.eps);
        let mut up = layer.up.apply(x, n);
        up.iter_mut().for_each(|v| *v = gelu(*v));
        let down = layer.down.apply(&up, n);
        for (v, a) in x.iter_mut().zip(&down) {
            *v += a;
        }
        layer.out_norm.apply(x, self.eps);
    }
}

/// GELU as BERT defines it: `x Φ(x)`, with the exact normal CDF.
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x / std::f32::consts::SQRT_2))
}

/// The error function, from the Chebyshev-fitted `erfc` of Numerical Recipes (fractional error
/// below 1.2e-7 everywhere), computed in f64: the standard library has no `erf`.
fn erf(x: f32) -> f32 {
    let x = f64::from(x);
    let t = 1.0 / (1.0 + 0.5 * x.abs());
    let y = t
        * (-x * x - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    let erf = 1.0 - y;
    (if x >= 0.0 { erf } else { -erf }) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.520_499_9),
            (1.0, 0.842_700_8),
            (2.0, 0.995_322_3),
            (-1.0, -0.842_700_8),
        ] {
            assert!((erf(x) - want).abs() < 1e-6, "erf({x}) = {}", erf(x));
        }
        assert!((gelu(1.0) - 0.841_344_7).abs() < 1e-6);
    }

    #[test]
    fn linear_is_w_times_x_plus_b() {
        let l = Linear {
            w: vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            b: vec![0.5, -0.5],
            inputs: 3,
            outputs: 2,
        };
        let y = l.apply(&[1.0, 0.0, -1.0, 0.0, 1.0, 0.0], 2);
        assert_eq!(y, [-1.5, -2.5, 2.5, 4.5]);
        // Five tokens: four through the blocked kernel, one alone; the same answers.
        let x: Vec<f32> = (0..15).map(|i| i as f32 - 7.0).collect();
        let y = l.apply(&x, 5);
        for t in 0..5 {
            for o in 0..2 {
                let want: f32 = (0..3).map(|i| l.w[o * 3 + i] * x[t * 3 + i]).sum::<f32>() + l.b[o];
                assert_eq!(y[t * 2 + o], want);
            }
        }
    }
}
