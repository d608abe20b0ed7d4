//! TOML configuration. Every command reads `--config FILE` (presets in `configs/`); flags given
//! on the command line override the file. Unknown keys are errors, so a typo never silently
//! falls back to a default.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The whole configuration; each stage reads its own section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub ingest: IngestConfig,
    pub vocab: VocabConfig,
    /// CorrMask Algorithm 1 (defaults: the paper's Table 4).
    pub graph: corrflow_algorithms::graph::GraphParams,
    /// CorrMask Algorithm 2 and its baselines (defaults: docs/DESIGN.md §6).
    pub mask: corrflow_algorithms::mask::MaskParams,
    /// The model (docs/DESIGN.md §7; `paper.toml` = Table 5).
    pub model: crate::model::ModelConfig,
    /// Optimisation and data of `corrflow train`.
    pub train: crate::train::TrainConfig,
    /// `corrflow finetune` (classification heads on a pre-trained checkpoint).
    pub finetune: crate::train::finetune::FinetuneConfig,
    /// The paper's synthetic experiments (`corrflow synth`; preset `configs/synth.toml`).
    pub synth: crate::synth::SynthConfig,
}

/// Which Geneformer sequence layout to produce.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelVersion {
    /// 2,048 genes, no special tokens.
    #[default]
    V1,
    /// 4,094 genes between `<cls>` and `<eos>`.
    V2,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IngestConfig {
    /// Cells read, tokenized and written per step (bounds memory).
    pub chunk_cells: usize,
    /// Input cells per Parquet shard.
    pub shard_cells: usize,
    pub zstd_level: i32,
    pub version: ModelVersion,
    /// Overrides the version's gene budget (2,048 for V1, 4,094 for V2).
    pub max_genes: Option<usize>,
}

impl Default for IngestConfig {
    fn default() -> Self {
        Self { chunk_cells: 256, shard_cells: 100_000, zstd_level: 1, version: ModelVersion::V1, max_genes: None }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VocabConfig {
    /// Relative error bound of the streaming medians.
    pub alpha: f64,
    /// Genes expressed in fewer cells are left out of a built vocabulary.
    pub min_cells: u64,
    /// Build in two passes over the inputs, in flat memory (the same medians).
    pub two_pass: bool,
    /// MiB for one pass's median sketches before their tails fold (0: no limit).
    pub sketch_memory_mb: u64,
}

impl Default for VocabConfig {
    fn default() -> Self {
        Self { alpha: 0.001, min_cells: 1, two_pass: false, sketch_memory_mb: corrflow_io::ingest::SKETCH_MEMORY_MB }
    }
}

impl Config {
    /// Reads and validates a TOML config file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::parse(&text).map_err(|msg| Error::Config { path: path.to_path_buf(), msg })
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let cfg: Self = toml::from_str(text).map_err(|e| e.to_string())?;
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), String> {
        let i = &self.ingest;
        if i.chunk_cells == 0 || i.shard_cells == 0 {
            return Err("ingest.chunk_cells and ingest.shard_cells must be > 0".into());
        }
        // Streaming reads a chunk of cells at a time: a chunk as large as an atlas holds it all.
        if i.chunk_cells > 1_000_000 {
            return Err(format!(
                "ingest.chunk_cells = {} is more than 1,000,000; larger chunks only cost memory (streaming reads one chunk at a time)",
                i.chunk_cells
            ));
        }
        if !(1..=22).contains(&i.zstd_level) {
            return Err(format!("ingest.zstd_level must be 1..=22, got {}", i.zstd_level));
        }
        if i.max_genes == Some(0) {
            return Err("ingest.max_genes must be > 0".into());
        }
        self.graph.validate()?;
        self.mask.validate()?;
        self.model.validate()?;
        self.train.validate()?;
        self.finetune.validate()?;
        self.synth.validate()?;
        if let Some(allowed) = corrflow_io::ingest::alpha_out_of_range(self.vocab.alpha) {
            return Err(format!("vocab.alpha must be in {allowed}, got {}", self.vocab.alpha));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_rejected() {
        let e = Config::parse("[ingest]\nchunk_celss = 10\n").unwrap_err();
        assert!(e.contains("unknown field"), "{e}");
    }

    #[test]
    fn impossible_values_are_rejected() {
        assert!(Config::parse("[ingest]\nchunk_cells = 0\n").is_err());
        for absurd in [
            "[ingest]\nchunk_cells = 10000000000\n",
            "[model]\nhidden = 1000000\n",
            "[model]\nlayers = 100000\n",
            "[train]\nbatch_size = 100000000\n",
            "[finetune]\nvalidation_fraction = 0.0\n",
        ] {
            let e = Config::parse(absurd).unwrap_err();
            assert!(e.contains("at most") || e.contains("more than") || e.contains("must be"), "{absurd}: {e}");
        }
        assert!(Config::parse("[vocab]\nalpha = 2.0\n").is_err());
    }

    #[test]
    fn presets_in_configs_parse() {
        for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/configs")).unwrap() {
            let p = entry.unwrap().path();
            if p.extension().is_some_and(|e| e == "toml") {
                Config::load(&p).unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }
}
