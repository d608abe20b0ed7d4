//! Gradient checks: each fused operation against its reference composition, differentiated by
//! burn's autodiff (values and gradients within 1e-4 relative), on random and real-cell shapes
//! with padding and dropout; on the GPU backends in `gpu.rs`.

#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod gpu;

use std::sync::Arc;

use burn::backend::Autodiff;
use burn::tensor::{Tensor, TensorData, TensorPrimitive};

use super::reference;
use super::{AttentionShape, AttentionSpec, DecoderShape, DecoderSpec, DropoutKey, FusedOps, LayerNormSpec};
use crate::{CpuBackend, CpuTraining};

/// A tensor of N(0, sd²)-like values from a local generator (burn's global one is shared with
/// the tests running beside this one, so it would not give the same inputs twice).
pub(super) fn normal<const D: usize>(dims: [usize; D], sd: f32, seed: u64) -> Tensor<CpuBackend, D> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut uniform = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 40) as f32 / (1u64 << 24) as f32
    };
    let n = dims.iter().product::<usize>();
    // Sum of four uniforms, centred and scaled: close enough to normal for gradient checks.
    let v: Vec<f32> = (0..n).map(|_| (uniform() + uniform() + uniform() + uniform() - 2.0) * 1.732 * sd).collect();
    Tensor::from_data(TensorData::new(v, dims), &Default::default())
}

fn rel_err<const D: usize>(a: Tensor<CpuBackend, D>, b: Tensor<CpuBackend, D>) -> f32 {
    relative(&values(a.into_data()), &values(b.into_data()))
}

fn spec(batch: usize, len: usize, heads: usize, head_dim: usize, lens: &[usize], p: f32) -> AttentionSpec {
    let valid = (0..batch).flat_map(|b| (0..len).map(move |i| i < lens[b])).collect();
    let dropout = (p > 0.0).then_some(DropoutKey { p, key: 12_345 });
    AttentionSpec { shape: AttentionShape { batch, len, heads, head_dim }, valid: Arc::new(valid), dropout }
}

fn check(spec: AttentionSpec) {
    check_attention::<CpuBackend>(&Default::default(), &spec);
}

#[test]
fn fused_attention_matches_the_composition_on_random_shapes_with_padding() {
    check(spec(3, 37, 2, 8, &[37, 20, 1], 0.0));
    check(spec(2, 130, 4, 16, &[130, 77], 0.1));
}

#[test]
fn fused_attention_matches_the_composition_on_a_real_cell_shape() {
    // Geneformer V1's attention (4 heads × 64) on two Kang-length cells, padded, with its dropout.
    check(spec(2, 640, 4, 64, &[640, 431], 0.02));
}

#[test]
fn default_backward_matches_autodiff_of_the_composition() {
    // The composed forward/backward pair (what backends without a fused kernel run).
    let spec = spec(2, 50, 2, 8, &[50, 31], 0.2);
    let s = spec.shape;
    let dims = [s.batch, s.len, s.heads * s.head_dim];
    let (q, k, v, w) = (normal(dims, 1.0, 5), normal(dims, 1.0, 6), normal(dims, 1.0, 7), normal(dims, 1.0, 8));
    let p = |t: &Tensor<CpuBackend, 3>| t.clone().into_primitive().tensor();
    let (out, lse) = reference::attention_forward::<CpuBackend>(p(&q), p(&k), p(&v), &spec);
    let [dq, dk, dv] = reference::attention_backward::<CpuBackend>(p(&q), p(&k), p(&v), out.clone(), lse, p(&w), &spec);
    let (fout, flse) = CpuBackend::attention_forward(p(&q), p(&k), p(&v), &spec);
    let [fq, fk, fv] = CpuBackend::attention_backward(p(&q), p(&k), p(&v), fout, flse, p(&w), &spec);
    let t = |x| Tensor::<CpuBackend, 3>::from_primitive(TensorPrimitive::Float(x));
    for (name, a, b) in [("dq", dq, fq), ("dk", dk, fk), ("dv", dv, fv)] {
        let e = rel_err(t(a), t(b));
        assert!(e < 1e-4, "{name}: relative error {e}");
    }
}

#[test]
fn fused_decoder_loss_matches_log_softmax_and_gather() {
    check_decoder::<CpuBackend>(&Default::default());
}

#[test]
fn composed_decoder_backward_matches_the_fused_kernel() {
    let (rows, hidden, vocab) = (5, 8, 1_500);
    let spec =
        DecoderSpec { shape: DecoderShape { rows, hidden, vocab }, targets: Arc::new(vec![0, 1_024, 1_499, 3, 700]) };
    let (y, e, b, g) = (
        normal([rows, hidden], 1.0, 13),
        normal([vocab, hidden], 1.0, 14),
        normal([vocab], 1.0, 15),
        normal([rows], 1.0, 16),
    );
    let p2 = |t: &Tensor<CpuBackend, 2>| t.clone().into_primitive().tensor();
    let p1 = |t: &Tensor<CpuBackend, 1>| t.clone().into_primitive().tensor();
    let (_, lse, argmax) = reference::decoder_nll_forward::<CpuBackend>(p2(&y), p2(&e), p1(&b), &spec);
    let composed = reference::decoder_nll_backward::<CpuBackend>(p2(&y), p2(&e), p1(&b), lse, p1(&g), &spec);
    let (_, flse, fargmax) = CpuBackend::decoder_nll_forward(p2(&y), p2(&e), p1(&b), &spec);
    let fused = CpuBackend::decoder_nll_backward(p2(&y), p2(&e), p1(&b), flse, p1(&g), &spec);
    assert_eq!(argmax, fargmax);
    for (a, b) in composed.into_iter().zip(fused) {
        let (a, b) = (
            Tensor::<CpuBackend, 1>::from_primitive(TensorPrimitive::Float(a)),
            Tensor::<CpuBackend, 1>::from_primitive(TensorPrimitive::Float(b)),
        );
        let err = (a - b.clone()).abs().max().into_scalar() / b.abs().max().into_scalar().max(1e-12);
        assert!(err < 1e-4, "relative error {err}");
    }
}

#[test]
fn fused_layer_norm_matches_the_composition() {
    check_layer_norm::<CpuBackend>(&Default::default());
}

#[test]
fn fused_linear_matches_burn_linear() {
    use burn::nn::LinearConfig;
    let device = Default::default();
    let mut layer = LinearConfig::new(48, 80).init::<CpuTraining>(&device);
    // Fixed weights: burn's generator is seeded from the OS, so its draws differ on every run.
    layer.weight = burn::module::Param::from_tensor(Tensor::from_inner(normal([48, 80], 0.15, 24)));
    layer.bias = Some(burn::module::Param::from_tensor(Tensor::from_inner(normal([80], 0.15, 25))));
    let (x0, w) = (normal([3, 111, 48], 1.0, 22), normal([3, 111, 80], 1.0, 23));
    let run = |fused: bool| {
        let x = Tensor::<CpuTraining, 3>::from_inner(x0.clone()).require_grad();
        let y = if fused { super::linear(x.clone(), &layer) } else { layer.forward(x.clone()) };
        let grads = (y.clone() * Tensor::from_inner(w.clone())).sum().backward();
        let bias = layer.bias.as_ref().unwrap().val().grad(&grads).unwrap().unsqueeze_dim::<2>(0).unsqueeze_dim::<3>(0);
        let weight = layer.weight.val().grad(&grads).unwrap().unsqueeze_dim::<3>(0);
        [y.inner(), x.grad(&grads).unwrap(), weight, bias]
    };
    let (f, c) = (run(true), run(false));
    for (name, (a, b)) in ["y", "dx", "dW", "db"].iter().zip(f.into_iter().zip(c)) {
        let e = rel_err(a, b);
        assert!(e < 1e-4, "{name}: relative error {e}");
    }
}

// Generic over the backend: shared by these checks and the GPU ones (`gpu.rs`).

fn values(d: TensorData) -> Vec<f32> {
    d.to_vec::<f32>().unwrap()
}

/// `‖a − b‖ / ‖b‖`.
fn relative(a: &[f32], b: &[f32]) -> f32 {
    let norm = b.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    a.iter().zip(b).map(|(p, q)| (p - q) * (p - q)).sum::<f32>().sqrt() / norm
}

fn assert_close(names: &[&str], got: &[Vec<f32>], want: &[Vec<f32>], bound: f32, what: &str) {
    for (name, (a, b)) in names.iter().zip(got.iter().zip(want)) {
        let err = relative(a, b);
        assert!(err < bound, "{what} {name}: relative error {err}");
    }
}

/// Output, dq, dk and dv of `Σ out ∘ w` on `G` (the fused operation, or the composition
/// differentiated by burn's autodiff).
fn attention<G: FusedOps>(device: &G::Device, spec: &AttentionSpec, fused: bool) -> Vec<Vec<f32>> {
    let s = spec.shape;
    let dims = [s.batch, s.len, s.heads * s.head_dim];
    let input = |seed| Tensor::<Autodiff<G>, 3>::from_data(normal(dims, 1.0, seed).into_data(), device);
    let (q, k, v) = (input(1).require_grad(), input(2).require_grad(), input(3).require_grad());
    let out = if fused {
        let p = |t: &Tensor<Autodiff<G>, 3>| t.clone().into_primitive().tensor();
        Tensor::from_primitive(TensorPrimitive::Float(Autodiff::<G>::fused_attention(p(&q), p(&k), p(&v), spec)))
    } else {
        reference::attention(q.clone(), k.clone(), v.clone(), spec)
    };
    let grads = (out.clone() * input(4)).sum().backward();
    let h = |t: Tensor<G, 3>| values(t.into_data());
    vec![h(out.inner()), h(q.grad(&grads).unwrap()), h(k.grad(&grads).unwrap()), h(v.grad(&grads).unwrap())]
}

fn check_attention<G: FusedOps>(device: &G::Device, spec: &AttentionSpec) {
    let what = format!("{:?}", spec.shape);
    let names = ["output", "dq", "dk", "dv"];
    assert_close(&names, &attention::<G>(device, spec, true), &attention::<G>(device, spec, false), 1e-4, &what);
}

/// `LN(x + r) · γ + β` and its gradients on `G`, fused or composed.
fn layer_norm<G: FusedOps>(device: &G::Device, rows: usize, width: usize, fused: bool) -> Vec<Vec<f32>> {
    let spec = LayerNormSpec { width, eps: 1e-12 };
    let up2 = |t: Tensor<CpuBackend, 2>| Tensor::<Autodiff<G>, 2>::from_data(t.into_data(), device);
    let up1 = |t: Tensor<CpuBackend, 1>| Tensor::<Autodiff<G>, 1>::from_data(t.into_data(), device);
    let x = up2(normal([rows, width], 1.0, 17)).require_grad();
    let r = up2(normal([rows, width], 0.5, 18)).require_grad();
    let g = up1(normal([width], 0.1, 20) + 1.0).require_grad();
    let b = up1(normal([width], 0.1, 21)).require_grad();
    let y = if fused {
        let p2 = |t: &Tensor<Autodiff<G>, 2>| t.clone().into_primitive().tensor();
        let p1 = |t: &Tensor<Autodiff<G>, 1>| t.clone().into_primitive().tensor();
        Tensor::<Autodiff<G>, 2>::from_primitive(TensorPrimitive::Float(Autodiff::<G>::fused_add_layer_norm(
            p2(&x),
            p2(&r),
            p1(&g),
            p1(&b),
            &spec,
        )))
    } else {
        reference::add_layer_norm(x.clone(), r.clone(), g.clone(), b.clone(), &spec)
    };
    let grads = (y.clone() * up2(normal([rows, width], 1.0, 19))).sum().backward();
    vec![
        values(y.inner().into_data()),
        values(x.grad(&grads).unwrap().into_data()),
        values(r.grad(&grads).unwrap().into_data()),
        values(g.grad(&grads).unwrap().into_data()),
        values(b.grad(&grads).unwrap().into_data()),
    ]
}

fn check_layer_norm<G: FusedOps>(device: &G::Device) {
    for (rows, width) in [(1_031, 256), (7, 64), (130, 48), (3, 300)] {
        let names = ["y", "dx", "dr", "dgamma", "dbeta"];
        let (f, c) = (layer_norm::<G>(device, rows, width, true), layer_norm::<G>(device, rows, width, false));
        assert_close(&names, &f, &c, 1e-4, &format!("{rows}×{width}"));
    }
}

/// The decoder's NLL, the gradients of the states, the embeddings and the bias, and the
/// arg-max, on `G`, fused or composed.
fn decoder<G: FusedOps>(device: &G::Device, spec: &DecoderSpec, fused: bool) -> (Vec<Vec<f32>>, Vec<u32>) {
    let DecoderShape { rows, hidden, vocab } = spec.shape;
    let up2 = |t: Tensor<CpuBackend, 2>| Tensor::<Autodiff<G>, 2>::from_data(t.into_data(), device);
    let up1 = |t: Tensor<CpuBackend, 1>| Tensor::<Autodiff<G>, 1>::from_data(t.into_data(), device);
    let y = up2(normal([rows, hidden], 1.0, 30)).require_grad();
    let e = up2(normal([vocab, hidden], 0.3, 31)).require_grad();
    let b = up1(normal([vocab], 0.1, 32)).require_grad();
    let (nll, argmax) = if fused {
        crate::fused::decoder_nll(y.clone(), e.clone(), b.clone(), &spec.targets)
    } else {
        reference::decoder_nll_with_argmax(y.clone(), e.clone(), b.clone(), spec)
    };
    let grads = (nll.clone() * up1(normal([rows], 1.0, 33))).sum().backward();
    let out = vec![
        values(nll.inner().into_data()),
        values(y.grad(&grads).unwrap().into_data()),
        values(e.grad(&grads).unwrap().into_data()),
        values(b.grad(&grads).unwrap().into_data()),
    ];
    (out, argmax)
}

/// At Geneformer V1's vocabulary and hidden width, on a row count past one chunk of the bias
/// gradient's column sums, and with the first and last tokens as targets.
fn check_decoder<G: FusedOps>(device: &G::Device) {
    for (rows, hidden, vocab) in [(37, 256, 25_426), (5, 8, 1_500), (300, 16, 70)] {
        let mut targets: Vec<u32> = (0..rows as u32).map(|r| (r * 7_919 + 3) % vocab as u32).collect();
        (targets[0], targets[rows - 1]) = (0, vocab as u32 - 1);
        let spec = DecoderSpec { shape: DecoderShape { rows, hidden, vocab }, targets: Arc::new(targets) };
        let ((f, f_argmax), (c, c_argmax)) = (decoder::<G>(device, &spec, true), decoder::<G>(device, &spec, false));
        let what = format!("{rows}×{hidden}×{vocab}");
        assert_eq!(f_argmax, c_argmax, "{what} arg-max");
        assert_close(&["nll", "dy", "dE", "dbias"], &f, &c, 1e-4, &what);
    }
}
