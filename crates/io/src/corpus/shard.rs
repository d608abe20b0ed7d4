//! `TokenShardWriter`: token batches in, zstd Parquet shards out, each committed atomically.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
use arrow_array::{ArrayRef, Float32Array, Float64Array, Int32Array, ListArray, RecordBatch, StringArray};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use super::columns::{ATLAS, CELL_ID, EXPRESSION_COUNTS, EXPRESSION_TAIL, EXPRESSION_TOTAL, INPUT_IDS, LENGTH};
use super::manifest::{DropCounts, ShardInfo};
use crate::error::{Error, IoContext, Result};
use crate::formats::{ObsField, ObsKind, ObsValues};
use crate::tokenize::ExpressionBatch;
use crate::util::writeback::WritebackFile;
use corrflow_fs::atomic::{commit, temp_path};
use corrflow_fs::hash::HashingWriter;

/// Arrow schema of token shards: fixed columns, the requested obs columns, then (shards that
/// keep each cell's expression) the expression columns.
pub fn token_schema(obs: &[ObsField], expression: bool) -> SchemaRef {
    let mut fields = vec![
        Field::new(INPUT_IDS, DataType::List(Arc::new(Field::new("item", DataType::Int32, true))), true),
        Field::new(LENGTH, DataType::Int32, true),
        Field::new(CELL_ID, DataType::Utf8, true),
        Field::new(ATLAS, DataType::Utf8, true),
    ];
    for f in obs {
        let dt = match f.kind {
            ObsKind::Utf8 => DataType::Utf8,
            ObsKind::Float64 => DataType::Float64,
            ObsKind::Int64 => DataType::Int64,
            ObsKind::Boolean => DataType::Boolean,
        };
        fields.push(Field::new(&f.name, dt, true));
    }
    if expression {
        fields.extend([
            Field::new(EXPRESSION_COUNTS, DataType::List(Arc::new(Field::new("item", DataType::Float32, true))), true),
            Field::new(EXPRESSION_TAIL, DataType::List(Arc::new(Field::new("item", DataType::Int32, true))), true),
            Field::new(EXPRESSION_TOTAL, DataType::Float64, true),
        ]);
    }
    Arc::new(Schema::new(fields))
}

fn ids_path() -> ColumnPath {
    list_path(INPUT_IDS)
}

fn list_path(column: &str) -> ColumnPath {
    ColumnPath::from(vec![column.into(), "list".into(), "item".into()])
}

/// Tokenized cells ready to be written.
#[derive(Debug, Default)]
pub struct TokenBatch {
    pub offsets: Vec<usize>,
    pub tokens: Vec<u32>,
    pub cell_ids: Vec<String>,
    pub obs: Vec<ObsValues>,
    /// The cells' expression (written when the schema has the expression columns).
    pub expression: Option<ExpressionBatch>,
}

impl TokenBatch {
    pub fn n_cells(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// The batch as Arrow columns; token ids are moved, not copied (their u32 buffer is reused
    /// as i32: ids are < 2^31).
    pub fn into_record_batch(self, schema: &SchemaRef, atlas: &str) -> Result<RecordBatch> {
        let n = self.n_cells();
        let values = Int32Array::from(bytemuck::allocation::cast_vec::<u32, i32>(self.tokens));
        let offsets = OffsetBuffer::new(self.offsets.iter().map(|&o| o as i32).collect::<Vec<_>>().into());
        let item = Arc::new(Field::new("item", DataType::Int32, true));
        let ids = ListArray::try_new(item, offsets, Arc::new(values), None).map_err(|e| Error::Usage(e.to_string()))?;
        let lengths = Int32Array::from_iter_values(self.offsets.windows(2).map(|w| (w[1] - w[0]) as i32));
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(ids),
            Arc::new(lengths),
            Arc::new(StringArray::from_iter_values(&self.cell_ids)),
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(atlas, n))),
        ];
        for o in &self.obs {
            cols.push(obs_array(o));
        }
        if schema.column_with_name(EXPRESSION_COUNTS).is_some() {
            let e = self
                .expression
                .ok_or_else(|| Error::internal("ingest", "a batch without the expression its shard keeps"))?;
            cols.extend(expression_arrays(e)?);
        }
        RecordBatch::try_new(schema.clone(), cols).map_err(|e| Error::Usage(format!("building token batch: {e}")))
    }
}

fn expression_arrays(e: ExpressionBatch) -> Result<[ArrayRef; 3]> {
    let list = |values: ArrayRef, item: DataType, offsets: &[usize]| -> Result<ArrayRef> {
        let offsets = OffsetBuffer::new(offsets.iter().map(|&o| o as i32).collect::<Vec<_>>().into());
        let field = Arc::new(Field::new("item", item, true));
        Ok(Arc::new(
            ListArray::try_new(field, offsets, values, None).map_err(|e| Error::internal("ingest", e.to_string()))?,
        ))
    };
    let tail = Int32Array::from(bytemuck::allocation::cast_vec::<u32, i32>(e.tail));
    Ok([
        list(Arc::new(Float32Array::from(e.counts)), DataType::Float32, &e.count_offsets)?,
        list(Arc::new(tail), DataType::Int32, &e.tail_offsets)?,
        Arc::new(Float64Array::from(e.totals)),
    ])
}

fn obs_array(values: &ObsValues) -> ArrayRef {
    match values {
        ObsValues::Utf8(v) => {
            let mut b = StringBuilder::new();
            v.iter().for_each(|x| b.append_option(x.as_deref()));
            Arc::new(b.finish())
        }
        ObsValues::Float64(v) => {
            let mut b = Float64Builder::new();
            v.iter().for_each(|&x| b.append_option(x));
            Arc::new(b.finish())
        }
        ObsValues::Int64(v) => {
            let mut b = Int64Builder::new();
            v.iter().for_each(|&x| b.append_option(x));
            Arc::new(b.finish())
        }
        ObsValues::Boolean(v) => {
            let mut b = BooleanBuilder::new();
            v.iter().for_each(|&x| b.append_option(x));
            Arc::new(b.finish())
        }
    }
}

struct OpenShard {
    /// Hashes as it writes: the shard's checksum needs no second read of the file.
    writer: ArrowWriter<HashingWriter<WritebackFile>>,
    tmp: PathBuf,
    target: PathBuf,
    cells: u64,
    tokens: u64,
    cells_read: u64,
    dropped: DropCounts,
}

/// Writes token batches into numbered shards of at most `shard_cells` cells.
pub struct TokenShardWriter {
    dir: PathBuf,
    atlas: String,
    schema: SchemaRef,
    props: WriterProperties,
    next_index: usize,
    open: Option<OpenShard>,
}

impl TokenShardWriter {
    /// `first_index` continues numbering after shards already finished (resume).
    pub fn new(
        dir: &Path,
        atlas: &str,
        schema: SchemaRef,
        zstd_level: i32,
        row_group_cells: usize,
        first_index: usize,
    ) -> Result<Self> {
        let level = ZstdLevel::try_new(zstd_level).map_err(|e| Error::Usage(format!("zstd level: {e}")))?;
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(level))
            .set_max_row_group_row_count(Some(row_group_cells))
            // Token ids are high-cardinality; dictionary pages would only be discarded.
            .set_column_dictionary_enabled(ids_path(), false)
            .set_column_encoding(ids_path(), Encoding::DELTA_BINARY_PACKED)
            // Bit-packed deltas of rank-ordered ids are incompressible: zstd cost ~6% of ingest's
            // CPU and saved 3 KB of 70 MB (Kang ×8), so only the other columns are compressed.
            .set_column_compression(ids_path(), Compression::UNCOMPRESSED)
            // Nothing filters on token ids, so min/max statistics would only cost time.
            .set_column_statistics_enabled(ids_path(), EnabledStatistics::None)
            // Counts are mostly small integers as f32: split into byte streams their exponent and
            // high mantissa bytes repeat, which zstd takes down (session 32: see BENCHMARKS).
            .set_column_dictionary_enabled(list_path(EXPRESSION_COUNTS), false)
            .set_column_encoding(list_path(EXPRESSION_COUNTS), Encoding::BYTE_STREAM_SPLIT)
            .set_column_statistics_enabled(list_path(EXPRESSION_COUNTS), EnabledStatistics::None)
            .set_column_dictionary_enabled(list_path(EXPRESSION_TAIL), false)
            .set_column_encoding(list_path(EXPRESSION_TAIL), Encoding::DELTA_BINARY_PACKED)
            .set_column_statistics_enabled(list_path(EXPRESSION_TAIL), EnabledStatistics::None)
            .build();
        Ok(Self {
            dir: dir.to_path_buf(),
            atlas: atlas.to_string(),
            schema,
            props,
            next_index: first_index,
            open: None,
        })
    }

    pub fn shard_name(index: usize) -> String {
        format!("shard-{index:05}.parquet")
    }

    /// Appends cells to the current shard (opening one if needed).
    pub fn write(&mut self, batch: TokenBatch, cells_read: u64, dropped: &DropCounts) -> Result<()> {
        if self.open.is_none() {
            let target = self.dir.join(Self::shard_name(self.next_index));
            let tmp = temp_path(&target);
            let file = File::create(&tmp).at(&tmp)?;
            let writer = ArrowWriter::try_new(
                HashingWriter::new(WritebackFile::new(file)),
                self.schema.clone(),
                Some(self.props.clone()),
            )
            .map_err(|e| Error::parquet(&tmp, e))?;
            self.open = Some(OpenShard {
                writer,
                tmp,
                target,
                cells: 0,
                tokens: 0,
                cells_read: 0,
                dropped: DropCounts::default(),
            });
        }
        let shard = self.open.as_mut().expect("opened above"); // ok: invariant
        let (cells, tokens) = (batch.n_cells() as u64, batch.tokens.len() as u64);
        if cells > 0 {
            let rb = batch.into_record_batch(&self.schema, &self.atlas)?;
            shard.writer.write(&rb).map_err(|e| Error::parquet(&shard.tmp, e))?;
        }
        shard.cells += cells;
        shard.tokens += tokens;
        shard.cells_read += cells_read;
        shard.dropped.add(dropped);
        Ok(())
    }

    /// Cells in the shard being written.
    pub fn open_cells_read(&self) -> u64 {
        self.open.as_ref().map_or(0, |s| s.cells_read)
    }

    /// Finishes the current shard (if any): footer, fsync, rename into place, checksum.
    pub fn finish_shard(&mut self, resume_at: (usize, usize)) -> Result<Option<ShardInfo>> {
        let Some(shard) = self.open.take() else { return Ok(None) };
        let hashing = shard.writer.into_inner().map_err(|e| Error::parquet(&shard.tmp, e))?;
        let (file, sha256, bytes) = hashing.finish();
        let file = file.into_inner();
        file.sync_all().at(&shard.tmp)?;
        drop(file);
        commit(&shard.tmp, &shard.target)?;
        self.next_index += 1;
        Ok(Some(ShardInfo {
            file: shard.target.file_name().expect("shard file name").to_string_lossy().into_owned(), // ok: invariant
            cells: shard.cells,
            tokens: shard.tokens,
            bytes,
            sha256,
            cells_read: shard.cells_read,
            dropped: shard.dropped,
            resume_at,
        }))
    }

    /// Drops the unfinished shard's temporary file (after an error).
    pub fn abandon(&mut self) {
        if let Some(s) = self.open.take() {
            drop(s.writer);
            let _ = std::fs::remove_file(&s.tmp);
        }
    }
}

impl Drop for TokenShardWriter {
    fn drop(&mut self) {
        self.abandon();
    }
}
