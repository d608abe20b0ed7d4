//! `[train]`: the optimisation and data settings of `corrflow train`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where training runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// burn's ndarray backend on the machine's cores.
    #[default]
    Cpu,
    /// burn-cuda with its kernel fusion (build with `--features cuda`); the fused operations run
    /// as their compositions.
    Cuda,
    /// burn-cuda without fusion, with the CubeCL kernels of the fused operations (attention,
    /// LayerNorm, AdamW; build with `--features cuda`).
    #[serde(rename = "cuda-kernels")]
    CudaKernels,
    /// burn's wgpu backend with the CubeCL kernels of the fused operations (build with
    /// `--features wgpu`): a Vulkan, Metal or DX12 GPU, or Mesa's software Vulkan driver.
    Wgpu,
}

impl Device {
    /// Batches are padded to a multiple of this many positions: GPU kernels compile once per
    /// sequence length, so lengths in buckets of 64 compile a few shapes, not one per batch.
    pub fn length_bucket(self) -> usize {
        match self {
            Device::Cpu => 1,
            Device::Cuda | Device::CudaKernels | Device::Wgpu => 64,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    /// Token corpus and dependency graph (the graph is needed by CorrMask only).
    pub corpus: Option<PathBuf>,
    pub graph: Option<PathBuf>,
    /// Atlases to train on (empty: all).
    pub atlases: Vec<String>,
    pub device: Device,
    pub batch_size: usize,
    /// Batches sorted together by length (Hugging Face's `LengthGroupedSampler` megabatches).
    pub group_batches: usize,
    /// Cells held in the shuffle buffer (shards are also read in a seeded order per epoch).
    pub shuffle_buffer: usize,
    pub epochs: usize,
    /// Stop after this many optimiser steps (0: run all epochs).
    pub max_steps: u64,
    /// Keep at most this many tokens of a cell (0: all), to bound memory of small runs.
    pub max_len: usize,
    pub lr: f64,
    pub weight_decay: f64,
    pub warmup_steps: u64,
    /// Gradient clipping by global norm (0: none).
    pub grad_clip: f64,
    /// Held-out share of cells (by a seeded hash of the cell key).
    pub eval_fraction: f64,
    /// Held-out cells evaluated each time (the first ones, fixed masks).
    pub eval_cells: usize,
    pub eval_every: u64,
    pub checkpoint_every: u64,
    /// Checkpoints kept (older ones are removed).
    pub keep_checkpoints: usize,
    pub log_every: u64,
    /// Masking dataflow worker threads.
    pub mask_workers: usize,
    pub seed: u64,
    /// Value models: the genes the encoder sees per cell (TxFM's K), drawn from the cell's
    /// measured genes; 0 uses `mask.p` as the share hidden instead. Rank models ignore it.
    #[serde(skip_serializing_if = "is_zero")]
    pub visible_genes: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            corpus: None,
            graph: None,
            atlases: Vec::new(),
            device: Device::Cpu,
            batch_size: 12,
            group_batches: 50,
            shuffle_buffer: 10_000,
            epochs: 3,
            max_steps: 0,
            max_len: 0,
            lr: 1e-3,
            weight_decay: 0.001,
            warmup_steps: 10_000,
            grad_clip: 1.0,
            eval_fraction: 0.05,
            eval_cells: 512,
            eval_every: 500,
            checkpoint_every: 1000,
            keep_checkpoints: 2,
            log_every: 10,
            mask_workers: 1,
            visible_genes: 0,
            seed: 0,
        }
    }
}

impl TrainConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.batch_size == 0 || self.group_batches == 0 || self.epochs == 0 {
            return Err("train.batch_size, group_batches and epochs must be > 0".into());
        }
        if self.batch_size > 1 << 20 || self.group_batches > 1 << 20 {
            return Err(format!(
                "train.batch_size ({}) and group_batches ({}) must be at most {}",
                self.batch_size,
                self.group_batches,
                1 << 20
            ));
        }
        // The shuffle buffer holds whole cells; 2^24 of them is already ~140 GB at full length.
        if self.shuffle_buffer > 1 << 24 {
            return Err(format!(
                "train.shuffle_buffer ({}) must be at most {} cells (it holds whole cells in memory)",
                self.shuffle_buffer,
                1 << 24
            ));
        }
        if self.mask_workers == 0 || self.mask_workers > 256 {
            return Err(format!("train.mask_workers must be in 1..=256 (threads), got {}", self.mask_workers));
        }
        if !(self.lr > 0.0) || self.weight_decay < 0.0 || self.grad_clip < 0.0 {
            return Err("train.lr must be > 0, weight_decay and grad_clip ≥ 0".into());
        }
        if !(0.0..0.5).contains(&self.eval_fraction) {
            return Err(format!("train.eval_fraction must be in [0, 0.5), got {}", self.eval_fraction));
        }
        if self.eval_every == 0 || self.checkpoint_every == 0 || self.log_every == 0 || self.keep_checkpoints == 0 {
            return Err("train.eval_every, checkpoint_every, log_every and keep_checkpoints must be > 0".into());
        }
        Ok(())
    }
}

/// Learning rate at `step` (0-based): linear warmup to `lr` over `warmup` steps, then linear
/// decay to 0 at `total` steps (Hugging Face's `get_linear_schedule_with_warmup`).
pub fn learning_rate(lr: f64, step: u64, warmup: u64, total: u64) -> f64 {
    if step < warmup {
        return lr * (step + 1) as f64 / warmup as f64;
    }
    let left = total.saturating_sub(step) as f64;
    let span = total.saturating_sub(warmup).max(1) as f64;
    lr * (left / span).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_warms_up_linearly_then_decays_to_zero() {
        assert!((learning_rate(1.0, 0, 10, 110) - 0.1).abs() < 1e-12);
        assert!((learning_rate(1.0, 9, 10, 110) - 1.0).abs() < 1e-12);
        assert!((learning_rate(1.0, 10, 10, 110) - 1.0).abs() < 1e-12);
        assert!((learning_rate(1.0, 60, 10, 110) - 0.5).abs() < 1e-12);
        assert_eq!(learning_rate(1.0, 110, 10, 110), 0.0);
        assert_eq!(learning_rate(1.0, 500, 10, 110), 0.0);
        assert!((learning_rate(2.0, 0, 0, 10) - 2.0).abs() < 1e-12, "no warmup");
    }
}
