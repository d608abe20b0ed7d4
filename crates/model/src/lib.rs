//! The cell encoder in burn: the Geneformer-style BERT ([`CellEncoder`]) built from a
//! [`ModelConfig`], checkpoints (load and atomic save), pooling into cell vectors (the burn
//! [`Encoder`](corrflow_infer::encode::Encoder) backend) and export to ONNX.
//!
//! Below the trainer, `embed`, export and the synthetic experiments; above `corrflow-io`.

pub mod burn_backend;
pub mod burn_encoder;
pub mod checkpoint;
pub mod classifier;
pub mod dropout;
pub mod encoder;
pub mod export;
pub mod fused;
pub mod import;
mod init;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub mod kernel_cache;
pub mod layer;
pub mod legacy;
pub mod memory;
pub mod objective;
pub mod train_settings;
pub mod value;

pub use burn_backend::BURN;
pub use burn_encoder::{load_checkpoint, BurnEncoder, LoadedModel};
pub use corrflow_infer::model_meta::{ModelConfig, Pooling};
pub use encoder::{CellEncoder, WholeCellHead};
pub use fused::{fused_enabled, set_fused, FusedOps, TrainingBackend};
pub use init::{head, InitModel};
pub use objective::{BatchTensors, LossOutput, Objective};
pub use train_settings::TrainSettings;

/// The CPU backend: burn's ndarray backend (the fastest CPU backend that builds offline here).
pub type CpuBackend = burn::backend::NdArray<f32>;
pub type CpuTraining = burn::backend::Autodiff<CpuBackend>;
