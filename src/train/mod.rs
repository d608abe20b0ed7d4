//! The trainer (DESIGN.md §5): the Geneformer V1 BERT in burn, pre-trained on batches from the
//! masking dataflow, on the CPU (ndarray backend) or with `--features cuda` on an NVIDIA GPU.

pub mod checkpoint;
pub mod config;
pub mod data;
pub mod model;
pub mod objective;
mod run;

pub use config::{Device, TrainConfig};
pub use model::{CellEncoder, ModelConfig, Objective};
pub use run::{evaluate, train, EvalResult, EvalSet, TrainRequest, TrainSummary};

/// The CPU backend: burn's ndarray backend (the fastest CPU backend that builds offline here).
pub type CpuBackend = burn::backend::NdArray<f32>;
pub type CpuTraining = burn::backend::Autodiff<CpuBackend>;

/// Runs `train` on the configured device.
pub fn train_on_device(req: &TrainRequest) -> crate::Result<TrainSummary> {
    match req.train.device {
        Device::Cpu => train::<CpuTraining>(req, Default::default()),
        #[cfg(feature = "cuda")]
        Device::Cuda => train::<burn::backend::Autodiff<burn::backend::Cuda<f32>>>(req, Default::default()),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda => {
            Err(crate::Error::Usage("this binary was built without CUDA: rebuild with --features cuda".into()))
        }
    }
}
