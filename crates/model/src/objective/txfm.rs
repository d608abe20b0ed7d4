//! `txfm`: TxFM's masked autoencoder objective (its §3, Eqs. 1–2). The encoder saw only the
//! visible genes with their values and a CLS token; the decoder MLP maps the CLS state to every
//! gene of the decoding set, through the rectified tanh `φ(z) = ln(L + 1)·ReLU(tanh(z / 4e))`,
//! and the loss is the Poisson loss `(1/G) Σ_g (e^{x̂_g} − x̂_g·e^{x_g})` with
//! `x_g = ln(1 + c_g / n_counts · L)`, over masked and visible genes alike. A cell's G are the
//! decoding genes its atlas measured; the loss is their mean, then the mean over cells.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::{BatchTensors, Heads, LossOutput, Objective, ValueTensors};
use crate::encoder::CellEncoder;
use crate::value::rectified_tanh;

pub struct Txfm;

impl<B: crate::fused::FusedOps> Objective<B> for Txfm {
    fn name(&self) -> &'static str {
        "txfm"
    }

    fn heads(&self, _vocab_size: usize) -> Heads {
        Heads { decoder: Some(1), ..Heads::default() }
    }

    fn sees_values(&self) -> bool {
        true
    }

    fn loss(
        &self,
        model: &CellEncoder<B>,
        states: &Tensor<B, 3>,
        t: &BatchTensors<B>,
        _max_positions: usize,
    ) -> LossOutput<B> {
        let (parts, config, v) = super::value_parts(model, t);
        let z = parts.decode(super::cls_states(states));
        LossOutput::new(txfm_loss(z, v, config.target_sum), None)
    }
}

/// The loss of the decoder's logits `z` `[rows, genes]`: `φ`, then each cell's Poisson loss over
/// its measured decoding genes (their mean), then the mean over cells.
pub fn txfm_loss<B: Backend>(z: Tensor<B, 2>, v: &ValueTensors<B>, target_sum: f64) -> Tensor<B, 1> {
    let xhat = rectified_tanh(z, target_sum);
    let ex = v.log_normalized(target_sum).exp();
    let per_gene = xhat.clone().exp() - xhat * ex;
    super::masked_cell_mean(per_gene, v.measured.clone())
}
