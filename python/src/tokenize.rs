//! `corrflow.tokenize`: the cells of an in-memory matrix as Geneformer rank-value tokens, with
//! the same gene mapping, validation and encoding as `corrflow ingest` (no file in between).

use std::path::Path;

use corrflow_io::tokenize::{
    tokenize_chunk, tokenize_chunk_with_expression, versioned_layout, GeneMapper, TokenizeOptions, TokenizedChunk,
    ValueTransform,
};
use corrflow_io::vocab::Vocabulary;
use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::matrix::CsrArrays;
use crate::py_err;

/// Cells tokenized per call into the library: the GIL is taken back between chunks to look
/// for a Ctrl-C.
const CHUNK_CELLS: usize = 8192;

/// What a matrix is tokenized with.
pub(crate) struct Tokenizer {
    pub vocab: Vocabulary,
    pub mapper: GeneMapper,
    pub opts: TokenizeOptions,
    /// Named in error messages (the AnnData has no file).
    pub source: String,
}

impl Tokenizer {
    pub fn new(vocab: Vocabulary, gene_ids: &[String], opts: TokenizeOptions, source: String) -> PyResult<Self> {
        let mapper = GeneMapper::new(&vocab, gene_ids);
        if mapper.n_matched() == 0 {
            return Err(crate::CorrflowError::new_err(format!(
                "{source}: none of its {} genes is in vocabulary '{}' (gene ids: {}…); pass gene_column= to read another var column",
                gene_ids.len(),
                vocab.name(),
                gene_ids.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        Ok(Self { vocab, mapper, opts, source })
    }

    /// Tokenizes the cells chunk by chunk, calling `f(first cell, chunk tokens)` in order; the
    /// GIL is released while a chunk is tokenized and a Ctrl-C stops between chunks.
    pub fn for_each_chunk(
        &self,
        py: Python<'_>,
        csr: &CsrArrays<'_>,
        gene_ids: &[String],
        cell_ids: &[String],
        f: impl FnMut(usize, TokenizedChunk) -> PyResult<()>,
    ) -> PyResult<()> {
        self.chunks(py, (csr, gene_ids, cell_ids), false, f)
    }

    /// [`Self::for_each_chunk`] with each kept cell's expression (value models).
    pub fn for_each_chunk_with_expression(
        &self,
        py: Python<'_>,
        csr: &CsrArrays<'_>,
        gene_ids: &[String],
        cell_ids: &[String],
        f: impl FnMut(usize, TokenizedChunk) -> PyResult<()>,
    ) -> PyResult<()> {
        self.chunks(py, (csr, gene_ids, cell_ids), true, f)
    }

    fn chunks(
        &self,
        py: Python<'_>,
        (csr, gene_ids, cell_ids): (&CsrArrays<'_>, &[String], &[String]),
        expression: bool,
        mut f: impl FnMut(usize, TokenizedChunk) -> PyResult<()>,
    ) -> PyResult<()> {
        let n = csr.n_cells();
        if !cell_ids.is_empty() && cell_ids.len() != n {
            return Err(PyValueError::new_err(format!("{} cell ids for {n} cells", cell_ids.len())));
        }
        let view = csr.view();
        let path = Path::new(&self.source);
        for start in (0..n).step_by(CHUNK_CELLS) {
            let rows = start..(start + CHUNK_CELLS).min(n);
            let ids = cell_ids.get(rows.clone()).map(<[String]>::to_vec).unwrap_or_default();
            let tokens = py
                .detach(|| {
                    let chunk = view.chunk(rows, ids);
                    let tokenize = if expression { tokenize_chunk_with_expression } else { tokenize_chunk };
                    tokenize(path, &chunk, gene_ids, &self.mapper, &self.vocab, &self.opts)
                })
                .map_err(py_err)?;
            f(start, tokens)?;
            py.check_signals()?;
        }
        Ok(())
    }
}

/// Options shared by everything that tokenizes a matrix.
pub(crate) fn options(
    layout: corrflow_algorithms::SequenceLayout,
    allow_normalized: bool,
    log1p: bool,
) -> TokenizeOptions {
    TokenizeOptions {
        layout,
        allow_normalized: allow_normalized || log1p,
        transform: if log1p { ValueTransform::Expm1 } else { ValueTransform::None },
    }
}

/// Tokenizes a CSR matrix (cells × genes). Returns `(offsets, tokens, kept, stats)`: int64
/// offsets (`n_cells + 1`; a dropped cell has an empty range), int32 tokens, a bool per cell
/// (false: no vocabulary gene expressed, the cells `ingest` drops) and the gene-mapping counts.
#[pyfunction]
#[pyo3(signature = (indptr, indices, data, gene_ids, cell_ids, vocab="geneformer-v1", version="v1", max_genes=None, allow_normalized=false, log1p=false, source="AnnData"))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn tokenize_csr<'py>(
    py: Python<'py>,
    indptr: &Bound<'py, PyAny>,
    indices: &Bound<'py, PyAny>,
    data: &Bound<'py, PyAny>,
    gene_ids: Vec<String>,
    cell_ids: Vec<String>,
    vocab: &str,
    version: &str,
    max_genes: Option<usize>,
    allow_normalized: bool,
    log1p: bool,
    source: &str,
) -> PyResult<(Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<i32>>, Bound<'py, PyArray1<bool>>, Bound<'py, PyDict>)> {
    let csr = CsrArrays::extract(indptr, indices, data, gene_ids.len())?;
    let (vocab, layout) = resolve(vocab, version, max_genes)?;
    let tok = Tokenizer::new(vocab, &gene_ids, options(layout, allow_normalized, log1p), source.to_string())?;
    let n = csr.n_cells();
    let mut offsets = Vec::with_capacity(n + 1);
    offsets.push(0i64);
    let mut tokens: Vec<i32> = Vec::new();
    let mut kept = vec![false; n];
    tok.for_each_chunk(py, &csr, &gene_ids, &cell_ids, |start, chunk| {
        let mut next = chunk.kept.iter().zip(chunk.offsets.windows(2)).peekable();
        let end = start + chunk_len(&csr, start);
        for (cell, keep) in kept[start..end].iter_mut().enumerate() {
            if let Some((_, w)) = next.next_if(|(&k, _)| k == cell) {
                tokens.extend(chunk.tokens[w[0]..w[1]].iter().map(|&t| t as i32));
                *keep = true;
            }
            offsets.push(tokens.len() as i64);
        }
        Ok(())
    })?;
    let stats = PyDict::new(py);
    let s = &tok.mapper.stats;
    stats.set_item("genes_in_file", s.genes_in_file)?;
    stats.set_item("matched_by_id", s.matched_by_id)?;
    stats.set_item("matched_by_unversioned_id", s.matched_by_unversioned_id)?;
    stats.set_item("matched_by_symbol", s.matched_by_symbol)?;
    stats.set_item("not_in_vocabulary", s.not_in_vocabulary)?;
    stats.set_item("duplicate_columns", s.duplicate_columns)?;
    stats.set_item("vocab", tok.vocab.name())?;
    stats.set_item("vocab_size", tok.vocab.len())?;
    Ok((PyArray1::from_vec(py, offsets), PyArray1::from_vec(py, tokens), PyArray1::from_vec(py, kept), stats))
}

fn chunk_len(csr: &CsrArrays<'_>, start: usize) -> usize {
    CHUNK_CELLS.min(csr.n_cells() - start)
}

/// A vocabulary by name or directory, with the layout of a Geneformer version.
pub(crate) fn resolve(
    vocab: &str,
    version: &str,
    max_genes: Option<usize>,
) -> PyResult<(Vocabulary, corrflow_algorithms::SequenceLayout)> {
    let v2 = match version.to_ascii_lowercase().as_str() {
        "v1" => false,
        "v2" => true,
        other => return Err(PyValueError::new_err(format!("version must be 'v1' or 'v2', got '{other}'"))),
    };
    versioned_layout(Vocabulary::resolve(vocab).map_err(py_err)?, v2, max_genes).map_err(py_err)
}

/// The genes of a vocabulary: `(token ids, gene ids, symbols)` (symbol `""` when unknown).
#[pyfunction]
#[pyo3(signature = (vocab="geneformer-v1"))]
pub(crate) fn vocabulary_genes(vocab: &str) -> PyResult<(Vec<u32>, Vec<String>, Vec<String>)> {
    let vocab = Vocabulary::resolve(vocab).map_err(py_err)?;
    let symbols = vocab.symbols_by_token();
    let ids: Vec<u32> = (0..vocab.len() as u32).filter(|&t| vocab.is_gene(t)).collect();
    let genes = ids.iter().map(|&t| vocab.token(t).unwrap_or_default().to_string()).collect();
    let names = ids.iter().map(|t| symbols.get(t).cloned().unwrap_or_default()).collect();
    Ok((ids, genes, names))
}
