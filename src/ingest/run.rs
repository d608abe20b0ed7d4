//! `corrflow ingest`: files → tokens → Parquet shards. Opens and validates the inputs, runs the
//! streaming [`pipeline`], then writes the manifest and publishes the atlas. Shards are
//! committed atomically and recorded in a progress file, so an interrupted ingest resumes
//! after its last finished shard.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::pipeline::pipeline;
use super::{open, CellSource, ReadOptions};
use crate::corpus::{self, AtlasManifest, CorpusInfo, DropCounts, InputFile, ShardInfo, TokenShardWriter};
use crate::error::{Error, IoContext, Result};
use crate::tokenize::{GeneMapper, TokenizeOptions};
use crate::util::atomic::write_json_atomic;
use crate::vocab::Vocabulary;

const FORMAT_VERSION: u32 = 1;
const PROGRESS: &str = "progress.json";
/// Where a new corpus's vocabulary tables are written during the ingest (in the staging dir).
const STAGED_VOCAB: &str = "vocab.staged";

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

/// What `progress.json` in the staging directory records: the finished shards of this ingest.
#[derive(Serialize, Deserialize)]
pub(super) struct Progress {
    pub(super) fingerprint: String,
    pub(super) shards: Vec<ShardInfo>,
}

/// Atlas names become directory names and Parquet values: keep them plain.
pub fn validate_atlas_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && name.len() <= 128
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "atlas name '{name}' must be 1-128 characters of A-Z a-z 0-9 . _ - and not start with '.'"
        )))
    }
}

pub(super) struct Opened {
    pub(super) source: Box<dyn CellSource>,
    pub(super) mapper: GeneMapper,
    bytes: u64,
}

/// Runs an ingest to completion (or resumes one).
pub fn run_ingest(req: &IngestRequest) -> Result<IngestSummary> {
    let started = Instant::now();
    validate_atlas_name(&req.atlas)?;
    if req.inputs.is_empty() {
        return Err(Error::Usage("ingest needs at least one input file".into()));
    }
    let final_dir = corpus::atlas_dir(&req.corpus, &req.atlas);
    if final_dir.exists() {
        return Err(Error::conflict(
            &final_dir,
            format!("atlas '{}' already exists in this corpus; choose another --atlas or remove it", req.atlas),
        ));
    }
    let info = CorpusInfo {
        format_version: FORMAT_VERSION,
        vocab_name: req.vocab.name().to_string(),
        vocab_hash: req.vocab.hash().to_string(),
        vocab_size: req.vocab.len(),
        layout: req.tokenize.layout,
    };
    let info_path = req.corpus.join(corpus::CORPUS_INFO);
    if info_path.exists() {
        let text = std::fs::read_to_string(&info_path).at(&info_path)?;
        let existing: CorpusInfo =
            serde_json::from_str(&text).map_err(|e| Error::format(&info_path, format!("invalid corpus info: {e}")))?;
        if existing != info {
            return Err(Error::conflict(
                &info_path,
                format!(
                    "corpus uses vocabulary '{}' ({}…) with layout {:?}; this ingest uses '{}' ({}…) with {:?}",
                    existing.vocab_name,
                    &existing.vocab_hash[..12],
                    existing.layout,
                    info.vocab_name,
                    &info.vocab_hash[..12],
                    info.layout
                ),
            ));
        }
    }

    // Open and validate every input before writing anything.
    let stage = corpus::staging_dir(&req.corpus, &req.atlas);
    let mut read = req.read.clone();
    read.scratch_dir = stage.clone();
    let mut opened = Vec::new();
    for path in &req.inputs {
        let source = open(path, &read)?;
        let mapper = GeneMapper::new(&req.vocab, source.gene_ids());
        if mapper.n_matched() == 0 {
            let column = read.gene_column.as_deref().unwrap_or("the var index");
            return Err(Error::format(
                path,
                format!(
                    "none of the {} genes in {column} is in vocabulary '{}' (tried Ensembl ids, unversioned ids and symbols); \
                     pick the column with gene ids using --gene-column",
                    source.gene_ids().len(),
                    req.vocab.name()
                ),
            ));
        }
        if let Some(first) = opened.first() {
            let first: &Opened = first;
            if first.source.obs_fields() != source.obs_fields() {
                return Err(Error::format(path, "obs columns have different types than in the first input"));
            }
        }
        let bytes = dir_or_file_size(path);
        opened.push(Opened { source, mapper, bytes });
    }

    let fingerprint = fingerprint(req, &opened)?;
    let progress_path = stage.join(PROGRESS);
    let mut done: Vec<ShardInfo> = Vec::new();
    if stage.exists() {
        let resumable = std::fs::read_to_string(&progress_path)
            .ok()
            .and_then(|t| serde_json::from_str::<Progress>(&t).ok())
            .filter(|p| p.fingerprint == fingerprint);
        match resumable {
            Some(p) if !req.restart && shards_intact(&stage, &p.shards) => {
                tracing::info!(shards = p.shards.len(), "resuming interrupted ingest of '{}'", req.atlas);
                done = p.shards;
            }
            Some(_) | None if !req.restart && progress_path.exists() => {
                return Err(Error::conflict(
                    &stage,
                    "an interrupted ingest of this atlas with different inputs or options (or damaged shards) is here; \
                     pass --restart to discard it",
                ));
            }
            _ => std::fs::remove_dir_all(&stage).at(&stage)?,
        }
    }
    std::fs::create_dir_all(&stage).at(&stage)?;
    let resumed = done.len();
    let resume_at = done.last().map_or((0, 0), |s| s.resume_at);

    let total_cells: u64 = opened.iter().map(|o| o.source.n_cells() as u64).sum();
    let bar = progress_bar(req.show_progress, total_cells);
    bar.set_position(done.iter().map(|s| s.cells_read).sum());

    let schema = corpus::token_schema(opened[0].source.obs_fields());
    let mut writer =
        TokenShardWriter::new(&stage, &req.atlas, schema, req.zstd_level, req.read.chunk_cells.max(1), done.len())?;
    // A new corpus also gets the vocabulary's tables: written beside the pipeline into the
    // staging directory (gone with it on failure), moved into place at the end.
    let staged_vocab = stage.join(STAGED_VOCAB);
    let (result, vocab_staged) = std::thread::scope(|s| {
        let vocab_job = (!info_path.exists()).then(|| s.spawn(|| req.vocab.write_dir(&staged_vocab).is_ok()));
        let result = pipeline(req, &mut opened, resume_at, &mut writer, &mut done, &progress_path, &fingerprint, &bar);
        (result, vocab_job.is_some_and(|j| j.join().unwrap_or(false)))
    });
    if result.is_err() {
        writer.abandon();
        // Nothing finished: leave no trace. Finished shards stay (hidden) for a resume.
        if done.is_empty() {
            drop(writer);
            let _ = std::fs::remove_dir_all(&stage);
        }
    }
    result?;
    bar.finish_and_clear();

    // All shards are in place: write the manifest, then publish the atlas directory.
    let dropped = done.iter().fold(DropCounts::default(), |mut d, s| {
        d.add(&s.dropped);
        d
    });
    let manifest = AtlasManifest {
        format_version: FORMAT_VERSION,
        atlas: req.atlas.clone(),
        corpus: info.clone(),
        tokenize: req.tokenize,
        counts: read.counts.to_string(),
        gene_column: read.gene_column.clone(),
        obs_columns: opened[0].source.obs_fields().to_vec(),
        inputs: opened
            .iter()
            .map(|o| InputFile {
                path: o.source.path().display().to_string(),
                format: o.source.format().to_string(),
                bytes: o.bytes,
                cells: o.source.n_cells() as u64,
                genes: o.mapper.stats.clone(),
            })
            .collect(),
        cells_read: done.iter().map(|s| s.cells_read).sum(),
        cells: done.iter().map(|s| s.cells).sum(),
        tokens: done.iter().map(|s| s.tokens).sum(),
        dropped,
        shards: done,
        created_by: format!("corrflow {}", env!("CARGO_PKG_VERSION")),
    };
    drop(opened);
    write_json_atomic(&stage.join(corpus::MANIFEST), &manifest)?;
    let _ = std::fs::remove_file(&progress_path);
    if !info_path.exists() {
        let vocab_dir = req.corpus.join("vocab");
        // A leftover vocabulary directory (an earlier first ingest that failed before writing
        // the corpus info) is overwritten file by file instead.
        if !(vocab_staged && !vocab_dir.exists() && std::fs::rename(&staged_vocab, &vocab_dir).is_ok()) {
            req.vocab.write_dir(&vocab_dir)?;
        }
        write_json_atomic(&info_path, &info)?;
    }
    if staged_vocab.exists() {
        std::fs::remove_dir_all(&staged_vocab).at(&staged_vocab)?;
    }
    std::fs::rename(&stage, &final_dir).at(&final_dir)?;

    let seconds = started.elapsed().as_secs_f64();
    let input_bytes: u64 = manifest.inputs.iter().map(|i| i.bytes).sum();
    Ok(IngestSummary {
        command: "ingest".into(),
        atlas: req.atlas.clone(),
        corpus: req.corpus.display().to_string(),
        cells_read: manifest.cells_read,
        cells_kept: manifest.cells,
        dropped: manifest.dropped.clone(),
        tokens: manifest.tokens,
        shards: manifest.shards.len(),
        resumed_shards: resumed,
        input_bytes,
        seconds,
        cells_per_s: manifest.cells_read as f64 / seconds.max(1e-9),
        mb_per_s: input_bytes as f64 / 1e6 / seconds.max(1e-9),
        peak_rss_mb: crate::util::peak_rss_bytes().map(|b| b as f64 / 1e6),
    })
}

fn progress_bar(show: bool, total: u64) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} ingest [{bar:30}] {pos}/{len} cells {per_sec} eta {eta}")
            .expect("static template") // ok: invariant
            .progress_chars("=> "),
    );
    bar
}

fn shards_intact(stage: &Path, shards: &[ShardInfo]) -> bool {
    shards.iter().all(|s| {
        let p = stage.join(&s.file);
        std::fs::metadata(&p).is_ok_and(|m| m.len() == s.bytes)
            && crate::util::sha256_file(&p).is_ok_and(|h| h == s.sha256)
    })
}

fn dir_or_file_size(path: &Path) -> u64 {
    if path.is_dir() {
        std::fs::read_dir(path)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.metadata().ok())
            .filter(|m| m.is_file())
            .map(|m| m.len())
            .sum()
    } else {
        std::fs::metadata(path).map_or(0, |m| m.len())
    }
}

/// Identifies an ingest: inputs (path, size, modification time) and every option that changes
/// the output. A resume is only allowed with the same fingerprint.
fn fingerprint(req: &IngestRequest, opened: &[Opened]) -> Result<String> {
    let inputs: Vec<_> = req
        .inputs
        .iter()
        .zip(opened)
        .map(|(p, o)| {
            let mtime = std::fs::metadata(p).and_then(|m| m.modified()).ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
            serde_json::json!({"path": p.display().to_string(), "bytes": o.bytes, "mtime": mtime.map(|d| d.as_nanos().to_string())})
        })
        .collect();
    let key = serde_json::json!({
        "inputs": inputs,
        "vocab": req.vocab.hash(),
        "tokenize": req.tokenize,
        "counts": req.read.counts.to_string(),
        "gene_column": req.read.gene_column,
        "obs_columns": req.read.obs_columns,
        "chunk_cells": req.read.chunk_cells,
        "shard_cells": req.shard_cells,
        "zstd_level": req.zstd_level,
    });
    Ok(hex::encode(Sha256::digest(key.to_string().as_bytes())))
}
