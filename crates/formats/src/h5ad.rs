//! AnnData (`.h5ad`) files, current and legacy layouts.

use std::ops::Range;
use std::path::Path;

use super::h5;
use super::matrix::{CountsMatrix, DenseRows, SparseCols, SparseRows};
use super::obs::{Column, ColumnReader};
use super::{CellChunk, CellSource, CountsSource, ObsField, ObsValues, ReadOptions, SourceMeta};
use crate::error::{Error, Result};

pub struct H5adSource {
    meta: SourceMeta,
    _file: hdf5::File,
    matrix: CountsMatrix,
    index: ColumnReader,
    obs: Vec<ColumnReader>,
}

/// The error for an HDF5 file without the matrix to read: an AnnData file without `X` (its counts
/// may be elsewhere), or a file that is neither AnnData nor 10x.
fn no_matrix(path: &Path, file: &hdf5::File, matrix_path: &str) -> Error {
    let members = file.member_names().unwrap_or_default();
    let anndata = file.link_exists("obs") && file.link_exists("var");
    if !anndata && ["matrix", "row_attrs", "col_attrs"].iter().all(|m| file.link_exists(m)) {
        // The loom reader takes any file whose `matrix` opens as a dataset.
        let why = file.dataset("matrix").err().map_or_else(|| "?".to_string(), |e| e.to_string());
        return Error::format(
            path,
            format!("a loom file (matrix, row_attrs, col_attrs) whose matrix cannot be opened ({why}): is it damaged?"),
        );
    }
    if !anndata {
        return Error::format(
            path,
            format!(
                "neither an AnnData file (X, obs, var) nor a 10x HDF5 matrix (matrix/ with barcodes, data, indices, \
                 indptr, shape) nor a loom file (matrix, row_attrs, col_attrs); its top-level members: {}",
                if members.is_empty() { "none".to_string() } else { members.join(", ") }
            ),
        );
    }
    let mut elsewhere = Vec::new();
    if file.link_exists("raw/X") || file.link_exists("raw.X") {
        elsewhere.push("--counts raw".to_string());
    }
    let layers = file.group("layers").and_then(|g| g.member_names()).unwrap_or_default();
    elsewhere.extend(layers.iter().map(|l| format!("--counts layer:{l}")));
    let hint = if elsewhere.is_empty() {
        "and no raw/X or layers either".to_string()
    } else {
        format!("counts may be read from {}", elsewhere.join(" or "))
    };
    Error::format(path, format!("AnnData file without a '{matrix_path}' matrix: {hint}"))
}

impl H5adSource {
    pub fn open(path: &Path, file: hdf5::File, opts: &ReadOptions) -> Result<Self> {
        let has = |p: &str| file.link_exists(p);
        let (matrix_path, var_path) = match &opts.counts {
            CountsSource::X => ("X".to_string(), "var".to_string()),
            CountsSource::Raw if has("raw") && file.link_exists("raw/X") => ("raw/X".into(), "raw/var".into()),
            CountsSource::Raw if has("raw.X") => ("raw.X".into(), "raw.var".into()),
            CountsSource::Raw => {
                return Err(Error::format(path, "--counts raw: the file has no raw/X (nor legacy raw.X)"))
            }
            CountsSource::Layer(name) => {
                let p = format!("layers/{name}");
                if !(has("layers") && file.link_exists(&p)) {
                    let layers = file.group("layers").and_then(|g| g.member_names()).unwrap_or_default();
                    return Err(Error::format(path, format!("no layer '{name}' (layers: {})", layers.join(", "))));
                }
                (p, "var".into())
            }
        };
        if !has(matrix_path.split('/').next().unwrap_or("X")) || !file.link_exists(&matrix_path) {
            return Err(no_matrix(path, &file, &matrix_path));
        }
        let (matrix, n_cells, n_genes) = open_matrix(path, &file, &matrix_path, opts)?;

        let gene_col = opts.gene_column.as_deref().map_or(Column::Index, Column::Named);
        let genes = ColumnReader::open(path, &file, &var_path, gene_col)?;
        if genes.len() != n_genes {
            return Err(Error::format(
                path,
                format!("shape mismatch: {matrix_path} has {n_genes} genes but {var_path} has {} rows", genes.len()),
            ));
        }
        let genes = genes.read(None)?.into_strings();

        let index = ColumnReader::open(path, &file, "obs", Column::Index)?;
        if index.len() != n_cells {
            return Err(Error::format(
                path,
                format!("shape mismatch: {matrix_path} has {n_cells} cells but obs has {} rows", index.len()),
            ));
        }
        let obs = opts
            .obs_columns
            .iter()
            .map(|c| {
                let reader = ColumnReader::open(path, &file, "obs", Column::Named(c))?;
                if reader.len() != n_cells {
                    let msg = format!("obs column '{c}' has {} rows but the matrix has {n_cells} cells", reader.len());
                    return Err(Error::format(path, msg));
                }
                Ok(reader)
            })
            .collect::<Result<Vec<_>>>()?;
        let obs_fields =
            opts.obs_columns.iter().zip(&obs).map(|(n, r)| ObsField { name: n.clone(), kind: r.kind() }).collect();
        let meta = SourceMeta { path: path.to_path_buf(), n_cells, genes, obs_fields };
        Ok(Self { meta, _file: file, matrix, index, obs })
    }
}

fn open_matrix(path: &Path, file: &hdf5::File, at: &str, opts: &ReadOptions) -> Result<(CountsMatrix, usize, usize)> {
    if let Ok(ds) = file.dataset(at) {
        let enc = h5::attr_string(&ds, "encoding-type").unwrap_or_else(|| "array".into());
        if enc != "array" {
            return Err(Error::format(
                path,
                format!("{at} has encoding-type '{enc}', expected array for a dense matrix"),
            ));
        }
        let (m, rows, cols) = DenseRows::open(path, at, ds)?;
        return Ok((CountsMatrix::Dense(m), rows, cols));
    }
    let group = file.group(at).map_err(|e| Error::hdf5(path, format!("opening {at}"), e))?;
    let (format, shape) = if let Some(enc) = h5::attr_string(&group, "encoding-type") {
        (enc, h5::attr_usizes(&group, "shape"))
    } else if let Some(fmt) = h5::attr_string(&group, "h5sparse_format") {
        (format!("{fmt}_matrix"), h5::attr_usizes(&group, "h5sparse_shape"))
    } else {
        return Err(Error::format(path, format!("{at} is a group without encoding-type or h5sparse_format attribute")));
    };
    let shape = match shape.as_deref() {
        Some(&[r, c]) => (r, c),
        other => {
            return Err(Error::format(path, format!("{at}: shape attribute must hold 2 integers, found {other:?}")))
        }
    };
    match format.as_str() {
        "csr_matrix" => {
            Ok((CountsMatrix::Rows(SparseRows::open(path, at, &group, shape.0, shape.1)?), shape.0, shape.1))
        }
        "csc_matrix" => {
            let m = SparseCols::open(path, at, &group, shape.0, shape.1, opts.chunk_cells, &opts.scratch_dir)?;
            Ok((CountsMatrix::Cols(m), shape.0, shape.1))
        }
        other => Err(Error::format(
            path,
            format!("{at} has encoding-type '{other}', expected csr_matrix, csc_matrix or a dense array"),
        )),
    }
}

impl CellSource for H5adSource {
    fn meta(&self) -> &SourceMeta {
        &self.meta
    }

    fn read_chunk(&mut self, rows: Range<usize>) -> Result<CellChunk> {
        let m = self.matrix.read(rows.clone())?;
        let cell_ids = self.index.read(Some(rows.clone()))?.into_strings();
        let obs = self.obs.iter().map(|c| c.read(Some(rows.clone()))).collect::<Result<_>>()?;
        Ok(CellChunk { first_cell: rows.start, indptr: m.indptr, genes: m.cols, values: m.values, cell_ids, obs })
    }

    fn read_obs_column(&mut self, name: &str) -> Result<Option<ObsValues>> {
        // Current layouts: a member of the obs group; legacy ones: a field of the obs table.
        let present = match self._file.group("obs") {
            Ok(g) => g.link_exists(name),
            Err(_) => ColumnReader::open(&self.meta.path, &self._file, "obs", Column::Named(name)).is_ok(),
        };
        if !present {
            return Ok(None);
        }
        ColumnReader::open(&self.meta.path, &self._file, "obs", Column::Named(name))?.read(None).map(Some)
    }

    fn format(&self) -> &'static str {
        match self.matrix {
            CountsMatrix::Rows(_) => "h5ad (csr)",
            CountsMatrix::Dense(_) => "h5ad (dense)",
            CountsMatrix::Cols(_) => "h5ad (csc)",
        }
    }
}

/// The h5ad format's entry in the registry.
pub struct H5ad;

impl crate::CellFormat for H5ad {
    fn name(&self) -> &'static str {
        "h5ad"
    }

    fn looks_like(&self) -> &'static str {
        "an AnnData HDF5 file with X, obs and var"
    }

    fn detect(&self, input: &crate::Input) -> bool {
        input.hdf5.is_some()
    }

    fn open(&self, input: &crate::Input, opts: &ReadOptions) -> Result<Box<dyn CellSource>> {
        Ok(Box::new(H5adSource::open(&input.path, input.hdf5_file()?, opts)?))
    }
}
