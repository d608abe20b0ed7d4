//! What an ingest is asked to do, what it reports, and an input opened for it: the types the
//! job's orchestration (`run`) and its streaming `pipeline` share.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::corpus::DropCounts;
use crate::formats::{CellSource, ReadOptions};
use crate::tokenize::{GeneMapper, TokenizeOptions};
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
}

pub(super) struct Opened {
    pub(super) source: Box<dyn CellSource>,
    pub(super) mapper: GeneMapper,
    pub(super) bytes: u64,
}
