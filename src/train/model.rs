//! The Geneformer V1 BERT (DESIGN.md §5) in burn: learned token and position embeddings,
//! post-LayerNorm transformer encoder with ReLU feed-forward, an MLM head tied to the input
//! embeddings, and the optional whole-cell heads of the WCED and Poisson objectives.

use burn::module::Module;
use burn::nn::transformer::{TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput};
use burn::nn::{
    activation::ActivationConfig, Dropout, DropoutConfig, Embedding, EmbeddingConfig, Initializer, LayerNorm,
    LayerNormConfig, Linear, LinearConfig,
};
use burn::tensor::activation::{gelu, relu};
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor};
use serde::{Deserialize, Serialize};

/// Which pre-training loss the model is trained with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    /// Masked-token prediction over the vocabulary (Geneformer).
    #[default]
    Mlm,
    /// Whole-cell expression decoding from the pooled embedding (BMFM-RNA): detection BCE over
    /// the vocabulary + expression MSE over the detected genes.
    Wced,
    /// TxFM: Poisson loss on a rectified-tanh decoding of the whole cell from the pooled embedding.
    Poisson,
}

/// Model sizes (`[model]` in the config; `configs/paper.toml` = the paper's Table 5).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    pub hidden: usize,
    pub ffn: usize,
    pub heads: usize,
    pub layers: usize,
    /// Learned absolute positions.
    pub max_positions: usize,
    pub dropout: f64,
    pub layer_norm_eps: f64,
    pub objective: Objective,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            hidden: 256,
            ffn: 512,
            heads: 4,
            layers: 6,
            max_positions: 2048,
            dropout: 0.02,
            layer_norm_eps: 1e-12,
            objective: Objective::Mlm,
        }
    }
}

impl ModelConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.hidden == 0 || self.ffn == 0 || self.heads == 0 || self.layers == 0 || self.max_positions == 0 {
            return Err("model.hidden, ffn, heads, layers and max_positions must be > 0".into());
        }
        if !self.hidden.is_multiple_of(self.heads) {
            return Err(format!("model.hidden ({}) must be a multiple of model.heads ({})", self.hidden, self.heads));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(format!("model.dropout must be in [0, 1), got {}", self.dropout));
        }
        if !(self.layer_norm_eps > 0.0) {
            return Err("model.layer_norm_eps must be > 0".into());
        }
        Ok(())
    }

    /// The module, randomly initialised (BERT's N(0, 0.02)) on `device`.
    pub fn init<B: Backend>(&self, vocab_size: usize, device: &B::Device) -> CellEncoder<B> {
        let normal = Initializer::Normal { mean: 0.0, std: 0.02 };
        let linear = |i, o| LinearConfig::new(i, o).with_initializer(normal.clone()).init(device);
        let h = self.hidden;
        let whole_cell = |outputs| WholeCellHead { dense: linear(h, h), out: linear(h, outputs) };
        CellEncoder {
            tokens: EmbeddingConfig::new(vocab_size, h).with_initializer(normal.clone()).init(device),
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
            wced: (self.objective == Objective::Wced).then(|| whole_cell(2 * vocab_size)),
            poisson: (self.objective == Objective::Poisson).then(|| whole_cell(vocab_size)),
        }
    }
}

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
    pub wced: Option<WholeCellHead<B>>,
    pub poisson: Option<WholeCellHead<B>>,
}

impl<B: Backend> CellEncoder<B> {
    /// Final-layer token states `[batch, len, hidden]`; `pad` is true on padding.
    pub fn hidden(&self, input_ids: Tensor<B, 2, Int>, pad: Tensor<B, 2, Bool>) -> Tensor<B, 3> {
        let [batch, len] = input_ids.dims();
        let device = input_ids.device();
        let pos = Tensor::<B, 1, Int>::arange(0..len as i64, &device).reshape([1, len]).repeat_dim(0, batch);
        let x = self.tokens.forward(input_ids) + self.positions.forward(pos);
        let x = self.dropout.forward(self.embed_norm.forward(x));
        self.encoder.forward(TransformerEncoderInput::new(x).mask_pad(pad))
    }

    /// Token states after the first `layers` encoder layers (0 = the embeddings; the number of
    /// layers = the final states), without dropout when the backend is not training.
    pub fn states_after(&self, input_ids: Tensor<B, 2, Int>, pad: Tensor<B, 2, Bool>, layers: usize) -> Tensor<B, 3> {
        let [batch, len] = input_ids.dims();
        let device = input_ids.device();
        let pos = Tensor::<B, 1, Int>::arange(0..len as i64, &device).reshape([1, len]).repeat_dim(0, batch);
        let mut x =
            self.dropout.forward(self.embed_norm.forward(self.tokens.forward(input_ids) + self.positions.forward(pos)));
        for layer in self.encoder.layers.iter().take(layers) {
            x = layer.forward(x, Some(pad.clone()), None);
        }
        x
    }

    /// Vocabulary logits of some token states `[n, hidden]` → `[n, vocab]` (tied decoder).
    pub fn mlm_logits(&self, states: Tensor<B, 2>) -> Tensor<B, 2> {
        let h = self.mlm_norm.forward(gelu(self.mlm_dense.forward(states)));
        h.matmul(self.tokens.weight.val().transpose()) + self.mlm_bias.val().unsqueeze_dim(0)
    }

    /// Mean of the token states over `weights` (1 on gene positions, 0 on specials and padding):
    /// Geneformer's `cell` embedding.
    pub fn mean_pool(states: Tensor<B, 3>, weights: Tensor<B, 2>) -> Tensor<B, 2> {
        let w = weights.unsqueeze_dim::<3>(2);
        let total = w.clone().sum_dim(1).clamp_min(1.0);
        (states * w).sum_dim(1).div(total).squeeze_dim::<2>(1)
    }
}
