//! 10x Genomics HDF5 matrices (`filtered_feature_bc_matrix.h5`): v3 (`matrix/features/…`) and
//! v2 (`<genome>/genes`). Stored genes × cells, compressed by cell, so cells read as slices.
//! Only "Gene Expression" features are kept (antibody or CRISPR features are not genes).

use std::ops::Range;
use std::path::{Path, PathBuf};

use super::h5;
use super::matrix::SparseRows;
use super::{CellChunk, CellSource, ObsField, ReadOptions};
use crate::error::{Error, Result};

/// Whether `file` looks like a 10x matrix rather than an AnnData file.
pub fn is_tenx(file: &hdf5::File) -> bool {
    !file.link_exists("X") && tenx_group(file).is_some()
}

fn tenx_group(file: &hdf5::File) -> Option<String> {
    let names = file.member_names().ok()?;
    names.into_iter().find(|n| {
        file.group(n).is_ok_and(|g| g.link_exists("barcodes") && g.link_exists("indptr") && g.link_exists("shape"))
    })
}

pub struct TenxSource {
    path: PathBuf,
    _file: hdf5::File,
    matrix: SparseRows,
    barcodes: hdf5::Dataset,
    n_cells: usize,
    genes: Vec<String>,
    /// New column index of each stored feature; `None` for non-gene features.
    remap: Vec<Option<u32>>,
}

impl TenxSource {
    pub fn open(path: &Path, file: hdf5::File, opts: &ReadOptions) -> Result<Self> {
        let name = tenx_group(&file).ok_or_else(|| Error::format(path, "no 10x matrix group"))?;
        let g = file.group(&name).map_err(|e| Error::hdf5(path, &name, e))?;
        let shape_ds = g.dataset("shape").map_err(|e| Error::hdf5(path, format!("{name}/shape"), e))?;
        let shape = h5::read_i64(path, &shape_ds, &format!("{name}/shape"), None)?;
        let (n_features, n_cells) = match shape.as_slice() {
            &[f, c] if f >= 0 && c >= 0 => (f as usize, c as usize),
            other => return Err(Error::format(path, format!("{name}/shape must hold 2 integers, found {other:?}"))),
        };
        let matrix = SparseRows::open(path, &name, &g, n_cells, n_features)?;
        let strings = |p: &str| -> Result<Vec<String>> {
            let ds = g.dataset(p).map_err(|_| Error::format(path, format!("10x matrix has no {name}/{p}")))?;
            h5::read_strings(path, &ds, &format!("{name}/{p}"), None)
        };
        let v3 = g.link_exists("features");
        let column = opts.gene_column.as_deref().unwrap_or("id");
        let ids = match (v3, column) {
            (true, "id" | "gene_ids") => strings("features/id")?,
            (true, "name" | "gene_symbols") => strings("features/name")?,
            (false, "id" | "gene_ids") => strings("genes")?,
            (false, "name" | "gene_symbols") => strings("gene_names")?,
            (_, other) => {
                return Err(Error::format(path, format!("10x files have gene columns 'id' and 'name', not '{other}'")))
            }
        };
        if ids.len() != n_features {
            return Err(Error::format(
                path,
                format!("shape mismatch: {name}/shape says {n_features} features, gene table has {}", ids.len()),
            ));
        }
        let is_gene = if v3 && g.link_exists("features/feature_type") {
            strings("features/feature_type")?.into_iter().map(|t| t == "Gene Expression").collect()
        } else {
            vec![true; n_features]
        };
        let mut genes = Vec::new();
        let remap = ids
            .into_iter()
            .zip(is_gene)
            .map(|(id, keep)| {
                keep.then(|| {
                    genes.push(id);
                    (genes.len() - 1) as u32
                })
            })
            .collect();
        let barcodes = g.dataset("barcodes").map_err(|e| Error::hdf5(path, format!("{name}/barcodes"), e))?;
        if barcodes.size() != n_cells {
            return Err(Error::format(
                path,
                format!("shape mismatch: {name}/shape says {n_cells} cells, barcodes has {}", barcodes.size()),
            ));
        }
        if !opts.obs_columns.is_empty() {
            return Err(Error::format(path, "10x matrices have no obs columns to pass through"));
        }
        Ok(Self { path: path.to_path_buf(), _file: file, matrix, barcodes, n_cells, genes, remap })
    }
}

impl CellSource for TenxSource {
    fn path(&self) -> &Path {
        &self.path
    }

    fn n_cells(&self) -> usize {
        self.n_cells
    }

    fn gene_ids(&self) -> &[String] {
        &self.genes
    }

    fn obs_fields(&self) -> &[ObsField] {
        &[]
    }

    fn read_chunk(&mut self, rows: Range<usize>) -> Result<CellChunk> {
        let m = self.matrix.read(rows.clone())?;
        let mut chunk = CellChunk { first_cell: rows.start, indptr: vec![0], ..Default::default() };
        for w in m.indptr.windows(2) {
            for k in w[0]..w[1] {
                if let Some(c) = self.remap[m.cols[k] as usize] {
                    chunk.genes.push(c);
                    chunk.values.push(m.values.get(k));
                }
            }
            chunk.indptr.push(chunk.genes.len());
        }
        chunk.cell_ids = h5::read_strings(&self.path, &self.barcodes, "barcodes", Some(rows))?;
        Ok(chunk)
    }

    fn format(&self) -> &'static str {
        "10x h5"
    }
}
