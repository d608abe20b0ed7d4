//! `wced-rank`: a rank proxy of whole-cell expression decoding, from before the corpus kept
//! expression: from the mean-pooled embedding, detection BCE over the vocabulary + MSE over the
//! detected genes, where a detected gene's "expression" is its rank score `s / L_max`, and
//! "detected" means among the tokens the encoder was given (so the decoder can copy its input:
//! REPORT §9). Kept for the earlier experiments; WCED as BMFM-RNA defines it is `wced`
//! (`wced_values.rs`). A model trained with it before the rename says `wced` with rank input.

use burn::tensor::activation::log_sigmoid;
use burn::tensor::Tensor;

use super::{BatchTensors, Heads, LossOutput, Objective};
use crate::encoder::CellEncoder;

pub struct WcedRank;

impl<B: crate::fused::FusedOps> Objective<B> for WcedRank {
    fn name(&self) -> &'static str {
        "wced-rank"
    }

    fn heads(&self, vocab_size: usize) -> Heads {
        Heads { cell: Some(2 * vocab_size), ..Heads::default() }
    }

    fn whole_cell_targets(&self) -> bool {
        true
    }

    fn loss(
        &self,
        model: &CellEncoder<B>,
        states: &Tensor<B, 3>,
        t: &BatchTensors<B>,
        _max_positions: usize,
    ) -> LossOutput<B> {
        let states = states.clone();
        let pooled = CellEncoder::mean_pool(states, t.gene_weights.clone());
        let head = model.cell_head.as_ref().expect("the model was built with this objective's cell head");
        let out = head.forward(pooled);
        let vocab = out.dims()[1] / 2;
        let logits = out.clone().narrow(1, 0, vocab);
        let expr = out.narrow(1, vocab, vocab);
        let y = t.detected.clone().expect("whole-cell targets");
        // BCE with logits: −[y log σ(z) + (1 − y) log σ(−z)].
        let bce = (y.clone() * log_sigmoid(logits.clone()) + (y.clone().neg() + 1.0) * log_sigmoid(logits.neg()))
            .neg()
            .mean();
        let diff = (expr - t.score.clone().expect("whole-cell targets")) * y.clone();
        let mse = diff.powi_scalar(2).sum().div(y.sum().clamp_min(1.0));
        LossOutput::new(bce + mse, None)
    }
}
