//! A Parquet file written batch by batch under a hidden temporary name and renamed into place
//! when finished: readers never see a partial file, and a failed or dropped writer leaves
//! nothing behind. The schema is taken from the first batch, so streaming commands that learn
//! their columns from the data (`embed`, `annotate`) need not spell it out.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use parquet::arrow::ArrowWriter;

use crate::error::{Error, IoContext, Result};
use corrflow_fs::atomic::{commit, temp_path};

/// Writes one record batch as a Parquet file at `path` (synced; not atomic by itself: for files
/// inside a staging directory, or under a temporary name).
pub fn write_parquet(path: &Path, batch: &arrow_array::RecordBatch) -> Result<()> {
    let file = File::create(path).at(path)?;
    let mut w =
        parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).map_err(|e| Error::parquet(path, e))?;
    w.write(batch).map_err(|e| Error::parquet(path, e))?;
    w.into_inner().map_err(|e| Error::parquet(path, e))?.sync_all().at(path)
}

/// Writes one record batch as a Parquet file at `target` atomically.
pub fn write_parquet_atomic(target: &Path, batch: &arrow_array::RecordBatch) -> Result<()> {
    let tmp = temp_path(target);
    let result = write_parquet(&tmp, batch).and_then(|()| Ok(commit(&tmp, target)?));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Bytes of encoded rows after which a streamed file's row group is ended.
pub const ROW_GROUP_BYTES: usize = 32 << 20;

pub struct ParquetOut {
    target: PathBuf,
    tmp: PathBuf,
    writer: Option<ArrowWriter<File>>,
    /// Renamed into place: nothing to clean up.
    committed: bool,
}

impl ParquetOut {
    /// A writer for `target` (nothing is created before the first batch).
    pub fn new(target: &Path) -> Self {
        Self { target: target.to_path_buf(), tmp: temp_path(target), writer: None, committed: false }
    }

    /// Appends a batch (the first one fixes the schema).
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        if self.writer.is_none() {
            let f = File::create(&self.tmp).at(&self.tmp)?;
            self.writer =
                Some(ArrowWriter::try_new(f, batch.schema(), None).map_err(|e| Error::parquet(&self.tmp, e))?);
        }
        let w = self.writer.as_mut().expect("created above"); // ok: invariant
        w.write(batch).map_err(|e| Error::parquet(&self.tmp, e))?;
        // A row group is held in memory until it ends, and the writer's default ends it at
        // 1,048,576 rows: 200 MB of embeddings at 16x (BENCHMARKS "Atlas scale"). Ending it by
        // size keeps memory independent of the row count.
        if w.in_progress_size() >= ROW_GROUP_BYTES {
            w.flush().map_err(|e| Error::parquet(&self.tmp, e))?;
        }
        Ok(())
    }

    /// The file this writer finishes into (for messages about what is being written).
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Whether any batch was written.
    pub fn is_empty(&self) -> bool {
        self.writer.is_none()
    }

    /// Closes, syncs and renames the file into place; `empty` is the error when no batch came.
    pub fn finish(mut self, empty: impl FnOnce() -> Error) -> Result<()> {
        let w = self.writer.take().ok_or_else(empty)?;
        w.into_inner().map_err(|e| Error::parquet(&self.tmp, e))?.sync_all().at(&self.tmp)?;
        commit(&self.tmp, &self.target)?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for ParquetOut {
    /// An unfinished file (an error at any point, a full disk, or a writer dropped) is removed.
    fn drop(&mut self) {
        drop(self.writer.take());
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int32Array;
    use std::sync::Arc;

    fn batch(v: &[i32]) -> RecordBatch {
        RecordBatch::try_from_iter([("x", Arc::new(Int32Array::from(v.to_vec())) as _)]).unwrap()
    }

    #[test]
    fn a_finished_file_appears_whole_and_an_abandoned_one_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.parquet");
        let mut out = ParquetOut::new(&target);
        out.write(&batch(&[1, 2])).unwrap();
        out.write(&batch(&[3])).unwrap();
        assert!(!target.exists(), "nothing at the target before finish");
        out.finish(|| Error::Usage("empty".into())).unwrap();
        let rows: usize =
            parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(File::open(&target).unwrap(), 8)
                .unwrap()
                .map(|b| b.unwrap().num_rows())
                .sum();
        assert_eq!(rows, 3);
        let other = dir.path().join("other.parquet");
        let mut out = ParquetOut::new(&other);
        out.write(&batch(&[1])).unwrap();
        drop(out);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "only the finished file");
        let e = ParquetOut::new(&other).finish(|| Error::Usage("no rows".into())).unwrap_err();
        assert!(e.to_string().contains("no rows"));
    }

    #[test]
    fn a_long_stream_is_cut_into_row_groups_by_size_and_reads_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("long.parquet");
        let mut out = ParquetOut::new(&target);
        // Distinct values, so the dictionary gives up and each row costs its 4 bytes.
        let per = 1 << 20;
        let batches = 3 * ROW_GROUP_BYTES / (4 * per) + 1;
        for b in 0..batches {
            out.write(&batch(&(0..per as i32).map(|i| i + (b * per) as i32).collect::<Vec<_>>())).unwrap();
        }
        out.finish(|| Error::Usage("empty".into())).unwrap();
        let file = File::open(&target).unwrap();
        let reader = parquet::file::reader::SerializedFileReader::new(file).unwrap();
        let groups = parquet::file::reader::FileReader::metadata(&reader).num_row_groups();
        assert!(groups >= 2, "{groups} row groups for {} MB", batches * per * 4 >> 20);
        let mut next = 0i32;
        for b in parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(File::open(&target).unwrap(), 65536)
            .unwrap()
        {
            let b = b.unwrap();
            let x = b.column(0).as_any().downcast_ref::<Int32Array>().unwrap();
            for v in x.values() {
                assert_eq!(*v, next);
                next += 1;
            }
        }
        assert_eq!(next as usize, batches * per);
    }
}
