//! `poisson`: TxFM's Poisson loss on a rectified-tanh decoding of the whole cell from the
//! pooled embedding; the target is `log(1 + s)` of each gene's rank score, the decoding is
//! bounded by `log(1 + L_max)`.

use burn::tensor::activation::relu;
use burn::tensor::Tensor;

use super::{BatchTensors, Heads, LossOutput, Objective};
use crate::encoder::CellEncoder;

pub struct Poisson;

impl<B: crate::fused::FusedOps> Objective<B> for Poisson {
    fn name(&self) -> &'static str {
        "poisson"
    }

    fn heads(&self, vocab_size: usize) -> Heads {
        Heads { cell: Some(vocab_size), ..Heads::default() }
    }

    fn whole_cell_targets(&self) -> bool {
        true
    }

    fn loss(
        &self,
        model: &CellEncoder<B>,
        states: &Tensor<B, 3>,
        t: &BatchTensors<B>,
        max_positions: usize,
    ) -> LossOutput<B> {
        let states = states.clone();
        let pooled = CellEncoder::mean_pool(states, t.gene_weights.clone());
        let head = model.cell_head.as_ref().expect("the model was built with this objective's cell head");
        let z = head.forward(pooled);
        // Rectified tanh: log(L + 1) · ReLU(tanh(z / 4e)), L = L_max.
        let bound = ((max_positions + 1) as f64).ln();
        let xhat = relu((z / (4.0 * std::f64::consts::E)).tanh()) * bound;
        // Target x = log(1 + s) with s = L_max · score.
        let x = (t.score.clone().expect("whole-cell targets") * max_positions as f64 + 1.0).log();
        let l = xhat.clone().exp() - xhat * x.exp();
        LossOutput::new(l.mean(), None)
    }
}
