//! `mask audit --dump`: every cell's masked positions, so the audit can be checked independently.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{ListBuilder, UInt32Builder};
use arrow_array::{ArrayRef, RecordBatch, StringArray, UInt32Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;

use corrflow_io::error::{Error, IoContext, Result};
use corrflow_io::util::atomic::{commit, temp_path};

/// Parquet rows `cell_id`, `positions` (indices into the cell's `input_ids`, ascending) and
/// `structural` (how many of them the structural phase chose), written to a temporary file and
/// renamed into place by [`MaskDumpWriter::finish`].
pub struct MaskDumpWriter {
    target: PathBuf,
    tmp: PathBuf,
    schema: SchemaRef,
    writer: Option<ArrowWriter<File>>,
}

impl MaskDumpWriter {
    pub fn create(target: &Path) -> Result<Self> {
        let tmp = temp_path(target);
        let schema = Arc::new(Schema::new(vec![
            Field::new("cell_id", DataType::Utf8, false),
            Field::new("positions", DataType::List(Arc::new(Field::new("item", DataType::UInt32, true))), false),
            Field::new("structural", DataType::UInt32, false),
        ]));
        let file = File::create(&tmp).at(&tmp)?;
        let writer = ArrowWriter::try_new(file, schema.clone(), None).map_err(|e| Error::parquet(&tmp, e))?;
        Ok(Self { target: target.to_path_buf(), tmp, schema, writer: Some(writer) })
    }

    /// Appends cells: ids, positions (sequence indices), structural counts.
    pub fn write(&mut self, ids: &[String], positions: &[Vec<u32>], structural: &[u32]) -> Result<()> {
        let mut list = ListBuilder::new(UInt32Builder::new());
        for p in positions {
            list.values().append_slice(p);
            list.append(true);
        }
        let cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(ids)),
            Arc::new(list.finish()),
            Arc::new(UInt32Array::from(structural.to_vec())),
        ];
        let rb = RecordBatch::try_new(self.schema.clone(), cols).map_err(|e| Error::parquet(&self.tmp, e))?;
        let w = self.writer.as_mut().expect("writer open until finish");
        w.write(&rb).map_err(|e| Error::parquet(&self.tmp, e))
    }

    pub fn finish(mut self) -> Result<()> {
        let w = self.writer.take().expect("finish once");
        let file = w.into_inner().map_err(|e| Error::parquet(&self.tmp, e))?;
        file.sync_all().at(&self.tmp)?;
        commit(&self.tmp, &self.target)
    }
}

impl Drop for MaskDumpWriter {
    fn drop(&mut self) {
        // Unfinished (an error or an interruption): never leave a dump that looks complete.
        if self.writer.is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}
