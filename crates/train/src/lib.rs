//! The trainer (docs/DESIGN.md §7.2): the Geneformer V1 BERT in burn, pre-trained on batches from the
//! masking dataflow, on the CPU (ndarray backend), with `--features cuda` on an NVIDIA GPU, or
//! with `--features wgpu` on burn's wgpu backend and the CubeCL kernels.
//!
//! `[train]`'s settings ([`TrainConfig`]) are always here; everything else needs the default
//! feature `trainer` (burn and the model). Without it the crate is those settings alone, which
//! the Python package reads presets with, without linking burn.

mod config;
pub use config::{learning_rate, Device, TrainConfig};

/// Items of the trainer itself (the default feature `trainer`: burn and the model).
macro_rules! trainer {
    ($($item:item)*) => { $(#[cfg(feature = "trainer")] $item)* };
}

trainer! {
    /// The training data plan, which lives with the masking stage (the Python loader uses it too).
    pub use corrflow_mask::plan as data;
    pub mod finetune;
    pub mod hce;
    mod held_out;
    mod init_from;
    pub mod learner;
    pub mod length;
    mod metrics;
    pub mod optim;
    mod run;
    pub mod step;
    mod values;
    pub use corrflow_model::{CpuBackend, CpuTraining};
    pub use held_out::{evaluate, EvalResult, EvalSet};
    pub use run::{TrainRequest, TrainSummary};

    /// Runs (or resumes) training on backend `B`: the rank loop or, for a model that reads
    /// expression values, the value loop (both on `learner::run_loop`).
    pub fn train<B: corrflow_model::TrainingBackend>(
        req: &TrainRequest,
        device: B::Device,
    ) -> corrflow_io::Result<TrainSummary> {
        if req.model.input.sees_values() {
            values::train_values::<B>(req, device)
        } else {
            run::train_ranks::<B>(req, device)
        }
    }

    /// Runs `finetune` on the CPU (fine-tuning's device is the CPU backend for now).
    pub fn finetune_on_cpu(req: &finetune::FinetuneRequest) -> corrflow_io::Result<finetune::FinetuneSummary> {
        finetune::finetune::<CpuTraining>(req, Default::default())
    }

    /// Runs `train` on the configured device.
    pub fn train_on_device(req: &TrainRequest) -> corrflow_io::Result<TrainSummary> {
        // CubeCL's kernel and autotune caches, read once by the first GPU call.
        #[cfg(any(feature = "cuda", feature = "wgpu"))]
        if req.train.device != Device::Cpu {
            corrflow_model::kernel_cache::enable_from_env();
        }
        match req.train.device {
            Device::Cpu => {
                let products = corrflow_algorithms::nn::GemmKernels::current().name();
                train::<CpuTraining>(req, Default::default())
                    .map(|s| TrainSummary { cpu_products: Some(products.into()), ..s })
            }
            #[cfg(feature = "cuda")]
            Device::Cuda => train::<burn::backend::Autodiff<burn::backend::Cuda<f32>>>(req, Default::default()),
            #[cfg(feature = "cuda")]
            Device::CudaKernels => {
                train::<burn::backend::Autodiff<corrflow_model::fused::CudaKernels>>(req, Default::default())
            }
            #[cfg(not(feature = "cuda"))]
            Device::Cuda | Device::CudaKernels => {
                Err(corrflow_io::Error::Usage("this binary was built without CUDA: rebuild with --features cuda".into()))
            }
            #[cfg(feature = "wgpu")]
            Device::Wgpu => train::<burn::backend::Autodiff<corrflow_model::fused::WgpuKernels>>(req, Default::default()),
            #[cfg(not(feature = "wgpu"))]
            Device::Wgpu => {
                Err(corrflow_io::Error::Usage("this binary was built without wgpu: rebuild with --features wgpu".into()))
            }
        }
    }
}
