//! Building a [`CellEncoder`] from its configuration: the encoder, the MLM head, and the heads
//! the configured objective asks for, with BERT's initialisation.

use burn::nn::transformer::TransformerEncoderConfig;
use burn::nn::{
    activation::ActivationConfig, DropoutConfig, EmbeddingConfig, Initializer, LayerNormConfig, LinearConfig,
};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use corrflow_infer::model_meta::{ModelConfig, ModelInput, ValueModel};

use crate::encoder::{CellEncoder, WholeCellHead};
use crate::value::ValueParts;

/// `ModelConfig::init`: the module described by a configuration (the configuration itself is
/// plain data in `corrflow_infer::model_meta`, so runtimes read it without burn).
pub trait InitModel {
    /// The module, randomly initialised (BERT's N(0, 0.02); a value model's gene embeddings
    /// N(0, `values.gene_embedding_std`)) on `device`.
    fn init<B: Backend>(&self, vocab_size: usize, device: &B::Device) -> CellEncoder<B>;
}

impl InitModel for ModelConfig {
    fn init<B: Backend>(&self, vocab_size: usize, device: &B::Device) -> CellEncoder<B> {
        let normal = Initializer::Normal { mean: 0.0, std: 0.02 };
        let linear = |i, o| LinearConfig::new(i, o).with_initializer(normal.clone()).init(device);
        let h = self.hidden;
        // An unknown objective has no heads; validation names it before a model is built.
        let heads =
            crate::objective::for_model::<crate::CpuBackend>(self).map(|o| o.heads(vocab_size)).unwrap_or_default();
        let whole_cell = |outputs| head(h, outputs, device);
        // A value model's gene embeddings start at `values.gene_embedding_std` (see there).
        let gene_std = self.values.as_ref().filter(|_| self.input.sees_values()).map_or(0.02, |v| v.gene_embedding_std);
        let genes = Initializer::Normal { mean: 0.0, std: gene_std };
        CellEncoder {
            tokens: EmbeddingConfig::new(vocab_size, h).with_initializer(genes).init(device),
            positions: EmbeddingConfig::new(self.max_positions, h).with_initializer(normal.clone()).init(device),
            embed_norm: LayerNormConfig::new(h).with_epsilon(self.layer_norm_eps).init(device),
            dropout: DropoutConfig::new(self.dropout).init(),
            encoder: TransformerEncoderConfig::new(h, self.ffn, self.heads, self.layers)
                .with_dropout(self.dropout)
                .with_norm_first(false)
                .with_activation(ActivationConfig::Relu)
                .with_layer_norm_eps(self.layer_norm_eps)
                .with_initializer(normal.clone())
                .init(device),
            mlm_dense: linear(h, h),
            mlm_norm: LayerNormConfig::new(h).with_epsilon(self.layer_norm_eps).init(device),
            mlm_bias: burn::module::Param::from_tensor(Tensor::zeros([vocab_size], device)),
            cell_head: heads.cell.map(&whole_cell),
            // A fine-tuned classifier's head takes the label slot (no objective has one then).
            label_head: heads.label.or(self.classifier.as_ref().map(|c| c.classes.len())).map(&whole_cell),
            mlm_activation: self.mlm_activation,
            layer_norm_eps: self.layer_norm_eps,
            input: self.input,
            value_config: self.values.clone(),
            value: self.values.as_ref().map(|v| value_parts(self, v, heads.decoder.unwrap_or(1), device)),
        }
    }
}

/// A value model's bins and decoder: `decoder_layers` hidden layers of `decoder_width` (the
/// hidden size when 0), then `outputs` values for each gene of the decoding set.
fn value_parts<B: Backend>(m: &ModelConfig, v: &ValueModel, outputs: usize, device: &B::Device) -> ValueParts<B> {
    let normal = Initializer::Normal { mean: 0.0, std: 0.02 };
    let linear = |i, o| LinearConfig::new(i, o).with_initializer(normal.clone()).init(device);
    let width = if v.decoder_width == 0 { m.hidden } else { v.decoder_width };
    let mut decoder = Vec::with_capacity(v.decoder_layers);
    for l in 0..v.decoder_layers {
        decoder.push(linear(if l == 0 { m.hidden } else { width }, width));
    }
    let last = if v.decoder_layers == 0 { m.hidden } else { width };
    ValueParts {
        bins: (m.input == ModelInput::Bins)
            .then(|| EmbeddingConfig::new(v.bins, m.hidden).with_initializer(normal.clone()).init(device)),
        decoder,
        decoder_out: linear(last, v.decode_genes.len().max(1) * outputs),
    }
}

/// A freshly initialised two-layer head `hidden → hidden → outputs` (BERT's initialisation): the
/// pooled heads of objectives, and the classification head `finetune` adds to a pre-trained
/// encoder.
pub fn head<B: Backend>(hidden: usize, outputs: usize, device: &B::Device) -> WholeCellHead<B> {
    let normal = Initializer::Normal { mean: 0.0, std: 0.02 };
    let linear = |i, o| LinearConfig::new(i, o).with_initializer(normal.clone()).init(device);
    WholeCellHead { dense: linear(hidden, hidden), out: linear(hidden, outputs) }
}

#[cfg(test)]
mod tests {
    use corrflow_infer::model_meta::{ModelInput, ValueModel};

    use super::*;

    fn std_of(x: &[f32]) -> f64 {
        let mean = x.iter().map(|&v| f64::from(v)).sum::<f64>() / x.len() as f64;
        (x.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / x.len() as f64).sqrt()
    }

    #[test]
    fn a_value_models_gene_embeddings_start_at_their_configured_scale_and_the_rest_at_berts() {
        let device = Default::default();
        let values = ValueModel { gene_embedding_std: 1.0, decode_genes: (0..10).collect(), ..ValueModel::default() };
        let config = ModelConfig {
            hidden: 32,
            ffn: 64,
            layers: 1,
            objective: "txfm".into(),
            input: ModelInput::Value,
            values: Some(values.clone()),
            ..ModelConfig::default()
        };
        let m = config.init::<crate::CpuBackend>(200, &device);
        let tokens: Vec<f32> = m.tokens.weight.val().into_data().to_vec().unwrap();
        assert!((std_of(&tokens) - 1.0).abs() < 0.05, "{}", std_of(&tokens));
        let positions: Vec<f32> = m.positions.weight.val().into_data().to_vec().unwrap();
        assert!((std_of(&positions) - 0.02).abs() < 0.002);
        // A rank model keeps BERT's start, whatever a [model.values] left in its configuration.
        let rank = ModelConfig { input: ModelInput::Rank, objective: "mlm".into(), ..config };
        let tokens: Vec<f32> =
            rank.init::<crate::CpuBackend>(200, &device).tokens.weight.val().into_data().to_vec().unwrap();
        assert!((std_of(&tokens) - 0.02).abs() < 0.002);
    }
}
