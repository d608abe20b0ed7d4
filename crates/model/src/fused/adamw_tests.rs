//! The fused AdamW step and squared norm against their compositions (`reference.rs`, burn's
//! `AdamW` arithmetic) on the CPU, bit for bit (`tests/gpu.rs` runs the same steps on the GPU
//! backends, to rounding).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorData, TensorPrimitive};

use super::tests::normal;
use super::{reference, AdamWHyper, AdamWSpec, FusedOps, MomentSlot};
use crate::CpuBackend;

/// Parameter shapes and their offsets in the moment buffers; 11 values at 91 belong to a
/// parameter that gets no gradient (its moments must not change).
const SHAPES: [&[usize]; 4] = [&[13, 7], &[5], &[2, 3, 40], &[1]];
const OFFSETS: [usize; 4] = [0, 102, 107, 347];
const TOTAL: usize = 348;

pub(super) fn upload<B: Backend>(data: TensorData, device: &B::Device) -> FloatTensor<B> {
    let n = data.num_elements();
    Tensor::<B, 1>::from_data(data.convert::<f32>(), device).reshape([n]).into_primitive().tensor()
}

fn download<B: Backend>(t: FloatTensor<B>) -> Vec<f32> {
    Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(t)).into_data().to_vec::<f32>().unwrap()
}

fn shaped<B: Backend>(values: Vec<f32>, dims: &[usize], device: &B::Device) -> FloatTensor<B> {
    let t = upload::<B>(TensorData::new(values, [dims.iter().product::<usize>()]), device);
    B::float_reshape(t, burn::tensor::Shape::from(dims.to_vec()))
}

/// Three steps (the second clipped) from fixed parameters and non-zero moments: every
/// parameter's values, then the two moment buffers, and the squared norm of each step's grads.
pub(super) fn three_steps<B: FusedOps>(device: &B::Device, fused: bool) -> (Vec<Vec<f32>>, f64) {
    let values = |dims: &[usize], seed: u64| {
        normal([dims.iter().product::<usize>()], 0.3, seed).into_data().to_vec::<f32>().unwrap()
    };
    let mut params: Vec<FloatTensor<B>> =
        SHAPES.iter().enumerate().map(|(i, d)| shaped::<B>(values(d, i as u64), d, device)).collect();
    let mut m = upload::<B>(normal([TOTAL], 0.01, 10).into_data(), device);
    let v0: Vec<f32> = normal([TOTAL], 0.01, 11).into_data().to_vec::<f32>().unwrap().iter().map(|x| x * x).collect();
    let mut v = upload::<B>(TensorData::new(v0, [TOTAL]), device);
    let mut squares = 0.0;
    let hyper = AdamWHyper { weight_decay: 0.01, ..AdamWHyper::default() };
    for step in 1..=3u64 {
        let grads: Vec<FloatTensor<B>> =
            SHAPES.iter().enumerate().map(|(i, d)| shaped::<B>(values(d, 100 * step + i as u64), d, device)).collect();
        squares += if fused { B::sum_of_squares(&grads) } else { reference::sum_of_squares::<B>(&grads) };
        let slots = SHAPES
            .iter()
            .zip(OFFSETS)
            .map(|(d, offset)| MomentSlot { offset, len: d.iter().product(), time: step as usize + 4 })
            .collect();
        let spec = AdamWSpec { hyper, lr: 1e-2 / step as f64, grad_scale: (step == 2).then_some(0.5), slots };
        (params, m, v) = if fused {
            B::adamw_step(params, grads, m, v, &spec)
        } else {
            reference::adamw_step::<B>(params, grads, m, v, &spec)
        };
    }
    let mut out: Vec<Vec<f32>> = params.into_iter().map(download::<B>).collect();
    out.push(download::<B>(m));
    out.push(download::<B>(v));
    (out, squares)
}

#[test]
fn cpu_adamw_step_gives_the_compositions_bits() {
    let device = Default::default();
    let (fused, sf) = three_steps::<CpuBackend>(&device, true);
    let (composed, sc) = three_steps::<CpuBackend>(&device, false);
    assert_eq!(fused, composed);
    assert!(((sf - sc) / sc).abs() < 1e-6, "{sf} vs {sc}");
    let untouched = normal([TOTAL], 0.01, 10).into_data().to_vec::<f32>().unwrap();
    assert_eq!(fused[4][91..102], untouched[91..102], "the moments of a parameter without a gradient");
}
