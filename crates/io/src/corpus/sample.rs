//! Cells of a corpus held in memory as gene-token sequences (special tokens removed, the first
//! `L_max` kept): a seeded sample of whole atlases (the exact graph build), or some shards of
//! one atlas (a worker's share of an incremental build).

use std::path::{Path, PathBuf};

use rand::SeedableRng;

use super::columns::InputIds;
use super::{for_each_batch, for_each_shard_batch, AtlasManifest};
use crate::error::{Error, Result};
use crate::vocab::Vocabulary;

/// The sampled cells of a corpus, as gene-token sequences (special tokens removed, first
/// `L_max` kept), in corpus order.
#[derive(Debug, Default)]
pub struct CorpusCells {
    pub offsets: Vec<usize>,
    pub tokens: Vec<u32>,
    pub atlases: Vec<String>,
    /// Cells in the corpus (before sampling).
    pub total_cells: u64,
}

impl CorpusCells {
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn cell(&self, i: usize) -> &[u32] {
        &self.tokens[self.offsets[i]..self.offsets[i + 1]]
    }
}

/// Reads the cells of `atlas_dirs` (all, or a sample of `n_sub` chosen with `seed`).
pub fn load_corpus_cells(
    atlas_dirs: &[PathBuf],
    vocab: &Vocabulary,
    l_max: usize,
    n_sub: u64,
    seed: u64,
) -> Result<CorpusCells> {
    let mut total = 0u64;
    for dir in atlas_dirs {
        total += AtlasManifest::load(dir)?.cells;
    }
    let sample: Option<Vec<u64>> = (n_sub > 0 && n_sub < total).then(|| {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut idx: Vec<u64> =
            rand::seq::index::sample(&mut rng, total as usize, n_sub as usize).into_iter().map(|i| i as u64).collect();
        idx.sort_unstable();
        idx
    });
    let mut cells = CorpusCells { offsets: vec![0], total_cells: total, ..Default::default() };
    let mut next = 0u64;
    let mut k = 0usize;
    for dir in atlas_dirs {
        let manifest = for_each_batch(dir, |rb| {
            append_cells(rb, dir, vocab, l_max, &mut cells, || {
                let index = next;
                next += 1;
                match &sample {
                    Some(s) if k < s.len() && s[k] == index => {
                        k += 1;
                        true
                    }
                    Some(_) => false,
                    None => true,
                }
            })
        })?;
        cells.atlases.push(manifest.atlas);
    }
    Ok(cells)
}

/// Appends the gene tokens (special tokens removed, first `l_max`) of the rows of a shard batch
/// for which `keep()` (called once per row, in order) says yes.
fn append_cells(
    rb: &arrow_array::RecordBatch,
    path: &Path,
    vocab: &Vocabulary,
    l_max: usize,
    cells: &mut CorpusCells,
    mut keep: impl FnMut() -> bool,
) -> Result<()> {
    let ids = InputIds::of(rb, path)?;
    for i in 0..rb.num_rows() {
        if !keep() {
            continue;
        }
        let v = ids.row(i)?;
        cells.tokens.extend(v.values().iter().map(|&t| t as u32).filter(|&t| vocab.is_gene(t)).take(l_max));
        cells.offsets.push(cells.tokens.len());
    }
    Ok(())
}

/// Calls `f` with the cells of shard `shard` of one atlas (by index in its manifest), in shard
/// order, in blocks of at least `block` cells (the last may be smaller): one block in memory at a
/// time, where a whole shard holds up to `ingest.shard_cells` cells. Returns the cells read,
/// which are checked to be the cells the manifest counts.
pub fn for_each_shard_block(
    atlas_dir: &Path,
    shard: usize,
    vocab: &Vocabulary,
    l_max: usize,
    block: usize,
    mut f: impl FnMut(&CorpusCells) -> Result<()>,
) -> Result<u64> {
    let manifest = AtlasManifest::load(atlas_dir)?;
    let info = manifest.shards.get(shard).ok_or_else(|| Error::format(atlas_dir, format!("no shard {shard}")))?;
    let p = atlas_dir.join(&info.file);
    super::verify_shard(&p, info.bytes, &info.sha256)?;
    let mut cells = CorpusCells { offsets: vec![0], atlases: vec![manifest.atlas.clone()], ..Default::default() };
    let mut read = 0u64;
    let mut flush = |cells: &mut CorpusCells| -> Result<()> {
        cells.total_cells = cells.len() as u64;
        read += cells.total_cells;
        f(cells)?;
        cells.tokens.clear();
        cells.offsets.truncate(1);
        Ok(())
    };
    for_each_shard_batch(&p, |rb| {
        append_cells(rb, &p, vocab, l_max, &mut cells, || true)?;
        if cells.len() >= block.max(1) {
            flush(&mut cells)?;
        }
        Ok(())
    })?;
    if !cells.is_empty() {
        flush(&mut cells)?;
    }
    super::read::check_shard_rows(&p, read, info.cells)?;
    Ok(read)
}
