//! Evaluation of embeddings: probes of cell embeddings (k-fold, logistic regression and k-NN), gene classification on gene
//! embeddings.

mod classify;
pub(crate) mod genes;
mod probe;

pub use genes::{eval_genes, stratified_folds, GeneEvalReport, GeneEvalRequest, Score};
pub use probe::{probe, ClassScore, ProbeReport, ProbeRequest};
