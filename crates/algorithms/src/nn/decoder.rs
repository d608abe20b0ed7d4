//! The tied MLM decoder's loss, fused: for each masked row `y` (`[rows, hidden]`, after the MLM
//! transform), logits against every vocabulary row of the embedding matrix `E` plus a bias, then
//! the negative log-likelihood of the target token. Computed in blocks of [`BLOCK`] vocabulary
//! rows, in parallel over blocks, so the `[rows, vocab]` logits never exist whole; the backward
//! pass recomputes each block's logits from the saved log-sum-exp.
//!
//! Backward, with `g` the gradient of each row's NLL: `dlogits = g · (softmax − onehot(target))`,
//! `dy = dlogits E`, `dE = dlogitsᵀ y`, `dbias = Σ_rows dlogits`. Blocks' partial `dy` are summed
//! in block order, so the result does not depend on the thread count.

use rayon::prelude::*;

use super::gemm_f32::{matmul, View};
use super::rows::exp_nonpositive_row;

/// Vocabulary rows per block: a block's logits for ~1,000 masked rows are a few MB.
const BLOCK: usize = 1024;

/// The shape of a decoder call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecoderShape {
    pub rows: usize,
    pub hidden: usize,
    pub vocab: usize,
}

/// Per row: the NLL of its target, the log-sum-exp of its logits (for the backward pass), and
/// the arg-max token (for accuracy).
pub struct DecoderForward {
    pub nll: Vec<f32>,
    pub lse: Vec<f32>,
    pub argmax: Vec<u32>,
}

/// Gradients of `y` (`[rows, hidden]`), `E` (`[vocab, hidden]`) and the bias (`[vocab]`).
pub struct DecoderGrads {
    pub y: Vec<f32>,
    pub emb: Vec<f32>,
    pub bias: Vec<f32>,
}

fn check(s: &DecoderShape, y: &[f32], emb: &[f32], bias: &[f32], targets: &[u32]) {
    assert_eq!(y.len(), s.rows * s.hidden, "decoder: states are not rows × hidden");
    assert_eq!(emb.len(), s.vocab * s.hidden, "decoder: embedding is not vocab × hidden");
    assert_eq!(bias.len(), s.vocab, "decoder: bias is not vocab");
    assert_eq!(targets.len(), s.rows, "decoder: one target per row");
    assert!(targets.iter().all(|&t| (t as usize) < s.vocab), "decoder: target outside the vocabulary");
}

/// `logits[rows, n] = y Eᵀ[block] + bias[block]` for the vocabulary rows `v0 .. v0 + n`.
fn block_logits(s: &DecoderShape, y: &[f32], emb: &[f32], bias: &[f32], v0: usize, n: usize) -> Vec<f32> {
    let mut logits = vec![0f32; s.rows * n];
    for row in logits.chunks_exact_mut(n) {
        row.copy_from_slice(&bias[v0..v0 + n]);
    }
    matmul(
        (s.rows, n, s.hidden),
        &mut logits,
        View::rows(0, n),
        true,
        y,
        View::rows(0, s.hidden),
        emb,
        View::transposed(v0 * s.hidden, s.hidden),
        1.0,
    );
    logits
}

fn blocks(vocab: usize) -> Vec<(usize, usize)> {
    (0..vocab).step_by(BLOCK).map(|v0| (v0, BLOCK.min(vocab - v0))).collect()
}

/// The forward pass.
pub fn decoder_nll_forward(s: DecoderShape, y: &[f32], emb: &[f32], bias: &[f32], targets: &[u32]) -> DecoderForward {
    check(&s, y, emb, bias, targets);
    // Per block and row: max, Σ exp(logit − max), arg-max, and the target's logit if in the block.
    let per_block: Vec<Vec<(f32, f32, u32, Option<f32>)>> = blocks(s.vocab)
        .into_par_iter()
        .map(|(v0, n)| {
            let mut logits = block_logits(&s, y, emb, bias, v0, n);
            logits
                .chunks_exact_mut(n)
                .zip(targets)
                .map(|(row, &t)| {
                    let (arg, max) =
                        row.iter()
                            .enumerate()
                            .fold((0, f32::NEG_INFINITY), |(ai, am), (i, &v)| if v > am { (i, v) } else { (ai, am) });
                    let target = (t as usize).checked_sub(v0).filter(|&i| i < n).map(|i| row[i]);
                    row.iter_mut().for_each(|v| *v -= max);
                    let sum = exp_nonpositive_row(row);
                    (max, sum, (v0 + arg) as u32, target)
                })
                .collect()
        })
        .collect();
    let mut out = DecoderForward { nll: vec![0.0; s.rows], lse: vec![0.0; s.rows], argmax: vec![0; s.rows] };
    for r in 0..s.rows {
        let max = per_block.iter().map(|b| b[r].0).fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = per_block.iter().map(|b| b[r].1 * (b[r].0 - max).exp()).sum();
        let best =
            per_block
                .iter()
                .map(|b| b[r])
                .fold((f32::NEG_INFINITY, 0u32), |acc, b| if b.0 > acc.0 { (b.0, b.2) } else { acc });
        let target = per_block.iter().find_map(|b| b[r].3).unwrap_or(0.0);
        out.lse[r] = max + sum.ln();
        out.nll[r] = out.lse[r] - target;
        out.argmax[r] = best.1;
    }
    out
}

/// The backward pass, given the forward's log-sum-exp and the gradient of each row's NLL.
#[allow(clippy::too_many_arguments)]
pub fn decoder_nll_backward(
    s: DecoderShape,
    y: &[f32],
    emb: &[f32],
    bias: &[f32],
    targets: &[u32],
    lse: &[f32],
    grad_nll: &[f32],
) -> DecoderGrads {
    check(&s, y, emb, bias, targets);
    assert_eq!(lse.len(), s.rows, "decoder: one log-sum-exp per row");
    assert_eq!(grad_nll.len(), s.rows, "decoder: one gradient per row");
    let h = s.hidden;
    let per_block: Vec<(usize, usize, Vec<f32>, Vec<f32>, Vec<f32>)> = blocks(s.vocab)
        .into_par_iter()
        .map(|(v0, n)| {
            let mut dl = block_logits(&s, y, emb, bias, v0, n);
            for (r, row) in dl.chunks_exact_mut(n).enumerate() {
                row.iter_mut().for_each(|v| *v -= lse[r]);
                exp_nonpositive_row(row);
                if let Some(i) = (targets[r] as usize).checked_sub(v0).filter(|&i| i < n) {
                    row[i] -= 1.0;
                }
                row.iter_mut().for_each(|v| *v *= grad_nll[r]);
            }
            let mut dbias = vec![0f32; n];
            for row in dl.chunks_exact(n) {
                dbias.iter_mut().zip(row).for_each(|(b, &g)| *b += g);
            }
            let mut demb = vec![0f32; n * h];
            matmul(
                (n, h, s.rows),
                &mut demb,
                View::rows(0, h),
                false,
                &dl,
                View::transposed(0, n),
                y,
                View::rows(0, h),
                1.0,
            );
            let mut dy = vec![0f32; s.rows * h];
            matmul(
                (s.rows, h, n),
                &mut dy,
                View::rows(0, h),
                false,
                &dl,
                View::rows(0, n),
                emb,
                View::rows(v0 * h, h),
                1.0,
            );
            (v0, n, dy, demb, dbias)
        })
        .collect();
    let mut grads = DecoderGrads { y: vec![0f32; s.rows * h], emb: vec![0f32; s.vocab * h], bias: vec![0f32; s.vocab] };
    for (v0, n, dy, demb, dbias) in per_block {
        grads.y.iter_mut().zip(&dy).for_each(|(a, b)| *a += b);
        grads.emb[v0 * h..(v0 + n) * h].copy_from_slice(&demb);
        grads.bias[v0..v0 + n].copy_from_slice(&dbias);
    }
    grads
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        super::super::test_values(n, seed, 40_503, -1.0, 1.0)
    }

    /// Logits, softmax and NLL written out in f64; returns (nll, dy, dE, dbias) for `grad`.
    #[allow(clippy::type_complexity)]
    fn naive(
        s: DecoderShape,
        y: &[f32],
        emb: &[f32],
        bias: &[f32],
        t: &[u32],
        grad: &[f32],
    ) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
        let h = s.hidden;
        let (mut nll, mut dy, mut de, mut db) =
            (vec![0.0; s.rows], vec![0.0; s.rows * h], vec![0.0; s.vocab * h], vec![0.0; s.vocab]);
        for r in 0..s.rows {
            let logits: Vec<f64> = (0..s.vocab)
                .map(|v| {
                    f64::from(bias[v])
                        + (0..h).map(|c| f64::from(y[r * h + c]) * f64::from(emb[v * h + c])).sum::<f64>()
                })
                .collect();
            let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = m + logits.iter().map(|l| (l - m).exp()).sum::<f64>().ln();
            nll[r] = lse - logits[t[r] as usize];
            for v in 0..s.vocab {
                let g = f64::from(grad[r]) * ((logits[v] - lse).exp() - if v == t[r] as usize { 1.0 } else { 0.0 });
                db[v] += g;
                for c in 0..h {
                    dy[r * h + c] += g * f64::from(emb[v * h + c]);
                    de[v * h + c] += g * f64::from(y[r * h + c]);
                }
            }
        }
        (nll, dy, de, db)
    }

    fn close(got: &[f32], want: &[f64], what: &str) {
        let norm = want.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-12);
        let err = got.iter().zip(want).map(|(g, w)| (f64::from(*g) - w).powi(2)).sum::<f64>().sqrt();
        assert!(err / norm < 2e-5, "{what}: relative error {}", err / norm);
    }

    #[test]
    fn matches_elementwise_softmax_cross_entropy_across_vocabulary_blocks() {
        // A vocabulary of three blocks (the last partial), targets in each block.
        let s = DecoderShape { rows: 7, hidden: 12, vocab: 2 * BLOCK + 37 };
        let (y, emb, bias) = (values(s.rows * s.hidden, 1), values(s.vocab * s.hidden, 2), values(s.vocab, 3));
        let targets = vec![0, 5, BLOCK as u32, BLOCK as u32 + 9, 2 * BLOCK as u32 + 36, 17, 2 * BLOCK as u32];
        let grad: Vec<f32> = (0..s.rows).map(|r| 1.0 / (r as f32 + 1.0)).collect();
        let f = decoder_nll_forward(s, &y, &emb, &bias, &targets);
        let g = decoder_nll_backward(s, &y, &emb, &bias, &targets, &f.lse, &grad);
        let (nll, dy, de, db) = naive(s, &y, &emb, &bias, &targets, &grad);
        close(&f.nll, &nll, "nll");
        close(&g.y, &dy, "dy");
        close(&g.emb, &de, "dE");
        close(&g.bias, &db, "dbias");
    }

    #[test]
    fn argmax_is_the_highest_logit() {
        let s = DecoderShape { rows: 2, hidden: 1, vocab: BLOCK + 10 };
        let y = vec![1.0, -1.0];
        let emb: Vec<f32> = (0..s.vocab)
            .map(|v| {
                if v == BLOCK + 3 {
                    5.0
                } else if v == 2 {
                    -5.0
                } else {
                    0.0
                }
            })
            .collect();
        let f = decoder_nll_forward(s, &y, &emb, &vec![0.0; s.vocab], &[0, 0]);
        assert_eq!(f.argmax, vec![BLOCK as u32 + 3, 2]);
    }

    #[test]
    fn same_bits_with_one_or_three_threads() {
        let s = DecoderShape { rows: 9, hidden: 16, vocab: 3 * BLOCK + 5 };
        let (y, emb, bias) = (values(s.rows * s.hidden, 4), values(s.vocab * s.hidden, 5), values(s.vocab, 6));
        let targets: Vec<u32> = (0..9).map(|r| r * 300).collect();
        let run = |threads| {
            rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap().install(|| {
                let f = decoder_nll_forward(s, &y, &emb, &bias, &targets);
                let g = decoder_nll_backward(s, &y, &emb, &bias, &targets, &f.lse, &[0.1; 9]);
                (f.nll, g.y, g.emb, g.bias)
            })
        };
        assert_eq!(run(1), run(3));
    }
}
