//! Inference on exported models with ONNX Runtime (`ort`, library loaded at run time).

pub mod library;
pub mod session;

pub use crate::encode::{encode_in_batches, plan_batches, PaddedBatch};
pub use session::{OrtEncoder, RuntimeDevice, RuntimeOptions};
