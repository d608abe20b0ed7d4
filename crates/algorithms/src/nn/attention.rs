//! Scaled-dot-product self-attention with a padding mask and dropout on the attention
//! probabilities, forward and backward, computed per (sequence, head) in tiles of query rows so
//! the `[len, len]` scores exist only one tile (`TILE × len`) at a time.
//!
//! Layout: `q`, `k`, `v` and the output are `[batch, len, heads · head_dim]` row-major (the
//! projections' output, heads side by side), so no transposes are needed around the kernel.
//! Padding positions (`valid[b · len + i] == false`) are left out as keys; as queries their
//! output and gradients are 0 (nothing downstream reads them).
//!
//! The math (per head; `P = softmax(s · QKᵀ)`, `M` the dropout multipliers):
//! forward `O = (P ∘ M) V`, kept per row: `lse = log Σ exp(s · qkᵀ)`;
//! backward `dV = (P ∘ M)ᵀ dO`, `dP = (dO Vᵀ) ∘ M`, `dS = P ∘ (dP − rowsum(dO ∘ O))`,
//! `dQ = s · dS K`, `dK = s · dSᵀ Q`.

use rayon::prelude::*;

use super::dropout::DropoutKey;
use super::gemm_f32::{matmul, View};
use super::rows::{probs, score_grad, softmax_dropout, RowDropout};

/// Query rows per tile: a tile's scores (`TILE × len` floats) stay in the L2 cache.
const TILE: usize = 64;

/// The shape of an attention call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    pub batch: usize,
    pub len: usize,
    pub heads: usize,
    pub head_dim: usize,
}

impl AttentionShape {
    fn width(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Elements of a `[batch, len, heads · head_dim]` tensor.
    pub fn elements(&self) -> usize {
        self.batch * self.len * self.width()
    }

    /// The flat dropout row of query `i` of head `h` in sequence `b`: `(b · heads + h) · len + i`.
    pub fn dropout_row(&self, b: usize, h: usize, i: usize) -> u64 {
        ((b * self.heads + h) * self.len + i) as u64
    }

    fn scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }
}

/// The forward output and what the backward pass needs besides the inputs.
pub struct AttentionStats {
    /// `[batch, len, heads · head_dim]`.
    pub out: Vec<f32>,
    /// Log-sum-exp of each query row's scaled scores, `[batch, heads, len]` (0 on padding).
    pub lse: Vec<f32>,
}

/// Gradients of the three inputs, each `[batch, len, heads · head_dim]`.
pub struct AttentionGrads {
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
}

/// One (sequence, head): its valid positions and those rows of q, k, v packed `[n, head_dim]`.
struct Unit {
    b: usize,
    h: usize,
    pos: Vec<u32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
}

impl Unit {
    fn gather(shape: &AttentionShape, valid: &[bool], b: usize, h: usize, q: &[f32], k: &[f32], v: &[f32]) -> Self {
        let (len, d, w) = (shape.len, shape.head_dim, shape.width());
        let pos: Vec<u32> = (0..len).filter(|&i| valid[b * len + i]).map(|i| i as u32).collect();
        let pack = |x: &[f32]| {
            let mut out = Vec::with_capacity(pos.len() * d);
            for &i in &pos {
                let at = (b * len + i as usize) * w + h * d;
                out.extend_from_slice(&x[at..at + d]);
            }
            out
        };
        Unit { b, h, q: pack(q), k: pack(k), v: pack(v), pos }
    }

    fn n(&self) -> usize {
        self.pos.len()
    }

    fn row_dropout<'a>(&'a self, shape: &AttentionShape, drop: Option<DropoutKey>, i: usize) -> Option<RowDropout<'a>> {
        drop.map(|key| RowDropout { key, seed: key.row_seed(shape.dropout_row(self.b, self.h, i)), cols: &self.pos })
    }

    /// Writes packed `[n, head_dim]` rows back into a `[batch, len, heads · head_dim]` tensor.
    fn scatter(&self, shape: &AttentionShape, packed: &[f32], into: &mut [f32]) {
        let (len, d, w) = (shape.len, shape.head_dim, shape.width());
        for (r, &i) in self.pos.iter().enumerate() {
            let at = (self.b * len + i as usize) * w + self.h * d;
            into[at..at + d].copy_from_slice(&packed[r * d..(r + 1) * d]);
        }
    }
}

fn check(shape: &AttentionShape, valid: &[bool], tensors: &[&[f32]]) {
    assert_eq!(valid.len(), shape.batch * shape.len, "attention: valid mask is not batch × len");
    for t in tensors {
        assert_eq!(t.len(), shape.elements(), "attention: tensor is not batch × len × heads · head_dim");
    }
}

fn units(shape: &AttentionShape) -> Vec<(usize, usize)> {
    (0..shape.batch).flat_map(|b| (0..shape.heads).map(move |h| (b, h))).collect()
}

/// The forward pass. `drop` is `None` when not training (or `p = 0`).
pub fn attention_forward(
    shape: AttentionShape,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    valid: &[bool],
    drop: Option<DropoutKey>,
) -> AttentionStats {
    check(&shape, valid, &[q, k, v]);
    let d = shape.head_dim;
    let done: Vec<(Unit, Vec<f32>, Vec<f32>)> = units(&shape)
        .into_par_iter()
        .map(|(b, h)| {
            let u = Unit::gather(&shape, valid, b, h, q, k, v);
            let n = u.n();
            let (mut out, mut lse) = (vec![0f32; n * d], vec![0f32; n]);
            let mut s = vec![0f32; TILE.min(n) * n];
            for t0 in (0..n).step_by(TILE) {
                let rows = TILE.min(n - t0);
                let s = &mut s[..rows * n];
                matmul(
                    (rows, n, d),
                    s,
                    View::rows(0, n),
                    false,
                    &u.q,
                    View::rows(t0 * d, d),
                    &u.k,
                    View::transposed(0, d),
                    shape.scale(),
                );
                for r in 0..rows {
                    let drop = u.row_dropout(&shape, drop, u.pos[t0 + r] as usize);
                    lse[t0 + r] = softmax_dropout(&mut s[r * n..(r + 1) * n], &drop);
                }
                matmul(
                    (rows, d, n),
                    &mut out,
                    View::rows(t0 * d, d),
                    false,
                    s,
                    View::rows(0, n),
                    &u.v,
                    View::rows(0, d),
                    1.0,
                );
            }
            (u, out, lse)
        })
        .collect();
    let mut stats =
        AttentionStats { out: vec![0f32; shape.elements()], lse: vec![0f32; shape.batch * shape.heads * shape.len] };
    for (u, out, lse) in done {
        u.scatter(&shape, &out, &mut stats.out);
        for (r, &i) in u.pos.iter().enumerate() {
            stats.lse[(u.b * shape.heads + u.h) * shape.len + i as usize] = lse[r];
        }
    }
    stats
}

/// The backward pass: gradients of `q`, `k`, `v` given the forward's output and log-sum-exp and
/// the output's gradient. The dropout must be the forward's.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward(
    shape: AttentionShape,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    fwd: &AttentionStats,
    grad_out: &[f32],
    valid: &[bool],
    drop: Option<DropoutKey>,
) -> AttentionGrads {
    check(&shape, valid, &[q, k, v, &fwd.out, grad_out]);
    let done: Vec<(Unit, [Vec<f32>; 3])> = units(&shape)
        .into_par_iter()
        .map(|(b, h)| {
            let inputs = Unit::gather(&shape, valid, b, h, q, k, v);
            // The output and its gradient, packed the same way (the third slot is unused).
            let outputs = Unit::gather(&shape, valid, b, h, &fwd.out, grad_out, grad_out);
            let lse = &fwd.lse[(b * shape.heads + h) * shape.len..][..shape.len];
            let grads = UnitBackward::new(&shape, &inputs, &outputs.q, &outputs.k, lse, drop).run();
            (inputs, grads)
        })
        .collect();
    let mut grads = AttentionGrads {
        q: vec![0f32; shape.elements()],
        k: vec![0f32; shape.elements()],
        v: vec![0f32; shape.elements()],
    };
    for (u, [dq, dk, dv]) in done {
        u.scatter(&shape, &dq, &mut grads.q);
        u.scatter(&shape, &dk, &mut grads.k);
        u.scatter(&shape, &dv, &mut grads.v);
    }
    grads
}

/// The backward pass of one (sequence, head) over its `n` valid positions, query tile by query
/// tile; `dK` and `dV` accumulate over the tiles in order.
struct UnitBackward<'a> {
    shape: &'a AttentionShape,
    u: &'a Unit,
    /// The forward output's gradient, packed `[n, head_dim]`.
    dout: &'a [f32],
    /// This head's log-sum-exp by position.
    lse: &'a [f32],
    /// `rowsum(dO ∘ O)` of each packed row.
    delta: Vec<f32>,
    drop: Option<DropoutKey>,
}

/// One tile's `[rows, n]` scratch: the probabilities, with dropout, and the score gradients.
struct TileScratch {
    p: Vec<f32>,
    pd: Vec<f32>,
    dp: Vec<f32>,
}

impl<'a> UnitBackward<'a> {
    fn new(
        shape: &'a AttentionShape,
        u: &'a Unit,
        out: &'a [f32],
        dout: &'a [f32],
        lse: &'a [f32],
        drop: Option<DropoutKey>,
    ) -> Self {
        let d = shape.head_dim;
        let delta = (0..u.n())
            .map(|r| out[r * d..(r + 1) * d].iter().zip(&dout[r * d..(r + 1) * d]).map(|(a, b)| a * b).sum())
            .collect();
        UnitBackward { shape, u, dout, lse, delta, drop }
    }

    fn run(self) -> [Vec<f32>; 3] {
        let (n, d) = (self.u.n(), self.shape.head_dim);
        let mut grads = [vec![0f32; n * d], vec![0f32; n * d], vec![0f32; n * d]];
        let tile = TILE.min(n) * n;
        let mut scratch = TileScratch { p: vec![0f32; tile], pd: vec![0f32; tile], dp: vec![0f32; tile] };
        for t0 in (0..n).step_by(TILE) {
            self.tile(t0, TILE.min(n - t0), &mut scratch, &mut grads);
        }
        grads
    }

    /// Query rows `t0..t0 + rows`: their `dQ`, and their share of `dK` and `dV`.
    fn tile(&self, t0: usize, rows: usize, scratch: &mut TileScratch, [dq, dk, dv]: &mut [Vec<f32>; 3]) {
        let (u, n, d, scale) = (self.u, self.u.n(), self.shape.head_dim, self.shape.scale());
        let (p, pd, dp) = (&mut scratch.p[..rows * n], &mut scratch.pd[..rows * n], &mut scratch.dp[..rows * n]);
        matmul(
            (rows, n, d),
            p,
            View::rows(0, n),
            false,
            &u.q,
            View::rows(t0 * d, d),
            &u.k,
            View::transposed(0, d),
            scale,
        );
        for r in 0..rows {
            let i = u.pos[t0 + r] as usize;
            let drop = u.row_dropout(self.shape, self.drop, i);
            probs(&mut p[r * n..(r + 1) * n], &mut pd[r * n..(r + 1) * n], self.lse[i], &drop);
        }
        // dV += Pdᵀ dO
        matmul(
            (n, d, rows),
            dv,
            View::rows(0, d),
            true,
            pd,
            View::transposed(0, n),
            self.dout,
            View::rows(t0 * d, d),
            1.0,
        );
        // dPd = dO Vᵀ, then dS in place
        matmul(
            (rows, n, d),
            dp,
            View::rows(0, n),
            false,
            self.dout,
            View::rows(t0 * d, d),
            &u.v,
            View::transposed(0, d),
            1.0,
        );
        for r in 0..rows {
            let drop = u.row_dropout(self.shape, self.drop, u.pos[t0 + r] as usize);
            score_grad(&p[r * n..(r + 1) * n], &mut dp[r * n..(r + 1) * n], self.delta[t0 + r], &drop);
        }
        // dQ = s · dS K ; dK += s · dSᵀ Q
        matmul((rows, d, n), dq, View::rows(t0 * d, d), false, dp, View::rows(0, n), &u.k, View::rows(0, d), scale);
        matmul(
            (n, d, rows),
            dk,
            View::rows(0, d),
            true,
            dp,
            View::transposed(0, n),
            &u.q,
            View::rows(t0 * d, d),
            scale,
        );
    }
}

#[cfg(test)]
mod tests;
