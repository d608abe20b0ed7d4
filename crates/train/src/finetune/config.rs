//! Fine-tuning's settings and their checks.

use corrflow_infer::model_meta::Pooling;
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
    /// Each setting against its bound; the message names the flag, the config key, the bound and
    /// the value given.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let (v, t) = (self.validation_fraction, self.test_fraction);
        if !(v > 0.0 && v < 0.5) {
            return Err(format!(
                "--validation-fraction (finetune.validation_fraction) must be in (0, 0.5), early stopping needs it (got {v})"
            ));
        }
        if !(0.0..0.5).contains(&t) {
            return Err(format!("--test-fraction (finetune.test_fraction) must be in [0, 0.5) (got {t})"));
        }
        for (name, n) in [
            ("--epochs (finetune.epochs)", self.epochs),
            ("--patience (finetune.patience)", self.patience),
            ("--batch-size (finetune.batch_size)", self.batch_size),
            ("finetune.log_every", self.log_every as usize),
        ] {
            if n == 0 {
                return Err(format!("{name} must be at least 1 (got 0)"));
            }
        }
        let limits = [
            ("--epochs (finetune.epochs)", self.epochs, 1_000_000),
            ("--batch-size (finetune.batch_size)", self.batch_size, 1 << 20),
            ("finetune.shuffle_buffer", self.shuffle_buffer, 1 << 24),
        ];
        for (name, n, max) in limits {
            if n > max {
                return Err(format!("{name} must be at most {max} (got {n})"));
            }
        }
        if !(self.lr > 0.0) {
            return Err(format!("--lr (finetune.lr) must be > 0 (got {})", self.lr));
        }
        if !self.lr.is_finite() {
            return Err(format!("--lr (finetune.lr) must be a finite number (got {})", self.lr));
        }
        for (name, x) in [("finetune.weight_decay", self.weight_decay), ("finetune.grad_clip", self.grad_clip)] {
            if !(x >= 0.0 && x.is_finite()) {
                return Err(format!("{name} must be a finite number ≥ 0 (got {x})"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_names_its_flag_and_the_value() {
        let bad = |f: fn(&mut FinetuneConfig)| {
            let mut c = FinetuneConfig::default();
            f(&mut c);
            c.validate().unwrap_err()
        };
        assert_eq!(bad(|c| c.lr = -1.0), "--lr (finetune.lr) must be > 0 (got -1)");
        assert!(bad(|c| c.lr = f64::INFINITY).contains("--lr (finetune.lr) must be a finite number (got inf)"));
        assert!(bad(|c| c.lr = f64::NAN).contains("got NaN"));
        assert!(bad(|c| c.validation_fraction = -0.1).contains("--validation-fraction"));
        assert!(bad(|c| c.validation_fraction = -0.1).contains("(got -0.1)"));
        assert!(bad(|c| c.test_fraction = 0.7).contains("--test-fraction"));
        assert!(bad(|c| c.epochs = 0).contains("--epochs (finetune.epochs) must be at least 1"));
        assert!(FinetuneConfig::default().validate().is_ok());
    }
}
