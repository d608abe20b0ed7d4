//! Evaluation of embeddings: the linear probe.

mod probe;

pub use probe::{probe, ClassScore, ProbeReport, ProbeRequest};
