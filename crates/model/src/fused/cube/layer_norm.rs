//! The LayerNorm of a residual sum: one unit per row for the statistics and the row gradient,
//! one per column for the gradients of `γ` and `β`.

use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;

use super::{array, contiguous, cubes, empty_like, UNITS};
use crate::fused::LayerNormSpec;

/// Row statistics and the normalized, scaled output of `x + r`.
#[cube(launch_unchecked)]
fn add_layer_norm_forward_kernel(
    x: &Array<f32>,
    r: &Array<f32>,
    gamma: &Array<f32>,
    beta: &Array<f32>,
    y: &mut Array<f32>,
    mean: &mut Array<f32>,
    rstd: &mut Array<f32>,
    eps: f32,
    #[comptime] width: usize,
) {
    let row = ABSOLUTE_POS;
    if row >= mean.len() {
        terminate!();
    }
    let base = row * width;
    let mut sum = 0.0f32;
    for i in 0..width {
        sum += x[base + i] + r[base + i];
    }
    let m = sum / (width as f32);
    let mut var = 0.0f32;
    for i in 0..width {
        let c = x[base + i] + r[base + i] - m;
        var += c * c;
    }
    let s = 1.0f32 / f32::sqrt(var / (width as f32) + eps);
    for i in 0..width {
        y[base + i] = (x[base + i] + r[base + i] - m) * s * gamma[i] + beta[i];
    }
    mean[row] = m;
    rstd[row] = s;
}

/// The gradient of the sum `x + r`, row by row.
#[cube(launch_unchecked)]
fn add_layer_norm_backward_rows_kernel(
    x: &Array<f32>,
    r: &Array<f32>,
    gamma: &Array<f32>,
    mean: &Array<f32>,
    rstd: &Array<f32>,
    dy: &Array<f32>,
    dz: &mut Array<f32>,
    #[comptime] width: usize,
) {
    let row = ABSOLUTE_POS;
    if row >= mean.len() {
        terminate!();
    }
    let base = row * width;
    let (m, s) = (mean[row], rstd[row]);
    let mut mg = 0.0f32;
    let mut mgx = 0.0f32;
    for i in 0..width {
        let g = dy[base + i] * gamma[i];
        mg += g;
        mgx += g * (x[base + i] + r[base + i] - m) * s;
    }
    mg /= width as f32;
    mgx /= width as f32;
    for i in 0..width {
        let xhat = (x[base + i] + r[base + i] - m) * s;
        dz[base + i] = (dy[base + i] * gamma[i] - mg - xhat * mgx) * s;
    }
}

/// The gradients of `γ` and `β`, column by column.
#[cube(launch_unchecked)]
fn add_layer_norm_backward_cols_kernel(
    x: &Array<f32>,
    r: &Array<f32>,
    mean: &Array<f32>,
    rstd: &Array<f32>,
    dy: &Array<f32>,
    dgamma: &mut Array<f32>,
    dbeta: &mut Array<f32>,
    #[comptime] width: usize,
) {
    let col = ABSOLUTE_POS;
    if col >= width {
        terminate!();
    }
    let rows = mean.len();
    let mut g = 0.0f32;
    let mut b = 0.0f32;
    for row in 0..rows {
        let at = row * width + col;
        g += dy[at] * (x[at] + r[at] - mean[row]) * rstd[row];
        b += dy[at];
    }
    dgamma[col] = g;
    dbeta[col] = b;
}

/// The forward pass: the output and each row's mean and reciprocal standard deviation.
pub(super) fn forward<R: CubeRuntime>(
    x: CubeTensor<R>,
    r: CubeTensor<R>,
    gamma: CubeTensor<R>,
    beta: CubeTensor<R>,
    spec: &LayerNormSpec,
) -> (CubeTensor<R>, CubeTensor<R>, CubeTensor<R>) {
    let (x, r, gamma, beta) = (contiguous(x), contiguous(r), contiguous(gamma), contiguous(beta));
    let rows = x.meta.num_elements() / spec.width.max(1);
    let y = empty_like(&x, vec![rows, spec.width]);
    let (mean, rstd) = (empty_like(&x, vec![rows]), empty_like(&x, vec![rows]));
    // SAFETY: every array is contiguous and sized from the same rows × width; the kernel
    // checks its row index against the rows.
    unsafe {
        add_layer_norm_forward_kernel::launch_unchecked(
            &x.client,
            cubes(rows),
            CubeDim::new_1d(UNITS),
            array(&x),
            array(&r),
            array(&gamma),
            array(&beta),
            array(&y),
            array(&mean),
            array(&rstd),
            spec.eps,
            spec.width,
        );
    }
    (y, mean, rstd)
}

/// The backward pass: the gradients of the sum, `γ` and `β`.
pub(super) fn backward<R: CubeRuntime>(
    x: CubeTensor<R>,
    r: CubeTensor<R>,
    gamma: CubeTensor<R>,
    mean: CubeTensor<R>,
    rstd: CubeTensor<R>,
    grad: CubeTensor<R>,
    spec: &LayerNormSpec,
) -> [CubeTensor<R>; 3] {
    let (x, r, gamma) = (contiguous(x), contiguous(r), contiguous(gamma));
    let (mean, rstd, grad) = (contiguous(mean), contiguous(rstd), contiguous(grad));
    let rows = x.meta.num_elements() / spec.width.max(1);
    let dz = empty_like(&x, vec![rows, spec.width]);
    let (dgamma, dbeta) = (empty_like(&x, vec![spec.width]), empty_like(&x, vec![spec.width]));
    // SAFETY: as in the forward pass; the column kernel checks its column index.
    unsafe {
        add_layer_norm_backward_rows_kernel::launch_unchecked(
            &x.client,
            cubes(rows),
            CubeDim::new_1d(UNITS),
            array(&x),
            array(&r),
            array(&gamma),
            array(&mean),
            array(&rstd),
            array(&grad),
            array(&dz),
            spec.width,
        );
        add_layer_norm_backward_cols_kernel::launch_unchecked(
            &x.client,
            cubes(spec.width),
            CubeDim::new_1d(UNITS),
            array(&x),
            array(&r),
            array(&mean),
            array(&rstd),
            array(&grad),
            array(&dgamma),
            array(&dbeta),
            spec.width,
        );
    }
    [dz, dgamma, dbeta]
}
