//! A BERT encoder's forward pass on the CPU, in Rust: enough for small sentence-embedding models
//! (MiniLM and its kind: a few layers, a few hundred dimensions). The matrix products are
//! `ndarray`'s (matrixmultiply's packed SIMD kernels); several texts go through together, their
//! tokens stacked for every per-token layer (projections, feed-forward, norms) and kept apart
//! only in attention, so that each weight matrix is read once per batch rather than per text.
//!
//! The layout is Hugging Face's `BertModel`: word + position + token-type embeddings and a
//! layer norm, then layers of self-attention and a GELU feed-forward block, each followed by a
//! residual layer norm. Weights are `[out, in]` as PyTorch stores a `Linear`.

use ndarray::linalg::general_mat_mul;
use ndarray::{ArrayView2, ArrayViewMut2, ShapeBuilder, ShapeError};

/// A linear layer `y = W x + b`, `W` stored `[out][in]`.
#[derive(Debug)]
pub(crate) struct Linear {
    pub(crate) w: Vec<f32>,
    pub(crate) b: Vec<f32>,
    pub(crate) inputs: usize,
    pub(crate) outputs: usize,
}

impl Linear {
    /// `x` is `[tokens][inputs]`; returns `[tokens][outputs]`.
    fn apply(&self, x: &[f32], tokens: usize) -> Result<Vec<f32>, ShapeError> {
        self.columns(x, tokens, 0, self.outputs)
    }

    /// [`Self::apply`] with the outputs split in `threads` blocks, one a thread: for a few
    /// tokens (a query), whose products are too small for one core to go fast.
    fn apply_on(&self, x: &[f32], tokens: usize, threads: usize) -> Result<Vec<f32>, ShapeError> {
        let m = self.outputs;
        if threads <= 1 {
            return self.apply(x, tokens);
        }
        let per = m.div_ceil(threads);
        let blocks = crate::par::each(threads, |k| {
            self.columns(x, tokens, (k * per).min(m), ((k + 1) * per).min(m))
        });
        let mut y = vec![0.0f32; tokens * m];
        for (k, block) in blocks.into_iter().enumerate() {
            let block = block?;
            let (from, to) = ((k * per).min(m), ((k + 1) * per).min(m));
            let width = to - from;
            if width == 0 {
                continue;
            }
            for (row, part) in y.chunks_exact_mut(m).zip(block.chunks_exact(width)) {
                row[from..to].copy_from_slice(part);
            }
        }
        Ok(y)
    }

    /// Outputs `from..to` of [`Self::apply`], as `[tokens][to - from]`.
    fn columns(
        &self,
        x: &[f32],
        tokens: usize,
        from: usize,
        to: usize,
    ) -> Result<Vec<f32>, ShapeError> {
        let (n, m) = (self.inputs, to - from);
        let mut y = vec![0.0f32; tokens * m];
        if m == 0 {
            return Ok(y);
        }
        for row in y.chunks_exact_mut(m) {
            row.copy_from_slice(&self.b[from..to]);
        }
        let xs = ArrayView2::from_shape((tokens, n), x)?;
        let w = ArrayView2::from_shape((m, n), &self.w[from * n..to * n])?;
        // y = x Wᵀ + y (the bias in every row).
        let mut ys = ArrayViewMut2::from_shape((tokens, m), &mut y)?;
        general_mat_mul(1.0, &xs, &w.t(), 1.0, &mut ys);
        Ok(y)
    }
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

    /// The mean of the last layer's token states for each of `texts` (token ids, special tokens
    /// included, as sentence-transformers pools them). Each must be non-empty and below the
    /// vocabulary size; tokens past [`Self::max_tokens`] are cut (the caller truncates first).
    #[cfg(test)]
    pub(crate) fn mean_pooled(&self, texts: &[&[u32]]) -> Result<Vec<Vec<f32>>, ShapeError> {
        self.mean_pooled_on(texts, 1)
    }

    /// [`Self::mean_pooled`], each layer's products split over `threads` threads (see
    /// [`Linear::apply_on`]).
    pub(crate) fn mean_pooled_on(
        &self,
        texts: &[&[u32]],
        threads: usize,
    ) -> Result<Vec<Vec<f32>>, ShapeError> {
        let h = self.hidden;
        let vocab = self.words.len() / h.max(1);
        // The texts' tokens stacked: text k is `spans[k].1` rows from row `spans[k].0`.
        let mut spans = Vec::with_capacity(texts.len());
        let mut total = 0;
        for ids in texts {
            let n = ids.len().min(self.max_tokens());
            spans.push((total, n));
            total += n;
        }
        let mut x = vec![0.0f32; total * h];
        for (ids, &(start, n)) in texts.iter().zip(&spans) {
            for (t, &id) in ids.iter().take(n).enumerate() {
                let id = (id as usize).min(vocab.saturating_sub(1));
                let row = &mut x[(start + t) * h..(start + t + 1) * h];
                let word = &self.words[id * h..(id + 1) * h];
                let pos = &self.positions[t * h..(t + 1) * h];
                for i in 0..h {
                    row[i] = word[i] + pos[i] + self.token_type[i];
                }
            }
        }
        self.embed_norm.apply(&mut x, self.eps);
        for layer in &self.layers {
            self.layer(layer, &mut x, &spans, threads)?;
        }
        Ok(spans
            .iter()
            .map(|&(start, n)| {
                let mut pooled = vec![0.0f32; h];
                for row in x[start * h..(start + n) * h].chunks_exact(h) {
                    for (p, v) in pooled.iter_mut().zip(row) {
                        *p += v;
                    }
                }
                pooled.iter_mut().for_each(|p| *p /= n.max(1) as f32);
                pooled
            })
            .collect())
    }

    /// One layer over the stacked tokens `x` of the texts at `spans` (first row, rows).
    fn layer(
        &self,
        layer: &Layer,
        x: &mut [f32],
        spans: &[(usize, usize)],
        threads: usize,
    ) -> Result<(), ShapeError> {
        let h = self.hidden;
        let total = x.len() / h.max(1);
        let heads = self.heads.max(1);
        let d = h / heads;
        let scale = 1.0 / (d as f32).sqrt();
        // Per token: its query, key and value, `[3h]`.
        let qkv = layer.qkv.apply_on(x, total, threads)?;
        let mut context = vec![0.0f32; total * h];
        let longest = spans.iter().map(|s| s.1).max().unwrap_or(0);
        let mut scores = vec![0.0f32; longest * longest];
        for &(start, n) in spans.iter().filter(|s| s.1 > 0) {
            for head in 0..heads {
                // This text's queries, keys and values for this head: `n` rows of `d` floats,
                // `3h` apart in `qkv`.
                let part = |offset: usize| {
                    let from = start * 3 * h + offset + head * d;
                    ArrayView2::from_shape((n, d).strides((3 * h, 1)), &qkv[from..])
                };
                let (q, k, v) = (part(0)?, part(h)?, part(2 * h)?);
                let mut s = ArrayViewMut2::from_shape((n, n), &mut scores[..n * n])?;
                general_mat_mul(scale, &q, &k.t(), 0.0, &mut s);
                for mut row in s.rows_mut() {
                    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let mut sum = 0.0;
                    row.iter_mut().for_each(|e| {
                        *e = (*e - max).exp();
                        sum += *e;
                    });
                    let inv = 1.0 / sum;
                    row.iter_mut().for_each(|e| *e *= inv);
                }
                let from = start * h + head * d;
                let mut out =
                    ArrayViewMut2::from_shape((n, d).strides((h, 1)), &mut context[from..])?;
                general_mat_mul(1.0, &s.view(), &v, 0.0, &mut out);
            }
        }
        let attn = layer.attn_out.apply_on(&context, total, threads)?;
        for (v, a) in x.iter_mut().zip(&attn) {
            *v += a;
        }
        layer.attn_norm.apply(x, self.eps);
        let mut up = layer.up.apply_on(x, total, threads)?;
        up.iter_mut().for_each(|v| *v = gelu(*v));
        let down = layer.down.apply_on(&up, total, threads)?;
        for (v, a) in x.iter_mut().zip(&down) {
            *v += a;
        }
        layer.out_norm.apply(x, self.eps);
        Ok(())
    }
}

/// GELU as BERT defines it: `x Φ(x)`, with the exact normal CDF.
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x / std::f32::consts::SQRT_2))
}

/// The error function, Abramowitz and Stegun's 7.1.26 (absolute error below 1.5e-7, about
/// what `f32` holds), in `f32`: GELU runs on every feed-forward activation, over a thousand per
/// token per layer, so it must cost little more than the `exp` in it.
fn erf(x: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_72,
        1.421_413_8,
        -1.453_152_1,
        1.061_405_4,
    ];
    let a = x.abs();
    let t = 1.0 / (1.0 + P * a);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    let erf = 1.0 - poly * (-a * a).exp();
    if x >= 0.0 {
        erf
    } else {
        -erf
    }
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
        let y = l.apply(&[1.0, 0.0, -1.0, 0.0, 1.0, 0.0], 2).unwrap();
        assert_eq!(y, [-1.5, -2.5, 2.5, 4.5]);
        let x: Vec<f32> = (0..15).map(|i| i as f32 - 7.0).collect();
        let y = l.apply(&x, 5).unwrap();
        for t in 0..5 {
            for o in 0..2 {
                let want: f32 = (0..3).map(|i| l.w[o * 3 + i] * x[t * 3 + i]).sum::<f32>() + l.b[o];
                assert_eq!(y[t * 2 + o], want);
            }
        }
    }

    /// A small encoder with made-up weights (a fixed pseudo-random sequence).
    fn tiny() -> Bert {
        let mut seed = 7u32;
        let mut next = move |n: usize| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
                })
                .collect()
        };
        let (h, ff) = (8, 16);
        let mut linear = |inputs: usize, outputs: usize| Linear {
            w: next(inputs * outputs),
            b: next(outputs),
            inputs,
            outputs,
        };
        let layers = (0..2)
            .map(|_| Layer {
                qkv: linear(h, 3 * h),
                attn_out: linear(h, h),
                attn_norm: Norm {
                    w: vec![1.0; h],
                    b: vec![0.0; h],
                },
                up: linear(h, ff),
                down: linear(ff, h),
                out_norm: Norm {
                    w: vec![1.0; h],
                    b: vec![0.0; h],
                },
            })
            .collect();
        Bert {
            hidden: h,
            heads: 2,
            eps: 1e-12,
            words: next(10 * h),
            positions: next(16 * h),
            token_type: next(h),
            embed_norm: Norm {
                w: vec![1.0; h],
                b: vec![0.0; h],
            },
            layers,
        }
    }

    #[test]
    fn products_split_over_threads_are_the_products() {
        let bert = tiny();
        let x: Vec<f32> = (0..24).map(|i| (i as f32 - 11.0) / 7.0).collect();
        let layer = &bert.layers[0];
        for threads in [2, 3, 5] {
            assert_eq!(
                layer.up.apply_on(&x, 3, threads).unwrap(),
                layer.up.apply(&x, 3).unwrap()
            );
        }
        let text: [&[u32]; 1] = [&[1, 2, 3, 4]];
        assert_eq!(
            bert.mean_pooled_on(&text, 2).unwrap(),
            bert.mean_pooled(&text).unwrap()
        );
    }

    #[test]
    fn texts_stacked_in_one_batch_get_the_vectors_they_get_alone() {
        let bert = tiny();
        let texts: [&[u32]; 4] = [&[1, 2, 3], &[4], &[5, 6, 7, 8, 9, 0, 1], &[2, 2]];
        let together = bert.mean_pooled(&texts).unwrap();
        assert_eq!(together.len(), 4);
        for (text, v) in texts.iter().zip(&together) {
            let alone = bert.mean_pooled(&[*text]).unwrap();
            for (a, b) in alone[0].iter().zip(v) {
                assert!((a - b).abs() < 1e-5, "{text:?}: {a} against {b}");
            }
        }
        // Past the position table, a text is cut, not refused.
        let long: Vec<u32> = (0..40).map(|i| i % 10).collect();
        assert_eq!(bert.mean_pooled(&[&long]).unwrap()[0].len(), 8);
    }
}
