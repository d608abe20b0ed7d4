//! corrflow's files in and out, in pipeline order: gene [`vocab`]ularies; [`tokenize`]
//! (Geneformer rank-value encoding); the token-shard [`corpus`] and the [`ingest`] job that
//! fills it; the dependency graph's files ([`graph_files`]); and the cell [`ontology`] with
//! label maps. Models' metadata and the embedding backends are the inference core's
//! (`corrflow-infer`), above this crate.
//!
//! The single-cell readers are the crate below, `corrflow-formats` (re-exported as [`formats`]).
//!
//! Nothing here trains, builds a graph or serves: those crates sit above this one. Pure
//! algorithms live in `corrflow-algorithms`.

pub mod corpus;
pub mod error;
pub mod graph_files;
pub mod ingest;
pub mod ontology;
pub mod progress;
pub mod tokenize;
pub mod util;
pub mod vocab;

/// The input formats, a crate of their own (`corrflow-formats`) below this one; re-exported so
/// `corrflow_io::formats::…` paths name the same items.
pub use corrflow_formats as formats;
pub use error::{Error, IoContext, Result};
