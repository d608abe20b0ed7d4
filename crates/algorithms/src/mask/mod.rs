//! Masking for masked-language-model pre-training (CorrMask Algorithm 2 and its baselines) as
//! pure functions over a cell's gene tokens.
//!
//! Every function takes the gene part of a sequence (special tokens are never masked, so the
//! caller passes only the genes and adds their offset back) and an RNG that the caller seeds with
//! [`cell_rng`] from `(seed, epoch, cell)`: a cell's masks therefore do not depend on worker
//! count, batch composition or order.

mod audit;
mod bits;
mod corrmask;
mod neighbours;
mod params;
mod pmi;
mod pmi_spans;
mod random;
mod replace;
mod rng;
mod sequence;
mod strategies;
mod strategy;
#[cfg(test)]
mod tests;

pub use audit::AuditCounts;
pub use neighbours::{NeighbourTable, MAX_GRAPH_GENES};
pub use params::MaskParams;
pub use pmi::{PmiCounts, PmiTable};
pub use replace::{apply_replacement, Replacement, IGNORE_INDEX};
pub use rng::{cell_rng, MaskRng};
pub use sequence::{gene_range, prefetch_cell, MaskedSequence, Masker};
pub use strategies::{mask_cell, MaskPlan, MaskScratch, MaskTables, StructuralPhase};
pub use strategy::{register, MaskStrategy, MaskingStrategy, BUILTIN};
