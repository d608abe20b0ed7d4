//! Evaluation of embeddings: the linear probe of cell embeddings, gene classification on gene
//! embeddings.

mod genes;
mod probe;

pub use genes::{eval_genes, stratified_folds, GeneEvalReport, GeneEvalRequest, Score};
pub use probe::{probe, ClassScore, ProbeReport, ProbeRequest};
