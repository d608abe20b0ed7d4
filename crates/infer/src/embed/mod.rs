//! `corrflow embed`: cell embeddings of an h5ad, streamed: the input is tokenized with the
//! model's vocabulary into a temporary corpus (bounded memory), cells are encoded in
//! length-sorted batches under a token budget, and the embeddings are written as Parquet
//! (`cell_id`, `embedding`, the requested obs columns) and optionally into a copy of the h5ad as
//! `obsm["X_corrflow"]`. The encoder is whatever backend the [registry](crate::registry) opens
//! for the model source: a checkpoint run by burn, or an exported model run by ONNX Runtime. A
//! fine-tuned cell classifier adds each cell's `predicted_label`, its `probability` and every
//! class's `probabilities`.

mod genes;
mod scratch;

pub(crate) use scratch::ScratchCells;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use serde::{Deserialize, Serialize};

use crate::cells_run::CellsRun;
use crate::encode::{encode_cells, split_probabilities, Batching, Encoder, ModelCells, Output};
pub use crate::registry::ModelSource;
use crate::registry::{open_encoder, OpenOptions};
use corrflow_io::corpus::columns::{is_obs_column, missing, CELL_ID};
use corrflow_io::corpus::CorpusIndex;
use corrflow_io::error::{Error, IoContext, Result};
use corrflow_io::formats::obsm::write_obsm;
use corrflow_io::formats::ReadOptions;
use corrflow_io::ingest::{run_ingest, IngestRequest};
use corrflow_io::progress::Task;
use corrflow_io::tokenize::{TokenizeOptions, ValueTransform};
use corrflow_io::util::parquet_out::ParquetOut;

pub use crate::model_meta::Pooling;

#[derive(Clone, Debug)]
pub struct EmbedRequest {
    pub cells: CellsRun,
    pub out: PathBuf,
    pub h5ad_out: Option<PathBuf>,
    /// Checkpoints: mean (default) or cls. ONNX models pool as exported; a different request is
    /// an error.
    pub pooling: Option<Pooling>,
    /// Encoder layer whose states are pooled (counted from 1; 0 = the embeddings); negative
    /// counts from the end (−1 = the last layer, Geneformer's −1 = our −2). ONNX models: −1.
    pub layer: i64,
    /// Gene embeddings (Geneformer's `gene` mode) instead of cell embeddings.
    pub genes: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EmbedSummary {
    pub command: String,
    /// burn (checkpoint) or onnxruntime.
    pub encoder: String,
    pub out: String,
    pub cells: u64,
    pub dropped: u64,
    pub dim: usize,
    pub layer: usize,
    pub seconds: f64,
    pub cells_per_s: f64,
    /// `embed --genes`: genes written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub genes: Option<usize>,
    /// What the reader should not miss: cells without an embedding (and where they are NaN),
    /// genes matched by symbol where a column of ids would match more.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// corrflow's layer number (`--layer`: 1..=layers, 0 = embeddings, −1 = last) of Geneformer's
/// `emb_layer` (0 = last, −1 = second to last): Geneformer pools `hidden_states[n_layers +
/// emb_layer]`, and corrflow's negative layers count from `n_layers + 1`.
pub fn layer_from_emb_layer(emb_layer: i64) -> i64 {
    emb_layer - 1
}

pub fn embed(req: &EmbedRequest) -> Result<EmbedSummary> {
    let start = std::time::Instant::now();
    // Fail before computing anything when the outputs cannot be written.
    corrflow_fs::atomic::check_writable(&req.out)?;
    if let Some(h5) = &req.h5ad_out {
        corrflow_fs::atomic::check_writable(h5)?;
        corrflow_io::formats::check_editable(&req.cells.input)?;
    }
    let opts = OpenOptions { pooling: req.pooling, layer: req.layer, runtime: req.cells.runtime.clone() };
    let mut encoder = open_encoder(&req.cells.model, &opts)?;
    crate::encode::check_batch_memory(encoder.as_ref(), req.cells.batching.token_budget)?;
    if req.genes {
        if encoder.config().and_then(crate::inputs::value_settings).is_some() {
            return Err(Error::Usage(
                "embed --genes: gene embeddings (Geneformer's gene mode) are for rank models; this is a value model"
                    .into(),
            ));
        }
        return genes::embed_genes(req, encoder.as_mut(), start);
    }
    let (_scratch, index, ingest) = tokenize_input(
        &req.cells.input,
        &req.cells.read,
        req.cells.allow_normalized,
        req.cells.transform,
        encoder.as_ref(),
        req.cells.progress,
    )?;
    let bar = progress_bar(req.cells.progress, index.cells, "embed");
    let source = ScratchCells::for_model(encoder.as_ref(), &index)?;
    let dim = encoder.dim();
    let classes = encoder.classes().to_vec();
    let mut out = ParquetOut::new(&req.out);
    let mut all_ids: Vec<String> = Vec::new();
    let mut all_emb: Vec<f32> = Vec::new();
    let keep_all = req.h5ad_out.is_some();
    for shard in &index.shards {
        source.for_each_batch(&shard.path, |rb| {
            let cells = source.cells(rb, &shard.path)?;
            let rows = embed_rows(encoder.as_mut(), &cells, req.cells.batching, &bar)?;
            let (emb, probs) = split_probabilities(rows, dim, classes.len());
            let batch = with_embedding(rb, &emb, dim, &shard.path, &classes, &probs)?;
            out.write(&batch)?;
            if keep_all {
                let ids = batch.column(0).as_any().downcast_ref::<arrow_array::StringArray>().expect("cell_id column");
                all_ids.extend((0..ids.len()).map(|i| ids.value(i).to_string()));
                all_emb.extend_from_slice(&emb);
            }
            Ok(())
        })?;
    }
    out.finish(|| Error::format(&req.cells.input, "no cell could be tokenized with the model's vocabulary"))?;
    bar.finish();
    if let Some(h5) = &req.h5ad_out {
        write_obsm(&req.cells.input, h5, &all_ids, &all_emb, dim)?;
    }
    Ok(EmbedSummary::of(req, encoder.as_ref(), &ingest, start, None))
}

impl EmbedSummary {
    /// The summary of a finished `embed` (of cells, or of `genes` genes).
    fn of(
        req: &EmbedRequest,
        encoder: &dyn Encoder,
        ingest: &corrflow_io::ingest::IngestSummary,
        start: std::time::Instant,
        genes: Option<usize>,
    ) -> Self {
        let seconds = start.elapsed().as_secs_f64();
        let mut warnings = ingest.warnings.clone();
        let empty = ingest.dropped.no_vocabulary_genes;
        if empty > 0 && genes.is_none() {
            let mut w = format!(
                "{empty} of {} cells express no gene of the model's vocabulary: they have no embedding and are not in {}",
                ingest.cells_read,
                req.out.display()
            );
            if let Some(h5) = &req.h5ad_out {
                w.push_str(&format!(
                    "; their rows of obsm['X_corrflow'] in {} are NaN (scanpy's neighbors refuses NaN: keep the \
                     others with adata = adata[~np.isnan(adata.obsm['X_corrflow']).any(axis=1)])",
                    h5.display()
                ));
            }
            warnings.push(w);
        }
        Self {
            command: if genes.is_some() { "embed --genes" } else { "embed" }.into(),
            encoder: encoder.name().into(),
            out: req.out.display().to_string(),
            cells: ingest.cells_kept,
            dropped: ingest.dropped.total(),
            dim: encoder.dim(),
            layer: encoder.layer(),
            seconds,
            cells_per_s: ingest.cells_kept as f64 / seconds.max(1e-9),
            genes,
            warnings,
        }
    }
}

/// A progress task over `cells` (heard by no one without `show`).
pub(crate) fn progress_bar(show: bool, cells: u64, what: &str) -> Task {
    Task::start(show, what, "cells", Some(cells), 0)
}

/// The input tokenized with the encoder's vocabulary and layout into a scratch corpus (the same
/// reader, validation and tokenizer as ingest; bounded memory), removed when the guard drops.
pub(crate) fn tokenize_input(
    input: &Path,
    read: &ReadOptions,
    allow_normalized: bool,
    transform: ValueTransform,
    encoder: &dyn Encoder,
    progress: bool,
) -> Result<(tempfile::TempDir, CorpusIndex, corrflow_io::ingest::IngestSummary)> {
    let scratch =
        tempfile::Builder::new().prefix(".corrflow-embed-").tempdir_in(std::env::temp_dir()).at(std::env::temp_dir())?;
    let corpus = scratch.path().join("corpus");
    let ingest = run_ingest(&IngestRequest {
        corpus: corpus.clone(),
        atlas: "input".into(),
        inputs: vec![input.to_path_buf()],
        vocab: encoder.vocab().clone(),
        read: read.clone(),
        tokenize: TokenizeOptions { layout: encoder.layout(), allow_normalized, transform },
        shard_cells: 50_000,
        zstd_level: 1,
        restart: true,
        show_progress: progress,
        cancel: Default::default(),
        cell_types: None,
        expression: true,
    })?;
    let index = CorpusIndex::open(&corpus, &["input".into()])?;
    Ok((scratch, index, ingest))
}

/// Embeddings of a shard record batch, in its row order, each followed by the class
/// probabilities of a cell classifier: row-major `rows × (dim + classes)`.
/// The bar moves with each model batch: a shard's record batch can hold every cell of the input.
fn embed_rows(encoder: &mut dyn Encoder, cells: &ModelCells, batching: Batching, bar: &Task) -> Result<Vec<f32>> {
    encode_cells(encoder, cells, batching, Output::WithProbabilities, |rows| bar.inc(rows as u64))
}

/// `cell_id`, `embedding` (fixed-size list of f32), with a cell classifier `predicted_label`,
/// `probability` and `probabilities`, and the shard's obs columns.
fn with_embedding(
    rb: &RecordBatch,
    emb: &[f32],
    dim: usize,
    path: &Path,
    classes: &[String],
    probs: &[f32],
) -> Result<RecordBatch> {
    let mut list = FixedSizeListBuilder::new(Float32Builder::with_capacity(emb.len()), dim as i32);
    for row in emb.chunks(dim) {
        list.values().append_slice(row);
        list.append(true);
    }
    let mut fields = vec![
        Field::new(CELL_ID, DataType::Utf8, true),
        Field::new(
            "embedding",
            DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), dim as i32),
            true,
        ),
    ];
    let mut cols: Vec<ArrayRef> =
        vec![rb.column_by_name(CELL_ID).cloned().ok_or_else(|| missing(path, CELL_ID))?, Arc::new(list.finish())];
    if !classes.is_empty() {
        let k = classes.len();
        let best: Vec<usize> = probs.chunks(k).map(corrflow_algorithms::classes::argmax).collect();
        let mut list = FixedSizeListBuilder::new(Float32Builder::with_capacity(probs.len()), k as i32);
        for row in probs.chunks(k) {
            list.values().append_slice(row);
            list.append(true);
        }
        fields.extend([
            Field::new("predicted_label", DataType::Utf8, false),
            Field::new("probability", DataType::Float32, false),
            Field::new(
                "probabilities",
                DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), k as i32),
                true,
            ),
        ]);
        cols.push(Arc::new(arrow_array::StringArray::from_iter_values(best.iter().map(|&c| classes[c].as_str()))));
        cols.push(Arc::new(arrow_array::Float32Array::from_iter_values(
            best.iter().enumerate().map(|(i, &c)| probs[i * k + c]),
        )));
        cols.push(Arc::new(list.finish()));
    }
    for (f, c) in rb.schema().fields().iter().zip(rb.columns()) {
        if is_obs_column(f.name()) {
            fields.push(f.as_ref().clone());
            cols.push(c.clone());
        }
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).map_err(|e| Error::parquet(path, e))
}
