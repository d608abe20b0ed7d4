//! Pre-training losses over a masked batch (DESIGN.md §5): MLM, WCED, TxFM Poisson.
//!
//! The corpus stores rank-value encoded cells, so the whole-cell targets are derived from ranks:
//! a gene is *detected* when it is among the cell's tokens, and its *expression* is its rank
//! score `s = L_max − position` (the quantity Geneformer's encoding preserves): WCED regresses
//! `s / L_max` on detected genes, the Poisson loss reconstructs `log(1 + s)` with the rectified
//! tanh bounded by `log(1 + L_max)`.

use burn::tensor::activation::{log_sigmoid, log_softmax, relu};
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor, TensorData};
use corrflow_operators::mask::IGNORE_INDEX;

use super::model::{CellEncoder, Objective};
use crate::mask::batches::TrainingBatch;

/// A training batch as tensors.
#[derive(Clone, Debug)]
pub struct BatchTensors<B: Backend> {
    pub input_ids: Tensor<B, 2, Int>,
    pub pad: Tensor<B, 2, Bool>,
    /// 1 on gene positions (not specials, not padding).
    pub gene_weights: Tensor<B, 2>,
    /// Flattened `row * len + col` of the masked positions, and their original tokens.
    pub masked_index: Tensor<B, 1, Int>,
    pub targets: Tensor<B, 1, Int>,
    pub masked: usize,
    /// Whole-cell targets `[rows, vocab]` (WCED / Poisson only): detected, and rank score in (0, 1].
    pub detected: Option<Tensor<B, 2>>,
    pub score: Option<Tensor<B, 2>>,
}

/// Builds the tensors of a batch. `is_special[t]` marks special tokens.
pub fn batch_tensors<B: Backend>(
    b: &TrainingBatch,
    is_special: &[bool],
    vocab: usize,
    objective: Objective,
    max_positions: usize,
    device: &B::Device,
) -> BatchTensors<B> {
    let (rows, len) = (b.rows, b.len);
    let ids: Vec<i64> = b.input_ids.iter().map(|&t| i64::from(t)).collect();
    let pad: Vec<bool> = b.attention_mask.iter().map(|&m| m == 0).collect();
    let mut weights = vec![0f32; rows * len];
    let (mut index, mut targets) = (Vec::new(), Vec::new());
    let whole = objective != Objective::Mlm;
    let (mut detected, mut score) =
        if whole { (vec![0f32; rows * vocab], vec![0f32; rows * vocab]) } else { (vec![], vec![]) };
    for r in 0..rows {
        let mut gene_pos = 0usize;
        for c in 0..len {
            let i = r * len + c;
            if b.attention_mask[i] == 0 {
                continue;
            }
            let label = b.labels[i];
            let original = if label == IGNORE_INDEX { b.input_ids[i] } else { label as u32 };
            if label != IGNORE_INDEX {
                index.push(i as i64);
                targets.push(label);
            }
            if is_special.get(original as usize).copied().unwrap_or(false) {
                continue;
            }
            weights[i] = 1.0;
            if whole {
                let s = max_positions.saturating_sub(gene_pos) as f32 / max_positions as f32;
                detected[r * vocab + original as usize] = 1.0;
                score[r * vocab + original as usize] = s;
            }
            gene_pos += 1;
        }
    }
    let masked = index.len();
    let int1 = |v: Vec<i64>| Tensor::<B, 1, Int>::from_data(TensorData::new(v.clone(), [v.len()]), device);
    BatchTensors {
        input_ids: Tensor::from_data(TensorData::new(ids, [rows, len]), device),
        pad: Tensor::from_data(TensorData::new(pad, [rows, len]), device),
        gene_weights: Tensor::from_data(TensorData::new(weights, [rows, len]), device),
        masked_index: int1(index),
        targets: int1(targets),
        masked,
        detected: whole.then(|| Tensor::from_data(TensorData::new(detected, [rows, vocab]), device)),
        score: whole.then(|| Tensor::from_data(TensorData::new(score, [rows, vocab]), device)),
    }
}

/// The loss of a batch and, for MLM, the number of masked tokens predicted correctly.
pub struct LossOutput<B: Backend> {
    pub loss: Tensor<B, 1>,
    pub correct: Option<Tensor<B, 1, Int>>,
}

/// Computes the objective's loss (mean over masked tokens for MLM, over cells × genes otherwise).
pub fn loss<B: Backend>(
    model: &CellEncoder<B>,
    t: &BatchTensors<B>,
    objective: Objective,
    max_positions: usize,
) -> LossOutput<B> {
    let states = model.hidden(t.input_ids.clone(), t.pad.clone());
    let [rows, len, hidden] = states.dims();
    match objective {
        Objective::Mlm => {
            let flat = states.reshape([rows * len, hidden]);
            let picked = flat.select(0, t.masked_index.clone());
            let logits = model.mlm_logits(picked);
            let logp = log_softmax(logits.clone(), 1);
            let nll = logp.gather(1, t.targets.clone().unsqueeze_dim(1)).neg().mean();
            let correct = logits.argmax(1).squeeze_dim::<1>(1).equal(t.targets.clone()).int().sum();
            LossOutput { loss: nll, correct: Some(correct) }
        }
        Objective::Wced => {
            let pooled = CellEncoder::mean_pool(states, t.gene_weights.clone());
            let head = model.wced.as_ref().expect("WCED head exists for the WCED objective");
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
            LossOutput { loss: bce + mse, correct: None }
        }
        Objective::Poisson => {
            let pooled = CellEncoder::mean_pool(states, t.gene_weights.clone());
            let head = model.poisson.as_ref().expect("Poisson head exists for the Poisson objective");
            let z = head.forward(pooled);
            // Rectified tanh: log(L + 1) · ReLU(tanh(z / 4e)), L = L_max.
            let bound = ((max_positions + 1) as f64).ln();
            let xhat = relu((z / (4.0 * std::f64::consts::E)).tanh()) * bound;
            // Target x = log(1 + s) with s = L_max · score.
            let x = (t.score.clone().expect("whole-cell targets") * max_positions as f64 + 1.0).log();
            let l = xhat.clone().exp() - xhat * x.exp();
            LossOutput { loss: l.mean(), correct: None }
        }
    }
}
