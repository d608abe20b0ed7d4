//! `corrflow ingest`: files → tokens → Parquet shards. Opens and validates the inputs, runs the
//! streaming [`pipeline`], then writes the manifest and publishes the atlas. Shards are
//! committed atomically and recorded in a progress file, so an interrupted ingest resumes
//! after its last finished shard.

use std::path::Path;
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::pipeline::pipeline;
use super::request::{CellTypeReport, IngestRequest, IngestSummary, Opened};
use super::{duplicates, hints};
use crate::corpus::{
    self, prepare_atlas, AtlasManifest, AtlasWriter, CorpusInfo, DropCounts, ExpressionInfo, InputFile, ShardOptions,
};
use crate::error::{Error, Result};
use crate::formats::{open, ReadOptions};
use crate::ontology::map::{CellTypeMapping, CL_ID_COLUMN};
use crate::progress::Task;
use crate::tokenize::{GeneMapper, MappingStats};
use corrflow_fs::lock::DirLock;

const FORMAT_VERSION: u32 = 1;

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

/// Runs an ingest to completion (or resumes one).
pub fn run_ingest(req: &IngestRequest) -> Result<IngestSummary> {
    let started = Instant::now();
    validate_atlas_name(&req.atlas)?;
    if req.inputs.is_empty() {
        return Err(Error::Usage("ingest needs at least one input file".into()));
    }
    let info = CorpusInfo {
        format_version: FORMAT_VERSION,
        vocab_name: req.vocab.name().to_string(),
        vocab_hash: req.vocab.hash().to_string(),
        vocab_size: req.vocab.len(),
        layout: req.tokenize.layout,
    };
    // One writer per atlas: a second ingest of the same atlas is refused while this one runs.
    let _lock = DirLock::beside(&corpus::atlas_dir(&req.corpus, &req.atlas), &format!("ingest --atlas {}", req.atlas))?;
    let stage = prepare_atlas(&req.corpus, &req.atlas, &info)?;
    // Open and validate every input before writing anything (readers transposing out of core
    // use the staging directory as scratch space).
    let mut read = req.read.clone();
    read.scratch_dir = stage;
    let mut opened = open_inputs(req, &read)?;
    let fingerprint = fingerprint(req, &opened)?;
    let shard_options = ShardOptions {
        schema: corpus::token_schema(&req.stored_obs_fields(opened[0].source.obs_fields()), req.expression),
        zstd_level: req.zstd_level,
        row_group_cells: req.read.chunk_cells.max(1),
    };
    let mut writer = AtlasWriter::begin(&req.corpus, &req.atlas, &fingerprint, req.restart, shard_options)?;
    let resumed = writer.resumed_shards();
    let total_cells: u64 = opened.iter().map(|o| o.source.n_cells() as u64).sum();
    let bar = Task::start(req.show_progress, "ingest", "cells", Some(total_cells), writer.cells_read());

    // A new corpus also gets the vocabulary's tables: written beside the pipeline into the
    // staging directory (gone with it on failure), moved into place at the end.
    let staged_vocab = writer.staged_vocab_dir();
    let (result, vocab_staged, hashes) = std::thread::scope(|s| {
        let vocab_job = writer.new_corpus().then(|| s.spawn(|| req.vocab.write_dir(&staged_vocab).is_ok()));
        // The inputs' content hashes, beside the pipeline (one core; reading from the page
        // cache the pipeline fills), to recognise an input ingested twice.
        let hash_job = s.spawn(|| req.inputs.iter().map(|p| duplicates::content_sha256(p).ok()).collect::<Vec<_>>());
        let result = pipeline(req, &mut opened, &mut writer, &bar);
        let hashes = hash_job.join().unwrap_or_default();
        (result, vocab_job.is_some_and(|j| j.join().unwrap_or(false)), hashes)
    });
    if let Err(e) = result {
        writer.abandon();
        return Err(hints::with_counts_hint(e, &req.read.counts));
    }
    bar.finish();

    // All shards are in place: write the manifest, then publish the atlas directory.
    let mut manifest = manifest_template(req, info, &read, &opened);
    for (input, sha) in manifest.inputs.iter_mut().zip(hashes) {
        input.sha256 = sha;
    }
    let mut warnings = duplicates::duplicate_inputs(&req.corpus, &req.atlas, &manifest.inputs);
    let mut genes = MappingStats::default();
    for o in &opened {
        genes.add(&o.mapper.stats);
        let column = req.read.gene_column.as_deref();
        warnings.extend(hints::gene_column_hint(o.source.path(), column, &o.mapper.stats, &req.vocab));
    }
    drop(opened);
    let manifest = writer.publish(manifest, &req.vocab, vocab_staged)?;

    summarize(req, &manifest, resumed, started, genes, warnings)
}

/// The summary of a finished ingest, from its published manifest.
fn summarize(
    req: &IngestRequest,
    manifest: &AtlasManifest,
    resumed_shards: usize,
    started: Instant,
    genes: MappingStats,
    warnings: Vec<String>,
) -> Result<IngestSummary> {
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
        resumed_shards,
        input_bytes,
        seconds,
        cells_per_s: manifest.cells_read as f64 / seconds.max(1e-9),
        mb_per_s: input_bytes as f64 / 1e6 / seconds.max(1e-9),
        peak_rss_mb: crate::util::peak_rss_bytes().map(|b| b as f64 / 1e6),
        cell_types: req.cell_types.as_ref().map(|m| cell_type_report(req, m)).transpose()?,
        genes,
        warnings,
    })
}

/// Counts, over the published atlas, the cells `--cell-type-map` gave an id, left unmapped
/// (by label) or found without a label.
fn cell_type_report(req: &IngestRequest, map: &CellTypeMapping) -> Result<CellTypeReport> {
    let index = corpus::CorpusIndex::open(&req.corpus, std::slice::from_ref(&req.atlas))?;
    let labels = corpus::CellLabels::read(&index, &map.column)?;
    let ids = corpus::CellLabels::read(&index, CL_ID_COLUMN)?;
    let mut report =
        CellTypeReport { column: map.column.clone(), map: map.path.display().to_string(), ..Default::default() };
    for key in 0..index.cells {
        match (labels.name(key), ids.name(key)) {
            (_, Some(_)) => report.mapped_cells += 1,
            (Some(label), None) => *report.unmapped.entry(label.to_string()).or_insert(0) += 1,
            (None, None) => report.missing += 1,
        }
    }
    Ok(report)
}

/// The atlas' manifest without its shards and counts (the writer fills those in).
fn manifest_template(req: &IngestRequest, info: CorpusInfo, read: &ReadOptions, opened: &[Opened]) -> AtlasManifest {
    AtlasManifest {
        format_version: FORMAT_VERSION,
        atlas: req.atlas.clone(),
        corpus: info,
        tokenize: req.tokenize,
        counts: read.counts.to_string(),
        gene_column: read.gene_column.clone(),
        obs_columns: req.stored_obs_fields(opened[0].source.obs_fields()),
        inputs: opened
            .iter()
            .map(|o| InputFile {
                path: o.source.path().display().to_string(),
                format: o.source.format().to_string(),
                bytes: o.bytes,
                cells: o.source.n_cells() as u64,
                genes: o.mapper.stats.clone(),
                sha256: None,
                selection: o.source.selection(),
            })
            .collect(),
        cells_read: 0,
        cells: 0,
        tokens: 0,
        dropped: DropCounts::default(),
        shards: Vec::new(),
        created_by: format!("corrflow {}", env!("CARGO_PKG_VERSION")),
        expression: req
            .expression
            .then(|| ExpressionInfo::of_inputs(&opened.iter().map(|o| o.mapper.measured_tokens()).collect::<Vec<_>>())),
    }
}

/// Opens every input and maps its genes onto the vocabulary; all inputs must have the same obs
/// columns.
fn open_inputs(req: &IngestRequest, read: &ReadOptions) -> Result<Vec<Opened>> {
    let mut opened: Vec<Opened> = Vec::new();
    for path in &req.inputs {
        let source = open(path, read)?;
        if source.n_cells() == 0 {
            return Err(Error::format(path, "has no cells (0 rows): nothing to ingest"));
        }
        let mapper = GeneMapper::new(&req.vocab, source.gene_ids());
        if mapper.n_matched() == 0 {
            return Err(no_gene_matched(req, read, source.as_ref()));
        }
        if opened.first().is_some_and(|first| first.source.obs_fields() != source.obs_fields()) {
            return Err(Error::format(path, "obs columns have different types than in the first input"));
        }
        let bytes = dir_or_file_size(path);
        opened.push(Opened { source, mapper, bytes });
    }
    Ok(opened)
}

/// The error for an input none of whose genes is in the vocabulary, naming the gene column read
/// as the format calls it (10x and MatrixMarket files have features, loom files row attributes,
/// not a var index) and the columns `--gene-column` can pick there.
fn no_gene_matched(req: &IngestRequest, read: &ReadOptions, source: &dyn crate::formats::CellSource) -> Error {
    let features = matches!(source.format(), "10x h5" | "MatrixMarket");
    let (column, choice) = match (read.gene_column.as_deref(), features) {
        (Some(c), _) => (format!("gene column '{c}'"), "another column"),
        // Loom: the row attribute the reader chose.
        (None, _) if source.gene_column().is_some() => {
            (source.gene_column().unwrap_or_default().to_string(), "another row attribute")
        }
        (None, true) => ("the features' 'id' column".to_string(), "'name' (symbols)"),
        (None, false) => ("the var index".to_string(), "the var column with gene ids or symbols"),
    };
    Error::format(
        source.path(),
        format!(
            "none of the {} genes in {column} is in vocabulary '{}' (tried Ensembl ids, unversioned ids and \
             symbols); pick {choice} with --gene-column",
            source.gene_ids().len(),
            req.vocab.name()
        ),
    )
}
/// The bytes of an input: a file's size, or every file under a directory (a MatrixMarket
/// directory, or a zarr store's nested chunks; links inside are not followed).
fn dir_or_file_size(path: &Path) -> u64 {
    fn tree(dir: &Path) -> u64 {
        let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
        entries
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => tree(&e.path()),
                Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
                _ => 0,
            })
            .sum()
    }
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => tree(path),
        Ok(m) => m.len(),
        Err(_) => 0,
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
            let mut input = serde_json::json!({"path": p.display().to_string(), "bytes": o.bytes, "mtime": mtime.map(|d| d.as_nanos().to_string())});
            // Only when there is one, so that interrupted ingests of files still resume.
            if let Some(selection) = o.source.selection() {
                input["selection"] = selection.into();
            }
            input
        })
        .collect();
    let mut key = serde_json::json!({
        "inputs": inputs,
        "vocab": req.vocab.hash(),
        "tokenize": req.tokenize,
        "counts": req.read.counts.to_string(),
        "gene_column": req.read.gene_column,
        "obs_columns": req.read.obs_columns,
        "chunk_cells": req.read.chunk_cells,
        "shard_cells": req.shard_cells,
        "zstd_level": req.zstd_level,
        "cell_type_map": req.cell_types.as_ref().map(|m| &m.sha256),
        "filter_pass": req.read.filter_pass,
        // Shards keep each cell's expression since value models: a staged ingest from before
        // them has shards without it, which this one must not continue.
        "expression": req.expression,
    });
    // Only when given, so that ingests interrupted before the flag existed still resume.
    if let Some(names) = &req.read.cell_names {
        key["loom_cell_names"] = names.clone().into();
    }
    Ok(hex::encode(Sha256::digest(key.to_string().as_bytes())))
}
