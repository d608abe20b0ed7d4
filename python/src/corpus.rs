//! `corrflow.ingest` and `corrflow.Corpus`: files into a token corpus, and what a corpus holds.

use std::path::PathBuf;

use corrflow_io::corpus::{verify_shard, Corpus, CorpusIndex};
use corrflow_io::formats::{CountsSource, ReadOptions};
use corrflow_io::ingest::{run_ingest, IngestRequest};
use corrflow_io::util::Cancel;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::{interrupt, py_err};

/// Runs `corrflow ingest` and returns its summary as JSON. A Ctrl-C stops it after the chunk
/// being read; the shards committed so far stay and the next call resumes.
#[pyfunction]
#[pyo3(signature = (paths, corpus, atlas, vocab="geneformer-v1", version="v1", max_genes=None, counts="X", gene_column=None, obs_columns=Vec::new(), allow_normalized=false, log1p=false, chunk_cells=256, shard_cells=100_000, zstd_level=1, restart=false, ignore_filter_pass=false))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn ingest(
    py: Python<'_>,
    paths: Vec<PathBuf>,
    corpus: PathBuf,
    atlas: String,
    vocab: &str,
    version: &str,
    max_genes: Option<usize>,
    counts: &str,
    gene_column: Option<String>,
    obs_columns: Vec<String>,
    allow_normalized: bool,
    log1p: bool,
    chunk_cells: usize,
    shard_cells: usize,
    zstd_level: i32,
    restart: bool,
    ignore_filter_pass: bool,
) -> PyResult<String> {
    let (vocab, layout) = crate::tokenize::resolve(vocab, version, max_genes)?;
    let counts: CountsSource = counts.parse().map_err(|e: String| PyValueError::new_err(e))?;
    if chunk_cells == 0 || shard_cells == 0 {
        return Err(PyValueError::new_err("chunk_cells and shard_cells must be at least 1"));
    }
    let cancel = Cancel::default();
    let req = IngestRequest {
        corpus,
        atlas,
        inputs: paths,
        vocab,
        read: ReadOptions {
            counts,
            gene_column,
            obs_columns,
            chunk_cells,
            filter_pass: !ignore_filter_pass,
            ..ReadOptions::default()
        },
        tokenize: crate::tokenize::options(layout, allow_normalized, log1p),
        shard_cells,
        zstd_level,
        restart,
        // Heard only when `corrflow.set_progress` installed a receiver.
        show_progress: true,
        cancel: cancel.clone(),
        cell_types: None,
        expression: true,
    };
    let summary = interrupt::run(py, &cancel, || run_ingest(&req))?;
    Ok(serde_json::to_string(&summary).expect("a summary serializes"))
}

/// What a corpus holds: its vocabulary and layout, the atlases and every shard (checksums
/// verified when `verify`).
#[pyfunction]
#[pyo3(signature = (path, atlases=Vec::new(), verify=false))]
pub(crate) fn corpus_info<'py>(
    py: Python<'py>,
    path: PathBuf,
    atlases: Vec<String>,
    verify: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let corpus = Corpus::open(&path).map_err(py_err)?;
    let index = CorpusIndex::open(&path, &atlases).map_err(py_err)?;
    if verify {
        let cancel = Cancel::default();
        let shards = index.shards.clone();
        interrupt::run(py, &cancel, || {
            shards.iter().try_for_each(|s| {
                cancel.check("verify")?;
                verify_shard(&s.path, s.bytes, &s.sha256)
            })
        })?;
    }
    let d = PyDict::new(py);
    d.set_item("path", path)?;
    d.set_item("vocab_name", &corpus.info.vocab_name)?;
    d.set_item("vocab_hash", &corpus.info.vocab_hash)?;
    d.set_item("vocab_size", corpus.info.vocab_size)?;
    d.set_item("max_genes", corpus.info.layout.max_genes)?;
    d.set_item("cls", corpus.info.layout.cls)?;
    d.set_item("eos", corpus.info.layout.eos)?;
    d.set_item("pad", corpus.vocab.pad)?;
    d.set_item("mask", corpus.vocab.mask)?;
    d.set_item("atlases", &index.atlases)?;
    d.set_item("cells", index.cells)?;
    let shards = PyList::empty(py);
    for s in &index.shards {
        let e = PyDict::new(py);
        e.set_item("atlas", &s.atlas)?;
        e.set_item("path", &s.path)?;
        e.set_item("first_key", s.first_key)?;
        e.set_item("cells", s.cells)?;
        shards.append(e)?;
    }
    d.set_item("shards", shards)?;
    Ok(d)
}

/// Writes atlases of a corpus in Hugging Face `datasets`' `save_to_disk` layout; returns the rows.
#[pyfunction]
#[pyo3(signature = (corpus, out, atlases=Vec::new()))]
pub(crate) fn export_hf(py: Python<'_>, corpus: PathBuf, out: PathBuf, atlases: Vec<String>) -> PyResult<u64> {
    let index = CorpusIndex::open(&corpus, &atlases).map_err(py_err)?;
    let dirs: Vec<PathBuf> = index.atlases.iter().map(|a| corrflow_io::corpus::atlas_dir(&corpus, a)).collect();
    interrupt::run(py, &Cancel::default(), || corrflow_io::corpus::export_hf(&dirs, &out))
}
