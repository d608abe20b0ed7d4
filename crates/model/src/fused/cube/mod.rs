//! CubeCL kernels of the fused operations, for burn's CubeCL backends (`CubeBackend<R>`: wgpu
//! here, also CUDA without fusion):
//! - attention with the padding mask and dropout, forward and backward, streaming over the keys
//!   with the row's log-sum-exp, so the `[batch, heads, len, len]` scores are never stored
//!   (one unit per query row, and one per key row for the key and value gradients);
//! - the LayerNorm of a residual sum, forward and backward, as three launches instead of the
//!   dozen element-wise and reduction kernels of its composition;
//! - the AdamW update over the optimizer's flat moment buffers, one launch per parameter.
//!
//! Every value is summed in a fixed order by one unit, so results do not depend on the launch
//! geometry. These are plain, unblocked kernels (no shared-memory tiles yet): what they are
//! checked for here is the numbers, against the compositions, on Mesa's software Vulkan driver.
//! The decoder loss and the dense layers keep their composed default bodies (burn's matmul).

mod adamw;
mod attention;
mod layer_norm;

use burn::tensor::Shape;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, IntElement};
use cubecl::prelude::*;

use super::{AdamWSpec, AttentionSpec, FusedOps, LayerNormSpec};

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

/// Cubes of `UNITS` units covering `n` units.
fn cubes(n: usize) -> CubeCount {
    CubeCount::Static((n as u32).div_ceil(UNITS).max(1), 1, 1)
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
        attention::forward(q, k, v, spec)
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
        attention::backward(q, k, v, out, lse, grad, spec)
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
