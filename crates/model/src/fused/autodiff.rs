//! Each fused operation as one node of burn's autodiff graph: the forward runs the inner
//! backend's fused forward and keeps what its backward needs; the backward calls the inner
//! backend's fused backward.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn::tensor::ops::FloatTensor;

use super::{AttentionSpec, DecoderSpec, FusedOps, LayerNormSpec, LinearShape};

/// Hands each tracked parent its gradient (a macro: burn does not export the parents' type).
macro_rules! register {
    ($b:ty, $grads:expr, $parents:expr, $values:expr) => {
        for (node, g) in $parents.into_iter().zip($values) {
            if let Some(node) = node {
                $grads.register::<$b>(node.id, g);
            }
        }
    };
}

#[derive(Debug)]
struct AttentionBackward;

/// The inputs, output and log-sum-exp of the forward pass.
#[derive(Clone, Debug)]
struct AttentionState<B: FusedOps> {
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    out: FloatTensor<B>,
    lse: FloatTensor<B>,
    spec: AttentionSpec,
}

impl<B: FusedOps> Backward<B, 3> for AttentionBackward {
    type State = AttentionState<B>;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let s = ops.state;
        let [dq, dk, dv] = B::attention_backward(s.q, s.k, s.v, s.out, s.lse, grad, &s.spec);
        register!(B, grads, ops.parents, [dq, dk, dv]);
    }
}

#[derive(Debug)]
struct DecoderBackward;

/// The inputs and log-sum-exp of the decoder-loss forward pass.
#[derive(Clone, Debug)]
struct DecoderState<B: FusedOps> {
    y: FloatTensor<B>,
    emb: FloatTensor<B>,
    bias: FloatTensor<B>,
    lse: FloatTensor<B>,
    spec: DecoderSpec,
}

impl<B: FusedOps> Backward<B, 3> for DecoderBackward {
    type State = DecoderState<B>;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let s = ops.state;
        let [dy, demb, dbias] = B::decoder_nll_backward(s.y, s.emb, s.bias, s.lse, grad, &s.spec);
        register!(B, grads, ops.parents, [dy, demb, dbias]);
    }
}

#[derive(Debug)]
struct LayerNormBackward;

/// The inputs and row statistics of the LayerNorm forward pass.
#[derive(Clone, Debug)]
struct LayerNormState<B: FusedOps> {
    x: FloatTensor<B>,
    r: FloatTensor<B>,
    gamma: FloatTensor<B>,
    mean: FloatTensor<B>,
    rstd: FloatTensor<B>,
    spec: LayerNormSpec,
}

impl<B: FusedOps> Backward<B, 4> for LayerNormBackward {
    type State = LayerNormState<B>;

    fn backward(self, ops: Ops<Self::State, 4>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let s = ops.state;
        let [dz, dgamma, dbeta] = B::add_layer_norm_backward(s.x, s.r, s.gamma, s.mean, s.rstd, grad, &s.spec);
        register!(B, grads, ops.parents, [dz.clone(), dz, dgamma, dbeta]);
    }
}

#[derive(Debug)]
struct LinearBackward;

impl<B: FusedOps> Backward<B, 3> for LinearBackward {
    /// The input and the weight.
    type State = (FloatTensor<B>, FloatTensor<B>, LinearShape);

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let (x, w, shape) = ops.state;
        let [dx, dw, db] = B::linear_backward(x, w, grad, shape);
        register!(B, grads, ops.parents, [dx, dw, db]);
    }
}

impl<B: FusedOps, C: CheckpointStrategy> FusedOps for Autodiff<B, C> {
    fn fused_linear(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: FloatTensor<Self>,
        shape: LinearShape,
    ) -> FloatTensor<Self> {
        let y = B::fused_linear(x.primitive.clone(), w.primitive.clone(), b.primitive.clone(), shape);
        match LinearBackward.prepare::<C>([x.node.clone(), w.node.clone(), b.node.clone()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish((x.primitive, w.primitive, shape), y),
            OpsKind::UnTracked(prep) => prep.finish(y),
        }
    }

    fn fused_add_layer_norm(
        x: FloatTensor<Self>,
        r: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        spec: &LayerNormSpec,
    ) -> FloatTensor<Self> {
        let (y, mean, rstd) = B::add_layer_norm_forward(
            x.primitive.clone(),
            r.primitive.clone(),
            gamma.primitive.clone(),
            beta.primitive.clone(),
            spec,
        );
        match LayerNormBackward
            .prepare::<C>([x.node.clone(), r.node.clone(), gamma.node.clone(), beta.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let state =
                    LayerNormState { x: x.primitive, r: r.primitive, gamma: gamma.primitive, mean, rstd, spec: *spec };
                prep.finish(state, y)
            }
            OpsKind::UnTracked(prep) => prep.finish(y),
        }
    }

    fn fused_decoder_nll(
        y: FloatTensor<Self>,
        emb: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        spec: &DecoderSpec,
    ) -> (FloatTensor<Self>, Vec<u32>) {
        let (nll, lse, argmax) =
            B::decoder_nll_forward(y.primitive.clone(), emb.primitive.clone(), bias.primitive.clone(), spec);
        let nll = match DecoderBackward
            .prepare::<C>([y.node.clone(), emb.node.clone(), bias.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let state =
                    DecoderState { y: y.primitive, emb: emb.primitive, bias: bias.primitive, lse, spec: spec.clone() };
                prep.finish(state, nll)
            }
            OpsKind::UnTracked(prep) => prep.finish(nll),
        };
        (nll, argmax)
    }

    fn fused_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        spec: &AttentionSpec,
    ) -> FloatTensor<Self> {
        match AttentionBackward
            .prepare::<C>([q.node.clone(), k.node.clone(), v.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let (out, lse) =
                    B::attention_forward(q.primitive.clone(), k.primitive.clone(), v.primitive.clone(), spec);
                let state = AttentionState {
                    q: q.primitive,
                    k: k.primitive,
                    v: v.primitive,
                    out: out.clone(),
                    lse,
                    spec: spec.clone(),
                };
                prep.finish(state, out)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(B::attention_forward(q.primitive, k.primitive, v.primitive, spec).0)
            }
        }
    }
}
