//! `corrflow.embed`: cell embeddings of an in-memory matrix from an exported ONNX model, run by
//! ONNX Runtime on all cores. Cells are tokenized with the model's vocabulary and layout and
//! encoded in length-sorted batches; a cell's vector does not depend on the batch it was in.

use std::path::PathBuf;

use corrflow_io::encode::{encode_in_batches, Encoder, PaddedBatch};
use corrflow_io::model_meta::Pooling;
use corrflow_serve::runtime::{OrtEncoder, RuntimeOptions};
use numpy::{PyArray1, PyArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::matrix::CsrArrays;
use crate::py_err;
use crate::tokenize::{options, Tokenizer};

/// Embeds the cells of a CSR matrix with `model` (a file written by `corrflow export onnx`):
/// float32 `[n_cells, dim]`, NaN rows for cells with no vocabulary gene.
#[pyfunction]
#[pyo3(signature = (indptr, indices, data, gene_ids, cell_ids, model, pooling=None, batch_size=64, token_budget=16384, threads=0, allow_normalized=false, log1p=false, source="AnnData", layer=None, emb_layer=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn embed_csr<'py>(
    py: Python<'py>,
    indptr: &Bound<'py, PyAny>,
    indices: &Bound<'py, PyAny>,
    data: &Bound<'py, PyAny>,
    gene_ids: Vec<String>,
    cell_ids: Vec<String>,
    model: PathBuf,
    pooling: Option<&str>,
    batch_size: usize,
    token_budget: usize,
    threads: usize,
    allow_normalized: bool,
    log1p: bool,
    source: &str,
    layer: Option<i64>,
    emb_layer: Option<i64>,
) -> PyResult<Bound<'py, PyAny>> {
    if batch_size == 0 || token_budget == 0 {
        return Err(PyValueError::new_err("batch_size and token_budget must be at least 1"));
    }
    let csr = CsrArrays::extract(indptr, indices, data, gene_ids.len())?;
    let mut encoder =
        py.detach(|| OrtEncoder::open(&model, &RuntimeOptions { threads, ..Default::default() })).map_err(py_err)?;
    if let Some(p) = pooling {
        let want = match p {
            "mean" => Pooling::Mean,
            "cls" => Pooling::Cls,
            other => return Err(PyValueError::new_err(format!("pooling must be 'mean' or 'cls', got '{other}'"))),
        };
        if want != encoder.meta.pooling {
            return Err(PyValueError::new_err(format!(
                "{} pools {:?}; re-export it with `corrflow export onnx --pooling {p}`",
                model.display(),
                encoder.meta.pooling
            )));
        }
    }
    check_layer(&model, encoder.meta.model.layers, layer, emb_layer)?;
    let tok = Tokenizer::new(
        encoder.vocab.clone(),
        &gene_ids,
        options(encoder.layout(), allow_normalized, log1p),
        source.to_string(),
    )?;
    let dim = encoder.dim();
    let n = csr.n_cells();
    let mut out = vec![f32::NAN; n * dim];
    let batching = (token_budget, batch_size);
    for_each_encoded(
        py,
        (&tok, &csr, &gene_ids, &cell_ids),
        &mut encoder,
        dim,
        batching,
        |b, e| e.encode(b),
        |cell, row| {
            out[cell * dim..(cell + 1) * dim].copy_from_slice(row);
        },
    )?;
    Ok(PyArray1::from_vec(py, out).reshape([n, dim])?.into_any())
}

/// An exported model gives the states of the layer it was exported at (its last): `layer`
/// (corrflow's numbering) or `emb_layer` (Geneformer's) must name that one, else the message
/// says how to export the model at the wanted layer.
fn check_layer(model: &std::path::Path, layers: usize, layer: Option<i64>, emb_layer: Option<i64>) -> PyResult<()> {
    let (flag, wanted, last) = match (layer, emb_layer) {
        (Some(_), Some(_)) => return Err(PyValueError::new_err("give layer or emb_layer, not both")),
        (Some(l), None) => ("layer", l, l == -1 || l == layers as i64),
        (None, Some(e)) if e > 0 => {
            return Err(PyValueError::new_err(format!(
                "emb_layer={e}: Geneformer's emb_layer counts back from the last layer (0 = last, -1 = second to last)"
            )))
        }
        (None, Some(e)) => ("emb_layer", e, e == 0),
        (None, None) => return Ok(()),
    };
    if last {
        return Ok(());
    }
    Err(PyValueError::new_err(format!(
        "{flag}={wanted}: {} gives the states of its last layer ({layers}); export the checkpoint at that layer \
         with `corrflow export onnx --{} {wanted}` and embed with that model",
        model.display(),
        flag.replace('_', "-"),
    )))
}

/// Tokenizes the cells of a CSR matrix chunk by chunk and encodes them in length-sorted batches
/// with `encode` (rows of `width` values), handing each cell's row to `each` with the cell's
/// index in the matrix; cells without a vocabulary gene are skipped. The GIL is released while
/// encoding.
pub(crate) fn for_each_encoded(
    py: Python<'_>,
    (tok, csr, gene_ids, cell_ids): (&Tokenizer, &CsrArrays, &[String], &[String]),
    encoder: &mut OrtEncoder,
    width: usize,
    (token_budget, batch_size): (usize, usize),
    encode: impl Fn(&PaddedBatch, &mut OrtEncoder) -> corrflow_io::Result<Vec<f32>> + Send + Sync,
    mut each: impl FnMut(usize, &[f32]),
) -> PyResult<()> {
    let pad = encoder.vocab.pad;
    tok.for_each_chunk(py, csr, gene_ids, cell_ids, |start, chunk| {
        let cells: Vec<Vec<u32>> = chunk.offsets.windows(2).map(|w| chunk.tokens[w[0]..w[1]].to_vec()).collect();
        let rows = py
            .detach(|| encode_in_batches(&cells, pad, width, token_budget, batch_size, |b| encode(b, encoder)))
            .map_err(py_err)?;
        for (r, &k) in chunk.kept.iter().enumerate() {
            each(start + k, &rows[r * width..(r + 1) * width]);
        }
        Ok(())
    })
}
