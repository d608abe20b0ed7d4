//! [`AtlasWriter`]: the corpus' side of adding an atlas. It owns the hidden staging directory,
//! resumes an interrupted ingest with the same fingerprint (its finished shards are recorded in
//! `progress.json` and checked by checksum), commits shards one by one, and at the end writes
//! the manifest and publishes the atlas (and, for a new corpus, its vocabulary and
//! `corpus.json`) by rename. The ingest job only feeds it token batches.

use std::path::{Path, PathBuf};

use arrow_schema::SchemaRef;
use serde::{Deserialize, Serialize};

use super::{atlas_dir, staging_dir, AtlasManifest, CorpusInfo, DropCounts, ShardInfo, TokenBatch, TokenShardWriter};
use super::{CORPUS_INFO, MANIFEST, VOCAB_DIR};
use crate::error::{Error, IoContext, Result};
use crate::vocab::Vocabulary;
use corrflow_fs::atomic::write_json_atomic;

const PROGRESS: &str = "progress.json";
/// Where a new corpus's vocabulary tables are written during the ingest (in the staging dir).
const STAGED_VOCAB: &str = "vocab.staged";

/// What `progress.json` in the staging directory records: the finished shards of this ingest.
#[derive(Serialize, Deserialize)]
struct Progress {
    fingerprint: String,
    shards: Vec<ShardInfo>,
}

/// How the shards of an atlas are written.
#[derive(Clone, Debug)]
pub struct ShardOptions {
    pub schema: SchemaRef,
    pub zstd_level: i32,
    pub row_group_cells: usize,
}

/// An atlas being written into a corpus (see the module doc).
pub struct AtlasWriter {
    corpus: PathBuf,
    atlas: String,
    stage: PathBuf,
    fingerprint: String,
    shards: TokenShardWriter,
    done: Vec<ShardInfo>,
    resumed: usize,
}

/// The checks before an atlas is written: a valid name, not in the corpus yet, and a corpus
/// (if there is one) that uses the same vocabulary and layout. Returns the staging directory,
/// which readers may use as scratch space before [`AtlasWriter::begin`].
pub fn prepare_atlas(corpus: &Path, atlas: &str, info: &CorpusInfo) -> Result<PathBuf> {
    let final_dir = atlas_dir(corpus, atlas);
    if final_dir.exists() {
        return Err(Error::conflict(
            &final_dir,
            format!("atlas '{atlas}' already exists in this corpus; choose another --atlas or remove it"),
        ));
    }
    if let Some(existing) = super::read_info(corpus)? {
        if &existing != info {
            let (theirs, ours) = corrflow_fs::hash::distinct_hashes(&existing.vocab_hash, &info.vocab_hash);
            return Err(Error::conflict(
                corpus.join(CORPUS_INFO),
                format!(
                    "corpus uses vocabulary '{}' ({theirs}) with layout {:?}; this ingest uses '{}' ({ours}) with {:?}",
                    existing.vocab_name, existing.layout, info.vocab_name, info.layout
                ),
            ));
        }
    }
    Ok(staging_dir(corpus, atlas))
}

impl AtlasWriter {
    /// Starts (or, with the same `fingerprint` and intact shards, resumes) writing `atlas`.
    /// `restart` discards an interrupted ingest instead of resuming it.
    pub fn begin(corpus: &Path, atlas: &str, fingerprint: &str, restart: bool, opts: ShardOptions) -> Result<Self> {
        let stage = staging_dir(corpus, atlas);
        let progress_path = stage.join(PROGRESS);
        let mut done: Vec<ShardInfo> = Vec::new();
        if stage.exists() {
            let resumable = std::fs::read_to_string(&progress_path)
                .ok()
                .and_then(|t| serde_json::from_str::<Progress>(&t).ok())
                .filter(|p| p.fingerprint == fingerprint);
            match resumable {
                Some(p) if !restart && shards_intact(&stage, &p.shards) => {
                    tracing::info!(shards = p.shards.len(), "resuming interrupted ingest of '{atlas}'");
                    done = p.shards;
                }
                Some(_) | None if !restart && progress_path.exists() => {
                    return Err(Error::conflict(
                        &stage,
                        "an interrupted ingest of this atlas with different inputs or options (or damaged shards) \
                         is here; pass --restart to discard it",
                    ));
                }
                _ => std::fs::remove_dir_all(&stage).at(&stage)?,
            }
        }
        std::fs::create_dir_all(&stage).at(&stage)?;
        let shards =
            TokenShardWriter::new(&stage, atlas, opts.schema, opts.zstd_level, opts.row_group_cells, done.len())?;
        Ok(Self {
            corpus: corpus.to_path_buf(),
            atlas: atlas.to_string(),
            stage,
            fingerprint: fingerprint.to_string(),
            shards,
            resumed: done.len(),
            done,
        })
    }

    /// Shards finished by an earlier, interrupted run.
    pub fn resumed_shards(&self) -> usize {
        self.resumed
    }

    /// Where the input resumes: (file, cell) after the last finished shard.
    pub fn resume_at(&self) -> (usize, usize) {
        self.done.last().map_or((0, 0), |s| s.resume_at)
    }

    /// Input cells read into the finished shards.
    pub fn cells_read(&self) -> u64 {
        self.done.iter().map(|s| s.cells_read).sum()
    }

    /// Whether the corpus is new (gets its vocabulary and `corpus.json` with this atlas).
    pub fn new_corpus(&self) -> bool {
        !self.corpus.join(CORPUS_INFO).exists()
    }

    /// Where a new corpus' vocabulary may be written while the shards are (see [`Self::publish`]).
    pub fn staged_vocab_dir(&self) -> PathBuf {
        self.stage.join(STAGED_VOCAB)
    }

    /// Appends cells to the open shard.
    pub fn write(&mut self, batch: TokenBatch, cells_read: u64, dropped: &DropCounts) -> Result<()> {
        self.shards.write(batch, cells_read, dropped)
    }

    /// Input cells in the open shard.
    pub fn open_cells_read(&self) -> u64 {
        self.shards.open_cells_read()
    }

    /// Commits the open shard (if any) and records it for a resume at `resume_at`. Returns the
    /// number of finished shards when one was committed.
    pub fn commit_shard(&mut self, resume_at: (usize, usize)) -> Result<Option<usize>> {
        let Some(info) = self.shards.finish_shard(resume_at)? else { return Ok(None) };
        self.done.push(info);
        let progress = Progress { fingerprint: self.fingerprint.clone(), shards: self.done.clone() };
        write_json_atomic(&self.stage.join(PROGRESS), &progress)?;
        Ok(Some(self.done.len()))
    }

    /// After a failure: the open shard is dropped; finished shards stay (hidden) for a resume,
    /// and with none finished nothing is left.
    pub fn abandon(mut self) {
        self.shards.abandon();
        if self.done.is_empty() {
            drop(self.shards);
            let _ = std::fs::remove_dir_all(&self.stage);
        }
    }

    /// Writes the manifest (`manifest` with the shards, cell and drop counts filled in), then
    /// publishes the atlas. A new corpus first gets its vocabulary (moved from
    /// [`Self::staged_vocab_dir`] when `vocab_staged`, written otherwise) and `corpus.json`.
    pub fn publish(self, mut manifest: AtlasManifest, vocab: &Vocabulary, vocab_staged: bool) -> Result<AtlasManifest> {
        manifest.cells_read = self.done.iter().map(|s| s.cells_read).sum();
        manifest.cells = self.done.iter().map(|s| s.cells).sum();
        manifest.tokens = self.done.iter().map(|s| s.tokens).sum();
        manifest.dropped = self.done.iter().fold(DropCounts::default(), |mut d, s| {
            d.add(&s.dropped);
            d
        });
        manifest.shards = self.done;
        write_json_atomic(&self.stage.join(MANIFEST), &manifest)?;
        let _ = std::fs::remove_file(self.stage.join(PROGRESS));
        let info_path = self.corpus.join(CORPUS_INFO);
        let staged_vocab = self.stage.join(STAGED_VOCAB);
        if !info_path.exists() {
            let vocab_dir = self.corpus.join(VOCAB_DIR);
            // A leftover vocabulary directory (an earlier first ingest that failed before writing
            // the corpus info) is overwritten file by file instead.
            if !(vocab_staged && !vocab_dir.exists() && std::fs::rename(&staged_vocab, &vocab_dir).is_ok()) {
                vocab.write_dir(&vocab_dir)?;
            }
            write_json_atomic(&info_path, &manifest.corpus)?;
        }
        if staged_vocab.exists() {
            std::fs::remove_dir_all(&staged_vocab).at(&staged_vocab)?;
        }
        let final_dir = atlas_dir(&self.corpus, &self.atlas);
        std::fs::rename(&self.stage, &final_dir).at(&final_dir)?;
        Ok(manifest)
    }
}

fn shards_intact(stage: &Path, shards: &[ShardInfo]) -> bool {
    shards.iter().all(|s| super::verify_shard(&stage.join(&s.file), s.bytes, &s.sha256).is_ok())
}
