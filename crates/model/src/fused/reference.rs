//! The fused operations written as compositions of burn tensor operations: the default bodies of
//! [`FusedOps`](super::FusedOps) and the reference the fused kernels are checked against.
//! They materialize what the kernels avoid (the `[batch, heads, len, len]` scores).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Bool, Int, Shape, Tensor, TensorData, TensorMetadata, TensorPrimitive};

use super::{AdamWSpec, AttentionSpec, DecoderSpec, LayerNormSpec};

fn wrap<B: Backend, const D: usize>(t: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

fn unwrap<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

/// `[batch, len, heads · d]` → `[batch, heads, len, d]`.
fn split_heads<B: Backend>(x: Tensor<B, 3>, heads: usize) -> Tensor<B, 4> {
    let [b, l, w] = x.dims();
    x.reshape([b, l, heads, w / heads]).swap_dims(1, 2)
}

fn merge_heads<B: Backend>(x: Tensor<B, 4>) -> Tensor<B, 3> {
    let [b, h, l, d] = x.dims();
    x.swap_dims(1, 2).reshape([b, l, h * d])
}

/// The tensors every pass needs: padding as keys `[b, 1, 1, len]`, real queries `[b, len, 1]`
/// as 0/1, and the dropout multipliers `[b, heads, len, len]` (1 without dropout).
struct Masks<B: Backend> {
    pad_keys: Tensor<B, 4, Bool>,
    pad_rows: Tensor<B, 4, Bool>,
    real_rows: Tensor<B, 3>,
    dropout: Option<Tensor<B, 4>>,
}

fn masks<B: Backend>(spec: &AttentionSpec, device: &B::Device) -> Masks<B> {
    let s = &spec.shape;
    let pad: Vec<bool> = spec.valid.iter().map(|&v| !v).collect();
    let rows: Vec<f32> = spec.valid.iter().map(|&v| if v { 1.0 } else { 0.0 }).collect();
    let dropout = spec.dropout.map(|key| {
        let m = key.mask(0, s.batch * s.heads * s.len, s.len);
        Tensor::from_data(TensorData::new(m, [s.batch, s.heads, s.len, s.len]), device)
    });
    Masks {
        pad_keys: Tensor::from_data(TensorData::new(pad.clone(), [s.batch, 1, 1, s.len]), device),
        pad_rows: Tensor::from_data(TensorData::new(pad, [s.batch, 1, s.len, 1]), device),
        real_rows: Tensor::from_data(TensorData::new(rows, [s.batch, s.len, 1]), device),
        dropout,
    }
}

/// The scaled scores `[b, h, len, len]`, −1e30 where the key or the query is padding (so padding
/// rows get probability 0 from the backward's `exp(s − lse)`).
fn scores<B: Backend>(q: Tensor<B, 4>, k: Tensor<B, 4>, m: &Masks<B>, spec: &AttentionSpec) -> Tensor<B, 4> {
    let scale = 1.0 / (spec.shape.head_dim as f64).sqrt();
    q.matmul(k.transpose())
        .mul_scalar(scale)
        .mask_fill(m.pad_keys.clone(), -1.0e30)
        .mask_fill(m.pad_rows.clone(), -1.0e30)
}

/// Probabilities `[b, h, len, len]` and log-sum-exp `[b, h, len]` of the scaled, masked scores.
fn probabilities<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    m: &Masks<B>,
    spec: &AttentionSpec,
) -> (Tensor<B, 4>, Tensor<B, 3>) {
    let scores = scores(q, k, m, spec);
    let max = scores.clone().max_dim(3);
    let e = (scores - max.clone()).exp();
    let sum = e.clone().sum_dim(3);
    let lse = (max + sum.clone().log()).squeeze_dim::<3>(3);
    (e / sum, lse)
}

/// The attention as a differentiable composition (autodiff through it is the unfused backward).
pub fn attention<B: Backend>(q: Tensor<B, 3>, k: Tensor<B, 3>, v: Tensor<B, 3>, spec: &AttentionSpec) -> Tensor<B, 3> {
    attention_parts(q, k, v, spec).0
}

/// The context `[b, len, heads · d]` and each query row's log-sum-exp `[b, heads, len]` (0 on
/// padding rows).
fn attention_parts<B: Backend>(
    q: Tensor<B, 3>,
    k: Tensor<B, 3>,
    v: Tensor<B, 3>,
    spec: &AttentionSpec,
) -> (Tensor<B, 3>, Tensor<B, 3>) {
    let m = masks::<B>(spec, &q.device());
    let h = spec.shape.heads;
    let (p, lse) = probabilities(split_heads(q, h), split_heads(k, h), &m, spec);
    let p = match &m.dropout {
        Some(d) => p * d.clone(),
        None => p,
    };
    let out = merge_heads(p.matmul(split_heads(v, h))) * m.real_rows.clone();
    let real_heads = m.real_rows.squeeze_dim::<2>(2).unsqueeze_dim::<3>(1);
    (out, lse * real_heads)
}

pub(super) fn attention_forward<B: Backend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    spec: &AttentionSpec,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let (out, lse) = attention_parts(wrap::<B, 3>(q), wrap::<B, 3>(k), wrap::<B, 3>(v), spec);
    (unwrap(out), unwrap(lse))
}

pub(super) fn attention_backward<B: Backend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    out: FloatTensor<B>,
    lse: FloatTensor<B>,
    grad: FloatTensor<B>,
    spec: &AttentionSpec,
) -> [FloatTensor<B>; 3] {
    let h = spec.shape.heads;
    let scale = 1.0 / (spec.shape.head_dim as f64).sqrt();
    let (q, k, v) = (split_heads(wrap::<B, 3>(q), h), split_heads(wrap::<B, 3>(k), h), split_heads(wrap::<B, 3>(v), h));
    let m = masks::<B>(spec, &q.device());
    let grad = wrap::<B, 3>(grad) * m.real_rows.clone();
    let delta = (grad.clone() * wrap::<B, 3>(out))
        .reshape([spec.shape.batch, spec.shape.len, h, spec.shape.head_dim])
        .sum_dim(3)
        .swap_dims(1, 2); // [b, h, len, 1]
    let d_out = split_heads(grad, h);
    let p = (scores(q.clone(), k.clone(), &m, spec) - wrap::<B, 3>(lse).unsqueeze_dim::<4>(3)).exp();
    let (pd, dp) = match &m.dropout {
        Some(d) => (p.clone() * d.clone(), d_out.clone().matmul(v.clone().transpose()) * d.clone()),
        None => (p.clone(), d_out.clone().matmul(v.clone().transpose())),
    };
    let dv = pd.transpose().matmul(d_out);
    let ds = p * (dp - delta);
    let dq = ds.clone().matmul(k).mul_scalar(scale);
    let dk = ds.transpose().matmul(q).mul_scalar(scale);
    let real = m.real_rows;
    [unwrap(merge_heads(dq) * real.clone()), unwrap(merge_heads(dk) * real.clone()), unwrap(merge_heads(dv) * real)]
}

fn targets<B: Backend>(spec: &DecoderSpec, device: &B::Device) -> Tensor<B, 1, Int> {
    let t: Vec<i64> = spec.targets.iter().map(|&t| i64::from(t)).collect();
    Tensor::from_data(TensorData::new(t, [spec.shape.rows]), device)
}

/// The tied decoder's logits `[rows, vocab]`.
fn logits<B: Backend>(y: Tensor<B, 2>, emb: Tensor<B, 2>, bias: Tensor<B, 1>) -> Tensor<B, 2> {
    y.matmul(emb.transpose()) + bias.unsqueeze_dim(0)
}

/// Each row's highest-scoring token.
fn argmax_rows<B: Backend>(logits: Tensor<B, 2>) -> Vec<u32> {
    let argmax = logits.argmax(1).into_data().convert::<i64>().to_vec::<i64>().unwrap_or_default();
    argmax.into_iter().map(|a| a as u32).collect()
}

/// The tied decoder's NLL per row as a differentiable composition (logits, log-softmax, gather).
pub fn decoder_nll<B: Backend>(
    y: Tensor<B, 2>,
    emb: Tensor<B, 2>,
    bias: Tensor<B, 1>,
    spec: &DecoderSpec,
) -> Tensor<B, 1> {
    decoder_nll_with_argmax(y, emb, bias, spec).0
}

/// [`decoder_nll`] and each row's arg-max token, from one computation of the logits.
pub fn decoder_nll_with_argmax<B: Backend>(
    y: Tensor<B, 2>,
    emb: Tensor<B, 2>,
    bias: Tensor<B, 1>,
    spec: &DecoderSpec,
) -> (Tensor<B, 1>, Vec<u32>) {
    let t = targets::<B>(spec, &y.device());
    let logits = logits(y, emb, bias);
    let argmax = argmax_rows(logits.clone());
    let logp = burn::tensor::activation::log_softmax(logits, 1);
    (logp.gather(1, t.unsqueeze_dim(1)).neg().squeeze_dim::<1>(1), argmax)
}

pub(super) fn decoder_nll_forward<B: Backend>(
    y: FloatTensor<B>,
    emb: FloatTensor<B>,
    bias: FloatTensor<B>,
    spec: &DecoderSpec,
) -> (FloatTensor<B>, FloatTensor<B>, Vec<u32>) {
    let y = wrap::<B, 2>(y);
    let t = targets::<B>(spec, &y.device());
    let logits = logits(y, wrap::<B, 2>(emb), wrap::<B, 1>(bias));
    let max = logits.clone().max_dim(1);
    let lse = max.clone() + (logits.clone() - max).exp().sum_dim(1).log();
    let nll = (lse.clone() - logits.clone().gather(1, t.unsqueeze_dim(1))).squeeze_dim::<1>(1);
    (unwrap(nll), unwrap(lse.squeeze_dim::<1>(1)), argmax_rows(logits))
}

pub(super) fn decoder_nll_backward<B: Backend>(
    y: FloatTensor<B>,
    emb: FloatTensor<B>,
    bias: FloatTensor<B>,
    lse: FloatTensor<B>,
    grad: FloatTensor<B>,
    spec: &DecoderSpec,
) -> [FloatTensor<B>; 3] {
    let (y, emb, bias) = (wrap::<B, 2>(y), wrap::<B, 2>(emb), wrap::<B, 1>(bias));
    let onehot = targets::<B>(spec, &y.device()).one_hot::<2>(spec.shape.vocab).float();
    let logits = logits(y.clone(), emb.clone(), bias);
    let g = wrap::<B, 1>(grad).unsqueeze_dim::<2>(1);
    let dl = ((logits - wrap::<B, 1>(lse).unsqueeze_dim::<2>(1)).exp() - onehot) * g;
    let dy = dl.clone().matmul(emb);
    let demb = dl.clone().transpose().matmul(y);
    [unwrap(dy), unwrap(demb), unwrap(dl.sum_dim(0).squeeze_dim::<1>(0))]
}

/// LayerNorm of `x + r` as a differentiable composition (`[rows, width]`).
pub fn add_layer_norm<B: Backend>(
    x: Tensor<B, 2>,
    r: Tensor<B, 2>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    spec: &LayerNormSpec,
) -> Tensor<B, 2> {
    layer_norm_parts(x, r, gamma, beta, spec).0
}

/// The output and each row's mean and reciprocal standard deviation `[rows, 1]`.
fn layer_norm_parts<B: Backend>(
    x: Tensor<B, 2>,
    r: Tensor<B, 2>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    spec: &LayerNormSpec,
) -> (Tensor<B, 2>, Tensor<B, 2>, Tensor<B, 2>) {
    let z = x + r;
    let mean = z.clone().mean_dim(1);
    let centered = z - mean.clone();
    let rstd = (centered.clone().powi_scalar(2).mean_dim(1) + f64::from(spec.eps)).sqrt().recip();
    let y = centered * rstd.clone() * gamma.unsqueeze_dim(0) + beta.unsqueeze_dim(0);
    (y, mean, rstd)
}

pub(super) fn add_layer_norm_forward<B: Backend>(
    x: FloatTensor<B>,
    r: FloatTensor<B>,
    gamma: FloatTensor<B>,
    beta: FloatTensor<B>,
    spec: &LayerNormSpec,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let (y, mean, rstd) =
        layer_norm_parts(wrap::<B, 2>(x), wrap::<B, 2>(r), wrap::<B, 1>(gamma), wrap::<B, 1>(beta), spec);
    (unwrap(y), unwrap(mean.squeeze_dim::<1>(1)), unwrap(rstd.squeeze_dim::<1>(1)))
}

#[allow(clippy::too_many_arguments)]
pub(super) fn add_layer_norm_backward<B: Backend>(
    x: FloatTensor<B>,
    r: FloatTensor<B>,
    gamma: FloatTensor<B>,
    mean: FloatTensor<B>,
    rstd: FloatTensor<B>,
    grad: FloatTensor<B>,
    _spec: &LayerNormSpec,
) -> [FloatTensor<B>; 3] {
    let rstd = wrap::<B, 1>(rstd).unsqueeze_dim::<2>(1);
    let xhat = (wrap::<B, 2>(x) + wrap::<B, 2>(r) - wrap::<B, 1>(mean).unsqueeze_dim(1)) * rstd.clone();
    let dy = wrap::<B, 2>(grad);
    let dgamma = (dy.clone() * xhat.clone()).sum_dim(0).squeeze_dim::<1>(0);
    let dbeta = dy.clone().sum_dim(0).squeeze_dim::<1>(0);
    let g = dy * wrap::<B, 1>(gamma).unsqueeze_dim(0);
    let mg = g.clone().mean_dim(1);
    let mgx = (g.clone() * xhat.clone()).mean_dim(1);
    let dz = (g - mg - xhat * mgx) * rstd;
    [unwrap(dz), unwrap(dgamma), unwrap(dbeta)]
}

pub(super) fn linear_forward<B: Backend>(x: FloatTensor<B>, w: FloatTensor<B>, b: FloatTensor<B>) -> FloatTensor<B> {
    unwrap(wrap::<B, 2>(x).matmul(wrap::<B, 2>(w)) + wrap::<B, 1>(b).unsqueeze_dim(0))
}

pub(super) fn linear_backward<B: Backend>(
    x: FloatTensor<B>,
    w: FloatTensor<B>,
    grad: FloatTensor<B>,
) -> [FloatTensor<B>; 3] {
    let dy = wrap::<B, 2>(grad);
    let dx = dy.clone().matmul(wrap::<B, 2>(w).transpose());
    let dw = wrap::<B, 2>(x).transpose().matmul(dy.clone());
    [unwrap(dx), unwrap(dw), unwrap(dy.sum_dim(0).squeeze_dim::<1>(0))]
}

/// `t` as a vector of its elements (row-major).
fn flat<B: Backend>(t: FloatTensor<B>) -> Tensor<B, 1> {
    let n = t.shape().num_elements();
    wrap(B::float_reshape(t, Shape::new([n])))
}

/// `Σ x²` over every element of `tensors`, summed per tensor and then in order in `f64`.
pub fn sum_of_squares<B: Backend>(tensors: &[FloatTensor<B>]) -> f64 {
    if tensors.is_empty() {
        return 0.0;
    }
    let squares: Vec<Tensor<B, 1>> = tensors.iter().map(|t| flat::<B>(t.clone()).square().sum()).collect();
    // One read-back for all of them (on a GPU each read is a device sync), summed in order.
    Tensor::cat(squares, 0).into_data().iter::<f64>().sum()
}

/// burn's `AdamW` step, parameter by parameter, with the moments sliced out of and written back
/// into the flat buffers.
pub fn adamw_step<B: Backend>(
    params: Vec<FloatTensor<B>>,
    grads: Vec<FloatTensor<B>>,
    moment_1: FloatTensor<B>,
    moment_2: FloatTensor<B>,
    spec: &AdamWSpec,
) -> (Vec<FloatTensor<B>>, FloatTensor<B>, FloatTensor<B>) {
    let (mut m, mut v) = (wrap::<B, 1>(moment_1), wrap::<B, 1>(moment_2));
    let h = spec.hyper;
    let decay_rate = spec.lr * f64::from(h.weight_decay);
    let mut out = Vec::with_capacity(params.len());
    for ((p, g), slot) in params.into_iter().zip(grads).zip(&spec.slots) {
        let shape = p.shape();
        let (p, mut g) = (flat::<B>(p), flat::<B>(g));
        if let Some(s) = spec.grad_scale {
            g = g.mul_scalar(s);
        }
        let span = slot.offset..slot.offset + slot.len;
        let m_i = m.clone().slice([span.clone()]).mul_scalar(h.beta_1).add(g.clone().mul_scalar(1.0 - h.beta_1));
        let v_i = v.clone().slice([span.clone()]).mul_scalar(h.beta_2).add(g.square().mul_scalar(1.0 - h.beta_2));
        let t = slot.time.min(i32::MAX as usize) as i32;
        let m_hat = m_i.clone().div_scalar(1f32 - h.beta_1.powi(t));
        let v_hat = v_i.clone().div_scalar(1f32 - h.beta_2.powi(t));
        let delta = m_hat.div(v_hat.sqrt().add_scalar(h.epsilon));
        let p = if decay_rate == 0.0 { p } else { p.mul_scalar(1.0 - decay_rate) };
        out.push(B::float_reshape(unwrap(p - delta.mul_scalar(spec.lr)), shape));
        m = m.slice_assign([span.clone()], m_i);
        v = v.slice_assign([span], v_i);
    }
    (out, unwrap(m), unwrap(v))
}
