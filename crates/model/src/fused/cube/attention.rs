//! The attention kernels: one unit per query row for the context (streaming over the keys with
//! a running maximum and log-sum-exp, so no `[len, len]` scores are stored) and for the query
//! gradient, one unit per key row for the key and value gradients; padding and the same
//! counter-based dropout as the CPU kernel.
//!
//! Every loop over a head's values is unrolled (`head_dim` is known when the kernel compiles),
//! so the accumulators live in registers and a unit's only loop is over the other rows. That
//! is also what makes the kernels right on Mesa's lavapipe, where llvmpipe stops **every loop
//! of an invocation after 65,535 iterations in all** (`LP_MAX_TGSI_LOOP_ITERATIONS`, one
//! counter shared by every loop of a shader): with the per-value loops rolled, a unit ran
//! about `len × 3 × head_dim` iterations, past the limit from 384 positions at head width 64
//! in the backward pass and from 512 in the forward pass, and the loops were cut short
//! silently. Now a unit runs `len` iterations.

use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;
use cubecl::server::Handle;

use super::{array, contiguous, cubes, empty_like, UNITS};
use crate::fused::AttentionSpec;

/// Whether the trainer runs these kernels (the default) or the composition
/// (`CORRFLOW_CUBECL_ATTENTION=0`, to compare the two in one binary).
pub(super) fn kernels_enabled() -> bool {
    // This crate's unit tests check the kernels themselves.
    if cfg!(test) {
        return true;
    }
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("CORRFLOW_CUBECL_ATTENTION").map_or(true, |v| v != "0"))
}

/// lowbias32 of a row seed and a column: `corrflow_algorithms::nn` dropout's element hash, so the
/// kernels drop exactly what the CPU kernel and the composition drop.
#[cube]
fn element_hash(seed: u32, col: u32) -> u32 {
    let mut x = seed ^ (col * 0x9e37_79b9u32);
    x ^= x >> 16u32;
    x *= 0x7feb_352du32;
    x ^= x >> 15u32;
    x *= 0x846c_a68bu32;
    x ^ (x >> 16u32)
}

/// The dropout factor of probability `(row, col)`: 0, or `keep` when the hash clears `threshold`.
#[cube]
fn dropout_factor(seeds: &Array<u32>, row: usize, col: usize, threshold: u32, keep: f32) -> f32 {
    let mut f = keep;
    if element_hash(seeds[row], col as u32) < threshold {
        f = 0.0f32;
    }
    f
}

/// `Σ_d a[ai + d] · b[bi + d]` over one head's `n` values.
#[cube]
fn dot(a: &Array<f32>, ai: usize, b: &Array<f32>, bi: usize, #[comptime] n: usize) -> f32 {
    let mut s = 0.0f32;
    #[unroll]
    for d in 0..n {
        s += a[ai + d] * b[bi + d];
    }
    s
}

/// One unit per query row `(b, h, i)`: the context and the row's log-sum-exp, streaming over the
/// keys (the running maximum rescales what was summed), so no `[len, len]` score row is stored.
#[cube(launch_unchecked)]
fn attention_forward_kernel(
    q: &Array<f32>,
    k: &Array<f32>,
    v: &Array<f32>,
    valid: &Array<u32>,
    seeds: &Array<u32>,
    out: &mut Array<f32>,
    lse: &mut Array<f32>,
    threshold: u32,
    keep: f32,
    scale: f32,
    #[comptime] len: usize,
    #[comptime] heads: usize,
    #[comptime] head_dim: usize,
) {
    let row = ABSOLUTE_POS; // (b · heads + h) · len + i
    if row >= lse.len() {
        terminate!();
    }
    let i = row % len;
    let h = (row / len) % heads;
    let b = row / (len * heads);
    let width = heads * head_dim;
    let qa = (b * len + i) * width + h * head_dim;
    if valid[b * len + i] == 0u32 {
        #[unroll]
        for d in 0..head_dim {
            out[qa + d] = 0.0f32;
        }
        lse[row] = 0.0f32;
        terminate!();
    }
    let mut acc = Array::<f32>::new(head_dim);
    #[unroll]
    for d in 0..head_dim {
        acc[d] = 0.0f32;
    }
    // A runtime value (a literal would be a compile-time constant that cannot be reassigned);
    // far below any score, so the first key's rescale multiplies zeros.
    let mut max = scale * -1.0e30f32;
    let mut sum = 0.0f32;
    for j in 0..len {
        if valid[b * len + j] != 0u32 {
            let ka = (b * len + j) * width + h * head_dim;
            let s = dot(q, qa, k, ka, head_dim) * scale;
            if s > max {
                let rescale = f32::exp(max - s);
                sum *= rescale;
                #[unroll]
                for d in 0..head_dim {
                    acc[d] *= rescale;
                }
                max = s;
            }
            let e = f32::exp(s - max);
            sum += e;
            let w = e * dropout_factor(seeds, row, j, threshold, keep);
            #[unroll]
            for d in 0..head_dim {
                acc[d] += w * v[ka + d];
            }
        }
    }
    #[unroll]
    for d in 0..head_dim {
        out[qa + d] = acc[d] / sum;
    }
    lse[row] = max + f32::ln(sum);
}

/// One unit per query row: `δ = dO · O` (kept for the key pass) and the query gradient.
#[cube(launch_unchecked)]
fn attention_backward_queries_kernel(
    q: &Array<f32>,
    k: &Array<f32>,
    v: &Array<f32>,
    out: &Array<f32>,
    lse: &Array<f32>,
    grad: &Array<f32>,
    valid: &Array<u32>,
    seeds: &Array<u32>,
    dq: &mut Array<f32>,
    delta: &mut Array<f32>,
    threshold: u32,
    keep: f32,
    scale: f32,
    #[comptime] len: usize,
    #[comptime] heads: usize,
    #[comptime] head_dim: usize,
) {
    let row = ABSOLUTE_POS;
    if row >= lse.len() {
        terminate!();
    }
    let i = row % len;
    let h = (row / len) % heads;
    let b = row / (len * heads);
    let width = heads * head_dim;
    let qa = (b * len + i) * width + h * head_dim;
    if valid[b * len + i] == 0u32 {
        #[unroll]
        for d in 0..head_dim {
            dq[qa + d] = 0.0f32;
        }
        delta[row] = 0.0f32;
        terminate!();
    }
    let dl = dot(grad, qa, out, qa, head_dim);
    delta[row] = dl;
    let mut acc = Array::<f32>::new(head_dim);
    #[unroll]
    for d in 0..head_dim {
        acc[d] = 0.0f32;
    }
    for j in 0..len {
        if valid[b * len + j] != 0u32 {
            let ka = (b * len + j) * width + h * head_dim;
            let p = f32::exp(dot(q, qa, k, ka, head_dim) * scale - lse[row]);
            let dp = dot(grad, qa, v, ka, head_dim);
            let ds = p * (dp * dropout_factor(seeds, row, j, threshold, keep) - dl);
            #[unroll]
            for d in 0..head_dim {
                acc[d] += ds * k[ka + d];
            }
        }
    }
    #[unroll]
    for d in 0..head_dim {
        dq[qa + d] = acc[d] * scale;
    }
}

/// One unit per key row `(b, h, j)`: the key and value gradients, summed over the query rows in
/// order.
#[cube(launch_unchecked)]
fn attention_backward_keys_kernel(
    q: &Array<f32>,
    k: &Array<f32>,
    v: &Array<f32>,
    lse: &Array<f32>,
    delta: &Array<f32>,
    grad: &Array<f32>,
    valid: &Array<u32>,
    seeds: &Array<u32>,
    dk: &mut Array<f32>,
    dv: &mut Array<f32>,
    threshold: u32,
    keep: f32,
    scale: f32,
    #[comptime] len: usize,
    #[comptime] heads: usize,
    #[comptime] head_dim: usize,
) {
    let key_row = ABSOLUTE_POS;
    if key_row >= lse.len() {
        terminate!();
    }
    let j = key_row % len;
    let h = (key_row / len) % heads;
    let b = key_row / (len * heads);
    let width = heads * head_dim;
    let ka = (b * len + j) * width + h * head_dim;
    let mut acc_k = Array::<f32>::new(head_dim);
    let mut acc_v = Array::<f32>::new(head_dim);
    #[unroll]
    for d in 0..head_dim {
        acc_k[d] = 0.0f32;
        acc_v[d] = 0.0f32;
    }
    if valid[b * len + j] != 0u32 {
        for i in 0..len {
            if valid[b * len + i] != 0u32 {
                let row = (b * heads + h) * len + i;
                let qa = (b * len + i) * width + h * head_dim;
                let p = f32::exp(dot(q, qa, k, ka, head_dim) * scale - lse[row]);
                let dp = dot(grad, qa, v, ka, head_dim);
                let f = dropout_factor(seeds, row, j, threshold, keep);
                let ds = p * (dp * f - delta[row]);
                #[unroll]
                for d in 0..head_dim {
                    acc_k[d] += ds * q[qa + d];
                    acc_v[d] += p * f * grad[qa + d];
                }
            }
        }
    }
    #[unroll]
    for d in 0..head_dim {
        dk[ka + d] = acc_k[d] * scale;
        dv[ka + d] = acc_v[d];
    }
}

/// What the attention kernels read besides q, k, v: the valid positions (`[batch · len]`, 1/0)
/// and the dropout row seeds (`[batch · heads · len]`), with the dropout threshold and scale
/// (0 and 1 without dropout: nothing is dropped). Uploaded once per pass; each launch takes
/// its own arguments over the same buffers.
struct AttentionInputs {
    valid: (Handle, usize),
    seeds: (Handle, usize),
    threshold: u32,
    keep: f32,
    scale: f32,
    rows: usize,
}

impl AttentionInputs {
    /// Launch arguments for the valid positions and the dropout row seeds.
    fn arrays<R: CubeRuntime>(&self) -> (ArrayArg<R>, ArrayArg<R>) {
        // SAFETY: each handle holds exactly its recorded number of u32 values.
        let arg = |(h, n): &(Handle, usize)| unsafe { ArrayArg::from_raw_parts(h.clone(), *n) };
        (arg(&self.valid), arg(&self.seeds))
    }
}

fn attention_inputs<R: CubeRuntime>(like: &CubeTensor<R>, spec: &AttentionSpec) -> AttentionInputs {
    let s = spec.shape;
    let rows = s.batch * s.heads * s.len;
    let valid: Vec<u32> = spec.valid.iter().map(|&v| u32::from(v)).collect();
    let seeds: Vec<u32> = match spec.dropout {
        Some(key) => (0..rows as u64).map(|r| key.row_seed(r)).collect(),
        None => vec![0; rows],
    };
    let upload = |v: &[u32]| (like.client.create_from_slice(u32::as_bytes(v)), v.len());
    AttentionInputs {
        valid: upload(&valid),
        seeds: upload(&seeds),
        threshold: spec.dropout.map_or(0, |k| k.threshold()),
        keep: spec.dropout.map_or(1.0, |k| k.keep_scale()),
        scale: 1.0 / (s.head_dim as f32).sqrt(),
        rows,
    }
}

/// The forward pass: the context and each query row's log-sum-exp (0 on padding rows).
pub(super) fn forward<R: CubeRuntime>(
    q: CubeTensor<R>,
    k: CubeTensor<R>,
    v: CubeTensor<R>,
    spec: &AttentionSpec,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let (q, k, v) = (contiguous(q), contiguous(k), contiguous(v));
    let s = spec.shape;
    let a = attention_inputs(&q, spec);
    let (valid, seeds) = a.arrays();
    let out = empty_like(&q, vec![s.batch, s.len, s.heads * s.head_dim]);
    let lse = empty_like(&q, vec![s.batch, s.heads, s.len]);
    // SAFETY: q, k, v and out are contiguous [batch, len, heads · head_dim], lse and the seeds
    // hold one value per (batch, head, row) and valid one per (batch, row); the kernel checks
    // its row index.
    unsafe {
        attention_forward_kernel::launch_unchecked(
            &q.client,
            cubes(&q.client, a.rows),
            CubeDim::new_1d(UNITS),
            array(&q),
            array(&k),
            array(&v),
            valid,
            seeds,
            array(&out),
            array(&lse),
            a.threshold,
            a.keep,
            a.scale,
            s.len,
            s.heads,
            s.head_dim,
        );
    }
    (out, lse)
}

/// The backward pass: the gradients of q, k and v.
pub(super) fn backward<R: CubeRuntime>(
    q: CubeTensor<R>,
    k: CubeTensor<R>,
    v: CubeTensor<R>,
    out: CubeTensor<R>,
    lse: CubeTensor<R>,
    grad: CubeTensor<R>,
    spec: &AttentionSpec,
) -> [CubeTensor<R>; 3] {
    let (q, k, v, out) = (contiguous(q), contiguous(k), contiguous(v), contiguous(out));
    let (lse, grad) = (contiguous(lse), contiguous(grad));
    let s = spec.shape;
    let dims = vec![s.batch, s.len, s.heads * s.head_dim];
    let (dq, dk, dv) = (empty_like(&q, dims.clone()), empty_like(&q, dims.clone()), empty_like(&q, dims));
    let delta = empty_like(&q, vec![s.batch, s.heads, s.len]);
    let a = attention_inputs(&q, spec);
    let ((valid, seeds), (valid_k, seeds_k)) = (a.arrays(), a.arrays());
    // SAFETY: as in the forward pass.
    unsafe {
        attention_backward_queries_kernel::launch_unchecked(
            &q.client,
            cubes(&q.client, a.rows),
            CubeDim::new_1d(UNITS),
            array(&q),
            array(&k),
            array(&v),
            array(&out),
            array(&lse),
            array(&grad),
            valid,
            seeds,
            array(&dq),
            array(&delta),
            a.threshold,
            a.keep,
            a.scale,
            s.len,
            s.heads,
            s.head_dim,
        );
        attention_backward_keys_kernel::launch_unchecked(
            &q.client,
            cubes(&q.client, a.rows),
            CubeDim::new_1d(UNITS),
            array(&q),
            array(&k),
            array(&v),
            array(&lse),
            array(&delta),
            array(&grad),
            valid_k,
            seeds_k,
            array(&dk),
            array(&dv),
            a.threshold,
            a.keep,
            a.scale,
            s.len,
            s.heads,
            s.head_dim,
        );
    }
    [dq, dk, dv]
}
