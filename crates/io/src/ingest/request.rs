//! What an ingest is asked to do, what it reports, and an input opened for it: the types the
//! job's orchestration (`run`) and its streaming `pipeline` share.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::corpus::DropCounts;
use crate::formats::{CellSource, ObsField, ObsKind, ReadOptions};
use crate::ontology::map::{CellTypeMapping, CL_ID_COLUMN};
use crate::tokenize::{GeneMapper, MappingStats, TokenizeOptions};
use crate::util::Cancel;
use crate::vocab::Vocabulary;

/// Everything `ingest` needs.
#[derive(Clone, Debug)]
pub struct IngestRequest {
    pub corpus: PathBuf,
    pub atlas: String,
    pub inputs: Vec<PathBuf>,
    pub vocab: Vocabulary,
    pub read: ReadOptions,
    pub tokenize: TokenizeOptions,
    pub shard_cells: usize,
    pub zstd_level: i32,
    /// Discard an interrupted ingest of this atlas instead of resuming it.
    pub restart: bool,
    pub show_progress: bool,
    /// Set to stop after the chunk being read (committed shards stay; the ingest resumes).
    pub cancel: Cancel,
    /// `--cell-type-map`: the ontology ids of one obs column's labels, stored as `cl_id`.
    pub cell_types: Option<CellTypeMapping>,
    /// Keep each cell's expression beside its tokens (what value models train on); `false`
    /// (`ingest --ranks-only`) writes rank tokens only, a smaller corpus for rank models.
    pub expression: bool,
}

/// What `ingest --json` prints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IngestSummary {
    pub command: String,
    pub atlas: String,
    pub corpus: String,
    pub cells_read: u64,
    pub cells_kept: u64,
    pub dropped: DropCounts,
    pub tokens: u64,
    pub shards: usize,
    pub resumed_shards: usize,
    pub input_bytes: u64,
    pub seconds: f64,
    pub cells_per_s: f64,
    pub mb_per_s: f64,
    pub peak_rss_mb: Option<f64>,
    /// What `--cell-type-map` did, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell_types: Option<CellTypeReport>,
    /// How the inputs' genes matched the vocabulary (by id, unversioned id or symbol), summed.
    #[serde(default)]
    pub genes: MappingStats,
    /// What the reader should not miss: genes matched by symbol where a var column of ids
    /// matches more, inputs already in the corpus under another atlas name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Cells per outcome of `--cell-type-map` over the atlas.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CellTypeReport {
    pub column: String,
    pub map: String,
    /// Cells with a term id.
    pub mapped_cells: u64,
    /// Cells whose label the map leaves unmapped, by label: stored without an id, so a
    /// hierarchical objective learns nothing from them.
    pub unmapped: std::collections::BTreeMap<String, u64>,
    /// Cells without a label at all.
    pub missing: u64,
}

impl IngestRequest {
    /// The obs columns the shards store: the requested ones, then `cl_id` with a cell-type map.
    pub(super) fn stored_obs_fields(&self, read: &[ObsField]) -> Vec<ObsField> {
        let mut fields = read.to_vec();
        if self.cell_types.is_some() {
            fields.push(ObsField { name: CL_ID_COLUMN.into(), kind: ObsKind::Utf8 });
        }
        fields
    }
}

pub(super) struct Opened {
    pub(super) source: Box<dyn CellSource>,
    pub(super) mapper: GeneMapper,
    pub(super) bytes: u64,
}
