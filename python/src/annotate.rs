//! `corrflow.annotate`: Cell Ontology calls for the cells of an in-memory matrix from an exported
//! model with a hierarchical cell-type head (`train --hce-ontology`, `export onnx`), run by ONNX
//! Runtime: each cell's leaf probabilities and its calls (leaf-argmax, reliable call), decoded
//! by the same code as `corrflow annotate` and the server's `/v1/annotate`.

use std::path::PathBuf;

use corrflow_io::encode::Encoder;
use corrflow_io::ontology::calls::Annotator;
use corrflow_serve::runtime::{OrtEncoder, RuntimeOptions};
use numpy::{PyArray1, PyArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::embed::for_each_encoded;
use crate::matrix::CsrArrays;
use crate::py_err;
use crate::tokenize::{options, Tokenizer};

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
    if batch_size == 0 || token_budget == 0 {
        return Err(PyValueError::new_err("batch_size and token_budget must be at least 1"));
    }
    let csr = CsrArrays::extract(indptr, indices, data, gene_ids.len())?;
    let mut encoder =
        py.detach(|| OrtEncoder::open(&model, &RuntimeOptions { threads, ..Default::default() })).map_err(py_err)?;
    let head = encoder.meta.model.hce.clone().ok_or_else(|| {
        PyValueError::new_err(format!(
            "{} has no hierarchical cell-type head (train it with `corrflow train --hce-ontology`)",
            model.display()
        ))
    })?;
    let annotator = Annotator::new(&head, threshold).map_err(PyValueError::new_err)?;
    corrflow_io::encode::check_batch_memory(&encoder, token_budget).map_err(py_err)?;
    let tok = Tokenizer::new(
        encoder.vocab.clone(),
        &gene_ids,
        options(encoder.layout(), allow_normalized, log1p),
        source.to_string(),
    )?;
    let (dim, k) = (encoder.dim(), encoder.classes().len());
    let n = csr.n_cells();
    let mut probabilities = vec![f32::NAN; n * k];
    let mut calls = vec![None; n];
    let batching = (token_budget, batch_size);
    let input = (&tok, &csr, gene_ids.as_slice(), cell_ids.as_slice());
    for_each_encoded(
        py,
        input,
        &mut encoder,
        dim + k,
        batching,
        |b, e| e.encode_with_probabilities(b),
        |cell, row| {
            let p = &row[dim..];
            probabilities[cell * k..(cell + 1) * k].copy_from_slice(p);
            calls[cell] = Some(annotator.call(p));
        },
    )?;
    let out = PyDict::new(py);
    let text = |f: &dyn Fn(&corrflow_io::ontology::calls::CellCall) -> Option<String>| {
        calls.iter().map(|c| c.as_ref().and_then(f)).collect::<Vec<Option<String>>>()
    };
    let number = |f: &dyn Fn(&corrflow_io::ontology::calls::CellCall) -> Option<f64>| {
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
