//! `mlm`: masked-token prediction over the vocabulary (Geneformer), decoded only at the masked
//! positions through the tied MLM head.

use burn::tensor::activation::log_softmax;
use burn::tensor::backend::Backend;

use super::{BatchTensors, LossOutput, Objective};
use crate::encoder::CellEncoder;

pub struct Mlm;

impl<B: Backend> Objective<B> for Mlm {
    fn name(&self) -> &'static str {
        "mlm"
    }

    fn per_masked_token(&self) -> bool {
        true
    }

    fn loss(&self, model: &CellEncoder<B>, t: &BatchTensors<B>, _max_positions: usize) -> LossOutput<B> {
        let states = model.hidden(t.input_ids.clone(), t.pad.clone());
        let [rows, len, hidden] = states.dims();
        let flat = states.reshape([rows * len, hidden]);
        let picked = flat.select(0, t.masked_index.clone());
        let logits = model.mlm_logits(picked);
        let logp = log_softmax(logits.clone(), 1);
        let nll = logp.gather(1, t.targets.clone().unsqueeze_dim(1)).neg().mean();
        let correct = logits.argmax(1).squeeze_dim::<1>(1).equal(t.targets.clone()).int().sum();
        LossOutput { loss: nll, correct: Some(correct) }
    }
}
