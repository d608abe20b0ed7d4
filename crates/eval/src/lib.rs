//! Evaluation of embeddings, always beside baselines.
//!
//! - [`cells`]: `eval cells`: an embedding of cells against baselines computed from the same
//!   cells in the same run (PCA of the log-normalised highly variable genes, the HVG matrix, a
//!   random projection), on the tasks scib-metrics and cz-benchmarks score: Leiden clustering
//!   (ARI, NMI), label prediction (k-fold logistic and k-NN probes), label silhouette and, with
//!   a batch column, batch mixing (batch silhouette, graph connectivity, iLISI, cLISI).
//! - [`metrics`] and [`baselines`]: the pure algorithms behind it, over plain slices, each
//!   checked against scikit-learn / scib-metrics / scanpy (`python/tests/test_eval_cells.py`).
//! - [`probe`] (`eval probe`) and [`genes`] (`eval genes`): probes of one embedding file.
//!
//! It lives apart from the trainer because it needs no burn: the Python package links it.

pub mod baselines;
pub mod cells;
mod classify;
mod embeddings_file;
mod fold_rows;
pub mod genes;
mod knn;
mod logistic;
pub mod metrics;
mod probe;
mod sparse_rows;

pub use genes::{eval_genes, stratified_folds, GeneEvalReport, GeneEvalRequest, Score};
pub use probe::{
    check_alpha, min_class_cells, probe, probe_classes, probe_matrix, ClassCount, ClassScore, ProbeReport,
    ProbeRequest, ALPHA_RANGE,
};
