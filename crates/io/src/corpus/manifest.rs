//! Manifest and corpus metadata types.

use std::path::Path;

use corrflow_algorithms::SequenceLayout;
use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::formats::ObsField;
use crate::tokenize::{MappingStats, TokenizeOptions};

/// Corpus-wide settings every atlas must share.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CorpusInfo {
    pub format_version: u32,
    pub vocab_name: String,
    pub vocab_hash: String,
    pub vocab_size: usize,
    pub layout: SequenceLayout,
}

/// Why cells were not written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropCounts {
    /// No expressed gene of the cell is in the vocabulary (or the cell has no counts).
    pub no_vocabulary_genes: u64,
}

impl DropCounts {
    pub fn add(&mut self, other: &Self) {
        self.no_vocabulary_genes += other.no_vocabulary_genes;
    }

    pub fn total(&self) -> u64 {
        self.no_vocabulary_genes
    }
}

/// One finished shard.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardInfo {
    pub file: String,
    pub cells: u64,
    pub tokens: u64,
    pub bytes: u64,
    pub sha256: String,
    /// Input cells read for this shard (kept + dropped).
    pub cells_read: u64,
    pub dropped: DropCounts,
    /// Where the input stands after this shard: (file index, next cell in that file).
    pub resume_at: (usize, usize),
}

/// One input file of an atlas.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InputFile {
    pub path: String,
    pub format: String,
    pub bytes: u64,
    pub cells: u64,
    pub genes: MappingStats,
    /// The input's content hash (a folder: its files), by which an input ingested again under
    /// another atlas name is recognised; absent in manifests written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The cells read when not all of the input's (a SOMA experiment's obs value filter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<String>,
}

/// The manifest of a finished atlas, written last: its presence marks the atlas complete.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AtlasManifest {
    pub format_version: u32,
    pub atlas: String,
    pub corpus: CorpusInfo,
    pub tokenize: TokenizeOptions,
    pub counts: String,
    pub gene_column: Option<String>,
    pub obs_columns: Vec<ObsField>,
    pub inputs: Vec<InputFile>,
    pub shards: Vec<ShardInfo>,
    pub cells_read: u64,
    pub cells: u64,
    pub tokens: u64,
    pub dropped: DropCounts,
    pub created_by: String,
    /// What the shards keep of each cell's expression (atlases ingested before corrflow kept it
    /// have none: they serve rank models only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression: Option<ExpressionInfo>,
}

/// An atlas' expression record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpressionInfo {
    /// The vocabulary genes every input file of the atlas measured (ascending token ids): a gene
    /// absent from a cell's expression is a zero only if it is here.
    pub measured: Vec<u32>,
}

impl ExpressionInfo {
    /// The genes measured by every input (the intersection of their sorted token lists).
    pub fn of_inputs(measured: &[Vec<u32>]) -> Self {
        let mut common = measured.first().cloned().unwrap_or_default();
        for m in &measured[1.min(measured.len())..] {
            common.retain(|t| m.binary_search(t).is_ok());
        }
        Self { measured: common }
    }
}

impl AtlasManifest {
    pub fn load(atlas_dir: &Path) -> Result<Self> {
        let p = atlas_dir.join(super::MANIFEST);
        let text = std::fs::read_to_string(&p).at(&p)?;
        let manifest: Self =
            serde_json::from_str(&text).map_err(|e| Error::format(&p, format!("invalid manifest: {e}")))?;
        // The shards' checksums do not cover the counts, so they are checked against each other
        // here and against the rows read by the readers.
        let in_shards = manifest.shards.iter().try_fold(0u64, |n, s| n.checked_add(s.cells));
        if in_shards != Some(manifest.cells) {
            let msg = format!(
                "invalid manifest: it counts {} cells but its shards {}",
                manifest.cells,
                in_shards.map_or("more than 2^64".into(), |n| n.to_string())
            );
            return Err(Error::format(&p, msg));
        }
        Ok(manifest)
    }

    /// Checks every shard's size and sha256 against the manifest.
    pub fn verify(&self, atlas_dir: &Path) -> Result<()> {
        self.shards.iter().try_for_each(|s| super::verify_shard(&atlas_dir.join(&s.file), s.bytes, &s.sha256))
    }
}
