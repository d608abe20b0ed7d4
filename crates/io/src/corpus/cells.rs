//! Streaming a corpus' cells with stable keys: every cell gets its ordinal in the corpus
//! (atlases in the given order, shards in manifest order), so anything seeded by the cell (masks,
//! splits) does not depend on the order or grouping in which cells are read.

use std::path::{Path, PathBuf};

use arrow_array::{Array, StringArray};

use super::columns::{missing, InputIds, CELL_ID};
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
                index.cells += s.cells;
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
        if key - shard.first_key != shard.cells {
            return Err(Error::format(
                p,
                format!("shard has {} cells, its manifest says {}", key - shard.first_key, shard.cells),
            ));
        }
        Ok(())
    }

    /// Reads every shard in key order.
    pub fn for_each_cell_block(&self, vocab_size: usize, mut f: impl FnMut(&CellBlock) -> Result<()>) -> Result<()> {
        (0..self.shards.len()).try_for_each(|i| self.for_each_block(i, vocab_size, &mut f))
    }
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
        for i in 0..rb.num_rows() {
            let v = ids.row(i)?;
            for &t in v.values() {
                if t < 0 || t as usize >= vocab_size {
                    return Err(Error::format(
                        path,
                        format!("cell {} has token id {t}, outside the vocabulary (size {vocab_size})", cell.value(i)),
                    ));
                }
                self.tokens.push(t as u32);
            }
            self.offsets.push(self.tokens.len());
            self.cell_ids.push(cell.value(i).to_string());
        }
        Ok(())
    }
}
