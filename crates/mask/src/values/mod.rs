//! Value models' data (DESIGN.md §11): which genes of a cell the encoder sees ([`visible`]:
//! the masking strategy hides part of the cell's measured genes, graph partners together under
//! CorrMask) and the batches of visible genes, values and decoding targets ([`batch`]). Burn-free,
//! so the trainer and the Python package build the same batches.

pub mod batch;
pub mod hvg;
pub mod setup;
pub mod visible;

pub use batch::{value_of, BatchMaker, ValueBatch};
pub use setup::{atlas_measured, decoding_set, HVG_CELLS};
pub use visible::{choose_visible, visible_count, AtlasGenes, CellAtlases, VisibleFrom};
