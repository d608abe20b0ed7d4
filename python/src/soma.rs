//! TileDB-SOMA experiments as an input format of the Python package. No Rust TileDB-SOMA reader
//! exists, so the cells come from the `tiledbsoma` package through `corrflow._soma`: this module
//! registers a [`CellFormat`] that recognises an experiment's directory and a [`CellSource`]
//! that asks Python for one chunk of cells at a time (taking the GIL only for that call), so
//! ingest streams a SOMA experiment as it streams an h5ad.

use std::ops::Range;
use std::path::Path;

use corrflow_io::formats::{
    CellChunk, CellFormat, CellSource, ChunkValues, Error, Input, ObsField, ObsKind, ObsValues, ReadOptions, Result,
    SourceMeta,
};
use numpy::PyReadonlyArray1;
use pyo3::prelude::*;

struct Soma;

impl CellFormat for Soma {
    fn name(&self) -> &'static str {
        "TileDB-SOMA (tiledbsoma)"
    }

    fn looks_like(&self) -> &'static str {
        "a SOMA experiment directory, read with the tiledbsoma package"
    }

    fn detect(&self, input: &Input) -> bool {
        input.is_dir && corrflow_io::formats::soma::is_soma_experiment(&input.path)
    }

    fn open(&self, input: &Input, opts: &ReadOptions) -> Result<Box<dyn CellSource>> {
        let path = &input.path;
        Python::attach(|py| SomaSource::open(py, path, opts).map_err(|e| python_message(py, &e)))
            .map(|s| Box::new(s) as Box<dyn CellSource>)
            .map_err(|msg| Error::format(path, msg))
    }
}

static SOMA: Soma = Soma;

/// Makes SOMA experiments readable by every reader of inputs in this process.
pub(crate) fn register() {
    corrflow_io::formats::register(&SOMA);
}

/// A Python exception as one line: its type and message (tiledbsoma's name the column or the
/// syntax error).
fn python_message(py: Python<'_>, e: &PyErr) -> String {
    let kind = e.get_type(py).name().map(|n| n.to_string()).unwrap_or_else(|_| "error".into());
    let msg = e.value(py).to_string();
    if kind == "ValueError" || kind == "ImportError" {
        msg
    } else {
        format!("{kind}: {msg}")
    }
}

struct SomaSource {
    meta: SourceMeta,
    source: Py<PyAny>,
    selection: String,
}

/// An obs kind by the name `corrflow._soma` gives it: `ObsKind`'s own serialized name.
fn kind_of(name: &str) -> PyResult<ObsKind> {
    serde_json::from_value(serde_json::Value::from(name))
        .map_err(|_| pyo3::exceptions::PyValueError::new_err(format!("unknown obs kind '{name}'")))
}

fn values_of(kind: &ObsKind, values: &Bound<'_, PyAny>) -> PyResult<ObsValues> {
    Ok(match kind {
        ObsKind::Utf8 => ObsValues::Utf8(values.extract()?),
        ObsKind::Float64 => ObsValues::Float64(values.extract()?),
        ObsKind::Int64 => ObsValues::Int64(values.extract()?),
        ObsKind::Boolean => ObsValues::Boolean(values.extract()?),
    })
}

impl SomaSource {
    fn open(py: Python<'_>, path: &Path, opts: &ReadOptions) -> PyResult<Self> {
        let module = py.import("corrflow._soma")?;
        let counts = opts.counts.to_string();
        let source =
            module.call_method1("open_source", (path, counts, opts.gene_column.clone(), opts.obs_columns.clone()))?;
        let n_cells: usize = source.getattr("n_cells")?.extract()?;
        let genes: Vec<String> = source.getattr("gene_ids")?.extract()?;
        let fields: Vec<(String, String)> = source.getattr("obs_fields")?.extract()?;
        let obs_fields = fields
            .into_iter()
            .map(|(name, kind)| Ok(ObsField { name, kind: kind_of(&kind)? }))
            .collect::<PyResult<_>>()?;
        let selection: String = source.getattr("selection")?.extract()?;
        let meta = SourceMeta { path: path.to_path_buf(), n_cells, genes, obs_fields };
        Ok(Self { meta, source: source.unbind(), selection })
    }

    fn chunk(&self, py: Python<'_>, rows: &Range<usize>) -> PyResult<CellChunk> {
        let out = self.source.bind(py).call_method1("read", (rows.start, rows.end))?;
        let (indptr, genes, data, cell_ids, obs): (
            PyReadonlyArray1<i64>,
            PyReadonlyArray1<u32>,
            PyReadonlyArray1<f64>,
            Vec<String>,
            Vec<Bound<'_, PyAny>>,
        ) = out.extract()?;
        let indptr: Vec<usize> = indptr.as_slice()?.iter().map(|&p| p as usize).collect();
        let obs = self.meta.obs_fields.iter().zip(&obs).map(|(f, v)| values_of(&f.kind, v)).collect::<PyResult<_>>()?;
        Ok(CellChunk {
            first_cell: rows.start,
            indptr,
            genes: genes.as_slice()?.to_vec(),
            values: ChunkValues::F64(data.as_slice()?.to_vec()),
            cell_ids,
            obs,
        })
    }
}

impl CellSource for SomaSource {
    fn meta(&self) -> &SourceMeta {
        &self.meta
    }

    fn read_chunk(&mut self, rows: Range<usize>) -> Result<CellChunk> {
        let chunk = Python::attach(|py| self.chunk(py, &rows).map_err(|e| python_message(py, &e)))
            .map_err(|msg| Error::format(&self.meta.path, format!("cells {rows:?}: {msg}")))?;
        let n_genes = self.meta.genes.len() as u32;
        if chunk.n_cells() != rows.len() || chunk.genes.iter().any(|&g| g >= n_genes) {
            return Err(Error::format(
                &self.meta.path,
                format!("cells {rows:?}: the SOMA reader returned a malformed chunk"),
            ));
        }
        Ok(chunk)
    }

    fn format(&self) -> &'static str {
        "TileDB-SOMA"
    }

    fn selection(&self) -> Option<String> {
        Some(self.selection.clone())
    }

    fn read_obs_column(&mut self, name: &str) -> Result<Option<ObsValues>> {
        Python::attach(|py| {
            let column = || -> PyResult<Option<ObsValues>> {
                let out = self.source.bind(py).call_method1("obs_column", (name,))?;
                if out.is_none() {
                    return Ok(None);
                }
                let (kind, values): (String, Bound<'_, PyAny>) = out.extract()?;
                values_of(&kind_of(&kind)?, &values).map(Some)
            };
            column().map_err(|e| python_message(py, &e))
        })
        .map_err(|msg| Error::format(&self.meta.path, msg))
    }
}
