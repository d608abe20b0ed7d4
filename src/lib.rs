//! corrflow: single-cell atlases → token corpora → CorrMask-pretrained, servable models.
//!
//! Stages, in pipeline order: [`ingest`] (streaming readers), [`tokenize`] (Geneformer
//! rank-value encoding), [`corpus`] (token shards), with [`vocab`] providing gene vocabularies.
//! Pure algorithms live in the `corrflow-operators` crate.

pub mod config;
pub mod corpus;
pub mod demo;
pub mod embed;
pub mod error;
pub mod eval;
pub mod export;
pub mod graph;
pub mod ingest;
pub mod mask;
pub mod plot;
pub mod runtime;
pub mod serve;
pub mod synth;
pub mod tokenize;
pub mod train;
pub mod util;
pub mod vocab;

pub use error::{Error, Result};
