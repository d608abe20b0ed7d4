//! AdamW over the optimizer's flat moment buffers: one launch per parameter, one unit per
//! element, moments updated in place; every parameter's scalars go to the device once per step,
//! as one array. (burn's composition launches about a dozen element-wise kernels per parameter,
//! and the clipping two more.) The clipping's squared norm is one launch per gradient into one
//! buffer of partial sums, read back once.

use burn::tensor::TensorMetadata;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;

use super::{array, contiguous, cube_sum, cubes, empty_like, row_cubes, UNITS};
use crate::fused::AdamWSpec;

/// Scalars per parameter in the constants array.
const SCALARS: usize = 10;

/// One parameter's update: its new values into `out`, its moments at `offset` of the flat
/// buffers in place. The scalars of parameter `slot` are `constants[slot · 10 ..]`: gradient
/// scale, β₁, β₂, 1 − β₁, 1 − β₂, the two bias corrections, ε, the decay factor and the rate.
#[cube(launch_unchecked)]
fn adamw_kernel(
    param: &Array<f32>,
    grad: &Array<f32>,
    m: &mut Array<f32>,
    v: &mut Array<f32>,
    out: &mut Array<f32>,
    constants: &Array<f32>,
    slot: u32,
    offset: u32,
) {
    let i = ABSOLUTE_POS;
    if i >= out.len() {
        terminate!();
    }
    let c = slot as usize * 10;
    let g = grad[i] * constants[c];
    let at = offset as usize + i;
    let m1 = m[at] * constants[c + 1] + g * constants[c + 3];
    let m2 = v[at] * constants[c + 2] + (g * g) * constants[c + 4];
    m[at] = m1;
    v[at] = m2;
    let step = (m1 / constants[c + 5]) / (f32::sqrt(m2 / constants[c + 6]) + constants[c + 7]);
    out[i] = param[i] * constants[c + 8] - step * constants[c + 9];
}

/// A buffer the kernel may write: `t` itself unless something else holds it.
fn writable<R: CubeRuntime>(t: CubeTensor<R>) -> CubeTensor<R> {
    let t = contiguous(t);
    if t.can_mut() {
        t
    } else {
        t.copy()
    }
}

pub(super) fn step<R: CubeRuntime>(
    params: Vec<CubeTensor<R>>,
    grads: Vec<CubeTensor<R>>,
    moment_1: CubeTensor<R>,
    moment_2: CubeTensor<R>,
    spec: &AdamWSpec,
) -> (Vec<CubeTensor<R>>, CubeTensor<R>, CubeTensor<R>) {
    let (m, v) = (writable(moment_1), writable(moment_2));
    let constants: Vec<f32> = spec
        .slots
        .iter()
        .flat_map(|slot| {
            let k = spec.constants(slot);
            let scale = k.grad_scale.unwrap_or(1.0);
            [
                scale,
                k.beta_1,
                k.beta_2,
                k.factor_1,
                k.factor_2,
                k.correction_1,
                k.correction_2,
                k.epsilon,
                k.decay,
                k.lr,
            ]
        })
        .collect();
    debug_assert_eq!(constants.len(), spec.slots.len() * SCALARS);
    let table = m.client.create_from_slice(f32::as_bytes(&constants));
    let updated = params
        .into_iter()
        .zip(grads)
        .zip(&spec.slots)
        .enumerate()
        .map(|(i, ((p, g), slot))| {
            let (p, g) = (contiguous(p), contiguous(g));
            let out = empty_like(&p, p.shape().to_vec());
            let offset = u32::try_from(slot.offset).expect("moment buffers of fewer than 2³² values");
            // SAFETY: p, g and out are contiguous with the parameter's `slot.len` values, the
            // moments hold `offset + len` or more, the table holds 10 scalars per slot; the
            // kernel checks its index against out's length.
            unsafe {
                let table = ArrayArg::from_raw_parts(table.clone(), constants.len());
                adamw_kernel::launch_unchecked(
                    &m.client,
                    cubes(&m.client, slot.len),
                    CubeDim::new_1d(UNITS),
                    array(&p),
                    array(&g),
                    array(&m),
                    array(&v),
                    array(&out),
                    table,
                    i as u32,
                    offset,
                );
            }
            out
        })
        .collect();
    (updated, m, v)
}

/// Elements per cube of the sum of squares: each of its units sums `SQUARES_PER_UNIT` of them.
const SQUARES_PER_UNIT: usize = 64;

/// A cube per block of `SQUARES_PER_UNIT · UNITS` elements: the block's `Σ x²`, written at
/// `first + block` of the partial sums (units read consecutive elements; a fixed tree adds them).
#[cube(launch_unchecked)]
fn sum_of_squares_kernel(
    x: &Array<f32>,
    partials: &mut Array<f32>,
    first: u32,
    #[comptime] per_unit: usize,
    #[comptime] units: usize,
) {
    let block = CUBE_POS;
    let base = block * per_unit * units;
    if base >= x.len() {
        terminate!();
    }
    let mut s = 0.0f32;
    for k in 0..per_unit {
        let i = base + UNIT_POS as usize + k * units;
        if i < x.len() {
            let v = x[i];
            s += v * v;
        }
    }
    let mut shared = SharedMemory::<f32>::new(units);
    let total = cube_sum(s, &mut shared);
    if UNIT_POS == 0u32 {
        partials[first as usize + block] = total;
    }
}

/// `Σ x²` over every element of `tensors`: a launch per tensor writing its blocks' partial sums
/// into one buffer, one read-back, and the partials added in order in `f64`.
pub(super) fn sum_of_squares<R: CubeRuntime>(tensors: &[CubeTensor<R>]) -> f64 {
    let Some(like) = tensors.first() else {
        return 0.0;
    };
    let block = SQUARES_PER_UNIT * UNITS as usize;
    let blocks: Vec<usize> = tensors.iter().map(|t| t.meta.num_elements().div_ceil(block)).collect();
    let total: usize = blocks.iter().sum();
    let partials = empty_like(like, vec![total.max(1)]);
    let mut first = 0usize;
    for (t, &n) in tensors.iter().zip(&blocks) {
        let t = contiguous(t.clone());
        // SAFETY: t is contiguous; its `n` blocks write partials[first .. first + n], inside
        // the buffer; the kernel checks each element index against t's length.
        unsafe {
            sum_of_squares_kernel::launch_unchecked(
                &like.client,
                row_cubes(&like.client, n),
                CubeDim::new_1d(UNITS),
                array(&t),
                array(&partials),
                u32::try_from(first).expect("fewer than 2³² partial sums"),
                SQUARES_PER_UNIT,
                UNITS as usize,
            );
        }
        first += n;
    }
    let bytes = like.client.read_one(partials.handle).expect("reading the gradients' norm back from the device");
    f32::from_bytes(&bytes)[..total].iter().map(|&p| f64::from(p)).sum()
}
