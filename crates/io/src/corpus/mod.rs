//! The token-shard corpus: per-atlas Parquet shards plus a manifest, written atomically.
//!
//! ```text
//! CORPUS/
//!   corpus.json                 vocabulary name + hash and sequence layout, shared by atlases
//!   vocab/                      the vocabulary tables (so later stages need nothing else)
//!   atlases/NAME/manifest.json  shards, cell counts, sha256 checksums (written last)
//!   atlases/NAME/shard-00000.parquet ...
//!   atlases/.NAME.partial/      an ingest in progress (hidden; resumable)
//! ```

mod atlas_writer;
mod cells;
pub mod columns;
mod expression;
mod hf;
mod labels;
mod manifest;
mod open;
mod read;
mod sample;
mod shard;

pub use crate::tokenize::ExpressionBatch;
pub use atlas_writer::{prepare_atlas, AtlasWriter, ShardOptions};
pub use cells::{CellBlock, CorpusIndex, ShardRef};
pub use expression::ExpressionBlock;
pub use hf::export_hf;
pub use labels::{obs_text, CellLabels, NO_LABEL};
pub use manifest::{AtlasManifest, CorpusInfo, DropCounts, ExpressionInfo, InputFile, ShardInfo};
pub use open::{corpus_of_atlas, read_info, Corpus, VOCAB_DIR};
pub use read::{
    for_each_batch, for_each_shard_batch, for_each_shard_batch_with_expression, read_atlas_tokens, verify_shard,
    AtlasCells,
};
pub use sample::{for_each_shard_block, load_corpus_cells, CorpusCells};
pub use shard::{token_schema, TokenBatch, TokenShardWriter};

use std::path::{Path, PathBuf};

pub const MANIFEST: &str = "manifest.json";
pub const CORPUS_INFO: &str = "corpus.json";

/// Directory of a finished atlas.
pub fn atlas_dir(corpus: &Path, atlas: &str) -> PathBuf {
    corpus.join("atlases").join(atlas)
}

/// Hidden staging directory of an atlas being ingested.
pub fn staging_dir(corpus: &Path, atlas: &str) -> PathBuf {
    corrflow_fs::atomic::hidden_sibling(&atlas_dir(corpus, atlas), "partial")
}

/// Names of the finished atlases of a corpus (those with a manifest), sorted.
pub fn list_atlases(corpus: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(corpus.join("atlases"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join(MANIFEST).is_file())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    names
}
