//! Pure algorithms of corrflow, as plain functions over plain data.
//!
//! Nothing here does I/O or knows about dataflow; the `corrflow` crate wires these into readers,
//! writers and timely/differential operators. Each algorithm is unit-tested on its own.

pub mod auroc;
pub mod batches;
pub mod classes;
pub mod graph;
pub mod mask;
pub mod nn;
pub mod ontology;
pub mod perturb;
pub mod quantile;
pub mod rank;

pub use quantile::{LogQuantileSketch, Side, MIN_ALPHA, PAGE_BYTES};
pub use rank::{normalized_expression, rank_order, rank_value_encode, RankScratch, SequenceLayout};
