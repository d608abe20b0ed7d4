//! `[synth.structure]` and `[synth.modularity]`: the settings of the paper's synthetic
//! experiments (Appendix B.1 and B.2). Defaults are the paper's values; `configs/synth.toml`
//! spells them out.

use serde::{Deserialize, Serialize};

use corrflow_model::ModelConfig;

/// Both synthetic experiments.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SynthConfig {
    pub structure: StructureParams,
    pub modularity: ModularityParams,
}

impl SynthConfig {
    pub fn validate(&self) -> Result<(), String> {
        self.structure.validate()?;
        self.modularity.validate()
    }
}

/// Appendix B.1: genes in equal modules, one active module per cell, dropout, top-K tokens.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StructureParams {
    pub genes: usize,
    pub modules: usize,
    pub cells: usize,
    /// Rate λ of the Exp(λ) background.
    pub background_rate: f64,
    /// Mean and standard deviation of the N(μ, σ) signal added to the active module's genes.
    pub signal_mean: f64,
    pub signal_sd: f64,
    /// Probability that a value is dropped (set to 0).
    pub dropout: f64,
    /// Tokens per cell: the top-K genes by observed value.
    pub top_k: usize,
    /// Side of the binned heatmaps (genes are averaged in `genes / plot_bins` blocks).
    pub plot_bins: usize,
    pub seed: u64,
}

impl Default for StructureParams {
    fn default() -> Self {
        Self {
            genes: 1000,
            modules: 5,
            cells: 1000,
            background_rate: 1.0,
            signal_mean: 10.0,
            signal_sd: 2.0,
            dropout: 0.5,
            top_k: 100,
            plot_bins: 50,
            seed: 0,
        }
    }
}

impl StructureParams {
    pub fn validate(&self) -> Result<(), String> {
        if self.modules == 0 || self.genes < 2 * self.modules || !self.genes.is_multiple_of(self.modules) {
            return Err(format!(
                "synth.structure: genes ({}) must be a multiple of modules ({}) with ≥ 2 genes per module",
                self.genes, self.modules
            ));
        }
        if self.cells == 0 || self.top_k < 2 || self.top_k > self.genes {
            return Err("synth.structure: cells must be > 0 and top_k in 2..=genes".into());
        }
        if !(self.background_rate > 0.0) || !(self.signal_sd >= 0.0) || !self.signal_mean.is_finite() {
            return Err("synth.structure: background_rate must be > 0 and signal_sd ≥ 0".into());
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(format!("synth.structure.dropout must be in [0, 1), got {}", self.dropout));
        }
        if self.plot_bins == 0 || self.plot_bins > self.genes {
            return Err("synth.structure.plot_bins must be in 1..=genes".into());
        }
        Ok(())
    }
}

/// How the paper's "Exp(0.1)" background is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Background {
    /// 0.1 is the rate λ: mean 1/λ = 10 (as `Exp(λ = 1)` in B.1 is written).
    Rate,
    /// 0.1 is the mean (NumPy's `exponential(scale=0.1)`): rate 10.
    Mean,
}

impl Background {
    /// The rate of Exp(·) for the configured parameter.
    pub fn rate(self, param: f64) -> f64 {
        match self {
            Self::Rate => param,
            Self::Mean => 1.0 / param,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Rate => "rate",
            Self::Mean => "mean",
        }
    }
}

/// Appendix B.2: the modularity sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModularityParams {
    pub samples: usize,
    pub genes: usize,
    pub modules: usize,
    /// Background variants run (`--background rate|mean|both`).
    pub backgrounds: Vec<Background>,
    /// The "0.1" of Exp(0.1), read as [`Background`] says.
    pub background_param: f64,
    pub signal_mean: f64,
    pub signal_sd: f64,
    /// Modularity levels γ.
    pub gammas: Vec<f64>,
    /// Independent trials per γ (dataset, model and masks seeded by `seed + trial`).
    pub seeds: usize,
    pub seed: u64,
    pub train_samples: usize,
    pub test_samples: usize,
    pub epochs: usize,
    pub batch_size: usize,
    pub lr: f64,
    /// Masking rate and BERT's 80/10/10.
    pub mask_rate: f64,
    pub mask_token_rate: f64,
    pub random_token_rate: f64,
    /// Correlation masking: partners per seed, and the probability of masking the seed itself.
    pub max_partners: usize,
    pub seed_keep: f64,
    /// The logistic-regression probe: L2 penalty (1.0 = scikit-learn's C = 1) and iterations.
    pub probe_alpha: f64,
    pub probe_iterations: u64,
    /// Runs trained at once (0: the rayon pool's threads). Runs are deterministic at any value.
    pub threads: usize,
    /// The encoder; `max_positions` must be ≥ genes + 1 ([CLS] + one position per gene).
    pub model: ModelConfig,
}

impl Default for ModularityParams {
    fn default() -> Self {
        Self {
            samples: 1500,
            genes: 60,
            modules: 3,
            backgrounds: vec![Background::Rate, Background::Mean],
            background_param: 0.1,
            signal_mean: 10.0,
            signal_sd: 0.5,
            gammas: vec![0.0, 0.25, 0.5, 0.75, 1.0],
            seeds: 5,
            seed: 0,
            train_samples: 800,
            test_samples: 500,
            epochs: 50,
            batch_size: 64,
            lr: 1e-3,
            mask_rate: 0.25,
            mask_token_rate: 0.8,
            random_token_rate: 0.1,
            max_partners: 8,
            seed_keep: 0.5,
            probe_alpha: 1.0,
            probe_iterations: 2000,
            threads: 0,
            model: ModelConfig {
                hidden: 64,
                ffn: 128,
                heads: 4,
                layers: 2,
                max_positions: 61,
                dropout: 0.0,
                layer_norm_eps: 1e-5,
                objective: "mlm".into(),
                mlm_activation: Default::default(),
                ..ModelConfig::default()
            },
        }
    }
}

impl ModularityParams {
    pub fn validate(&self) -> Result<(), String> {
        let p = "synth.modularity";
        if self.modules == 0 || self.genes < 2 * self.modules || !self.genes.is_multiple_of(self.modules) {
            return Err(format!(
                "{p}: genes ({}) must be a multiple of modules ({}), ≥ 2 per module",
                self.genes, self.modules
            ));
        }
        if self.train_samples == 0 || self.test_samples == 0 || self.train_samples + self.test_samples > self.samples {
            return Err(format!("{p}: train_samples + test_samples must be in 2..=samples ({})", self.samples));
        }
        if self.backgrounds.is_empty() || !(self.background_param > 0.0) {
            return Err(format!("{p}: backgrounds must not be empty and background_param must be > 0"));
        }
        if self.backgrounds.iter().enumerate().any(|(i, b)| self.backgrounds[..i].contains(b))
            || self.gammas.iter().enumerate().any(|(i, g)| self.gammas[..i].contains(g))
        {
            return Err(format!("{p}: backgrounds and gammas must not repeat a value"));
        }
        if self.gammas.is_empty() || self.gammas.iter().any(|g| !(0.0..=1.0).contains(g)) {
            return Err(format!("{p}.gammas must be a non-empty list of values in [0, 1]"));
        }
        if self.seeds == 0 || self.epochs == 0 || self.batch_size == 0 || !(self.lr > 0.0) {
            return Err(format!("{p}: seeds, epochs, batch_size and lr must be > 0"));
        }
        if !(self.mask_rate > 0.0 && self.mask_rate < 1.0) {
            return Err(format!("{p}.mask_rate must be in (0, 1) and mask at least one gene"));
        }
        let r = (self.mask_token_rate, self.random_token_rate);
        if !(r.0 >= 0.0 && r.1 >= 0.0 && r.0 + r.1 <= 1.0) {
            return Err(format!("{p}: mask_token_rate + random_token_rate must be in [0, 1]"));
        }
        if !(0.0..=1.0).contains(&self.seed_keep) || !(self.probe_alpha >= 0.0) || self.probe_iterations == 0 {
            return Err(format!("{p}: seed_keep must be in [0, 1], probe_alpha ≥ 0, probe_iterations > 0"));
        }
        if !(self.signal_sd >= 0.0) || !self.signal_mean.is_finite() {
            return Err(format!("{p}.signal_sd must be ≥ 0"));
        }
        self.model.validate().map_err(|e| format!("{p}.{e}"))?;
        if self.model.max_positions < self.genes + 1 {
            return Err(format!("{p}.model.max_positions must be ≥ genes + 1 = {}", self.genes + 1));
        }
        if self.model.objective != "mlm" {
            return Err(format!("{p}.model.objective must be mlm"));
        }
        Ok(())
    }

    /// Masked genes per sample: ⌈rate · genes⌉ (the paper fills until |M| ≥ 0.25 · n_genes).
    pub fn mask_budget(&self) -> usize {
        ((self.genes as f64 * self.mask_rate - 1e-9).ceil() as usize).clamp(1, self.genes)
    }
}
