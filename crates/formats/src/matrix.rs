//! The counts matrix of a file, read by cell ranges whatever its storage: compressed by cell
//! (h5ad CSR, 10x), dense, or compressed by gene (h5ad CSC, transposed out of core).

use std::ops::Range;
use std::path::{Path, PathBuf};

use hdf5::Dataset;

use super::h5::{self, NumKind};
use super::transpose::{transpose_columns, RowBuckets, SparseRowsData};
use crate::csr;
use crate::error::{Error, Result};

/// Entries read per HDF5 call when streaming a gene-compressed matrix or a dense slab.
const BLOCK_ENTRIES: usize = 1 << 22;

/// A sparse matrix whose compressed axis is the cell axis.
pub struct SparseRows {
    path: PathBuf,
    what: String,
    data: Dataset,
    indices: Dataset,
    indptr: Dataset,
    kind: NumKind,
    n_rows: usize,
    n_cols: usize,
    nnz: usize,
}

impl SparseRows {
    /// `what` names the matrix in messages (e.g. `X`, `matrix`).
    pub fn open(path: &Path, what: &str, group: &hdf5::Group, n_rows: usize, n_cols: usize) -> Result<Self> {
        let (data, indices, indptr) = sparse_parts(path, what, group)?;
        let kind = h5::num_kind(path, &data, &format!("{what}/data"))?;
        let nnz = data.size();
        check_sparse_lengths(path, what, &indices, &indptr, nnz, n_rows)?;
        check_ptr_ends(path, what, &indptr, n_rows, nnz)?;
        Ok(Self { path: path.to_path_buf(), what: what.to_string(), data, indices, indptr, kind, n_rows, n_cols, nnz })
    }

    pub fn read(&self, rows: Range<usize>) -> Result<SparseRowsData> {
        let (path, what) = (self.path.as_path(), self.what.as_str());
        if rows.end > self.n_rows {
            return Err(Error::Usage(format!("rows {rows:?} beyond {} cells", self.n_rows)));
        }
        let ptr = h5::read_i64(path, &self.indptr, &format!("{what}/indptr"), Some(rows.start..rows.end + 1))?;
        csr::check_window(path, what, &ptr, rows.start, self.nnz)?;
        let (start, end) = (ptr[0], ptr[ptr.len() - 1]);
        let range = start as usize..end as usize;
        let values = h5::read_values(path, &self.data, &format!("{what}/data"), self.kind, Some(range.clone()))?;
        let cols = h5::read_indices(path, &self.indices, &format!("{what}/indices"), Some(range), self.n_cols)?;
        let indptr = ptr.iter().map(|&p| (p - start) as usize).collect();
        Ok(SparseRowsData { indptr, cols, values })
    }
}

/// A dense 2-d matrix with cells as rows.
pub struct DenseRows {
    path: PathBuf,
    what: String,
    ds: Dataset,
    n_cols: usize,
}

impl DenseRows {
    pub fn open(path: &Path, what: &str, ds: Dataset) -> Result<(Self, usize, usize)> {
        let shape = ds.shape();
        if shape.len() != 2 {
            return Err(Error::format(path, format!("{what}: dense matrix must be 2-d, found shape {shape:?}")));
        }
        h5::num_kind(path, &ds, what)?; // dense data must be numeric
        Ok((Self { path: path.to_path_buf(), what: what.to_string(), ds, n_cols: shape[1] }, shape[0], shape[1]))
    }

    pub fn read(&self, rows: Range<usize>) -> Result<SparseRowsData> {
        let mut out = SparseRowsData { indptr: vec![0], ..Default::default() };
        let step = (BLOCK_ENTRIES / self.n_cols.max(1)).max(1);
        let mut r = rows.start;
        while r < rows.end {
            let r1 = (r + step).min(rows.end);
            let slab = self
                .ds
                .read_slice_2d::<f64, _>(ndarray::s![r..r1, ..])
                .map_err(|e| Error::hdf5(&self.path, format!("reading rows {r}..{r1} of {}", self.what), e))?;
            for row in slab.rows() {
                for (c, &v) in row.iter().enumerate() {
                    if v != 0.0 {
                        out.cols.push(c as u32);
                        out.values.push(v);
                    }
                }
                out.indptr.push(out.cols.len());
            }
            r = r1;
        }
        Ok(out)
    }
}

/// A sparse matrix compressed by gene; transposed into row buckets on first read.
pub struct SparseCols {
    path: PathBuf,
    what: String,
    data: Dataset,
    indices: Dataset,
    indptr: Dataset,
    kind: NumKind,
    n_rows: usize,
    nnz: usize,
    chunk_cells: usize,
    scratch: PathBuf,
    buckets: Option<RowBuckets>,
}

impl SparseCols {
    pub fn open(
        path: &Path,
        what: &str,
        group: &hdf5::Group,
        n_rows: usize,
        n_cols: usize,
        chunk_cells: usize,
        scratch: &Path,
    ) -> Result<Self> {
        let (data, indices, indptr) = sparse_parts(path, what, group)?;
        let kind = h5::num_kind(path, &data, &format!("{what}/data"))?;
        let nnz = data.size();
        check_sparse_lengths(path, what, &indices, &indptr, nnz, n_cols)?;
        check_ptr_ends(path, what, &indptr, n_cols, nnz)?;
        Ok(Self {
            path: path.to_path_buf(),
            what: what.to_string(),
            data,
            indices,
            indptr,
            kind,
            n_rows,
            nnz,
            chunk_cells,
            scratch: scratch.to_path_buf(),
            buckets: None,
        })
    }

    fn transpose(&self) -> Result<RowBuckets> {
        let (path, what) = (self.path.as_path(), self.what.as_str());
        tracing::info!(file = %path.display(), "transposing gene-compressed {what} out of core");
        let ptr = h5::read_i64(path, &self.indptr, &format!("{what}/indptr"), None)?;
        transpose_columns(path, what, &ptr, self.n_rows, self.nnz, (&self.scratch, self.chunk_cells), |range| {
            let values = h5::read_f64(path, &self.data, &format!("{what}/data"), self.kind, Some(range.clone()))?;
            let rows = h5::read_indices(path, &self.indices, &format!("{what}/indices"), Some(range), self.n_rows)?;
            Ok((rows, values))
        })
    }

    pub fn read(&mut self, rows: Range<usize>) -> Result<SparseRowsData> {
        if self.buckets.is_none() {
            self.buckets = Some(self.transpose()?);
        }
        self.buckets.as_mut().expect("transposed above").read(rows) // ok: invariant
    }
}

/// The counts matrix in whichever storage the file uses.
pub enum CountsMatrix {
    Rows(SparseRows),
    Dense(DenseRows),
    Cols(SparseCols),
}

impl CountsMatrix {
    pub fn read(&mut self, rows: Range<usize>) -> Result<SparseRowsData> {
        match self {
            Self::Rows(m) => m.read(rows),
            Self::Dense(m) => m.read(rows),
            Self::Cols(m) => m.read(rows),
        }
    }
}

fn sparse_parts(path: &Path, what: &str, group: &hdf5::Group) -> Result<(Dataset, Dataset, Dataset)> {
    let part = |n: &str| {
        h5::open_sequential(group, n)
            .map_err(|_| Error::format(path, format!("sparse matrix {what} has no '{n}' dataset")))
    };
    Ok((part("data")?, part("indices")?, part("indptr")?))
}

/// The first and last offsets of `indptr` (`n_major + 1` of them), checked once at open.
fn check_ptr_ends(path: &Path, what: &str, indptr: &Dataset, n_major: usize, nnz: usize) -> Result<()> {
    let at = |i: usize| -> Result<i64> {
        let v = h5::read_i64(path, indptr, &format!("{what}/indptr"), Some(i..i + 1))?;
        v.first().copied().ok_or_else(|| Error::format(path, format!("{what}/indptr: entry {i} cannot be read")))
    };
    csr::check_ends(path, what, at(0)?, at(n_major)?, nnz)
}

fn check_sparse_lengths(
    path: &Path,
    what: &str,
    indices: &Dataset,
    indptr: &Dataset,
    nnz: usize,
    n_major: usize,
) -> Result<()> {
    if indices.size() != nnz {
        return Err(Error::format(
            path,
            format!("shape mismatch: {what}/data has {nnz} entries but {what}/indices has {}", indices.size()),
        ));
    }
    if indptr.size() != n_major + 1 {
        return Err(Error::format(
            path,
            format!(
                "shape mismatch: {what}/indptr has {} entries, expected {} for its shape",
                indptr.size(),
                n_major + 1
            ),
        ));
    }
    Ok(())
}
