//! `wced`: whole-cell expression decoding as BMFM-RNA defines it. The encoder saw a subset of
//! the cell's genes with their values; from the CLS state a shallow decoder predicts, for every
//! gene of the decoding set, whether it is detected (BCE against `c_g > 0`, zeros included) and,
//! for detected genes, its level `ln(1 + c_g / n_counts · 10⁴)` (MSE). Genes the cell's atlas did
//! not measure are left out of both. The loss is the BCE's mean over a cell's measured decoding
//! genes (then over cells) plus the MSE's mean over the batch's detected ones.

use burn::tensor::activation::log_sigmoid;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::{BatchTensors, Heads, LossOutput, Objective, ValueTensors};
use crate::encoder::CellEncoder;

/// BMFM-RNA normalizes every cell to 10,000 counts before `log1p`.
pub const WCED_TARGET_SUM: f64 = 1e4;

pub struct Wced;

impl<B: crate::fused::FusedOps> Objective<B> for Wced {
    fn name(&self) -> &'static str {
        "wced"
    }

    fn heads(&self, _vocab_size: usize) -> Heads {
        Heads { decoder: Some(2), ..Heads::default() }
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
        let (parts, _, v) = super::value_parts(model, t);
        let (bce, mse) = wced_loss(parts.decode(super::cls_states(states)), v);
        let mut out = LossOutput::new(bce.clone() + mse.clone(), None);
        out.parts = vec![("detection", bce), ("level", mse)];
        out
    }
}

/// The two terms of the decoder's outputs `out` `[rows, 2 × genes]` (detection logits, then
/// levels): the BCE's mean over each cell's measured decoding genes (then over cells), and the
/// MSE's mean over the batch's detected measured genes.
pub fn wced_loss<B: Backend>(out: Tensor<B, 2>, v: &ValueTensors<B>) -> (Tensor<B, 1>, Tensor<B, 1>) {
    let genes = out.dims()[1] / 2;
    let logits = out.clone().narrow(1, 0, genes);
    let level = out.narrow(1, genes, genes);
    let detected = v.counts.clone().greater_elem(0.0).float();
    // BCE with logits: −[y log σ(z) + (1 − y) log σ(−z)].
    let bce = (detected.clone() * log_sigmoid(logits.clone())
        + (detected.clone().neg() + 1.0) * log_sigmoid(logits.neg()))
    .neg();
    let bce = super::masked_cell_mean(bce, v.measured.clone());
    let on = detected * v.measured.clone();
    let diff = (level - v.log_normalized(WCED_TARGET_SUM)) * on.clone();
    let mse = diff.powi_scalar(2).sum().div(on.sum().clamp_min(1.0));
    (bce, mse)
}
