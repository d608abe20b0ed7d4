//! corrflow's files in and out, in pipeline order: gene [`vocab`]ularies; single-cell
//! [`formats`] (h5ad, 10x HDF5, MatrixMarket) read as streams of cell chunks; [`tokenize`]
//! (Geneformer rank-value encoding); the token-shard [`corpus`] and the [`ingest`] job that
//! fills it; the dependency graph's files ([`graph_files`]); exported models' metadata
//! ([`model_meta`]), the embedding-backend trait ([`encode`]) and the cell [`ontology`] with
//! label maps.
//!
//! Nothing here trains, builds a graph or serves: those crates sit above this one. Pure
//! algorithms live in `corrflow-algorithms`.

pub mod corpus;
pub mod encode;
pub mod error;
pub mod formats;
pub mod graph_files;
pub mod ingest;
pub mod model_meta;
pub mod ontology;
pub mod tokenize;
pub mod util;
pub mod vocab;

pub use error::{Error, IoContext, Result};
