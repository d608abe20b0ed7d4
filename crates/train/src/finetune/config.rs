//! Fine-tuning's settings and their checks.

use corrflow_io::model_meta::Pooling;
use serde::{Deserialize, Serialize};

/// Fine-tuning settings (`[finetune]` in a config; flags override).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FinetuneConfig {
    /// Shares of each class (cells, or genes) held out for validation and test.
    pub validation_fraction: f64,
    pub test_fraction: f64,
    /// Seeds the split, the head's initialisation, the epoch order and dropout.
    pub seed: u64,
    /// Weigh the loss by scikit-learn's balanced class weights (from the training part).
    pub class_weights: bool,
    /// Freeze the embeddings and the first N encoder layers (0: train everything).
    pub freeze_layers: usize,
    pub epochs: usize,
    /// Stop after this many epochs without a better validation macro-F1.
    pub patience: usize,
    pub lr: f64,
    pub warmup_steps: u64,
    pub weight_decay: f64,
    /// Gradient clipping by global norm (0: none).
    pub grad_clip: f64,
    pub batch_size: usize,
    /// Longest sequence (0: the length the model was pre-trained on).
    pub max_len: usize,
    /// The cell vector a cell classifier reads.
    pub pooling: Pooling,
    /// Gene classification: the cells whose held-out gene occurrences are scored.
    pub gene_eval_cells: usize,
    pub shuffle_buffer: usize,
    pub log_every: u64,
}

impl Default for FinetuneConfig {
    fn default() -> Self {
        Self {
            validation_fraction: 0.1,
            test_fraction: 0.1,
            seed: 0,
            class_weights: false,
            freeze_layers: 0,
            epochs: 10,
            patience: 3,
            lr: 2e-4,
            warmup_steps: 50,
            weight_decay: 0.01,
            grad_clip: 1.0,
            batch_size: 16,
            max_len: 0,
            pooling: Pooling::Mean,
            gene_eval_cells: 1000,
            shuffle_buffer: 10_000,
            log_every: 10,
        }
    }
}

impl FinetuneConfig {
    pub fn validate(&self) -> std::result::Result<(), String> {
        let f = (self.validation_fraction, self.test_fraction);
        if !(f.0 > 0.0 && f.0 < 0.5 && (0.0..0.5).contains(&f.1)) {
            return Err(format!(
                "finetune.validation_fraction must be in (0, 0.5) (early stopping needs it) and test_fraction in [0, 0.5); got {} and {}",
                f.0, f.1
            ));
        }
        if self.epochs == 0 || self.patience == 0 || self.batch_size == 0 || self.log_every == 0 {
            return Err("finetune.epochs, patience, batch_size and log_every must be > 0".into());
        }
        if self.batch_size > 1 << 20 || self.shuffle_buffer > 1 << 24 {
            return Err(format!(
                "finetune.batch_size ({}) must be at most {} and shuffle_buffer ({}) at most {} cells",
                self.batch_size,
                1 << 20,
                self.shuffle_buffer,
                1 << 24
            ));
        }
        if !(self.lr > 0.0 && self.lr.is_finite()) || self.weight_decay < 0.0 || self.grad_clip < 0.0 {
            return Err("finetune.lr must be > 0, weight_decay and grad_clip ≥ 0".into());
        }
        Ok(())
    }
}
