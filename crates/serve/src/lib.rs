//! The HTTP embedding server ([`server`]: tokio + axum, a bounded queue and a dynamic batcher
//! generic over the inference core's [`Encoder`](corrflow_infer::encode::Encoder)), a thin
//! adapter over `corrflow-infer`: the ONNX Runtime sessions, the model metadata and the
//! annotation calls are the core's.
//!
//! Depends on `corrflow-io` and `corrflow-infer` only: changing the server recompiles neither
//! burn nor the dataflow.

pub mod server;
