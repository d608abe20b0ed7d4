//! The LayerNorm of a residual sum: a cube per row for the statistics and the row gradient
//! (its units read consecutive columns and add their partial sums by a fixed tree), and for the
//! gradients of `γ` and `β` one unit per column and chunk of rows, then per column over the
//! chunks in order. No sum depends on anything but the row width and the constants here.

use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;

use super::{array, column, contiguous, cube_sum, cubes, empty_like, row_cubes, UNITS};
use crate::fused::LayerNormSpec;

/// Rows of the `γ`/`β` gradient's partial sums: each unit sums one column over this many rows,
/// then one unit per column adds the chunks in order.
const CHUNK_ROWS: usize = 128;

/// A cube per row: the row statistics and the normalized, scaled output of `x + r`.
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
    #[comptime] units: usize,
) {
    let row = CUBE_POS;
    if row >= mean.len() {
        terminate!();
    }
    let base = row * width;
    let per = comptime!(width.div_ceil(units));
    let mut z = Array::<f32>::new(per);
    let mut part = 0.0f32;
    for k in 0..per {
        let c = column(k, units);
        let mut value = 0.0f32;
        if c < width {
            value = x[base + c] + r[base + c];
        }
        z[k] = value;
        part += value;
    }
    let mut shared = SharedMemory::<f32>::new(units);
    let m = cube_sum(part, &mut shared) / (width as f32);
    let mut squares = 0.0f32;
    for k in 0..per {
        if column(k, units) < width {
            let d = z[k] - m;
            squares += d * d;
        }
    }
    let s = 1.0f32 / f32::sqrt(cube_sum(squares, &mut shared) / (width as f32) + eps);
    for k in 0..per {
        let c = column(k, units);
        if c < width {
            y[base + c] = (z[k] - m) * s * gamma[c] + beta[c];
        }
    }
    if UNIT_POS == 0u32 {
        mean[row] = m;
        rstd[row] = s;
    }
}

/// A cube per row: the gradient of the sum `x + r`.
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
    #[comptime] units: usize,
) {
    let row = CUBE_POS;
    if row >= mean.len() {
        terminate!();
    }
    let base = row * width;
    let (m, s) = (mean[row], rstd[row]);
    let per = comptime!(width.div_ceil(units));
    let mut g = Array::<f32>::new(per);
    let mut xhat = Array::<f32>::new(per);
    let mut g_part = 0.0f32;
    let mut gx_part = 0.0f32;
    for k in 0..per {
        let c = column(k, units);
        let mut gk = 0.0f32;
        let mut xk = 0.0f32;
        if c < width {
            gk = dy[base + c] * gamma[c];
            xk = (x[base + c] + r[base + c] - m) * s;
        }
        g[k] = gk;
        xhat[k] = xk;
        g_part += gk;
        gx_part += gk * xk;
    }
    let mut shared = SharedMemory::<f32>::new(units);
    let mg = cube_sum(g_part, &mut shared) / (width as f32);
    let mgx = cube_sum(gx_part, &mut shared) / (width as f32);
    for k in 0..per {
        let c = column(k, units);
        if c < width {
            dz[base + c] = (g[k] - mg - xhat[k] * mgx) * s;
        }
    }
}

/// The `γ` and `β` gradients of one chunk of `CHUNK_ROWS` rows, one unit per column (cube x:
/// the columns, y: the chunk): partial sums over the chunk's rows in order.
#[cube(launch_unchecked)]
fn add_layer_norm_backward_cols_kernel(
    x: &Array<f32>,
    r: &Array<f32>,
    mean: &Array<f32>,
    rstd: &Array<f32>,
    dy: &Array<f32>,
    part_gamma: &mut Array<f32>,
    part_beta: &mut Array<f32>,
    #[comptime] width: usize,
    #[comptime] chunk: usize,
) {
    let col = CUBE_POS_X as usize * CUBE_DIM as usize + UNIT_POS as usize;
    if col >= width {
        terminate!();
    }
    let rows = mean.len();
    let first = CUBE_POS_Y as usize * chunk;
    let mut g = 0.0f32;
    let mut b = 0.0f32;
    for k in 0..chunk {
        let row = first + k;
        if row < rows {
            let at = row * width + col;
            g += dy[at] * (x[at] + r[at] - mean[row]) * rstd[row];
            b += dy[at];
        }
    }
    let out = CUBE_POS_Y as usize * width + col;
    part_gamma[out] = g;
    part_beta[out] = b;
}

/// One unit per column: the chunks' partial sums, added in chunk order.
#[cube(launch_unchecked)]
fn sum_chunks_kernel(
    part_gamma: &Array<f32>,
    part_beta: &Array<f32>,
    dgamma: &mut Array<f32>,
    dbeta: &mut Array<f32>,
    #[comptime] width: usize,
) {
    let col = ABSOLUTE_POS;
    if col >= width {
        terminate!();
    }
    let chunks = part_gamma.len() / width;
    let mut g = 0.0f32;
    let mut b = 0.0f32;
    for c in 0..chunks {
        g += part_gamma[c * width + col];
        b += part_beta[c * width + col];
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
            row_cubes(&x.client, rows),
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
            UNITS as usize,
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
    let chunks = rows.div_ceil(CHUNK_ROWS).max(1);
    let parts = vec![chunks, spec.width];
    let (part_gamma, part_beta) = (empty_like(&x, parts.clone()), empty_like(&x, parts));
    let column_blocks = (spec.width as u32).div_ceil(UNITS).max(1);
    // SAFETY: as in the forward pass; the column kernels check their column index, the chunk
    // kernel its rows.
    unsafe {
        add_layer_norm_backward_rows_kernel::launch_unchecked(
            &x.client,
            row_cubes(&x.client, rows),
            CubeDim::new_1d(UNITS),
            array(&x),
            array(&r),
            array(&gamma),
            array(&mean),
            array(&rstd),
            array(&grad),
            array(&dz),
            spec.width,
            UNITS as usize,
        );
        add_layer_norm_backward_cols_kernel::launch_unchecked(
            &x.client,
            CubeCount::Static(column_blocks, chunks as u32, 1),
            CubeDim::new_1d(UNITS),
            array(&x),
            array(&r),
            array(&mean),
            array(&rstd),
            array(&grad),
            array(&part_gamma),
            array(&part_beta),
            spec.width,
            CHUNK_ROWS,
        );
        sum_chunks_kernel::launch_unchecked(
            &x.client,
            cubes(&x.client, spec.width),
            CubeDim::new_1d(UNITS),
            array(&part_gamma),
            array(&part_beta),
            array(&dgamma),
            array(&dbeta),
            spec.width,
        );
    }
    [dz, dgamma, dbeta]
}
