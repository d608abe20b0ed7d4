//! One post-LayerNorm BERT encoder layer over burn's `TransformerEncoderLayer` parameters (so
//! checkpoints and the ONNX export keep their layout), with the attention as the fused operation
//! of [`crate::fused`]: the projections stay `[batch, len, heads · head_dim]`, and dropout falls on
//! the attention probabilities, as in BERT. All dropouts are the counter-based [`crate::dropout`];
//! the residual sums and their LayerNorms are the fused [`add_layer_norm`], the dense layers
//! the fused [`linear`] (one product over all rows).

use std::sync::Arc;

use burn::nn::transformer::TransformerEncoderLayer;
use burn::tensor::Tensor;

use crate::dropout::dropout;
use crate::fused::{add_layer_norm, attention, linear, FusedOps};

/// `valid[b · len + i]`: position `i` of sequence `b` is a real token.
pub fn encoder_layer<B: FusedOps>(
    layer: &TransformerEncoderLayer<B>,
    x: Tensor<B, 3>,
    valid: &Arc<Vec<bool>>,
    eps: f64,
) -> Tensor<B, 3> {
    let mha = &layer.mha;
    let q = linear(x.clone(), &mha.query);
    let k = linear(x.clone(), &mha.key);
    let v = linear(x.clone(), &mha.value);
    let context = attention(q, k, v, mha.n_heads, valid, mha.dropout.prob);
    let attended = linear(context, &mha.output);
    let p = layer.dropout.prob;
    let x = add_layer_norm(x, dropout(attended, p), &layer.norm_1, eps);
    let ffn = &layer.pwff;
    let inner = dropout(ffn.activation.forward(linear(x.clone(), &ffn.linear_inner)), ffn.dropout.prob);
    let outer = linear(inner, &ffn.linear_outer);
    add_layer_norm(x, dropout(outer, p), &layer.norm_2, eps)
}
