//! corrflow: single-cell atlases → token corpora → CorrMask-pretrained, servable models.
//!
//! This crate is the front of a workspace whose crates follow the pipeline (see
//! `docs/ARCHITECTURE.md`; the definitions are in `docs/DESIGN.md`): `corrflow-fs` (files on
//! disk: I/O errors, atomic writes, locks, checksums) and `corrflow-algorithms` (pure
//! algorithms) at the base → `corrflow-formats` (the input readers) → `corrflow-io`
//! (vocabularies, tokenization, the corpus, ingest, graph files) → `corrflow-graph` (Algorithm
//! 1, timely/differential) and `corrflow-mask` (Algorithm 2, the masking operator) →
//! `corrflow-infer` (the inference core: model metadata, encoder backends, embed, annotate,
//! perturb) → `corrflow-model` (the encoder in burn, objectives, checkpoints, ONNX and Hugging
//! Face export) → `corrflow-train` (the training loop, pre-training, fine-tuning, value models)
//! → `corrflow-synth` (the paper's synthetic experiments); beside them `corrflow-eval`
//! (embeddings against baselines), `corrflow-serve` (the HTTP server over the inference core)
//! and `corrflow-plot` (SVG). It re-exports each stage under its pipeline name and adds the TOML
//! [`config`] and the [`demo`].

pub mod config;
pub mod demo;

pub use corrflow_algorithms as algorithms;
pub use corrflow_eval as eval;
pub use corrflow_fs as fs;
pub use corrflow_graph as graph;
pub use corrflow_infer as infer;
pub use corrflow_infer::onnxruntime as runtime;
pub use corrflow_infer::{annotate, embed, encode, model_meta, perturb};
pub use corrflow_io::{corpus, error, formats, graph_files, ingest, ontology, progress, tokenize, util, vocab};
pub use corrflow_io::{Error, Result};
pub use corrflow_mask as mask;
pub use corrflow_model as model;
pub use corrflow_model::export;
pub use corrflow_serve::server;
pub use corrflow_synth as synth;
pub use corrflow_train as train;

/// Registers the backends this build runs beside the inference core's built-in ONNX Runtime:
/// burn, for `--checkpoint`. The binary calls it first; a library user that opens checkpoints
/// calls it once.
pub fn register_backends() {
    corrflow_infer::register_backend(&corrflow_model::BURN);
}
