//! What every command that runs a model on the cells of a file is given: the model, the input
//! and how to read it, how to batch, where the runtime computes. `embed`, `annotate` and
//! `perturb` each add their own outputs and options to it.

use std::path::PathBuf;

use corrflow_io::formats::ReadOptions;
use corrflow_io::tokenize::ValueTransform;

use crate::encode::Batching;
use crate::onnxruntime::RuntimeOptions;
use crate::registry::ModelSource;

#[derive(Clone, Debug)]
pub struct CellsRun {
    pub model: ModelSource,
    /// Cells in any format corrflow reads (h5ad, AnnData zarr, loom, 10x HDF5, MatrixMarket).
    pub input: PathBuf,
    pub read: ReadOptions,
    /// Accept non-integer values (normalized data), as `ingest --allow-normalized` does.
    pub allow_normalized: bool,
    pub transform: ValueTransform,
    pub batching: Batching,
    pub runtime: RuntimeOptions,
    /// Report progress (a bar on a terminal, periodic lines in a log).
    pub progress: bool,
}
