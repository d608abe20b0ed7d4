use serde::{Deserialize, Serialize};

use super::MaskStrategy;

/// Masking parameters (defaults: docs/DESIGN.md §6.1 / the paper).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MaskParams {
    pub strategy: MaskStrategy,
    /// Masking rate `p`: budget `B = ⌊L·p⌋` of a cell with `L` genes.
    pub p: f64,
    /// Structural ratio `λ` of CorrMask: quota `B_s = ⌊B·λ⌋`.
    pub lambda: f64,
    /// Partners sampled per seed (`K_max`).
    pub k_max: usize,
    /// PMI: adjacent tokens with NPMI ≥ `pmi_tau` belong to the same span.
    pub pmi_tau: f64,
    /// PMI: adjacent pairs seen fewer times in the corpus are not trusted (NPMI of rare pairs is
    /// noise near 1).
    pub pmi_min_count: u64,
    /// Share of masked positions replaced by `<mask>`.
    pub mask_token_rate: f64,
    /// Share replaced by a uniformly random gene token (the rest stay unchanged).
    pub random_token_rate: f64,
    /// Seed of every masking draw (with the epoch and the cell).
    pub seed: u64,
}

impl Default for MaskParams {
    fn default() -> Self {
        Self {
            strategy: MaskStrategy::CORRMASK,
            p: 0.15,
            lambda: 0.5,
            k_max: 5,
            pmi_tau: 0.5,
            pmi_min_count: 5,
            mask_token_rate: 0.8,
            random_token_rate: 0.1,
            seed: 0,
        }
    }
}

impl MaskParams {
    pub fn validate(&self) -> Result<(), String> {
        if !(self.p > 0.0 && self.p < 1.0) {
            return Err(format!("mask.p must be in (0, 1), got {}", self.p));
        }
        if !(0.0..=1.0).contains(&self.lambda) {
            return Err(format!("mask.lambda must be in [0, 1], got {}", self.lambda));
        }
        if !(-1.0..=1.0).contains(&self.pmi_tau) {
            return Err(format!("mask.pmi_tau must be in [-1, 1], got {}", self.pmi_tau));
        }
        let (m, r) = (self.mask_token_rate, self.random_token_rate);
        if !(m >= 0.0 && r >= 0.0 && m + r <= 1.0 + 1e-12) {
            return Err(format!(
                "mask.mask_token_rate ({m}) and mask.random_token_rate ({r}) must be ≥ 0 and sum to ≤ 1"
            ));
        }
        Ok(())
    }

    /// `(B, B_s)` for a cell of `len` genes under this strategy.
    pub fn budgets(&self, len: usize) -> (usize, usize) {
        let b = (len as f64 * self.p).floor() as usize;
        let share = self.strategy.get().structural_share(self);
        (b, (b as f64 * share).floor() as usize)
    }
}
