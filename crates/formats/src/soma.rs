//! TileDB-SOMA experiments (CELLxGENE Census is one) are recognised here only to say how to read
//! one: no Rust TileDB-SOMA reader exists. The Python package registers a reader backed by the
//! `tiledbsoma` package (`python/src/soma.rs`), which is tried before this one.

use std::path::Path;

use crate::error::{Error, Result};
use crate::{CellFormat, CellSource, Input, ReadOptions};

/// A TileDB group with a SOMA experiment's measurements.
pub fn is_soma_experiment(path: &Path) -> bool {
    path.is_dir() && path.join("__tiledb_group.tdb").exists() && path.join("ms").is_dir()
}

/// The format's entry in the registry: detects an experiment and refuses it with directions.
pub struct Soma;

impl CellFormat for Soma {
    fn name(&self) -> &'static str {
        "TileDB-SOMA"
    }

    fn looks_like(&self) -> &'static str {
        "a SOMA experiment directory, through the Python package with tiledbsoma"
    }

    fn detect(&self, input: &Input) -> bool {
        input.is_dir && is_soma_experiment(&input.path)
    }

    fn open(&self, input: &Input, _opts: &ReadOptions) -> Result<Box<dyn CellSource>> {
        Err(Error::format(
            &input.path,
            "a TileDB-SOMA experiment: the command line has no TileDB reader; ingest it from Python with the \
             tiledbsoma package installed: corrflow.ingest([path], corpus=..., atlas=..., value_filter=...)",
        ))
    }
}
