//! `corrflow embed`: cell embeddings of an h5ad, streamed: the input is tokenized with the
//! model's vocabulary into a temporary corpus (bounded memory), cells are encoded in
//! length-sorted batches under a token budget, and the embeddings are written as Parquet
//! (`cell_id`, `embedding`, the requested obs columns) and optionally into a copy of the h5ad as
//! `obsm["X_corrflow"]`. The encoder is a checkpoint run by burn ([`checkpoint`]) or an
//! exported model run by ONNX Runtime ([`onnx`]). A fine-tuned cell classifier adds each cell's
//! `predicted_label`, its `probability` and every class's `probabilities`.

mod genes;

pub use corrflow_model::{load_checkpoint, LoadedModel};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use serde::{Deserialize, Serialize};

use corrflow_io::corpus::columns::{is_obs_column, missing, InputIds, CELL_ID};
use corrflow_io::corpus::{for_each_shard_batch, CorpusIndex};
use corrflow_io::encode::{encode_in_batches, split_probabilities, Encoder};
use corrflow_io::error::{Error, IoContext, Result};
use corrflow_io::formats::obsm::write_obsm;
use corrflow_io::formats::ReadOptions;
use corrflow_io::ingest::{run_ingest, IngestRequest};
use corrflow_io::tokenize::{TokenizeOptions, ValueTransform};
use corrflow_io::util::parquet_out::ParquetOut;
use corrflow_model::BurnEncoder;
use corrflow_serve::runtime::{OrtEncoder, RuntimeOptions};

pub use corrflow_io::model_meta::Pooling;

/// Which model computes the embeddings.
#[derive(Clone, Debug)]
pub enum ModelSource {
    /// A training checkpoint (or run directory), run by burn on the CPU.
    Checkpoint(PathBuf),
    /// A model written by `export onnx`, run by ONNX Runtime.
    Onnx(PathBuf),
}

#[derive(Clone, Debug)]
pub struct EmbedRequest {
    pub model: ModelSource,
    pub input: PathBuf,
    pub out: PathBuf,
    pub h5ad_out: Option<PathBuf>,
    pub read: ReadOptions,
    pub allow_normalized: bool,
    pub transform: ValueTransform,
    /// Checkpoints: mean (default) or cls. ONNX models pool as exported; a different request is
    /// an error.
    pub pooling: Option<Pooling>,
    /// Encoder layer whose states are pooled (counted from 1; 0 = the embeddings); negative
    /// counts from the end (−1 = the last layer, Geneformer's −1 = our −2). ONNX models: −1.
    pub layer: i64,
    /// Most cells per batch.
    pub batch_size: usize,
    /// Most padded tokens per batch (rows × longest cell).
    pub token_budget: usize,
    pub runtime: RuntimeOptions,
    pub progress: bool,
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

/// Opens the encoder a request names: a checkpoint run by burn, or an exported model run by
/// ONNX Runtime. A new backend is registered here.
pub fn open_encoder(
    model: &ModelSource,
    pooling: Option<Pooling>,
    layer: i64,
    runtime: &RuntimeOptions,
) -> Result<Box<dyn Encoder>> {
    Ok(match model {
        ModelSource::Checkpoint(p) => Box::new(BurnEncoder::open(p, pooling, layer)?),
        ModelSource::Onnx(p) => Box::new(open_onnx(p, pooling, layer, runtime)?),
    })
}

/// An exported model for `embed`: it pools as exported and gives its last layer's states.
fn open_onnx(path: &Path, pooling: Option<Pooling>, layer: i64, runtime: &RuntimeOptions) -> Result<OrtEncoder> {
    let encoder = OrtEncoder::open(path, runtime)?;
    let meta = &encoder.meta;
    if pooling.is_some_and(|p| p != meta.pooling) {
        return Err(Error::Usage(format!(
            "{} pools {:?}; re-export it with --pooling to change that",
            path.display(),
            meta.pooling
        )));
    }
    if layer != -1 && layer != meta.model.layers as i64 {
        return Err(Error::Usage(
            "--layer applies to checkpoints; an exported model gives the states of the layer it was exported at \
             (re-export it with `corrflow export onnx --layer N` or `--emb-layer N`)"
                .into(),
        ));
    }
    Ok(encoder)
}

pub fn embed(req: &EmbedRequest) -> Result<EmbedSummary> {
    let start = std::time::Instant::now();
    // Fail before computing anything when the outputs cannot be written.
    corrflow_io::util::atomic::check_writable(&req.out)?;
    if let Some(h5) = &req.h5ad_out {
        corrflow_io::util::atomic::check_writable(h5)?;
        corrflow_io::formats::check_editable(&req.input)?;
    }
    let mut encoder = open_encoder(&req.model, req.pooling, req.layer, &req.runtime)?;
    corrflow_io::encode::check_batch_memory(encoder.as_ref(), req.token_budget)?;
    if req.genes {
        return genes::embed_genes(req, encoder.as_mut(), start);
    }
    let (_scratch, index, ingest) =
        tokenize_input(&req.input, &req.read, req.allow_normalized, req.transform, encoder.as_ref(), req.progress)?;
    let bar = progress_bar(req.progress, index.cells, "embed");
    let dim = encoder.dim();
    let classes = encoder.classes().to_vec();
    let mut out = ParquetOut::new(&req.out);
    let mut all_ids: Vec<String> = Vec::new();
    let mut all_emb: Vec<f32> = Vec::new();
    let keep_all = req.h5ad_out.is_some();
    for shard in &index.shards {
        for_each_shard_batch(&shard.path, |rb| {
            let rows = embed_rows(encoder.as_mut(), rb, &shard.path, (req.token_budget, req.batch_size), &bar)?;
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
    out.finish(|| Error::format(&req.input, "no cell could be tokenized with the model's vocabulary"))?;
    bar.finish_and_clear();
    if let Some(h5) = &req.h5ad_out {
        write_obsm(&req.input, h5, &all_ids, &all_emb, dim)?;
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

/// A progress bar over `cells` (hidden without `show`).
pub(crate) fn progress_bar(show: bool, cells: u64, what: &str) -> indicatif::ProgressBar {
    let template = format!("{what} {{bar:40}} {{pos}}/{{len}} cells ({{per_sec}}, eta {{eta}})");
    corrflow_io::util::progress::bar(show, cells, what, "cells", &template)
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
    })?;
    let index = CorpusIndex::open(&corpus, &["input".into()])?;
    Ok((scratch, index, ingest))
}

/// Embeddings of a shard record batch, in its row order, each followed by the class
/// probabilities of a cell classifier: row-major `rows × (dim + classes)`.
/// The bar moves with each model batch: a shard's record batch can hold every cell of the input.
fn embed_rows(
    encoder: &mut dyn Encoder,
    rb: &RecordBatch,
    path: &Path,
    (token_budget, max_rows): (usize, usize),
    bar: &indicatif::ProgressBar,
) -> Result<Vec<f32>> {
    let cells = InputIds::of(rb, path)?.cells()?;
    let (width, pad) = (encoder.dim() + encoder.classes().len(), encoder.vocab().pad);
    encode_in_batches(&cells, pad, width, token_budget, max_rows, |batch| {
        let rows = encoder.encode_with_probabilities(batch);
        bar.inc(batch.rows as u64);
        rows
    })
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
