//! The parts a value model adds to the encoder (DESIGN.md §11): the value bins' embedding of
//! `input = "bins"`, and the decoder from the CLS state to the decoding set (TxFM's MLP count
//! decoder; BMFM-RNA's shallow WCED decoder). How tokens are embedded with their values and
//! the decoder's forward pass are here too; the losses are the objectives' (`objective/txfm.rs`,
//! `objective/wced.rs`).

use burn::module::Module;
use burn::nn::{Embedding, Linear};
use burn::tensor::activation::relu;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

use corrflow_infer::model_meta::{ModelInput, ValueModel};

/// A value model's own weights.
#[derive(Module, Debug)]
pub struct ValueParts<B: Backend> {
    /// `E_bin`, for `input = "bins"`.
    pub bins: Option<Embedding<B>>,
    /// The decoder's hidden layers (ReLU; residual where the width does not change).
    pub decoder: Vec<Linear<B>>,
    /// The decoder's output: `outputs_per_gene` values for each gene of the decoding set.
    pub decoder_out: Linear<B>,
}

impl<B: Backend> ValueParts<B> {
    /// The decoder's raw outputs `[rows, genes × outputs per gene]` from the CLS states
    /// `[rows, hidden]`.
    pub fn decode(&self, cls: Tensor<B, 2>) -> Tensor<B, 2> {
        let mut x = cls;
        for layer in &self.decoder {
            let y = relu(layer.forward(x.clone()));
            x = if y.dims() == x.dims() { x + y } else { y };
        }
        self.decoder_out.forward(x)
    }
}

/// The token embeddings of a value model: TxFM's `[E_gene (hidden − 1); x]`, or
/// `E_gene + E_bin(x)`, from the gene embeddings `[rows, len, hidden]` and the values
/// `[rows, len]`.
pub fn embed_values<B: Backend>(
    genes: Tensor<B, 3>,
    values: Tensor<B, 2>,
    input: ModelInput,
    parts: &ValueParts<B>,
    config: &ValueModel,
) -> Tensor<B, 3> {
    let [rows, len, hidden] = genes.dims();
    match input {
        ModelInput::Rank | ModelInput::Value => {
            let x = values.reshape([rows, len, 1]);
            Tensor::cat(vec![genes.narrow(2, 0, hidden - 1), x], 2)
        }
        ModelInput::Bins => {
            let bins = parts.bins.as_ref().expect("a bins model has its bin embedding"); // ok: invariant
            genes + bins.forward(value_bins(values, config))
        }
    }
}

/// Equal-width bins of values in `(0, ln(1 + L)]`: zero → bin 0, the rest → `1..bins`.
pub fn value_bins<B: Backend>(values: Tensor<B, 2>, config: &ValueModel) -> Tensor<B, 2, Int> {
    let steps = (config.bins - 1) as f64;
    let scaled = (values.clone() / config.max_value() * steps).ceil().clamp(1.0, steps);
    let zero = values.lower_equal_elem(0.0);
    scaled.mask_fill(zero, 0.0).int()
}

/// Rectified tanh, TxFM's Eq. 1: `φ(z) = ln(L + 1) · ReLU(tanh(z / 4e))`.
pub fn rectified_tanh<B: Backend, const D: usize>(z: Tensor<B, D>, target_sum: f64) -> Tensor<B, D> {
    relu((z / (4.0 * std::f64::consts::E)).tanh()) * target_sum.ln_1p()
}
