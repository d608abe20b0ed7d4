//! `corrflow.embed`: cell embeddings of an in-memory matrix from an exported ONNX model, run by
//! ONNX Runtime on all cores. Cells are tokenized with the model's vocabulary and layout and
//! encoded in length-sorted batches; a cell's vector does not depend on the batch it was in.

use std::path::{Path, PathBuf};

use corrflow_infer::encode::{check_batch_memory, encode_cells, Batching, Encoder, ModelCells, Output};
use corrflow_infer::inputs::{cls_token, value_input, value_settings, CellExpression};
use corrflow_infer::model_meta::Pooling;
use corrflow_infer::model_meta::ValueModel;
use corrflow_infer::onnxruntime::RuntimeOptions;
use corrflow_infer::{open_encoder, ModelSource, OpenOptions};
use corrflow_io::progress::Task;
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
    let pooling = pooling.map(parse_pooling).transpose()?;
    let settings = RunSettings {
        model,
        pooling,
        threads,
        batching: batching(batch_size, token_budget)?,
        allow_normalized,
        log1p,
        source,
    };
    let mut run = ModelRun::open(py, (indptr, indices, data), &gene_ids, &settings)?;
    check_layer(&settings.model, run.encoder.config().map_or(0, |c| c.layers), layer, emb_layer)?;
    let dim = run.encoder.dim();
    let n = run.csr.n_cells();
    let mut out = vec![f32::NAN; n * dim];
    run.for_each_row(py, &gene_ids, &cell_ids, Output::Embedding, |cell, row| {
        out[cell * dim..(cell + 1) * dim].copy_from_slice(row);
    })?;
    Ok(PyArray1::from_vec(py, out).reshape([n, dim])?.into_any())
}

fn parse_pooling(p: &str) -> PyResult<Pooling> {
    match p {
        "mean" => Ok(Pooling::Mean),
        "cls" => Ok(Pooling::Cls),
        other => Err(PyValueError::new_err(format!("pooling must be 'mean' or 'cls', got '{other}'"))),
    }
}

/// The batching arguments, checked.
pub(crate) fn batching(batch_size: usize, token_budget: usize) -> PyResult<Batching> {
    if batch_size == 0 || token_budget == 0 {
        return Err(PyValueError::new_err("batch_size and token_budget must be at least 1"));
    }
    Ok(Batching { token_budget, max_rows: batch_size })
}

/// The Python arguments of a model run, beside the matrix.
pub(crate) struct RunSettings<'a> {
    pub model: PathBuf,
    pub pooling: Option<Pooling>,
    pub threads: usize,
    pub batching: Batching,
    pub allow_normalized: bool,
    pub log1p: bool,
    pub source: &'a str,
}

/// What `embed_csr` and `annotate_csr` share: the matrix, the model opened by the inference
/// core (the same checks as `corrflow embed`), and the tokenizer with its vocabulary and layout.
pub(crate) struct ModelRun<'py> {
    pub csr: CsrArrays<'py>,
    pub encoder: Box<dyn Encoder>,
    tok: Tokenizer,
    batching: Batching,
}

impl<'py> ModelRun<'py> {
    pub fn open(
        py: Python<'py>,
        (indptr, indices, data): (&Bound<'py, PyAny>, &Bound<'py, PyAny>, &Bound<'py, PyAny>),
        gene_ids: &[String],
        s: &RunSettings<'_>,
    ) -> PyResult<Self> {
        let csr = CsrArrays::extract(indptr, indices, data, gene_ids.len())?;
        let opts = OpenOptions {
            pooling: s.pooling,
            runtime: RuntimeOptions { threads: s.threads, ..Default::default() },
            ..OpenOptions::default()
        };
        let source = ModelSource::Onnx(s.model.clone());
        let encoder = py.detach(|| open_encoder(&source, &opts)).map_err(open_err)?;
        check_batch_memory(encoder.as_ref(), s.batching.token_budget).map_err(py_err)?;
        let opts = options(encoder.layout(), s.allow_normalized, s.log1p);
        let tok = Tokenizer::new(encoder.vocab().clone(), gene_ids, opts, s.source.to_string())?;
        Ok(Self { csr, encoder, tok, batching: s.batching })
    }

    /// Tokenizes the matrix chunk by chunk and runs the model on each chunk's cells (GIL
    /// released), handing each kept cell's row to `each` with its index in the matrix; cells
    /// without a vocabulary gene are skipped.
    pub fn for_each_row(
        &mut self,
        py: Python<'_>,
        gene_ids: &[String],
        cell_ids: &[String],
        output: Output,
        mut each: impl FnMut(usize, &[f32]),
    ) -> PyResult<()> {
        let width = match output {
            Output::Embedding => self.encoder.dim(),
            Output::WithProbabilities => self.encoder.dim() + self.encoder.classes().len(),
        };
        let (encoder, batching) = (&mut self.encoder, self.batching);
        // A value model reads each cell's expression: its measured genes are the matrix's.
        let values = encoder.config().and_then(value_settings).cloned();
        let value = match &values {
            Some(v) => Some((
                v,
                cls_token(encoder.vocab()).map_err(py_err)?,
                v.visible_pool(&self.tok.mapper.measured_tokens()),
            )),
            None => None,
        };
        // Heard only when `corrflow.set_progress` installed a receiver.
        let task = Task::start(true, "embed", "cells", Some(self.csr.n_cells() as u64), 0);
        let mut each_chunk = |start: usize, chunk: corrflow_io::tokenize::TokenizedChunk| -> PyResult<()> {
            let cells = model_cells(&chunk, value.as_ref().map(|(v, cls, m)| (*v, *cls, m.as_slice())));
            let rows =
                py.detach(|| encode_cells(encoder.as_mut(), &cells, batching, output, |_| {})).map_err(py_err)?;
            task.set_position((start + chunk_cells(&chunk)) as u64);
            for (r, &k) in chunk.kept.iter().enumerate() {
                each(start + k, &rows[r * width..(r + 1) * width]);
            }
            Ok(())
        };
        if value.is_some() {
            self.tok.for_each_chunk_with_expression(py, &self.csr, gene_ids, cell_ids, &mut each_chunk)
        } else {
            self.tok.for_each_chunk(py, &self.csr, gene_ids, cell_ids, &mut each_chunk)
        }
    }
}

/// Opening a model: a request its model cannot meet (pooling, layer) is the caller's
/// `ValueError`; anything else is the library's error.
fn open_err(e: corrflow_io::Error) -> PyErr {
    match e {
        corrflow_io::Error::Usage(msg) => PyValueError::new_err(msg),
        e => py_err(e),
    }
}

/// An exported model gives the states of the layer it was exported at (its last): `layer`
/// (corrflow's numbering) or `emb_layer` (Geneformer's) must name that one, else the message
/// says how to export the model at the wanted layer.
fn check_layer(model: &Path, layers: usize, layer: Option<i64>, emb_layer: Option<i64>) -> PyResult<()> {
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

/// A tokenized chunk's kept cells as the model takes them: their tokens, or (value models) their
/// expression made into the value model's input by the inference core.
fn model_cells(chunk: &corrflow_io::tokenize::TokenizedChunk, value: Option<(&ValueModel, u32, &[u32])>) -> ModelCells {
    let tokens = || chunk.offsets.windows(2).map(|w| chunk.tokens[w[0]..w[1]].to_vec()).collect();
    let (Some((settings, cls, measured)), Some(e)) = (value, &chunk.expression) else {
        return ModelCells::ranks(tokens());
    };
    let mut cells = ModelCells { tokens: Vec::new(), values: Some(Vec::new()) };
    for (r, w) in chunk.offsets.windows(2).enumerate() {
        // The cell's genes in rank order: its tokens without `<cls>` (a value model's layout has
        // no `<eos>`), then those past the cut.
        let genes: Vec<u32> = chunk.tokens[w[0]..w[1]]
            .iter()
            .copied()
            .filter(|&t| t != cls)
            .chain(e.tail[e.tail_offsets[r]..e.tail_offsets[r + 1]].iter().copied())
            .collect();
        let counts = &e.counts[e.count_offsets[r]..e.count_offsets[r + 1]];
        let cell = CellExpression { genes: &genes, counts, total: e.totals[r] };
        let (t, x) = value_input(cls, settings, measured, cell);
        cells.tokens.push(t);
        if let Some(v) = cells.values.as_mut() {
            v.push(x);
        }
    }
    cells
}

/// Cells a tokenized chunk covered (kept and dropped): one past its last kept cell is not
/// enough, a chunk may end in dropped cells, so the drop count is added.
fn chunk_cells(chunk: &corrflow_io::tokenize::TokenizedChunk) -> usize {
    chunk.kept.len() + chunk.dropped_no_vocab_genes
}
