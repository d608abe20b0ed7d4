//! CubeCL kernels of the fused operations, for burn's CubeCL backends (`CubeBackend<R>`: wgpu
//! here, also CUDA without fusion):
//! - attention with the padding mask and dropout, forward and backward, streaming over the keys
//!   with the row's log-sum-exp, so the `[batch, heads, len, len]` scores are never stored
//!   (one unit per query row, and one per key row for the key and value gradients; the loops
//!   over a head's values unrolled, see `attention.rs` on lavapipe's loop limit).
//!   `CORRFLOW_CUBECL_ATTENTION=0` runs the composition instead;
//! - the LayerNorm of a residual sum, forward and backward, a cube per row (coalesced reads,
//!   a fixed reduction tree), as four launches instead of the dozen element-wise and
//!   reduction kernels of its composition;
//! - the tied decoder's loss between its GEMMs (burn's matmul): a cube per masked row for the
//!   NLL, log-sum-exp and arg-max, and the logit gradient in place, instead of the dozen
//!   `[rows, vocab]` kernels of its composition;
//! - the AdamW update over the optimizer's flat moment buffers, one launch per parameter, and
//!   the squared gradient norm it is clipped by, one launch per gradient and one read-back.
//!
//! Every sum has a fixed order that depends only on the shapes and the constants of these
//! files, never on the device or on the number of cubes it runs at once. What they are checked
//! for here is the numbers, against the compositions, on Mesa's software Vulkan driver; their
//! speed needs a GPU.
//! The dense layers keep their composed default body: burn's matmul, itself CubeCL's GEMM.

mod adamw;
mod attention;
mod decoder;
mod layer_norm;

use burn::tensor::Shape;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, IntElement};
use cubecl::calculate_cube_count_elemwise;
use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use super::{AdamWSpec, AttentionSpec, DecoderSpec, FusedOps, LayerNormSpec};

/// Units per cube of the row and column launches.
const UNITS: u32 = 64;

fn contiguous<R: CubeRuntime>(t: CubeTensor<R>) -> CubeTensor<R> {
    burn_cubecl::kernel::into_contiguous(t)
}

fn empty_like<R: CubeRuntime>(like: &CubeTensor<R>, dims: Vec<usize>) -> CubeTensor<R> {
    empty_device_dtype(like.client.clone(), like.device.clone(), Shape::from(dims), like.dtype)
}

fn array<R: CubeRuntime>(t: &CubeTensor<R>) -> ArrayArg<R> {
    t.clone().into_array_arg()
}

/// Cubes of `UNITS` units covering `n` units (`ABSOLUTE_POS` below `n`), spread over two or
/// three dimensions past a dimension's limit (65,535 cubes on Vulkan: the embedding matrix's
/// AdamW update alone needs about 100,000).
fn cubes<R: CubeRuntime>(client: &ComputeClient<R>, n: usize) -> CubeCount {
    calculate_cube_count_elemwise(client, n.max(1), CubeDim::new_1d(UNITS))
}

/// One cube per row (`CUBE_POS` below `rows`), spread over dimensions as [`cubes`] does.
fn row_cubes<R: CubeRuntime>(client: &ComputeClient<R>, rows: usize) -> CubeCount {
    CubeCountSelection::new(client, rows.max(1) as u32).cube_count()
}

/// The sum of the cube's partial values by a fixed tree (the same order on every device), in
/// every unit. `shared` holds one value per unit; it is free again when this returns.
#[cube]
fn cube_sum(partial: f32, shared: &mut SharedMemory<f32>) -> f32 {
    let u = UNIT_POS as usize;
    shared[u] = partial;
    sync_cube();
    let mut stride = CUBE_DIM as usize / 2;
    while stride > 0 {
        if u < stride {
            shared[u] = shared[u] + shared[u + stride];
        }
        sync_cube();
        stride /= 2;
    }
    let total = shared[0];
    sync_cube();
    total
}

/// This unit's `k`-th column of a row: the cube's units take consecutive columns, so each read
/// of a row is one coalesced transaction.
#[cube]
fn column(k: usize, #[comptime] units: usize) -> usize {
    UNIT_POS as usize + k * units
}

impl<R, I, BT> FusedOps for CubeBackend<R, f32, I, BT>
where
    R: CubeRuntime,
    I: IntElement,
    BT: BoolElement,
{
    fn attention_forward(
        q: CubeTensor<R>,
        k: CubeTensor<R>,
        v: CubeTensor<R>,
        spec: &AttentionSpec,
    ) -> (CubeTensor<R>, CubeTensor<R>) {
        if attention::kernels_enabled() {
            attention::forward(q, k, v, spec)
        } else {
            super::reference::attention_forward::<Self>(q, k, v, spec)
        }
    }

    fn attention_backward(
        q: CubeTensor<R>,
        k: CubeTensor<R>,
        v: CubeTensor<R>,
        out: CubeTensor<R>,
        lse: CubeTensor<R>,
        grad: CubeTensor<R>,
        spec: &AttentionSpec,
    ) -> [CubeTensor<R>; 3] {
        if attention::kernels_enabled() {
            attention::backward(q, k, v, out, lse, grad, spec)
        } else {
            super::reference::attention_backward::<Self>(q, k, v, out, lse, grad, spec)
        }
    }

    fn add_layer_norm_forward(
        x: CubeTensor<R>,
        r: CubeTensor<R>,
        gamma: CubeTensor<R>,
        beta: CubeTensor<R>,
        spec: &LayerNormSpec,
    ) -> (CubeTensor<R>, CubeTensor<R>, CubeTensor<R>) {
        layer_norm::forward(x, r, gamma, beta, spec)
    }

    fn add_layer_norm_backward(
        x: CubeTensor<R>,
        r: CubeTensor<R>,
        gamma: CubeTensor<R>,
        mean: CubeTensor<R>,
        rstd: CubeTensor<R>,
        grad: CubeTensor<R>,
        spec: &LayerNormSpec,
    ) -> [CubeTensor<R>; 3] {
        layer_norm::backward(x, r, gamma, mean, rstd, grad, spec)
    }

    fn decoder_nll_forward(
        y: CubeTensor<R>,
        emb: CubeTensor<R>,
        bias: CubeTensor<R>,
        spec: &DecoderSpec,
    ) -> (CubeTensor<R>, CubeTensor<R>, Vec<u32>) {
        decoder::forward::<R, I, BT>(y, emb, bias, spec)
    }

    fn decoder_nll_backward(
        y: CubeTensor<R>,
        emb: CubeTensor<R>,
        bias: CubeTensor<R>,
        lse: CubeTensor<R>,
        grad: CubeTensor<R>,
        spec: &DecoderSpec,
    ) -> [CubeTensor<R>; 3] {
        decoder::backward::<R, I, BT>(y, emb, bias, lse, grad, spec)
    }

    fn sum_of_squares(tensors: &[CubeTensor<R>]) -> f64 {
        adamw::sum_of_squares(tensors)
    }

    fn adamw_step(
        params: Vec<CubeTensor<R>>,
        grads: Vec<CubeTensor<R>>,
        moment_1: CubeTensor<R>,
        moment_2: CubeTensor<R>,
        spec: &AdamWSpec,
    ) -> (Vec<CubeTensor<R>>, CubeTensor<R>, CubeTensor<R>) {
        adamw::step(params, grads, moment_1, moment_2, spec)
    }
}
