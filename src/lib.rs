//! corrflow: single-cell atlases → token corpora → CorrMask-pretrained, servable models.
//!
//! This crate is the front of a workspace whose crates follow the pipeline (see
//! `docs/ARCHITECTURE.md`; the definitions are in `docs/DESIGN.md`): `corrflow-algorithms` (pure
//! algorithms) → `corrflow-formats` (the input readers) → `corrflow-io` (vocabularies,
//! tokenization, the corpus, ingest, graph files, model metadata) → `corrflow-graph` (Algorithm 1,
//! timely/differential) and `corrflow-mask` (Algorithm 2, the masking operator) →
//! `corrflow-model` (the encoder in burn, objectives, checkpoints, ONNX and Hugging Face export)
//! → `corrflow-train` (the trainer, fine-tuning) → `corrflow-synth` (the paper's synthetic
//! experiments); beside them `corrflow-eval` (embeddings against baselines), `corrflow-serve`
//! (ONNX Runtime, the HTTP server) and `corrflow-plot` (SVG). It re-exports each stage under its
//! pipeline name and adds what spans several of them: [`embed`] (any encoder backend), Cell
//! Ontology [`annotate`]ion, the TOML [`config`], in-silico [`perturb`]ation and the [`demo`].

pub mod annotate;
pub mod config;
pub mod demo;
pub mod embed;
pub mod perturb;

pub use corrflow_algorithms as algorithms;
pub use corrflow_eval as eval;
pub use corrflow_graph as graph;
pub use corrflow_io::{
    corpus, encode, error, formats, graph_files, ingest, model_meta, ontology, tokenize, util, vocab,
};
pub use corrflow_io::{Error, Result};
pub use corrflow_mask as mask;
pub use corrflow_model as model;
pub use corrflow_model::export;
pub use corrflow_serve::{runtime, server};
pub use corrflow_synth as synth;
pub use corrflow_train as train;
