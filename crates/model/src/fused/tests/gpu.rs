//! The fused operations on burn's GPU backends against their compositions on the same device,
//! differentiated by burn's autodiff (values and gradients within 1e-4 relative; AdamW and the
//! squared norm to 1e-6). Each check is generic over the inner backend and runs on:
//! - wgpu without fusion, the CubeCL kernels (`wgpu_kernels::cubecl_*`, feature `wgpu`): in
//!   `make test`, on Mesa's software Vulkan driver (lavapipe);
//! - CUDA without fusion, the same CubeCL kernels (`cuda_kernels::*`), and CUDA with fusion, the
//!   default bodies with their explicit backward passes (`cuda_fusion::*`), feature `cuda`:
//!   ignored without an NVIDIA GPU; on one, `cargo test --release -p corrflow-model --features
//!   cuda --lib -- --ignored cuda_` (or the test binary with `--ignored cuda_`).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorData;

use super::{
    assert_close, attention, check_attention, check_decoder, check_layer_norm, normal, relative, spec, values,
};
use crate::fused::adamw_tests::{three_steps, upload};
use crate::fused::{reference, AttentionSpec, FusedOps};
use crate::CpuBackend;

/// The attention shapes checked everywhere: padding, dropout, head widths 8 to 128.
fn attention_specs() -> Vec<AttentionSpec> {
    vec![
        spec(3, 37, 2, 8, &[37, 20, 1], 0.0),
        spec(2, 130, 4, 16, &[130, 77], 0.1),
        spec(1, 96, 4, 64, &[90], 0.02),
        spec(2, 45, 1, 128, &[45, 30], 0.05),
    ]
}

/// The attention against the CPU kernel (the same arithmetic and dropout mask, itself checked
/// against the composition): for lengths where the composition is slow on the device.
fn check_attention_against_the_cpu<G: FusedOps>(device: &G::Device, spec: &AttentionSpec) {
    let cpu = attention::<CpuBackend>(&Default::default(), spec, true);
    let what = format!("{:?} against the CPU", spec.shape);
    assert_close(&["output", "dq", "dk", "dv"], &attention::<G>(device, spec, true), &cpu, 1e-4, &what);
}

/// Three AdamW steps (one clipped) against the composition on the device and the CPU kernel,
/// and their squared gradient norms.
fn check_adamw<G: FusedOps>(device: &G::Device) {
    let (fused, squares) = three_steps::<G>(device, true);
    let (composed, composed_squares) = three_steps::<G>(device, false);
    let (cpu, _) = three_steps::<CpuBackend>(&Default::default(), true);
    assert!(((squares - composed_squares) / composed_squares).abs() < 1e-6, "{squares} vs {composed_squares}");
    for (i, ((f, c), h)) in fused.iter().zip(&composed).zip(&cpu).enumerate() {
        assert!(relative(f, c) < 1e-6, "buffer {i}: relative error {}", relative(f, c));
        assert!(relative(f, h) < 1e-6, "buffer {i} against the CPU: relative error {}", relative(f, h));
    }
}

/// The squared norm over gradients of one block, many blocks with a partial last one, one
/// element and none, against the composition and against `f64` on the host.
fn check_sum_of_squares<G: FusedOps>(device: &G::Device) {
    let lengths = [4_096, 100_003, 1, 0, 37];
    let host: Vec<Vec<f32>> = lengths.iter().map(|&n| values(normal([n], 0.5, n as u64).into_data())).collect();
    let tensors: Vec<FloatTensor<G>> =
        host.iter().map(|v| upload::<G>(TensorData::new(v.clone(), [v.len()]), device)).collect();
    let exact: f64 = host.iter().flatten().map(|&x| f64::from(x) * f64::from(x)).sum();
    let fused = G::sum_of_squares(&tensors);
    let composed = reference::sum_of_squares::<G>(&tensors);
    assert!(((fused - exact) / exact).abs() < 1e-6, "{fused} vs exact {exact}");
    assert!(((fused - composed) / composed).abs() < 1e-6, "{fused} vs the composition's {composed}");
}

/// The device a backend's checks run on.
fn device<G: Backend>() -> G::Device {
    G::Device::default()
}

#[cfg(feature = "wgpu")]
mod wgpu_kernels {
    use super::*;
    type Gpu = crate::fused::WgpuKernels;

    #[test]
    fn cubecl_layer_norm_matches_the_composition_on_wgpu() {
        check_layer_norm::<Gpu>(&device::<Gpu>());
    }

    #[test]
    fn cubecl_attention_matches_the_composition_on_wgpu() {
        for spec in attention_specs() {
            check_attention::<Gpu>(&device::<Gpu>(), &spec);
        }
    }

    /// Past lavapipe's loop limit: llvmpipe ends every loop of an invocation after 65,535
    /// iterations in all, and before the loops over a head's values were unrolled a unit ran
    /// about `len × 3 × head_dim` of them, so from 384 positions at head width 64 the kernels
    /// were cut short (output relative error ~1.2 at 4 × 512 × 2 × 64). Against the CPU kernel,
    /// since the composition on lavapipe takes minutes at these lengths.
    #[test]
    fn cubecl_attention_past_lavapipes_loop_limit_matches_the_cpu_kernel() {
        for spec in [spec(2, 512, 2, 64, &[480, 465], 0.02), spec(1, 1024, 1, 64, &[1000], 0.02)] {
            check_attention_against_the_cpu::<Gpu>(&device::<Gpu>(), &spec);
        }
    }

    /// The paper config's length against the composition on wgpu (about four minutes on
    /// lavapipe, so `-- --ignored`).
    #[test]
    #[ignore = "slow on lavapipe: the composition at 2,048 positions"]
    fn cubecl_attention_at_the_paper_length_matches_the_composition() {
        check_attention::<Gpu>(&device::<Gpu>(), &spec(1, 2048, 1, 64, &[2000], 0.02));
    }

    #[test]
    fn cubecl_decoder_loss_matches_the_composition_on_wgpu() {
        check_decoder::<Gpu>(&device::<Gpu>());
    }

    #[test]
    fn cubecl_adamw_step_matches_the_composition_on_wgpu() {
        check_adamw::<Gpu>(&device::<Gpu>());
    }

    #[test]
    fn cubecl_sum_of_squares_matches_the_composition_on_wgpu() {
        check_sum_of_squares::<Gpu>(&device::<Gpu>());
    }
}

/// Every check, on CUDA: the CubeCL kernels without fusion (`CudaKernels`, what
/// `--device cuda-kernels` trains on) and the default bodies under fusion (`Cuda`, what
/// `--device cuda` trains on); the attention at the paper length against the composition too.
#[cfg(feature = "cuda")]
macro_rules! cuda_checks {
    ($name:ident, $backend:ty) => {
        mod $name {
            use super::*;
            type Gpu = $backend;

            #[test]
            #[ignore = "needs an NVIDIA GPU"]
            fn layer_norm_matches_the_composition() {
                check_layer_norm::<Gpu>(&device::<Gpu>());
            }

            #[test]
            #[ignore = "needs an NVIDIA GPU"]
            fn attention_matches_the_composition() {
                let paper = [spec(2, 512, 2, 64, &[480, 465], 0.02), spec(1, 2048, 4, 64, &[2000], 0.02)];
                for spec in attention_specs().into_iter().chain(paper) {
                    check_attention::<Gpu>(&device::<Gpu>(), &spec);
                }
            }

            #[test]
            #[ignore = "needs an NVIDIA GPU"]
            fn attention_matches_the_cpu_kernel() {
                check_attention_against_the_cpu::<Gpu>(&device::<Gpu>(), &spec(2, 300, 2, 64, &[300, 211], 0.1));
            }

            #[test]
            #[ignore = "needs an NVIDIA GPU"]
            fn decoder_loss_matches_the_composition() {
                check_decoder::<Gpu>(&device::<Gpu>());
            }

            #[test]
            #[ignore = "needs an NVIDIA GPU"]
            fn adamw_step_matches_the_composition() {
                check_adamw::<Gpu>(&device::<Gpu>());
            }

            #[test]
            #[ignore = "needs an NVIDIA GPU"]
            fn sum_of_squares_matches_the_composition() {
                check_sum_of_squares::<Gpu>(&device::<Gpu>());
            }
        }
    };
}

#[cfg(feature = "cuda")]
cuda_checks!(cuda_kernels, crate::fused::CudaKernels);
#[cfg(feature = "cuda")]
cuda_checks!(cuda_fusion, burn::backend::Cuda<f32>);
