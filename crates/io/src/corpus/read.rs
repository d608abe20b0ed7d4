//! Reading token shards back (tests, export, later stages).

use std::fs::File;
use std::path::Path;

use arrow_array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;

use super::manifest::AtlasManifest;
use crate::error::{Error, IoContext, Result};

/// Calls `f` with every record batch of one shard file: its token and obs columns (the
/// expression columns are not decoded: [`for_each_shard_batch_with_expression`]).
pub fn for_each_shard_batch(path: &Path, f: impl FnMut(&RecordBatch) -> Result<()>) -> Result<()> {
    read_shard(path, false, f)
}

/// [`for_each_shard_batch`] with the expression columns too, where the shard has them.
pub fn for_each_shard_batch_with_expression(path: &Path, f: impl FnMut(&RecordBatch) -> Result<()>) -> Result<()> {
    read_shard(path, true, f)
}

fn read_shard(path: &Path, expression: bool, mut f: impl FnMut(&RecordBatch) -> Result<()>) -> Result<()> {
    let file = File::open(path).at(path)?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| {
            let mask = columns_mask(&b, expression);
            b.with_projection(mask).with_batch_size(8192).build()
        })
        .map_err(|e| Error::parquet_read(path, e))?;
    for rb in reader {
        f(&rb.map_err(|e| Error::parquet_read(path, e))?)?;
    }
    Ok(())
}

/// The shard's columns a reader decodes: all, or all but the expression columns.
pub(super) fn columns_mask<T>(
    builder: &parquet::arrow::arrow_reader::ArrowReaderBuilder<T>,
    expression: bool,
) -> ProjectionMask {
    let schema = builder.schema();
    let keep = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| expression || !super::columns::is_expression_column(f.name()))
        .map(|(i, _)| i);
    ProjectionMask::roots(builder.parquet_schema(), keep)
}

/// Calls `f` with every record batch of an atlas, shard by shard, in manifest order; each shard
/// is checked against its manifest checksum before it is read.
pub fn for_each_batch(atlas_dir: &Path, mut f: impl FnMut(&RecordBatch) -> Result<()>) -> Result<AtlasManifest> {
    let manifest = AtlasManifest::load(atlas_dir)?;
    for s in &manifest.shards {
        let path = atlas_dir.join(&s.file);
        verify_shard(&path, s.bytes, &s.sha256)?;
        let mut rows = 0u64;
        for_each_shard_batch(&path, |rb| {
            rows += rb.num_rows() as u64;
            f(rb)
        })?;
        check_shard_rows(&path, rows, s.cells)?;
    }
    Ok(manifest)
}

/// The rows read from a shard must be the cells its manifest entry counts: the shard's checksum
/// does not cover that count.
pub(super) fn check_shard_rows(path: &Path, read: u64, counted: u64) -> Result<()> {
    if read != counted {
        return Err(Error::format(path, format!("shard has {read} cells, its manifest says {counted}")));
    }
    Ok(())
}

/// The one check of a shard against its manifest entry (size, then sha256), used by every
/// reader of a corpus.
pub fn verify_shard(path: &Path, bytes: u64, sha256: &str) -> Result<()> {
    let actual = std::fs::metadata(path).at(path)?.len();
    if actual != bytes || corrflow_fs::hash::sha256_file(path)? != sha256 {
        return Err(Error::format(path, "shard does not match its manifest checksum (corrupt or modified)"));
    }
    Ok(())
}

/// All cells of an atlas in memory: for tests and small corpora only.
#[derive(Debug, Default)]
pub struct AtlasCells {
    pub cell_ids: Vec<String>,
    pub input_ids: Vec<Vec<u32>>,
}

pub fn read_atlas_tokens(atlas_dir: &Path) -> Result<AtlasCells> {
    let mut cells = AtlasCells::default();
    let mut block = super::CellBlock::default();
    for_each_batch(atlas_dir, |rb| {
        block.decode(rb, atlas_dir, 0, u32::MAX as usize)?;
        for i in 0..block.len() {
            cells.input_ids.push(block.cell(i).to_vec());
        }
        cells.cell_ids.append(&mut block.cell_ids);
        Ok(())
    })?;
    Ok(cells)
}
