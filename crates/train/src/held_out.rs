//! Held-out evaluation during training: a fixed set of held-out cells masked once, the loss
//! (and for per-token objectives the accuracy, beside the unigram baseline) of the model on it.

use burn::tensor::ElementConversion;
use corrflow_algorithms::batches::TrainingBatch;
use corrflow_mask::MaskContext;
use corrflow_model::objective::{self, batch_tensors, Targets};
use corrflow_model::{CellEncoder, FusedOps, ModelConfig};

/// Held-out masked-token loss and accuracy, with the unigram baseline (always predicting the
/// most frequent masked token).
pub struct EvalResult {
    pub loss: f64,
    pub accuracy: f64,
    pub unigram_accuracy: f64,
    /// Named parts of a combined loss (multitask: reconstruction, hce), weighted as the loss.
    pub parts: Vec<(&'static str, f64)>,
}

/// The held-out cells, masked once (the evaluation epoch is fixed, so every evaluation sees the
/// same masks) and padded into length-sorted batches.
pub struct EvalSet {
    batches: Vec<TrainingBatch>,
    masked: u64,
    unigram_accuracy: f64,
}

impl EvalSet {
    pub fn new(ctx: &MaskContext, cells: &[(u64, Vec<u32>)], batch_size: usize) -> Self {
        let batches = corrflow_mask::held_out_batches(ctx, cells, batch_size);
        let mut label_counts = std::collections::HashMap::<i64, u64>::new();
        for b in &batches {
            for &l in b.labels.iter().filter(|&&l| l != corrflow_algorithms::mask::IGNORE_INDEX) {
                *label_counts.entry(l).or_default() += 1;
            }
        }
        let total: u64 = label_counts.values().sum();
        let top = label_counts.values().copied().max().unwrap_or(0);
        Self { batches, masked: total, unigram_accuracy: top as f64 / total.max(1) as f64 }
    }
}

pub fn evaluate<B: FusedOps>(
    model: &CellEncoder<B>,
    set: &EvalSet,
    is_special: &[bool],
    vocab: usize,
    targets: Targets<'_>,
    m: &ModelConfig,
    device: &B::Device,
) -> Option<EvalResult> {
    if set.batches.is_empty() {
        return None;
    }
    let objective = objective::for_model::<B>(m).ok()?;
    let (mut loss_sum, mut weight, mut correct) = (0.0f64, 0.0f64, 0u64);
    // Per named part: weighted sum and weight (a part is absent from batches it learns nothing from).
    let mut parts: Vec<(&'static str, f64, f64)> = Vec::new();
    for b in &set.batches {
        let targets = Targets { whole_cell: objective.whole_cell_targets(), ..targets };
        let t = batch_tensors::<B>(b, is_special, vocab, targets, m.max_positions, device);
        if objective.per_masked_token() && t.masked == 0 {
            continue;
        }
        let states = model.hidden(t.input_ids.clone(), t.pad.clone());
        let out = objective.loss(model, &states, &t, m.max_positions);
        let w = if objective.per_masked_token() { t.masked as f64 } else { b.rows as f64 };
        loss_sum += out.loss.into_scalar().elem::<f64>() * w;
        weight += w;
        for (name, part) in out.parts {
            let v = part.into_scalar().elem::<f64>() * w;
            match parts.iter_mut().find(|p| p.0 == name) {
                Some(slot) => (slot.1, slot.2) = (slot.1 + v, slot.2 + w),
                None => parts.push((name, v, w)),
            }
        }
        if let Some(c) = out.correct {
            correct += c.into_scalar().elem::<i64>() as u64;
        }
    }
    Some(EvalResult {
        loss: loss_sum / weight.max(1.0),
        accuracy: correct as f64 / set.masked.max(1) as f64,
        unigram_accuracy: set.unigram_accuracy,
        parts: parts.into_iter().map(|(n, v, w)| (n, v / w.max(1e-12))).collect(),
    })
}
