//! Fused operations of the trainer as a burn backend extension: one trait, [`FusedOps`], whose
//! methods have a default body written as a composition of burn tensor operations (so every
//! backend has them), overridden where a backend has a fused kernel:
//!
//! - `NdArray<f32>` (the CPU trainer) runs the tiled kernels of `corrflow_algorithms::nn`;
//! - `Autodiff<B>` registers each fused operation as one node of the autodiff graph whose
//!   backward pass calls `B`'s fused backward kernel, so training never materializes what the
//!   kernel avoids (the attention scores);
//! - burn's CubeCL backends without fusion (`CubeBackend<R>`: wgpu, and CUDA as `cuda-kernels`)
//!   run the CubeCL kernels of `cube/` where there is one (attention, LayerNorm, AdamW), the
//!   default bodies elsewhere;
//! - other backends (CUDA with fusion) use the default bodies.
//!
//! Adding a fused operation: a method pair (forward, backward) on the trait with its reference
//! composition as the default body (`reference.rs`), the CPU kernel in `ndarray.rs`, the autodiff
//! node in `autodiff.rs`, and a gradient check against the composition in `tests.rs`.

#[cfg(test)]
mod adamw_tests;
mod autodiff;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod cube;
mod ndarray;
pub mod reference;
#[cfg(test)]
mod tests;

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Distribution, Int, Tensor, TensorPrimitive};
pub use corrflow_algorithms::nn::{AdamWConstants, AdamWHyper, AttentionShape, DecoderShape, DropoutKey, LinearShape};

static UNFUSED: std::sync::OnceLock<std::sync::atomic::AtomicBool> = std::sync::OnceLock::new();

fn unfused_flag() -> &'static std::sync::atomic::AtomicBool {
    UNFUSED.get_or_init(|| {
        std::sync::atomic::AtomicBool::new(std::env::var_os("CORRFLOW_UNFUSED").is_some_and(|v| v != "0"))
    })
}

/// Whether the model runs the fused operations (the default) or their reference compositions,
/// differentiated by burn's autodiff (`CORRFLOW_UNFUSED=1` in the environment, or
/// [`set_fused`]): the slow path a suspected kernel bug is checked against.
pub fn fused_enabled() -> bool {
    !unfused_flag().load(std::sync::atomic::Ordering::Relaxed)
}

/// Switches between the fused operations and their compositions for the whole process.
pub fn set_fused(enabled: bool) {
    unfused_flag().store(!enabled, std::sync::atomic::Ordering::Relaxed);
}

/// What an attention call needs besides its tensors: the shape, which positions are real tokens
/// (`valid[b · len + i]`), and the dropout on the attention probabilities when training.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionSpec {
    pub shape: AttentionShape,
    pub valid: std::sync::Arc<Vec<bool>>,
    pub dropout: Option<DropoutKey>,
}

/// What a decoder-loss call needs besides its tensors: the shape and each row's target token.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderSpec {
    pub shape: DecoderShape,
    pub targets: std::sync::Arc<Vec<u32>>,
}

/// A LayerNorm call: the row width and epsilon.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerNormSpec {
    pub width: usize,
    pub eps: f32,
}

/// Where one parameter's moments lie in the optimizer's flat moment buffers, and how many
/// updates it has had counting this one (AdamW's bias correction).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MomentSlot {
    pub offset: usize,
    pub len: usize,
    pub time: usize,
}

/// One AdamW step over many parameters: the hyper-parameters, the learning rate, the clipping
/// coefficient every gradient is multiplied by first (`None`: not clipped), and each updated
/// parameter's moment slot.
#[derive(Clone, Debug, PartialEq)]
pub struct AdamWSpec {
    pub hyper: AdamWHyper,
    pub lr: f64,
    pub grad_scale: Option<f64>,
    pub slots: Vec<MomentSlot>,
}

impl AdamWSpec {
    /// The scalars of the update of the parameter at `slot`.
    pub fn constants(&self, slot: &MomentSlot) -> AdamWConstants {
        AdamWConstants::new(&self.hyper, self.lr, slot.time, self.grad_scale)
    }
}

/// A backend with the trainer's fused operations.
pub trait FusedOps: Backend {
    /// Self-attention over `q`, `k`, `v` (`[batch, len, heads · head_dim]`, heads side by side):
    /// the context, same layout, 0 at padding positions.
    fn fused_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        spec: &AttentionSpec,
    ) -> FloatTensor<Self> {
        Self::attention_forward(q, k, v, spec).0
    }

    /// The attention forward pass: the context and each query row's log-sum-exp
    /// (`[batch, heads, len]`), which the backward pass needs.
    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        spec: &AttentionSpec,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        reference::attention_forward::<Self>(q, k, v, spec)
    }

    /// The attention backward pass: gradients of `q`, `k`, `v` given the forward's context and
    /// log-sum-exp and the context's gradient.
    #[allow(clippy::too_many_arguments)]
    fn attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        out: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        spec: &AttentionSpec,
    ) -> [FloatTensor<Self>; 3] {
        reference::attention_backward::<Self>(q, k, v, out, lse, grad, spec)
    }

    /// A dense layer over rows: `x W + b` (`x` `[rows, in]`, `W` `[in, out]`, `b` `[out]`).
    fn fused_linear(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: FloatTensor<Self>,
        _shape: LinearShape,
    ) -> FloatTensor<Self> {
        reference::linear_forward::<Self>(x, w, b)
    }

    /// The dense layer's backward pass: gradients of `x`, `W` and `b`.
    fn linear_backward(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        _shape: LinearShape,
    ) -> [FloatTensor<Self>; 3] {
        reference::linear_backward::<Self>(x, w, grad)
    }

    /// LayerNorm of a residual sum, `LN(x + r) · γ + β`, over rows of `spec.width` (`x`, `r`:
    /// `[rows, width]`).
    fn fused_add_layer_norm(
        x: FloatTensor<Self>,
        r: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        spec: &LayerNormSpec,
    ) -> FloatTensor<Self> {
        Self::add_layer_norm_forward(x, r, gamma, beta, spec).0
    }

    /// The forward pass: the output and each row's mean and reciprocal standard deviation.
    fn add_layer_norm_forward(
        x: FloatTensor<Self>,
        r: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        spec: &LayerNormSpec,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        reference::add_layer_norm_forward::<Self>(x, r, gamma, beta, spec)
    }

    /// The backward pass: gradients of the sum (`x` and `r` alike), `γ` and `β`.
    #[allow(clippy::too_many_arguments)]
    fn add_layer_norm_backward(
        x: FloatTensor<Self>,
        r: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        spec: &LayerNormSpec,
    ) -> [FloatTensor<Self>; 3] {
        reference::add_layer_norm_backward::<Self>(x, r, gamma, mean, rstd, grad, spec)
    }

    /// The tied decoder's loss: each row's NLL of its target (`[rows]`) given the transformed
    /// states `y` (`[rows, hidden]`), the token embeddings (`[vocab, hidden]`) and the output bias
    /// (`[vocab]`); and each row's arg-max token.
    fn fused_decoder_nll(
        y: FloatTensor<Self>,
        emb: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        spec: &DecoderSpec,
    ) -> (FloatTensor<Self>, Vec<u32>) {
        let (nll, _, argmax) = Self::decoder_nll_forward(y, emb, bias, spec);
        (nll, argmax)
    }

    /// The decoder-loss forward pass: NLL, log-sum-exp (both `[rows]`) and arg-max per row.
    fn decoder_nll_forward(
        y: FloatTensor<Self>,
        emb: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        spec: &DecoderSpec,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, Vec<u32>) {
        reference::decoder_nll_forward::<Self>(y, emb, bias, spec)
    }

    /// The decoder-loss backward pass: gradients of `y`, the embeddings and the bias given the
    /// forward's log-sum-exp and the gradient of each row's NLL.
    fn decoder_nll_backward(
        y: FloatTensor<Self>,
        emb: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        spec: &DecoderSpec,
    ) -> [FloatTensor<Self>; 3] {
        reference::decoder_nll_backward::<Self>(y, emb, bias, lse, grad, spec)
    }

    /// `Σ x²` over every element of `tensors` (the squared global norm of a model's gradients),
    /// summed in a fixed order.
    fn sum_of_squares(tensors: &[FloatTensor<Self>]) -> f64 {
        reference::sum_of_squares::<Self>(tensors)
    }

    /// AdamW over parameters `params[i]` with gradients `grads[i]` and moments at
    /// `spec.slots[i]` of the flat buffers `moment_1`, `moment_2` (each gradient multiplied by
    /// `spec.grad_scale` first): the new parameters, same shapes, and the new moment buffers.
    /// The update rule is burn's `AdamW`.
    fn adamw_step(
        params: Vec<FloatTensor<Self>>,
        grads: Vec<FloatTensor<Self>>,
        moment_1: FloatTensor<Self>,
        moment_2: FloatTensor<Self>,
        spec: &AdamWSpec,
    ) -> (Vec<FloatTensor<Self>>, FloatTensor<Self>, FloatTensor<Self>) {
        reference::adamw_step::<Self>(params, grads, moment_1, moment_2, spec)
    }
}

/// `linear.forward(x)` for any rank, as one fused product over all rows; see
/// [`FusedOps::fused_linear`].
pub fn linear<B: FusedOps, const D: usize>(x: Tensor<B, D>, linear: &burn::nn::Linear<B>) -> Tensor<B, D> {
    let dims = x.dims();
    if !fused_enabled() {
        return linear.forward(x);
    }
    let [inputs, outputs] = linear.weight.dims();
    let rows = dims.iter().product::<usize>() / inputs.max(1);
    let bias = match &linear.bias {
        Some(b) => b.val(),
        None => Tensor::zeros([outputs], &x.device()),
    };
    let shape = LinearShape { rows, inputs, outputs };
    let y = B::fused_linear(
        x.reshape([rows, inputs]).into_primitive().tensor(),
        linear.weight.val().into_primitive().tensor(),
        bias.into_primitive().tensor(),
        shape,
    );
    let mut out = dims;
    out[D - 1] = outputs;
    Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(y)).reshape(out)
}

/// `norm(x + r)` for a LayerNorm module with epsilon `eps`, fused; see
/// [`FusedOps::fused_add_layer_norm`].
pub fn add_layer_norm<B: FusedOps, const D: usize>(
    x: Tensor<B, D>,
    r: Tensor<B, D>,
    norm: &burn::nn::LayerNorm<B>,
    eps: f64,
) -> Tensor<B, D> {
    if !fused_enabled() {
        return norm.forward(x + r);
    }
    let dims = x.dims();
    let width = dims[D - 1];
    let rows = dims.iter().product::<usize>() / width.max(1);
    let beta = match &norm.beta {
        Some(b) => b.val(),
        None => Tensor::zeros([width], &x.device()),
    };
    let spec = LayerNormSpec { width, eps: eps as f32 };
    let flat = |t: Tensor<B, D>| t.reshape([rows, width]).into_primitive().tensor();
    let y = B::fused_add_layer_norm(
        flat(x),
        flat(r),
        norm.gamma.val().into_primitive().tensor(),
        beta.into_primitive().tensor(),
        &spec,
    );
    Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(y)).reshape(dims)
}

/// The tied decoder's loss per masked row and each row's arg-max token; see
/// [`FusedOps::fused_decoder_nll`].
pub fn decoder_nll<B: FusedOps>(
    y: Tensor<B, 2>,
    emb: Tensor<B, 2>,
    bias: Tensor<B, 1>,
    targets: &std::sync::Arc<Vec<u32>>,
) -> (Tensor<B, 1>, Vec<u32>) {
    let [rows, hidden] = y.dims();
    let spec = DecoderSpec { shape: DecoderShape { rows, hidden, vocab: emb.dims()[0] }, targets: targets.clone() };
    if !fused_enabled() {
        return reference::decoder_nll_with_argmax(y, emb, bias, &spec);
    }
    let (nll, argmax) = B::fused_decoder_nll(
        y.into_primitive().tensor(),
        emb.into_primitive().tensor(),
        bias.into_primitive().tensor(),
        &spec,
    );
    (Tensor::from_primitive(TensorPrimitive::Float(nll)), argmax)
}

/// Self-attention with the padding mask and, when `B` is training and `dropout > 0`, dropout
/// on the attention probabilities (its key drawn from the backend's random generator, so
/// seeded runs repeat). `q`, `k`, `v`: `[batch, len, heads · head_dim]`.
pub fn attention<B: FusedOps>(
    q: Tensor<B, 3>,
    k: Tensor<B, 3>,
    v: Tensor<B, 3>,
    heads: usize,
    valid: &std::sync::Arc<Vec<bool>>,
    dropout: f64,
) -> Tensor<B, 3> {
    let [batch, len, width] = q.dims();
    let device = q.device();
    let dropout = (dropout > 0.0 && B::ad_enabled(&device))
        .then(|| DropoutKey { p: dropout as f32, key: draw_key::<B>(&device) });
    let spec = AttentionSpec {
        shape: AttentionShape { batch, len, heads, head_dim: width / heads },
        valid: valid.clone(),
        dropout,
    };
    if !fused_enabled() {
        return reference::attention(q, k, v, &spec);
    }
    let out = B::fused_attention(
        q.into_primitive().tensor(),
        k.into_primitive().tensor(),
        v.into_primitive().tensor(),
        &spec,
    );
    Tensor::from_primitive(TensorPrimitive::Float(out))
}

/// A 48-bit dropout key from the backend's seeded generator.
pub(crate) fn draw_key<B: Backend>(device: &B::Device) -> u64 {
    let parts = Tensor::<B, 1, Int>::random([2], Distribution::Uniform(0.0, 16_777_216.0), device);
    let parts: Vec<i64> = parts.into_data().convert::<i64>().to_vec().unwrap_or_default();
    parts.iter().fold(0u64, |acc, &p| (acc << 24) | (p as u64 & 0xff_ffff))
}

/// `impl FusedOps` for burn-cuda with fusion: the default (composed) bodies, which its fusion
/// compiles into fewer kernels.
#[cfg(feature = "cuda")]
impl FusedOps for burn::backend::Cuda<f32> {}

/// burn-cuda without fusion, with the CubeCL kernels of the fused operations.
#[cfg(feature = "cuda")]
pub type CudaKernels = burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>;

/// burn's wgpu backend without fusion, with the CubeCL kernels of the fused operations. Named
/// here rather than as `burn::backend::Wgpu`, which becomes the fusion backend when another
/// feature (`cuda`) turns burn's fusion on.
#[cfg(feature = "wgpu")]
pub type WgpuKernels = burn_cubecl::CubeBackend<cubecl::wgpu::WgpuRuntime, f32, i32, u32>;

/// A backend the trainer runs on: autodiff with the fused operations, over an inner backend
/// (evaluation, `valid()` models) that has them too.
pub trait TrainingBackend: burn::tensor::backend::AutodiffBackend<InnerBackend: FusedOps> + FusedOps {}

impl<B> TrainingBackend for B
where
    B: burn::tensor::backend::AutodiffBackend + FusedOps,
    B::InnerBackend: FusedOps,
{
}
