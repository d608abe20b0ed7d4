//! Inference on exported models and the embedding server: ONNX Runtime sessions ([`runtime`],
//! the `onnxruntime` [`Encoder`](corrflow_io::encode::Encoder) backend) and the HTTP API
//! ([`server`]: tokio + axum, a bounded queue and a dynamic batcher generic over the encoder).
//!
//! Depends on `corrflow-io` only: changing the server recompiles neither burn nor the dataflow.

pub mod runtime;
pub mod server;
