//! `corrflow.annotate`: Cell Ontology calls for the cells of an in-memory matrix from an exported
//! model with a hierarchical cell-type head (`train --hce-ontology`, `export onnx`), run by ONNX
//! Runtime: each cell's leaf probabilities and its calls (leaf-argmax, reliable call), decoded
//! by the same code as `corrflow annotate` and the server's `/v1/annotate`.

use std::path::PathBuf;

use corrflow_infer::annotate::calls::Annotator;
use corrflow_infer::encode::Output;
use numpy::{PyArray1, PyArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::embed::{batching, ModelRun, RunSettings};

/// The calls of the cells of a CSR matrix: a dict of columns (`leaf_id`, `leaf_label`,
/// `leaf_probability`, `call_id`, `call_label`, `call_probability`, `call_depth`; None / NaN /
/// −1 for cells with no vocabulary gene), `probabilities` (float32 `[n_cells, leaves]`, NaN
/// rows), `leaves` (the head's term ids) and `ontology_version`.
#[pyfunction]
#[pyo3(signature = (indptr, indices, data, gene_ids, cell_ids, model, threshold=0.5, batch_size=64, token_budget=16384, threads=0, allow_normalized=false, log1p=false, source="AnnData"))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn annotate_csr<'py>(
    py: Python<'py>,
    indptr: &Bound<'py, PyAny>,
    indices: &Bound<'py, PyAny>,
    data: &Bound<'py, PyAny>,
    gene_ids: Vec<String>,
    cell_ids: Vec<String>,
    model: PathBuf,
    threshold: f64,
    batch_size: usize,
    token_budget: usize,
    threads: usize,
    allow_normalized: bool,
    log1p: bool,
    source: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let settings = RunSettings {
        model,
        pooling: None,
        threads,
        batching: batching(batch_size, token_budget)?,
        allow_normalized,
        log1p,
        source,
    };
    let mut run = ModelRun::open(py, (indptr, indices, data), &gene_ids, &settings)?;
    let model = &settings.model;
    let head = run.encoder.config().and_then(|c| c.hce.clone()).ok_or_else(|| {
        PyValueError::new_err(format!(
            "{} has no hierarchical cell-type head (train it with `corrflow train --hce-ontology`)",
            model.display()
        ))
    })?;
    let annotator = Annotator::new(&head, threshold).map_err(PyValueError::new_err)?;
    let (dim, k) = (run.encoder.dim(), run.encoder.classes().len());
    let n = run.csr.n_cells();
    let mut probabilities = vec![f32::NAN; n * k];
    let mut calls = vec![None; n];
    run.for_each_row(py, &gene_ids, &cell_ids, Output::WithProbabilities, |cell, row| {
        let p = &row[dim..];
        probabilities[cell * k..(cell + 1) * k].copy_from_slice(p);
        calls[cell] = Some(annotator.call(p));
    })?;
    let out = PyDict::new(py);
    let text = |f: &dyn Fn(&corrflow_infer::annotate::calls::CellCall) -> Option<String>| {
        calls.iter().map(|c| c.as_ref().and_then(f)).collect::<Vec<Option<String>>>()
    };
    let number = |f: &dyn Fn(&corrflow_infer::annotate::calls::CellCall) -> Option<f64>| {
        calls.iter().map(|c| c.as_ref().and_then(f).unwrap_or(f64::NAN)).collect::<Vec<f64>>()
    };
    out.set_item("leaf_id", text(&|c| Some(c.leaf.id.clone())))?;
    out.set_item("leaf_label", text(&|c| Some(c.leaf.label.clone())))?;
    out.set_item("leaf_probability", number(&|c| Some(c.leaf.probability)))?;
    out.set_item("call_id", text(&|c| c.call.as_ref().map(|t| t.id.clone())))?;
    out.set_item("call_label", text(&|c| c.call.as_ref().map(|t| t.label.clone())))?;
    out.set_item("call_probability", number(&|c| c.call.as_ref().map(|t| t.probability)))?;
    let depth: Vec<i64> =
        calls.iter().map(|c| c.as_ref().and_then(|c| c.call.as_ref()).map_or(-1, |t| i64::from(t.depth))).collect();
    out.set_item("call_depth", depth)?;
    out.set_item("probabilities", PyArray1::from_vec(py, probabilities).reshape([n, k])?)?;
    out.set_item("leaves", head.leaves.clone())?;
    out.set_item("ontology_version", head.ontology_version.clone())?;
    Ok(out)
}
