//! Reading token shards back (tests, export, later stages).

use std::fs::File;
use std::path::Path;

use arrow_array::{Array, Int32Array, ListArray, RecordBatch, StringArray};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::manifest::AtlasManifest;
use crate::error::{Error, IoContext, Result};

/// Calls `f` with every record batch of one shard file.
pub fn for_each_shard_batch(path: &Path, mut f: impl FnMut(&RecordBatch) -> Result<()>) -> Result<()> {
    let file = File::open(path).at(path)?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| b.with_batch_size(8192).build())
        .map_err(|e| Error::parquet(path, e))?;
    for rb in reader {
        f(&rb.map_err(|e| Error::parquet(path, e))?)?;
    }
    Ok(())
}

/// Calls `f` with every record batch of an atlas, shard by shard, in manifest order.
pub fn for_each_batch(atlas_dir: &Path, mut f: impl FnMut(&RecordBatch) -> Result<()>) -> Result<AtlasManifest> {
    let manifest = AtlasManifest::load(atlas_dir)?;
    for s in &manifest.shards {
        for_each_shard_batch(&atlas_dir.join(&s.file), &mut f)?;
    }
    Ok(manifest)
}

/// All cells of an atlas in memory: for tests and small corpora only.
#[derive(Debug, Default)]
pub struct AtlasCells {
    pub cell_ids: Vec<String>,
    pub input_ids: Vec<Vec<u32>>,
}

pub fn read_atlas_tokens(atlas_dir: &Path) -> Result<AtlasCells> {
    let mut cells = AtlasCells::default();
    for_each_batch(atlas_dir, |rb| {
        let bad = |c: &str| Error::format(atlas_dir, format!("shard column '{c}' has an unexpected type"));
        let ids = rb
            .column_by_name("input_ids")
            .and_then(|c| c.as_any().downcast_ref::<ListArray>())
            .ok_or_else(|| bad("input_ids"))?;
        let cell = rb
            .column_by_name("cell_id")
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            .ok_or_else(|| bad("cell_id"))?;
        for i in 0..rb.num_rows() {
            let v = ids.value(i);
            let v = v.as_any().downcast_ref::<Int32Array>().ok_or_else(|| bad("input_ids"))?;
            cells.input_ids.push(v.values().iter().map(|&t| t as u32).collect());
            cells.cell_ids.push(cell.value(i).to_string());
        }
        Ok(())
    })?;
    Ok(cells)
}
