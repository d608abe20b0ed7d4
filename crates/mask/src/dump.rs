//! `mask audit --dump`: every cell's masked positions, so the audit can be checked independently.

use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{ListBuilder, UInt32Builder};
use arrow_array::{ArrayRef, RecordBatch, StringArray, UInt32Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use corrflow_io::error::{Error, Result};
use corrflow_io::util::parquet_out::ParquetOut;

/// Parquet rows `cell_id`, `positions` (indices into the cell's `input_ids`, ascending) and
/// `structural` (how many of them the structural phase chose), written to a temporary file and
/// renamed into place by [`MaskDumpWriter::finish`]; an unfinished dump leaves nothing.
pub struct MaskDumpWriter {
    schema: SchemaRef,
    out: ParquetOut,
    target: std::path::PathBuf,
}

impl MaskDumpWriter {
    pub fn create(target: &Path) -> Result<Self> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("cell_id", DataType::Utf8, false),
            Field::new("positions", DataType::List(Arc::new(Field::new("item", DataType::UInt32, true))), false),
            Field::new("structural", DataType::UInt32, false),
        ]));
        Ok(Self { schema, out: ParquetOut::new(target), target: target.to_path_buf() })
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
        let rb = RecordBatch::try_new(self.schema.clone(), cols).map_err(|e| Error::parquet(&self.target, e))?;
        self.out.write(&rb)
    }

    pub fn finish(mut self) -> Result<()> {
        if self.out.is_empty() {
            self.out.write(&RecordBatch::new_empty(self.schema.clone()))?;
        }
        self.out.finish(|| Error::internal("mask dump", "no batch written"))
    }
}
