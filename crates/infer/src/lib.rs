//! The inference core: everything that runs a trained model on cells, in one place for the
//! command line, the HTTP server and the Python package (text-embeddings-inference's `core`).
//!
//! - [`encode`]: the [`Encoder`](encode::Encoder) trait every backend implements, padded batches
//!   and token-budget batching;
//! - [`registry`]: which backend opens a [`ModelSource`](registry::ModelSource): ONNX Runtime is
//!   built in ([`onnxruntime`]); burn checkpoints are registered by the binary
//!   (`corrflow-model` depends on this crate for [`model_meta`], so it cannot sit below it);
//! - [`model_meta`]: a model's configuration and the metadata and ONNX protobuf of an exported
//!   model;
//! - [`embed`], [`annotate`] (with the named hierarchical calls) and [`perturb`]: the one
//!   implementation of each, written against the trait.
//!
//! No burn here: the server and the Python package link this crate without compiling a model.

pub mod annotate;
pub mod cells_run;
pub mod embed;
pub mod encode;
pub mod inputs;
pub mod model_meta;
pub mod onnxruntime;
pub mod perturb;
pub mod registry;

pub use cells_run::CellsRun;
pub use registry::{open_encoder, register_backend, Backend, ModelSource, OpenOptions};
