//! Inference on exported models with ONNX Runtime (`ort`, library loaded at run time).

pub mod batch;
pub mod library;
pub mod session;

pub use batch::{plan_batches, PaddedBatch};
pub use session::{OrtEncoder, RuntimeDevice, RuntimeOptions};
