//! Out-of-core transpose for matrices stored by gene (h5ad CSC, MatrixMarket): entries are
//! appended to per-row-range bucket files in one pass, then each bucket is sorted in memory
//! when its cells are requested. Memory is bounded by one bucket, not by the matrix.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::ChunkValues;
use crate::error::{Error, IoContext, Result};

const RECORD: usize = 16; // row u32, col u32, value f64
const MAX_OPEN_BUCKETS: usize = 512;

/// Writes `(row, col, value)` entries into row buckets.
pub struct BucketWriter {
    dir: tempfile::TempDir,
    rows_per_bucket: usize,
    n_rows: usize,
    writers: Vec<BufWriter<File>>,
}

impl BucketWriter {
    /// Buckets hold `chunk_cells` rows, or a multiple of it when that would open too many files.
    pub fn new(scratch: &Path, n_rows: usize, chunk_cells: usize) -> Result<Self> {
        std::fs::create_dir_all(scratch).at(scratch)?;
        let dir = tempfile::Builder::new().prefix(".corrflow-transpose-").tempdir_in(scratch).at(scratch)?;
        let chunk_cells = chunk_cells.max(1);
        let chunks = n_rows.div_ceil(chunk_cells).max(1);
        let rows_per_bucket = chunk_cells * chunks.div_ceil(MAX_OPEN_BUCKETS);
        let n_buckets = n_rows.div_ceil(rows_per_bucket).max(1);
        let writers = (0..n_buckets)
            .map(|b| {
                let p = dir.path().join(format!("bucket-{b:05}"));
                File::create(&p).map(|f| BufWriter::with_capacity(1 << 16, f)).at(&p)
            })
            .collect::<Result<_>>()?;
        Ok(Self { dir, rows_per_bucket, n_rows, writers })
    }

    #[inline]
    pub fn push(&mut self, row: u32, col: u32, value: f64) -> Result<()> {
        debug_assert!((row as usize) < self.n_rows);
        let mut rec = [0u8; RECORD];
        rec[..4].copy_from_slice(&row.to_le_bytes());
        rec[4..8].copy_from_slice(&col.to_le_bytes());
        rec[8..].copy_from_slice(&value.to_le_bytes());
        let b = row as usize / self.rows_per_bucket;
        self.writers[b].write_all(&rec).at(self.dir.path())
    }

    pub fn finish(self) -> Result<RowBuckets> {
        for w in self.writers {
            w.into_inner().map_err(|e| Error::io(self.dir.path(), e.into_error()))?;
        }
        Ok(RowBuckets { dir: self.dir, rows_per_bucket: self.rows_per_bucket, n_rows: self.n_rows, cached: None })
    }
}

/// Entries of a gene-compressed matrix read per block while transposing it.
const BLOCK_ENTRIES: usize = 1 << 22;

/// Transposes a matrix compressed by column (`ptr`: its indptr, `n_cols + 1` offsets) into row
/// buckets under `scratch`, reading blocks of whole columns of about `BLOCK_ENTRIES` entries
/// with `read(entries) -> (row indices, values)`. `what` names the matrix in errors. The one
/// loop behind h5ad's and zarr's CSC readers.
pub fn transpose_columns(
    path: &Path,
    what: &str,
    ptr: &[i64],
    n_rows: usize,
    nnz: usize,
    (scratch, chunk_cells): (&Path, usize),
    mut read: impl FnMut(Range<usize>) -> Result<(Vec<u32>, Vec<f64>)>,
) -> Result<RowBuckets> {
    let n_cols = ptr.len().saturating_sub(1);
    if ptr.is_empty() {
        return Err(Error::format(path, format!("{what}/indptr is empty")));
    }
    crate::csr::check_all(path, what, ptr, n_cols, nnz)?;
    let mut writer = BucketWriter::new(scratch, n_rows, chunk_cells)?;
    let mut col = 0usize;
    while col < n_cols {
        let start = ptr[col] as usize;
        let mut end_col = col + 1;
        while end_col < n_cols && (ptr[end_col + 1] as usize) - start <= BLOCK_ENTRIES {
            end_col += 1;
        }
        let (rows, values) = read(start..ptr[end_col] as usize)?;
        for c in col..end_col {
            for k in ptr[c] as usize - start..ptr[c + 1] as usize - start {
                writer.push(rows[k], c as u32, values[k])?;
            }
        }
        col = end_col;
    }
    writer.finish()
}

/// Sparse rows of one row range: offsets, columns, values.
#[derive(Debug, Default)]
pub struct SparseRowsData {
    pub indptr: Vec<usize>,
    pub cols: Vec<u32>,
    pub values: ChunkValues,
}

/// The transposed matrix, readable by row range.
pub struct RowBuckets {
    dir: tempfile::TempDir,
    rows_per_bucket: usize,
    n_rows: usize,
    /// The last bucket read, sorted by (row, col): (bucket, rows, entries).
    cached: Option<(usize, Vec<(u32, u32, f64)>)>,
}

impl RowBuckets {
    fn bucket_path(&self, b: usize) -> PathBuf {
        self.dir.path().join(format!("bucket-{b:05}"))
    }

    /// Reads rows `rows`, which must lie within one bucket.
    pub fn read(&mut self, rows: Range<usize>) -> Result<SparseRowsData> {
        let b = rows.start / self.rows_per_bucket;
        if rows.end > self.n_rows || (rows.end > rows.start && (rows.end - 1) / self.rows_per_bucket != b) {
            return Err(Error::Usage(format!("transposed rows {rows:?} do not lie within one bucket")));
        }
        if self.cached.as_ref().map(|c| c.0) != Some(b) {
            let path = self.bucket_path(b);
            let mut bytes = Vec::new();
            BufReader::new(File::open(&path).at(&path)?).read_to_end(&mut bytes).at(&path)?;
            let mut entries: Vec<(u32, u32, f64)> = bytes
                .chunks_exact(RECORD)
                .map(|r| {
                    let u = |i: usize| u32::from_le_bytes(r[i..i + 4].try_into().expect("4 bytes")); // ok: invariant
                    (u(0), u(4), f64::from_le_bytes(r[8..16].try_into().expect("8 bytes")))
                    // ok: invariant
                })
                .collect();
            entries.sort_unstable_by_key(|e| (e.0, e.1));
            self.cached = Some((b, entries));
        }
        let entries = &self.cached.as_ref().expect("just cached").1; // ok: invariant
        let lo = entries.partition_point(|e| (e.0 as usize) < rows.start);
        let hi = entries.partition_point(|e| (e.0 as usize) < rows.end);
        let slice = &entries[lo..hi];
        let mut out = SparseRowsData { indptr: Vec::with_capacity(rows.len() + 1), ..Default::default() };
        out.indptr.push(0);
        let mut k = 0;
        for row in rows {
            while k < slice.len() && slice[k].0 as usize == row {
                out.cols.push(slice[k].1);
                out.values.push(slice[k].2);
                k += 1;
            }
            out.indptr.push(out.cols.len());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposes_entries_into_sorted_rows() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = BucketWriter::new(dir.path(), 5, 2).unwrap();
        // Column-major input, as a CSC matrix would give it.
        for (r, c, v) in [(4, 0, 1.0), (0, 0, 2.0), (3, 1, 3.0), (0, 2, 4.0), (1, 2, 5.0)] {
            w.push(r, c, v).unwrap();
        }
        let mut b = w.finish().unwrap();
        let rows01 = b.read(0..2).unwrap();
        assert_eq!(rows01.indptr, vec![0, 2, 3]);
        assert_eq!(rows01.cols, vec![0, 2, 2]);
        assert_eq!(rows01.values, ChunkValues::F64(vec![2.0, 4.0, 5.0]));
        let rows23 = b.read(2..4).unwrap();
        assert_eq!((rows23.indptr, rows23.cols), (vec![0, 0, 1], vec![1]));
        let row4 = b.read(4..5).unwrap();
        assert_eq!((row4.cols, row4.values), (vec![0], ChunkValues::F64(vec![1.0])));
    }

    #[test]
    fn refuses_ranges_spanning_buckets() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = BucketWriter::new(dir.path(), 5, 2).unwrap().finish().unwrap();
        assert!(b.read(1..3).is_err());
    }
}
