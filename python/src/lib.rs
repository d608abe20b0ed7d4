//! `corrflow._native`: the Rust half of the `corrflow` Python package. Each module wraps one
//! pipeline stage of the library for Python; the Python half (`python/corrflow/`) turns AnnData
//! and pyarrow objects into the plain arrays these functions take, and their results back.
//!
//! Heavy work runs with the GIL released; long calls stop at their next safe point on Ctrl-C
//! (see [`interrupt`]); library errors become `corrflow.CorrflowError` with the library's
//! message.

use pyo3::prelude::*;

mod annotate;
mod batches;
mod corpus;
mod embed;
mod eval;
mod graph;
mod interrupt;
mod matrix;
mod progress;
mod settings;
mod soma;
mod tokenize;
mod value_batches;

pyo3::create_exception!(_native, CorrflowError, pyo3::exceptions::PyException, "An error from corrflow's library: bad input, a corrupt file, a refused write. The message names the file and the problem.");

/// A library error as a Python exception: `Interrupted` as `KeyboardInterrupt` (the Ctrl-C that
/// caused it), everything else as `CorrflowError`.
pub(crate) fn py_err(e: corrflow_io::Error) -> PyErr {
    match e {
        corrflow_io::Error::Interrupted(_) => pyo3::exceptions::PyKeyboardInterrupt::new_err(e.to_string()),
        e => CorrflowError::new_err(e.to_string()),
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("CorrflowError", m.py().get_type::<CorrflowError>())?;
    soma::register();
    m.add_function(wrap_pyfunction!(tokenize::tokenize_csr, m)?)?;
    m.add_function(wrap_pyfunction!(tokenize::vocabulary_genes, m)?)?;
    m.add_function(wrap_pyfunction!(corpus::ingest, m)?)?;
    m.add_function(wrap_pyfunction!(corpus::corpus_info, m)?)?;
    m.add_function(wrap_pyfunction!(corpus::export_hf, m)?)?;
    m.add_function(wrap_pyfunction!(graph::graph_build, m)?)?;
    m.add_function(wrap_pyfunction!(graph::graph_read, m)?)?;
    m.add_function(wrap_pyfunction!(graph::graph_update, m)?)?;
    m.add_function(wrap_pyfunction!(embed::embed_csr, m)?)?;
    m.add_function(wrap_pyfunction!(annotate::annotate_csr, m)?)?;
    m.add_function(wrap_pyfunction!(eval::eval_cells, m)?)?;
    m.add_class::<batches::MaskedBatches>()?;
    m.add_class::<value_batches::ValueBatches>()?;
    m.add_function(wrap_pyfunction!(value_batches::held_out_value_batches, m)?)?;
    m.add_function(wrap_pyfunction!(batches::held_out_batches, m)?)?;
    m.add_function(wrap_pyfunction!(progress::set_progress, m)?)?;
    m.add_function(wrap_pyfunction!(settings::train_settings, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
