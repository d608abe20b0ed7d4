//! A fine-tuned classification head (`model.classifier`): class logits of whole cells from the
//! pooled embedding, or of gene tokens from their final states, and the (class-weighted)
//! cross-entropy that trains it. The head sits in the model's label slot.

use burn::tensor::activation::log_softmax;
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor};

use crate::encoder::{CellEncoder, WholeCellHead};
use crate::fused::FusedOps;

impl<B: FusedOps> CellEncoder<B> {
    fn classifier_head(&self) -> &WholeCellHead<B> {
        self.label_head.as_ref().expect("the model was built with a classifier (model.classifier)")
    }

    /// Class logits `[rows, classes]` of whole cells: the head over the mean of the final states
    /// at the positions `weights` marks (gene positions, or `<cls>`). A value model's tokens
    /// carry `values` `[rows, len]` (`None` for rank models).
    pub fn cell_logits(
        &self,
        input_ids: Tensor<B, 2, Int>,
        values: Option<Tensor<B, 2>>,
        pad: Tensor<B, 2, Bool>,
        weights: Tensor<B, 2>,
    ) -> Tensor<B, 2> {
        let states = self.states_with_values(input_ids, values, pad, self.encoder.layers.len());
        let pooled = Self::mean_pool(states, weights);
        self.classifier_head().forward(pooled)
    }

    /// Class logits `[n, classes]` of the token positions `index` (flattened `row · len + col`).
    pub fn token_logits(
        &self,
        input_ids: Tensor<B, 2, Int>,
        pad: Tensor<B, 2, Bool>,
        index: Tensor<B, 1, Int>,
    ) -> Tensor<B, 2> {
        let states = self.hidden(input_ids, pad);
        let [rows, len, hidden] = states.dims();
        self.classifier_head().forward(states.reshape([rows * len, hidden]).select(0, index))
    }
}

/// Cross-entropy of `logits [n, classes]` against `targets [n]`: the mean of −log p(target), or
/// with class weights `w` PyTorch's weighted mean `Σ w_y·(−log p_y) / Σ w_y`.
pub fn cross_entropy<B: Backend>(
    logits: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
    class_weights: Option<Tensor<B, 1>>,
) -> Tensor<B, 1> {
    let n = targets.dims()[0];
    let picked = log_softmax(logits, 1).gather(1, targets.clone().reshape([n, 1])).reshape([n]);
    match class_weights {
        None => picked.mean().neg(),
        Some(w) => {
            let w = w.select(0, targets);
            (picked * w.clone()).sum().neg().div(w.sum().clamp_min(1e-12))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::TensorData;

    type B = crate::CpuBackend;

    #[test]
    fn weighted_cross_entropy_equals_the_direct_sum() {
        let device = Default::default();
        let logits = [[2.0f32, 0.5, -1.0], [0.1, 0.2, 0.3], [-0.5, 1.5, 0.0], [1.0, 1.0, 1.0]];
        let targets = [0i64, 2, 1, 1];
        let w = [0.5f32, 2.0, 1.0];
        let t = |v: Vec<f32>, s: [usize; 2]| Tensor::<B, 2>::from_data(TensorData::new(v, s), &device);
        let l = t(logits.concat(), [4, 3]);
        let y = Tensor::<B, 1, Int>::from_data(TensorData::new(targets.to_vec(), [4]), &device);
        let wt = Tensor::<B, 1>::from_data(TensorData::new(w.to_vec(), [3]), &device);
        let nll = |r: &[f32; 3], c: usize| {
            let lse = r.iter().map(|&v| f64::from(v).exp()).sum::<f64>().ln();
            lse - f64::from(r[c])
        };
        let plain: f64 = logits.iter().zip(&targets).map(|(r, &c)| nll(r, c as usize)).sum::<f64>() / 4.0;
        let num: f64 = logits.iter().zip(&targets).map(|(r, &c)| f64::from(w[c as usize]) * nll(r, c as usize)).sum();
        let den: f64 = targets.iter().map(|&c| f64::from(w[c as usize])).sum();
        let got = |x: Tensor<B, 1>| f64::from(x.into_scalar());
        assert!((got(cross_entropy(l.clone(), y.clone(), None)) - plain).abs() < 1e-5);
        assert!((got(cross_entropy(l, y, Some(wt))) - num / den).abs() < 1e-5);
    }
}
