//! `mlm`: masked-token prediction over the vocabulary (Geneformer), decoded only at the masked
//! positions through the tied MLM head, with the fused decoder loss
//! ([`crate::fused::decoder_nll`]: logits in vocabulary blocks, never the whole `[masked, vocab]`).

use burn::tensor::{Tensor, TensorData};

use super::{BatchTensors, LossOutput, Objective};
use crate::encoder::CellEncoder;
use crate::fused::decoder_nll;

pub struct Mlm;

impl<B: crate::fused::FusedOps> Objective<B> for Mlm {
    fn name(&self) -> &'static str {
        "mlm"
    }

    fn per_masked_token(&self) -> bool {
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
        let [rows, len, hidden] = states.dims();
        let flat = states.reshape([rows * len, hidden]);
        let picked = flat.select(0, t.masked_index.clone());
        let transformed = model.mlm_transform(picked);
        let (nll, argmax) =
            decoder_nll(transformed, model.tokens.weight.val(), model.mlm_bias.val(), &t.masked_targets);
        let correct = argmax.iter().zip(t.masked_targets.iter()).filter(|(a, b)| a == b).count() as i64;
        let correct = Tensor::from_data(TensorData::new(vec![correct], [1]), &nll.device());
        LossOutput::new(nll.mean(), Some(correct))
    }
}
