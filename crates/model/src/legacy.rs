//! Checkpoints of rank models written before value models existed. Their weight records are
//! today's [`CellEncoder`] record without its last field (`value`), so they are read into this
//! copy of the old module and moved over (`value: None`): every checkpoint keeps loading.

use burn::module::Module;
use burn::nn::transformer::TransformerEncoder;
use burn::nn::{Dropout, Embedding, LayerNorm, Linear};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use corrflow_infer::model_meta::HeadActivation;

use crate::encoder::{CellEncoder, WholeCellHead};

/// [`CellEncoder`] as it was before `value` (same fields, same order).
#[derive(Module, Debug)]
pub struct RankEncoderV1<B: Backend> {
    pub tokens: Embedding<B>,
    pub positions: Embedding<B>,
    pub embed_norm: LayerNorm<B>,
    pub dropout: Dropout,
    pub encoder: TransformerEncoder<B>,
    pub mlm_dense: Linear<B>,
    pub mlm_norm: LayerNorm<B>,
    pub mlm_bias: burn::module::Param<Tensor<B, 1>>,
    pub cell_head: Option<WholeCellHead<B>>,
    pub label_head: Option<WholeCellHead<B>>,
    // Skipped fields are in a record too (an empty record each): the old ones, in their place.
    #[module(skip)]
    pub mlm_activation: HeadActivation,
    #[module(skip)]
    pub layer_norm_eps: f64,
}

impl<B: Backend> RankEncoderV1<B> {
    /// The old layout of `model`'s weights (its skipped settings are taken back from `model`).
    pub fn of(model: CellEncoder<B>) -> (Self, CellEncoder<B>) {
        let old = Self {
            tokens: model.tokens.clone(),
            positions: model.positions.clone(),
            embed_norm: model.embed_norm.clone(),
            dropout: model.dropout.clone(),
            encoder: model.encoder.clone(),
            mlm_dense: model.mlm_dense.clone(),
            mlm_norm: model.mlm_norm.clone(),
            mlm_bias: model.mlm_bias.clone(),
            cell_head: model.cell_head.clone(),
            label_head: model.label_head.clone(),
            mlm_activation: model.mlm_activation,
            layer_norm_eps: model.layer_norm_eps,
        };
        (old, model)
    }

    /// The loaded old weights in today's module, with `template`'s settings.
    pub fn into_current(self, template: CellEncoder<B>) -> CellEncoder<B> {
        CellEncoder {
            tokens: self.tokens,
            positions: self.positions,
            embed_norm: self.embed_norm,
            dropout: self.dropout,
            encoder: self.encoder,
            mlm_dense: self.mlm_dense,
            mlm_norm: self.mlm_norm,
            mlm_bias: self.mlm_bias,
            cell_head: self.cell_head,
            label_head: self.label_head,
            value: None,
            ..template
        }
    }
}
