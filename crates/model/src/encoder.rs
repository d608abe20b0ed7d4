//! The Geneformer V1 BERT (docs/DESIGN.md §7.1) in burn: learned token and position embeddings,
//! post-LayerNorm transformer encoder with ReLU feed-forward, an MLM head tied to the input
//! embeddings, and the optional pooled heads an objective asks for (`crate::objective`).

use burn::module::Module;
use std::sync::Arc;

use burn::nn::transformer::TransformerEncoder;
use burn::nn::{Dropout, Embedding, LayerNorm, Linear};
use burn::tensor::activation::{gelu, relu};
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor};

use corrflow_infer::model_meta::{HeadActivation, ModelInput, ValueModel};

use crate::dropout::dropout;
use crate::fused::{add_layer_norm, linear, FusedOps};
use crate::layer::encoder_layer;
use crate::value::{embed_values, ValueParts};

/// Two-layer MLP from the pooled embedding to per-gene outputs.
#[derive(Module, Debug)]
pub struct WholeCellHead<B: Backend> {
    pub dense: Linear<B>,
    pub out: Linear<B>,
}

impl<B: Backend> WholeCellHead<B> {
    pub fn forward(&self, pooled: Tensor<B, 2>) -> Tensor<B, 2> {
        self.out.forward(relu(self.dense.forward(pooled)))
    }
}

/// The encoder and its heads.
#[derive(Module, Debug)]
pub struct CellEncoder<B: Backend> {
    pub tokens: Embedding<B>,
    pub positions: Embedding<B>,
    pub embed_norm: LayerNorm<B>,
    pub dropout: Dropout,
    pub encoder: TransformerEncoder<B>,
    /// BERT's MLM transform (dense + GELU + LayerNorm); the decoder is `tokens`' weight.
    pub mlm_dense: Linear<B>,
    pub mlm_norm: LayerNorm<B>,
    pub mlm_bias: burn::module::Param<Tensor<B, 1>>,
    /// The pooled head of whole-cell objectives (WCED, Poisson), when the objective has one.
    pub cell_head: Option<WholeCellHead<B>>,
    /// The pooled head of objectives predicting per-cell labels, when the objective has one.
    pub label_head: Option<WholeCellHead<B>>,
    /// The MLM transform's activation (`model.mlm_activation`). Not part of the weights.
    #[module(skip)]
    pub mlm_activation: HeadActivation,
    /// The LayerNorms' epsilon (`model.layer_norm_eps`; burn keeps its own private), for the fused
    /// LayerNorm. Not part of the weights.
    #[module(skip)]
    pub layer_norm_eps: f64,
    /// What tokens carry (`model.input`). Not part of the weights.
    #[module(skip)]
    pub input: ModelInput,
    /// A value model's settings (`model.values`). Not part of the weights.
    #[module(skip)]
    pub value_config: Option<ValueModel>,
    /// A value model's bins and decoder. Last, so that the records of rank models written
    /// before value models existed are a prefix of today's (`checkpoint::load_model`).
    pub value: Option<ValueParts<B>>,
}

impl<B: FusedOps> CellEncoder<B> {
    /// Final-layer token states `[batch, len, hidden]`; `pad` is true on padding (the states
    /// of padding positions are not meaningful).
    pub fn hidden(&self, input_ids: Tensor<B, 2, Int>, pad: Tensor<B, 2, Bool>) -> Tensor<B, 3> {
        self.states_after(input_ids, pad, self.encoder.layers.len())
    }

    /// Token states after the first `layers` encoder layers (0 = the embeddings; the number of
    /// layers = the final states), without dropout when the backend is not training.
    pub fn states_after(&self, input_ids: Tensor<B, 2, Int>, pad: Tensor<B, 2, Bool>, layers: usize) -> Tensor<B, 3> {
        self.states_with_values(input_ids, None, pad, layers)
    }

    /// [`Self::states_after`] for any model: a value model's tokens carry `values` `[rows, len]`
    /// (ignored, and may be `None`, for rank models).
    pub fn states_with_values(
        &self,
        input_ids: Tensor<B, 2, Int>,
        values: Option<Tensor<B, 2>>,
        pad: Tensor<B, 2, Bool>,
        layers: usize,
    ) -> Tensor<B, 3> {
        let [batch, len] = input_ids.dims();
        let device = input_ids.device();
        // The attention kernels take the padding as host data (read once per forward).
        let valid: Vec<bool> =
            pad.into_data().convert::<bool>().to_vec::<bool>().unwrap_or_default().iter().map(|&p| !p).collect();
        let valid = Arc::new(valid);
        let mut tokens = self.tokens.forward(input_ids);
        if let (Some(parts), Some(config)) = (&self.value, &self.value_config) {
            let values = values.unwrap_or_else(|| Tensor::zeros([batch, len], &device));
            tokens = embed_values(tokens, values, self.input, parts, config);
        }
        let positions = self.value_config.as_ref().is_none_or(|v| v.positions);
        let embedded = if positions {
            let pos = Tensor::<B, 1, Int>::arange(0..len as i64, &device).reshape([1, len]).repeat_dim(0, batch);
            add_layer_norm(tokens, self.positions.forward(pos), &self.embed_norm, self.layer_norm_eps)
        } else {
            self.embed_norm.forward(tokens)
        };
        let mut x = dropout(embedded, self.dropout.prob);
        for layer in self.encoder.layers.iter().take(layers) {
            x = encoder_layer(layer, x, &valid, self.layer_norm_eps);
        }
        x
    }
}

impl<B: FusedOps> CellEncoder<B> {
    /// BERT's MLM transform of some token states `[n, hidden]` (dense, GELU, LayerNorm): what the
    /// tied decoder multiplies by the token embeddings.
    pub fn mlm_transform(&self, states: Tensor<B, 2>) -> Tensor<B, 2> {
        self.mlm_norm.forward(self.head_activation(linear(states, &self.mlm_dense)))
    }
}

impl<B: Backend> CellEncoder<B> {
    /// Vocabulary logits of some token states `[n, hidden]` → `[n, vocab]` (tied decoder).
    pub fn mlm_logits(&self, states: Tensor<B, 2>) -> Tensor<B, 2> {
        let h = self.mlm_norm.forward(self.head_activation(self.mlm_dense.forward(states)));
        h.matmul(self.tokens.weight.val().transpose()) + self.mlm_bias.val().unsqueeze_dim(0)
    }

    fn head_activation<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        match self.mlm_activation {
            HeadActivation::Gelu => gelu(x),
            HeadActivation::Relu => relu(x),
        }
    }

    /// Mean of the token states over `weights` (1 on gene positions, 0 on specials and padding):
    /// Geneformer's `cell` embedding.
    pub fn mean_pool(states: Tensor<B, 3>, weights: Tensor<B, 2>) -> Tensor<B, 2> {
        let w = weights.unsqueeze_dim::<3>(2);
        let total = w.clone().sum_dim(1).clamp_min(1.0);
        (states * w).sum_dim(1).div(total).squeeze_dim::<2>(1)
    }
}
