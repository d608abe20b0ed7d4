//! Inference on exported models with ONNX Runtime (`ort`, library loaded at run time).

/// The backend's name in its errors (`corrflow_io::error::Error::Backend`).
pub const BACKEND: &str = "ONNX Runtime";

pub mod library;
pub mod session;

pub use crate::encode::{encode_in_batches, plan_batches, PaddedBatch};
pub use session::{OrtEncoder, RuntimeDevice, RuntimeOptions};
