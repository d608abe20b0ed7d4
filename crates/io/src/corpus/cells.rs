//! Streaming a corpus' cells with stable keys: every cell gets its ordinal in the corpus
//! (atlases in the given order, shards in manifest order), so anything seeded by the cell (masks,
//! splits) does not depend on the order or grouping in which cells are read.

use std::path::{Path, PathBuf};

use arrow_array::{Array, StringArray};

use super::columns::{missing, InputIds, CELL_ID};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::{atlas_dir, for_each_shard_batch, list_atlases, AtlasManifest};
use crate::error::{Error, Result};

/// One shard of the corpus and the key of its first cell.
#[derive(Clone, Debug)]
pub struct ShardRef {
    pub atlas: String,
    pub path: PathBuf,
    pub first_key: u64,
    pub cells: u64,
    pub bytes: u64,
    pub sha256: String,
}

impl ShardRef {
    /// The cells read from the shard must be the cells its manifest counts.
    pub(super) fn check_cells(&self, read: u64) -> Result<()> {
        super::read::check_shard_rows(&self.path, read, self.cells)
    }
}

/// The shards of some atlases of a corpus, in key order.
#[derive(Clone, Debug, Default)]
pub struct CorpusIndex {
    pub shards: Vec<ShardRef>,
    pub cells: u64,
    pub atlases: Vec<String>,
}

impl CorpusIndex {
    /// Indexes `atlases` of `corpus` (empty: all finished atlases, sorted by name).
    pub fn open(corpus: &Path, atlases: &[String]) -> Result<Self> {
        let names = if atlases.is_empty() { list_atlases(corpus) } else { atlases.to_vec() };
        if names.is_empty() {
            return Err(Error::format(corpus, "corpus has no finished atlas (nothing under atlases/ with a manifest)"));
        }
        let mut index = Self { atlases: names.clone(), ..Self::default() };
        for name in &names {
            let dir = atlas_dir(corpus, name);
            let manifest = AtlasManifest::load(&dir)?;
            for s in &manifest.shards {
                index.shards.push(ShardRef {
                    atlas: name.clone(),
                    path: dir.join(&s.file),
                    first_key: index.cells,
                    cells: s.cells,
                    bytes: s.bytes,
                    sha256: s.sha256.clone(),
                });
                index.cells = index.cells.saturating_add(s.cells);
            }
        }
        Ok(index)
    }

    /// Reads shard `i` block by block (at most 8,192 cells each), checking its checksum first and
    /// every token against the vocabulary size.
    pub fn for_each_block(
        &self,
        i: usize,
        vocab_size: usize,
        mut f: impl FnMut(&CellBlock) -> Result<()>,
    ) -> Result<()> {
        let shard = &self.shards[i];
        let p = &shard.path;
        super::verify_shard(p, shard.bytes, &shard.sha256)?;
        let mut key = shard.first_key;
        let mut block = CellBlock::default();
        for_each_shard_batch(p, |rb| {
            block.decode(rb, p, key, vocab_size)?;
            key += block.len() as u64;
            f(&block)
        })?;
        shard.check_cells(key - shard.first_key)
    }

    /// [`Self::for_each_block`] with the shard's row groups decoded in parallel on the rayon pool,
    /// `f` still called in key order: for readers that decoding would otherwise hold up, such as
    /// the training data plan. Blocks hold whole row groups of about `rows` cells, and one per
    /// thread is decoded at once, so the memory held is set by `rows`, not by the shard.
    pub fn for_each_block_parallel(
        &self,
        i: usize,
        vocab_size: usize,
        rows: usize,
        mut f: impl FnMut(&CellBlock) -> Result<()>,
    ) -> Result<()> {
        use rayon::prelude::*;
        let shard = &self.shards[i];
        let p = &shard.path;
        super::verify_shard(p, shard.bytes, &shard.sha256)?;
        let ranges = row_group_ranges(p, rows.max(1))?;
        let mut cells = 0u64;
        for window in ranges.chunks(rayon::current_num_threads().max(1)) {
            let decoded: Vec<Result<Vec<CellBlock>>> = window
                .par_iter()
                .map(|(groups, first_row)| read_row_groups(p, groups, shard.first_key + first_row, vocab_size))
                .collect();
            for blocks in decoded {
                for block in blocks? {
                    cells += block.len() as u64;
                    f(&block)?;
                }
            }
        }
        shard.check_cells(cells)
    }

    /// Reads every shard in key order.
    pub fn for_each_cell_block(&self, vocab_size: usize, mut f: impl FnMut(&CellBlock) -> Result<()>) -> Result<()> {
        (0..self.shards.len()).try_for_each(|i| self.for_each_block(i, vocab_size, &mut f))
    }
}

/// A shard's row groups in consecutive runs of about `rows` rows: (row group indices, index of
/// the run's first row in the shard).
fn row_group_ranges(path: &Path, rows: usize) -> Result<Vec<(Vec<usize>, u64)>> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| Error::parquet_read(path, e))?;
    let mut ranges: Vec<(Vec<usize>, u64)> = Vec::new();
    let (mut current, mut in_current, mut first) = (Vec::new(), 0usize, 0u64);
    for (g, meta) in builder.metadata().row_groups().iter().enumerate() {
        current.push(g);
        in_current += meta.num_rows().max(0) as usize;
        if in_current >= rows {
            ranges.push((std::mem::take(&mut current), first));
            first += in_current as u64;
            in_current = 0;
        }
    }
    if !current.is_empty() {
        ranges.push((current, first));
    }
    Ok(ranges)
}

/// The cells of some row groups of a shard, whose first cell has key `first_key`.
fn read_row_groups(path: &Path, groups: &[usize], first_key: u64, vocab_size: usize) -> Result<Vec<CellBlock>> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| {
            let rows: i64 = groups.iter().map(|&g| b.metadata().row_group(g).num_rows()).sum();
            let mask = super::read::columns_mask(&b, false);
            b.with_projection(mask).with_row_groups(groups.to_vec()).with_batch_size(rows.max(1) as usize).build()
        })
        .map_err(|e| Error::parquet(path, e))?;
    let mut key = first_key;
    let mut blocks = Vec::new();
    for rb in reader {
        let mut block = CellBlock::default();
        block.decode(&rb.map_err(|e| Error::parquet_read(path, e))?, path, key, vocab_size)?;
        key += block.len() as u64;
        blocks.push(block);
    }
    Ok(blocks)
}

/// Consecutive cells of a shard: ids and full token sequences (special tokens included).
#[derive(Clone, Debug, Default)]
pub struct CellBlock {
    pub first_key: u64,
    pub cell_ids: Vec<String>,
    pub offsets: Vec<usize>,
    pub tokens: Vec<u32>,
}

impl CellBlock {
    pub fn len(&self) -> usize {
        self.cell_ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cell_ids.is_empty()
    }

    pub fn cell(&self, i: usize) -> &[u32] {
        &self.tokens[self.offsets[i]..self.offsets[i + 1]]
    }

    pub(crate) fn decode(
        &mut self,
        rb: &arrow_array::RecordBatch,
        path: &Path,
        first_key: u64,
        vocab_size: usize,
    ) -> Result<()> {
        let ids = InputIds::of(rb, path)?;
        let cell = rb
            .column_by_name(CELL_ID)
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            .ok_or_else(|| missing(path, CELL_ID))?;
        self.first_key = first_key;
        self.cell_ids.clear();
        self.offsets.clear();
        self.offsets.push(0);
        self.tokens.clear();
        let (values, offsets) = ids.flat()?;
        for i in 0..rb.num_rows() {
            let row = &values[offsets[i] as usize..offsets[i + 1] as usize];
            // One branch-free pass finds any token outside the vocabulary; the message is made
            // only for a bad row.
            if row.iter().fold(false, |bad, &t| bad | (t < 0) | (t as usize >= vocab_size)) {
                let t = row.iter().find(|&&t| t < 0 || t as usize >= vocab_size).expect("found above");
                return Err(Error::format(
                    path,
                    format!("cell {} has token id {t}, outside the vocabulary (size {vocab_size})", cell.value(i)),
                ));
            }
            self.tokens.extend(row.iter().map(|&t| t as u32));
            self.offsets.push(self.tokens.len());
            self.cell_ids.push(cell.value(i).to_string());
        }
        Ok(())
    }
}
