//! The tied decoder's loss: the logits come from burn's matmul (CubeCL's tiled GEMM), and
//! everything between the GEMMs is one kernel per pass instead of the composition's dozen
//! `[rows, vocab]` element-wise and reduction kernels (bias add, max, subtract, exp, sum, log,
//! gather, arg-max; in the backward pass a one-hot matrix, exp, subtract and scale):
//! - forward: a cube per row reads its logits twice (maximum and arg-max, then the sum of
//!   exponentials), adding the bias on the fly, and writes the row's NLL, log-sum-exp and
//!   arg-max;
//! - backward: the recomputed logits become `(softmax − onehot) · g` in place, then two GEMMs
//!   give the gradients of the states and the embeddings, and the bias gradient is a column sum
//!   in chunks of rows, added in chunk order.
//!
//! Every reduction has a fixed order (a unit's columns in order, then a fixed tree; a column's
//! chunks in order), so the results depend only on the shapes.

use burn::tensor::ops::FloatTensorOps;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, IntElement};
use cubecl::prelude::*;

use super::{array, column, contiguous, cube_sum, cubes, empty_like, row_cubes, UNITS};
use crate::fused::DecoderSpec;

/// Rows per partial column sum of the bias gradient.
const CHUNK_ROWS: usize = 128;

/// A cube per row: the row's first maximal logit (its arg-max), then its log-sum-exp and the
/// NLL of its target. `lowest` is −∞ (a runtime value: a literal could not be reassigned).
#[cube(launch_unchecked)]
fn decoder_forward_kernel(
    logits: &Array<f32>,
    bias: &Array<f32>,
    targets: &Array<u32>,
    nll: &mut Array<f32>,
    lse: &mut Array<f32>,
    argmax: &mut Array<u32>,
    lowest: f32,
    #[comptime] units: usize,
) {
    let row = CUBE_POS;
    if row >= nll.len() {
        terminate!();
    }
    let vocab = bias.len();
    let base = row * vocab;
    // Enough rounds for every column (one more than needed when `units` divides `vocab`).
    let per = vocab / units + 1;
    // Each unit's first maximum over its columns, which it visits in increasing order.
    let mut best = lowest;
    let mut best_at = vocab as u32;
    for k in 0..per {
        let c = column(k, units);
        if c < vocab {
            let l = logits[base + c] + bias[c];
            if l > best {
                best = l;
                best_at = c as u32;
            }
        }
    }
    // The cube's first maximum by a fixed tree: the larger value, on a tie the lower column.
    let u = UNIT_POS as usize;
    let mut values = SharedMemory::<f32>::new(units);
    let mut columns = SharedMemory::<u32>::new(units);
    values[u] = best;
    columns[u] = best_at;
    sync_cube();
    let mut stride = CUBE_DIM as usize / 2;
    while stride > 0 {
        if u < stride {
            let (v, at) = (values[u + stride], columns[u + stride]);
            if v > values[u] {
                values[u] = v;
                columns[u] = at;
            } else if v == values[u] && at < columns[u] {
                columns[u] = at;
            }
        }
        sync_cube();
        stride /= 2;
    }
    let max = values[0];
    let mut part = 0.0f32;
    for k in 0..per {
        let c = column(k, units);
        if c < vocab {
            part += f32::exp(logits[base + c] + bias[c] - max);
        }
    }
    let mut shared = SharedMemory::<f32>::new(units);
    let row_lse = max + f32::ln(cube_sum(part, &mut shared));
    if UNIT_POS == 0u32 {
        let t = targets[row] as usize;
        lse[row] = row_lse;
        // The host checks every target against the vocabulary; this guards the read alone.
        if t < vocab {
            nll[row] = row_lse - (logits[base + t] + bias[t]);
        }
        argmax[row] = columns[0];
    }
}

/// One unit per logit, in place: `(exp(logit − lse) − [column = target]) · g`, the gradient of
/// `g · NLL` with respect to the logit.
#[cube(launch_unchecked)]
fn decoder_logit_grad_kernel(
    logits: &mut Array<f32>,
    bias: &Array<f32>,
    targets: &Array<u32>,
    lse: &Array<f32>,
    grad: &Array<f32>,
) {
    let at = ABSOLUTE_POS;
    if at >= logits.len() {
        terminate!();
    }
    let vocab = bias.len();
    let (row, c) = (at / vocab, at % vocab);
    let mut p = f32::exp(logits[at] + bias[c] - lse[row]);
    if c == targets[row] as usize {
        p -= 1.0f32;
    }
    logits[at] = p * grad[row];
}

/// One unit per column and chunk of rows (cube x: the columns, y: the chunk): the column's sum
/// over the chunk's rows, in order.
#[cube(launch_unchecked)]
fn column_chunk_sums_kernel(t: &Array<f32>, parts: &mut Array<f32>, width: u32, #[comptime] chunk: usize) {
    let width = width as usize;
    let col = CUBE_POS_X as usize * CUBE_DIM as usize + UNIT_POS as usize;
    if col >= width {
        terminate!();
    }
    let rows = t.len() / width;
    let first = CUBE_POS_Y as usize * chunk;
    let mut s = 0.0f32;
    for k in 0..chunk {
        let row = first + k;
        if row < rows {
            s += t[row * width + col];
        }
    }
    parts[CUBE_POS_Y as usize * width + col] = s;
}

/// One unit per column: the chunks' partial sums, added in chunk order.
#[cube(launch_unchecked)]
fn sum_column_chunks_kernel(parts: &Array<f32>, sums: &mut Array<f32>) {
    let col = ABSOLUTE_POS;
    let width = sums.len();
    if col >= width {
        terminate!();
    }
    let chunks = parts.len() / width;
    let mut s = 0.0f32;
    for c in 0..chunks {
        s += parts[c * width + col];
    }
    sums[col] = s;
}

/// `y · Eᵀ` (`[rows, vocab]`) by burn's matmul, contiguous.
fn logits<R: CubeRuntime, I: IntElement, BT: BoolElement>(y: CubeTensor<R>, emb: CubeTensor<R>) -> CubeTensor<R> {
    type B<R, I, BT> = CubeBackend<R, f32, I, BT>;
    contiguous(B::<R, I, BT>::float_matmul(y, B::<R, I, BT>::float_transpose(emb)))
}

/// The targets as a device array of u32, checked against the vocabulary.
fn upload_targets<R: CubeRuntime>(like: &CubeTensor<R>, spec: &DecoderSpec) -> ArrayArg<R> {
    let vocab = spec.shape.vocab;
    assert!(
        spec.targets.len() == spec.shape.rows && spec.targets.iter().all(|&t| (t as usize) < vocab),
        "decoder targets: {} rows, each below the vocabulary of {vocab}",
        spec.shape.rows
    );
    let handle = like.client.create_from_slice(u32::as_bytes(&spec.targets));
    // SAFETY: the handle holds exactly `targets.len()` u32 values.
    unsafe { ArrayArg::from_raw_parts(handle, spec.targets.len()) }
}

/// The forward pass: each row's NLL and log-sum-exp (`[rows]`) and arg-max token.
pub(super) fn forward<R: CubeRuntime, I: IntElement, BT: BoolElement>(
    y: CubeTensor<R>,
    emb: CubeTensor<R>,
    bias: CubeTensor<R>,
    spec: &DecoderSpec,
) -> (CubeTensor<R>, CubeTensor<R>, Vec<u32>) {
    let rows = spec.shape.rows;
    let logits = logits::<R, I, BT>(y, emb);
    let bias = contiguous(bias);
    let (nll, lse) = (empty_like(&logits, vec![rows]), empty_like(&logits, vec![rows]));
    let client = logits.client.clone();
    let argmax = client.empty(rows.max(1) * size_of::<u32>());
    // SAFETY: logits is contiguous [rows, vocab] with vocab the bias's length, nll, lse,
    // targets and argmax hold one value per row; the kernel checks its row index.
    unsafe {
        decoder_forward_kernel::launch_unchecked(
            &client,
            row_cubes(&client, rows),
            CubeDim::new_1d(UNITS),
            array(&logits),
            array(&bias),
            upload_targets(&logits, spec),
            array(&nll),
            array(&lse),
            ArrayArg::from_raw_parts(argmax.clone(), rows),
            f32::NEG_INFINITY,
            UNITS as usize,
        );
    }
    // The trainer reports accuracy from the arg-max every step, as burn's `into_data` would
    // read it; a device that cannot be read back has lost the run.
    let bytes = client.read_one(argmax).expect("reading the decoder's arg-max back from the device");
    let argmax = u32::from_bytes(&bytes)[..rows].to_vec();
    (nll, lse, argmax)
}

/// The backward pass: the gradients of the states, the embeddings and the bias.
pub(super) fn backward<R: CubeRuntime, I: IntElement, BT: BoolElement>(
    y: CubeTensor<R>,
    emb: CubeTensor<R>,
    bias: CubeTensor<R>,
    lse: CubeTensor<R>,
    grad: CubeTensor<R>,
    spec: &DecoderSpec,
) -> [CubeTensor<R>; 3] {
    type B<R, I, BT> = CubeBackend<R, f32, I, BT>;
    let (rows, vocab) = (spec.shape.rows, spec.shape.vocab);
    let dl = logits::<R, I, BT>(y.clone(), emb.clone());
    let (bias, lse, grad) = (contiguous(bias), contiguous(lse), contiguous(grad));
    let client = dl.client.clone();
    // SAFETY: dl is the contiguous [rows, vocab] product just made (nothing else holds it);
    // lse, grad and targets hold one value per row; the kernel checks its index.
    unsafe {
        decoder_logit_grad_kernel::launch_unchecked(
            &client,
            cubes(&client, rows * vocab),
            CubeDim::new_1d(UNITS),
            array(&dl),
            array(&bias),
            upload_targets(&dl, spec),
            array(&lse),
            array(&grad),
        );
    }
    let dbias = column_sums(&dl, rows, vocab);
    let dy = B::<R, I, BT>::float_matmul(dl.clone(), emb);
    let demb = B::<R, I, BT>::float_matmul(B::<R, I, BT>::float_transpose(dl), y);
    [dy, demb, dbias]
}

/// The sums of the columns of a contiguous `[rows, width]` tensor, in a fixed order.
fn column_sums<R: CubeRuntime>(t: &CubeTensor<R>, rows: usize, width: usize) -> CubeTensor<R> {
    let chunks = rows.div_ceil(CHUNK_ROWS).max(1);
    let parts = empty_like(t, vec![chunks, width]);
    let sums = empty_like(t, vec![width]);
    let column_blocks = (width as u32).div_ceil(UNITS).max(1);
    // SAFETY: t is contiguous [rows, width], parts [chunks, width]; both kernels check their
    // column index, the chunk kernel its rows.
    unsafe {
        column_chunk_sums_kernel::launch_unchecked(
            &t.client,
            CubeCount::Static(column_blocks, chunks as u32, 1),
            CubeDim::new_1d(UNITS),
            array(t),
            array(&parts),
            width as u32,
            CHUNK_ROWS,
        );
        sum_column_chunks_kernel::launch_unchecked(
            &t.client,
            cubes(&t.client, width),
            CubeDim::new_1d(UNITS),
            array(&parts),
            array(&sums),
        );
    }
    sums
}
