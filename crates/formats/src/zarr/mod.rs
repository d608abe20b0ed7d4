//! AnnData zarr stores (`adata.write_zarr`): zarr formats 2 and 3, consolidated or not, sharded
//! or not, with X (or `raw/X`, or a layer) as CSR, CSC or a dense array. Read through `zarrs`
//! (the Rust zarr implementation zarr-python's own Rust codec pipeline uses), by cell ranges:
//! CSR and dense X chunk by chunk, CSC through the same out-of-core transpose as h5ad.

mod array;
mod block;
mod chunks;
mod frame;
mod store;
mod text;

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use array::{Store, ZArray};
use chunks::Omit;
use frame::ZColumn;
use store::ReadStore;

use crate::csr;
use crate::error::{Error, Result};
use crate::obs::Column;
use crate::transpose::{transpose_columns, RowBuckets, SparseRowsData};
use crate::{CellChunk, CellSource, CountsSource, ObsField, ObsValues, ReadOptions, SourceMeta};

/// Whether `path` is a zarr store (a directory with the root group's metadata).
pub fn is_zarr(path: &Path) -> bool {
    path.is_dir() && (path.join("zarr.json").is_file() || path.join(".zgroup").is_file())
}

/// A cell-compressed matrix's arrays.
struct Csr {
    key: String,
    data: ZArray,
    indices: ZArray,
    indptr: ZArray,
    n_cols: usize,
    nnz: usize,
}

/// A gene-compressed matrix's arrays, transposed into row buckets on first read. Not at open:
/// ingest opens its inputs before it clears its staging directory, the transpose's scratch.
struct Csc {
    key: String,
    data: ZArray,
    indices: ZArray,
    indptr: ZArray,
    n_rows: usize,
    chunk_cells: usize,
    scratch: PathBuf,
    buckets: Option<RowBuckets>,
}

enum Matrix {
    Rows(Box<Csr>),
    Dense(ZArray),
    Cols(Box<Csc>),
}

pub struct ZarrSource {
    meta: SourceMeta,
    store: Store,
    matrix: Matrix,
    index: ZColumn,
    obs: Vec<ZColumn>,
}

impl ZarrSource {
    pub fn open(path: &Path, opts: &ReadOptions) -> Result<Self> {
        let store: Store = Arc::new(ReadStore::new(path));
        let has = |k: &str| array::exists(path, k);
        if !(has("obs") && has("var")) {
            let members = array::members(path, "");
            return Err(Error::format(
                path,
                format!(
                    "a zarr store but not an AnnData one (X, obs, var); its top-level members: {}",
                    if members.is_empty() { "none".to_string() } else { members.join(", ") }
                ),
            ));
        }
        let (matrix_key, var_key) = match &opts.counts {
            CountsSource::X => ("X".to_string(), "var"),
            CountsSource::Raw if has("raw/X") => ("raw/X".to_string(), "raw/var"),
            CountsSource::Raw => return Err(Error::format(path, "--counts raw: the store has no raw/X")),
            CountsSource::Layer(name) => {
                let key = format!("layers/{name}");
                if !has(&key) {
                    let layers = array::members(path, "layers").join(", ");
                    return Err(Error::format(path, format!("no layer '{name}' (layers: {layers})")));
                }
                (key, "var")
            }
        };
        if !has(&matrix_key) {
            return Err(no_matrix(path, &matrix_key));
        }
        let (matrix, n_cells, n_genes) = open_matrix(path, &store, &matrix_key, opts)?;

        let gene_col = opts.gene_column.as_deref().map_or(Column::Index, Column::Named);
        let genes = ZColumn::open(path, &store, var_key, gene_col)?;
        if genes.len() != n_genes {
            let msg =
                format!("shape mismatch: {matrix_key} has {n_genes} genes but {var_key} has {} rows", genes.len());
            return Err(Error::format(path, msg));
        }
        let genes = genes.read(None)?.into_strings();
        let index = ZColumn::open(path, &store, "obs", Column::Index)?;
        if index.len() != n_cells {
            let msg = format!("shape mismatch: {matrix_key} has {n_cells} cells but obs has {} rows", index.len());
            return Err(Error::format(path, msg));
        }
        let obs = opts
            .obs_columns
            .iter()
            .map(|c| {
                let col = ZColumn::open(path, &store, "obs", Column::Named(c))?;
                if col.len() != n_cells {
                    let msg = format!("obs column '{c}' has {} rows but the matrix has {n_cells} cells", col.len());
                    return Err(Error::format(path, msg));
                }
                Ok(col)
            })
            .collect::<Result<Vec<_>>>()?;
        let obs_fields =
            opts.obs_columns.iter().zip(&obs).map(|(n, c)| ObsField { name: n.clone(), kind: c.kind() }).collect();
        let meta = SourceMeta { path: path.to_path_buf(), n_cells, genes, obs_fields };
        Ok(Self { meta, store, matrix, index, obs })
    }
}

/// The plain string columns of the store's `var` other than its index, by name: where Ensembl
/// ids may be when the index holds symbols (ingest's `--gene-column` hint). Unreadable columns
/// are left out.
pub fn var_string_columns(path: &Path) -> Vec<(String, Vec<String>)> {
    let store: Store = Arc::new(ReadStore::new(path));
    let index = array::group_attrs(path, "var").ok().and_then(|a| array::attr_str(&a, "_index").map(str::to_string));
    array::members(path, "var")
        .into_iter()
        .filter(|n| Some(n) != index.as_ref() && !n.starts_with("__"))
        .filter_map(|n| {
            let a = ZArray::open(path, &store, &format!("var/{n}")).ok()??;
            (a.kind() == array::Kind::Str).then_some(())?;
            Some((n, a.read_strings(None).ok()?))
        })
        .collect()
}

/// The `--counts` choices of a store besides X: `raw` when it has `raw/X`, then its layers.
pub fn counts_choices(path: &Path) -> Vec<crate::CountsSource> {
    let raw = array::exists(path, "raw/X").then_some(crate::CountsSource::Raw);
    raw.into_iter().chain(array::members(path, "layers").into_iter().map(crate::CountsSource::Layer)).collect()
}

/// The error for a store without the matrix to read, naming where counts may be instead.
fn no_matrix(path: &Path, key: &str) -> Error {
    let mut elsewhere = Vec::new();
    if array::exists(path, "raw/X") {
        elsewhere.push("--counts raw".to_string());
    }
    elsewhere.extend(array::members(path, "layers").iter().map(|l| format!("--counts layer:{l}")));
    let hint = if elsewhere.is_empty() {
        "and no raw/X or layers either".to_string()
    } else {
        format!("counts may be read from {}", elsewhere.join(" or "))
    };
    Error::format(path, format!("AnnData zarr store without a '{key}' matrix: {hint}"))
}

fn open_matrix(path: &Path, store: &Store, key: &str, opts: &ReadOptions) -> Result<(Matrix, usize, usize)> {
    match ZArray::open(path, store, key)? {
        Some(a) => open_dense(path, a, key),
        None => open_sparse(path, store, key, opts),
    }
}

/// `key` as a dense 2-d array of numbers.
fn open_dense(path: &Path, a: ZArray, key: &str) -> Result<(Matrix, usize, usize)> {
    let enc = array::attr_str(a.attributes(), "encoding-type").unwrap_or("array");
    if enc != "array" {
        return Err(Error::format(path, format!("{key} has encoding-type '{enc}', expected array for a dense matrix")));
    }
    let (rows, cols) = match a.shape() {
        [r, c] => (*r, *c),
        other => return Err(Error::format(path, format!("{key}: dense matrix must be 2-d, found shape {other:?}"))),
    };
    if a.kind() == array::Kind::Str {
        return Err(Error::format(path, format!("{key}: a matrix of strings, expected numbers")));
    }
    Ok((Matrix::Dense(a), rows, cols))
}

/// `key` as an AnnData sparse group (csr_matrix or csc_matrix): its three arrays, each with
/// every chunk present, of lengths that agree with each other and with the group's shape.
fn open_sparse(path: &Path, store: &Store, key: &str, opts: &ReadOptions) -> Result<(Matrix, usize, usize)> {
    let attrs = array::group_attrs(path, key)?;
    let enc = array::attr_str(&attrs, "encoding-type")
        .ok_or_else(|| Error::format(path, format!("{key} is a group without an encoding-type attribute")))?
        .to_string();
    let (n_rows, n_cols) = sparse_shape(path, key, &attrs)?;
    let part = |p: &str| {
        let at = format!("{key}/{p}");
        ZArray::open(path, store, &at)?.ok_or_else(|| {
            let why = if path.join(&at).is_dir() { " (its directory has no zarr.json or .zarray)" } else { "" };
            Error::format(path, format!("sparse matrix {key} has no '{p}' array{why}"))
        })
    };
    let (mut data, mut indices, mut indptr) = (part("data")?, part("indices")?, part("indptr")?);
    data.require_chunks(Omit::Nothing)?;
    indices.require_chunks(Omit::Nothing)?;
    let nnz = data.len();
    indptr.require_chunks(Omit::LeadingZeros { empty: nnz == 0 })?;
    let n_major = if enc == "csc_matrix" { n_cols } else { n_rows };
    if indices.len() != nnz {
        let msg = format!("shape mismatch: {key}/data has {nnz} entries but {key}/indices has {}", indices.len());
        return Err(Error::format(path, msg));
    }
    if indptr.len() != n_major + 1 {
        let msg = format!(
            "shape mismatch: {key}/indptr has {} entries, expected {} for its shape",
            indptr.len(),
            n_major + 1
        );
        return Err(Error::format(path, msg));
    }
    let at = |i: usize| -> Result<i64> {
        let v = indptr.read_i64(Some(i..i + 1))?;
        v.first().copied().ok_or_else(|| Error::format(path, format!("{key}/indptr: entry {i} cannot be read")))
    };
    csr::check_ends(path, key, at(0)?, at(n_major)?, nnz)?;
    let matrix = match enc.as_str() {
        "csr_matrix" => Matrix::Rows(Box::new(Csr { key: key.to_string(), data, indices, indptr, n_cols, nnz })),
        "csc_matrix" => Matrix::Cols(Box::new(Csc {
            key: key.to_string(),
            data,
            indices,
            indptr,
            n_rows,
            chunk_cells: opts.chunk_cells,
            scratch: opts.scratch_dir.clone(),
            buckets: None,
        })),
        other => {
            return Err(Error::format(
                path,
                format!("{key} has encoding-type '{other}', expected csr_matrix, csc_matrix or a dense array"),
            ))
        }
    };
    Ok((matrix, n_rows, n_cols))
}

/// A sparse group's `shape` attribute: two integers, each at most i64::MAX.
fn sparse_shape(path: &Path, key: &str, attrs: &serde_json::Map<String, serde_json::Value>) -> Result<(usize, usize)> {
    let shape: Option<Vec<usize>> = attrs
        .get("shape")
        .and_then(|s| s.as_array())
        // At most i64::MAX, as HDF5's signed shapes: `n + 1` and byte counts stay in range.
        .and_then(|s| s.iter().map(|v| v.as_u64().filter(|&n| n <= i64::MAX as u64).map(|n| n as usize)).collect());
    match shape.as_deref() {
        Some(&[r, c]) => Ok((r, c)),
        other => Err(Error::format(
            path,
            format!("{key}: shape attribute must hold 2 integers from 0 to 2^63 - 1, found {other:?}"),
        )),
    }
}

impl Csc {
    /// Transposes the matrix into row buckets on disk, whole columns at a time.
    fn transpose(&self, path: &Path) -> Result<RowBuckets> {
        let Self { key, data, indices, indptr, n_rows, .. } = self;
        tracing::info!(file = %path.display(), "transposing gene-compressed {key} out of core");
        let ptr = indptr.read_i64(None)?;
        transpose_columns(path, key, &ptr, *n_rows, data.len(), (&self.scratch, self.chunk_cells), |range| {
            let values = data.read_f64(Some(range.clone()))?;
            Ok((indices.read_indices(range, *n_rows)?, values))
        })
    }

    fn read(&mut self, path: &Path, rows: Range<usize>) -> Result<SparseRowsData> {
        if self.buckets.is_none() {
            self.buckets = Some(self.transpose(path)?);
        }
        self.buckets.as_mut().expect("transposed above").read(rows) // ok: invariant
    }
}

impl Matrix {
    fn read(&mut self, path: &Path, rows: Range<usize>) -> Result<SparseRowsData> {
        match self {
            Self::Rows(m) => {
                let Csr { key, data, indices, indptr, n_cols, nnz } = m.as_ref();
                let ptr = indptr.read_i64(Some(rows.start..rows.end + 1))?;
                csr::check_window(path, key, &ptr, rows.start, *nnz)?;
                let (start, end) = (ptr[0], ptr[ptr.len() - 1]);
                let range = start as usize..end as usize;
                let values = data.read_values(range.clone())?;
                let cols = indices.read_indices(range, *n_cols)?;
                let indptr = ptr.iter().map(|&p| (p - start) as usize).collect();
                Ok(SparseRowsData { indptr, cols, values })
            }
            Self::Dense(a) => {
                let n_cols = a.shape()[1];
                let dense = a.read_rows_f64(rows)?;
                let mut out = SparseRowsData { indptr: vec![0], ..Default::default() };
                for row in dense.chunks(n_cols.max(1)) {
                    for (c, &v) in row.iter().enumerate() {
                        if v != 0.0 {
                            out.cols.push(c as u32);
                            out.values.push(v);
                        }
                    }
                    out.indptr.push(out.cols.len());
                }
                Ok(out)
            }
            Self::Cols(csc) => csc.read(path, rows),
        }
    }
}

impl CellSource for ZarrSource {
    fn meta(&self) -> &SourceMeta {
        &self.meta
    }

    fn read_chunk(&mut self, rows: Range<usize>) -> Result<CellChunk> {
        if rows.end > self.meta.n_cells {
            return Err(Error::Usage(format!("rows {rows:?} beyond {} cells", self.meta.n_cells)));
        }
        let m = self.matrix.read(&self.meta.path, rows.clone())?;
        let cell_ids = self.index.read(Some(rows.clone()))?.into_strings();
        let obs = self.obs.iter().map(|c| c.read(Some(rows.clone()))).collect::<Result<_>>()?;
        Ok(CellChunk { first_cell: rows.start, indptr: m.indptr, genes: m.cols, values: m.values, cell_ids, obs })
    }

    fn read_obs_column(&mut self, name: &str) -> Result<Option<ObsValues>> {
        if !array::exists(&self.meta.path, &format!("obs/{name}")) {
            return Ok(None);
        }
        ZColumn::open(&self.meta.path, &self.store, "obs", Column::Named(name))?.read(None).map(Some)
    }

    fn format(&self) -> &'static str {
        match self.matrix {
            Matrix::Rows(_) => "zarr (csr)",
            Matrix::Dense(_) => "zarr (dense)",
            Matrix::Cols(_) => "zarr (csc)",
        }
    }
}

/// The AnnData zarr format's entry in the registry.
pub struct Zarr;

impl crate::CellFormat for Zarr {
    fn name(&self) -> &'static str {
        "AnnData zarr"
    }

    fn looks_like(&self) -> &'static str {
        "a directory with zarr.json or .zgroup, from adata.write_zarr"
    }

    fn detect(&self, input: &crate::Input) -> bool {
        input.is_dir && is_zarr(&input.path)
    }

    fn open(&self, input: &crate::Input, opts: &ReadOptions) -> Result<Box<dyn CellSource>> {
        Ok(Box::new(ZarrSource::open(&input.path, opts)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparse_shape_past_i64_is_refused_not_wrapped() {
        let attrs = |shape: serde_json::Value| serde_json::json!({ "shape": shape }).as_object().unwrap().clone();
        let p = Path::new("a.zarr");
        assert_eq!(sparse_shape(p, "X", &attrs(serde_json::json!([3, 5]))).unwrap(), (3, 5));
        for bad in [serde_json::json!([u64::MAX, 5]), serde_json::json!([3]), serde_json::json!([-1, 5])] {
            let e = sparse_shape(p, "X", &attrs(bad)).unwrap_err().to_string();
            assert!(e.contains("a.zarr") && e.contains("2 integers from 0 to 2^63 - 1"), "{e}");
        }
    }
}
