//! `corrflow embed`: cell embeddings of an h5ad, streamed: the input is tokenized with the
//! model's vocabulary into a temporary corpus (bounded memory), cells are encoded in
//! length-sorted batches under a token budget, and the embeddings are written as Parquet
//! (`cell_id`, `embedding`, the requested obs columns) and optionally into a copy of the h5ad as
//! `obsm["X_corrflow"]`. The encoder is a checkpoint run by burn ([`checkpoint`]) or an
//! exported model run by ONNX Runtime ([`onnx`]).

mod checkpoint;
mod onnx;

pub use checkpoint::{load_checkpoint, LoadedModel};

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::{Array, ArrayRef, Int32Array, ListArray, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::ingest::{run_ingest, IngestRequest, ReadOptions};
use crate::runtime::{encode_in_batches, PaddedBatch};
use crate::tokenize::{TokenizeOptions, ValueTransform};
use crate::vocab::Vocabulary;
use corrflow_operators::SequenceLayout;

/// How a cell's token states become one vector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// Mean over gene positions (Geneformer's `cell` mode).
    #[default]
    Mean,
    /// The `<cls>` position (V2 layout).
    Cls,
}

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
    pub runtime: crate::runtime::RuntimeOptions,
    pub progress: bool,
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
}

/// A model that turns padded token batches into cell vectors.
trait CellVectors {
    fn name(&self) -> &'static str;
    fn vocab(&self) -> &Vocabulary;
    /// How input cells are tokenized for it (cut to the length it was trained on).
    fn layout(&self) -> SequenceLayout;
    fn dim(&self) -> usize;
    fn layer(&self) -> usize;
    /// Row-major `[rows, dim]`.
    fn encode(&mut self, batch: &PaddedBatch) -> Result<Vec<f32>>;
}

pub fn embed(req: &EmbedRequest) -> Result<EmbedSummary> {
    let start = std::time::Instant::now();
    let mut encoder: Box<dyn CellVectors> = match &req.model {
        ModelSource::Checkpoint(p) => Box::new(checkpoint::BurnVectors::open(p, req.pooling, req.layer)?),
        ModelSource::Onnx(p) => Box::new(onnx::OrtVectors::open(p, req)?),
    };
    let layout = encoder.layout();
    // Tokenize into a scratch corpus: the same reader, validation and tokenizer as ingest.
    let scratch =
        tempfile::Builder::new().prefix(".corrflow-embed-").tempdir_in(std::env::temp_dir()).at(std::env::temp_dir())?;
    let corpus = scratch.path().join("corpus");
    let ingest = run_ingest(&IngestRequest {
        corpus: corpus.clone(),
        atlas: "input".into(),
        inputs: vec![req.input.clone()],
        vocab: encoder.vocab().clone(),
        read: req.read.clone(),
        tokenize: TokenizeOptions { layout, allow_normalized: req.allow_normalized, transform: req.transform },
        shard_cells: 50_000,
        zstd_level: 1,
        restart: true,
        show_progress: false,
    })?;
    let index = crate::corpus::CorpusIndex::open(&corpus, &["input".into()])?;
    let bar = if req.progress {
        indicatif::ProgressBar::new(index.cells).with_style(
            indicatif::ProgressStyle::with_template("embed {bar:40} {pos}/{len} cells ({per_sec}, eta {eta})")
                .expect("static template"),
        )
    } else {
        indicatif::ProgressBar::hidden()
    };
    let tmp = crate::util::atomic::temp_path(&req.out);
    let dim = encoder.dim();
    let mut writer: Option<ArrowWriter<File>> = None;
    let mut all_ids: Vec<String> = Vec::new();
    let mut all_emb: Vec<f32> = Vec::new();
    let keep_all = req.h5ad_out.is_some();
    let result = (|| -> Result<()> {
        for shard in &index.shards {
            crate::corpus::for_each_shard_batch(&shard.path, |rb| {
                let emb = embed_rows(encoder.as_mut(), rb, &shard.path, req.token_budget, req.batch_size)?;
                let out = with_embedding(rb, &emb, dim, &shard.path)?;
                if writer.is_none() {
                    let f = File::create(&tmp).at(&tmp)?;
                    writer = Some(ArrowWriter::try_new(f, out.schema(), None).map_err(|e| Error::parquet(&tmp, e))?);
                }
                writer.as_mut().expect("created above").write(&out).map_err(|e| Error::parquet(&tmp, e))?;
                if keep_all {
                    let ids =
                        out.column(0).as_any().downcast_ref::<arrow_array::StringArray>().expect("cell_id column");
                    all_ids.extend((0..ids.len()).map(|i| ids.value(i).to_string()));
                    all_emb.extend_from_slice(&emb);
                }
                bar.inc(rb.num_rows() as u64);
                Ok(())
            })?;
        }
        let w = writer
            .take()
            .ok_or_else(|| Error::format(&req.input, "no cell could be tokenized with the model's vocabulary"))?;
        w.into_inner().map_err(|e| Error::parquet(&tmp, e))?.sync_all().at(&tmp)?;
        crate::util::atomic::commit(&tmp, &req.out)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    bar.finish_and_clear();
    if let Some(h5) = &req.h5ad_out {
        write_obsm(&req.input, h5, &all_ids, &all_emb, dim)?;
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(EmbedSummary {
        command: "embed".into(),
        encoder: encoder.name().into(),
        out: req.out.display().to_string(),
        cells: ingest.cells_kept,
        dropped: ingest.dropped.total(),
        dim,
        layer: encoder.layer(),
        seconds,
        cells_per_s: ingest.cells_kept as f64 / seconds.max(1e-9),
    })
}

/// Embeddings (row-major `rows × dim`) of a shard record batch, in its row order.
fn embed_rows(
    encoder: &mut dyn CellVectors,
    rb: &RecordBatch,
    path: &Path,
    token_budget: usize,
    max_rows: usize,
) -> Result<Vec<f32>> {
    let ids = rb
        .column_by_name("input_ids")
        .and_then(|c| c.as_any().downcast_ref::<ListArray>())
        .ok_or_else(|| Error::format(path, "shard has no input_ids"))?;
    let cells: Vec<Vec<u32>> = (0..rb.num_rows())
        .map(|i| {
            let v = ids.value(i);
            v.as_any()
                .downcast_ref::<Int32Array>()
                .map(|a| a.values().iter().map(|&t| t as u32).collect())
                .ok_or_else(|| Error::format(path, "input_ids are not int32"))
        })
        .collect::<Result<_>>()?;
    let (dim, pad) = (encoder.dim(), encoder.vocab().pad);
    encode_in_batches(&cells, pad, dim, token_budget, max_rows, |batch| encoder.encode(batch))
}

/// `cell_id`, `embedding` (fixed-size list of f32) and the shard's obs columns.
fn with_embedding(rb: &RecordBatch, emb: &[f32], dim: usize, path: &Path) -> Result<RecordBatch> {
    let mut list = FixedSizeListBuilder::new(Float32Builder::with_capacity(emb.len()), dim as i32);
    for row in emb.chunks(dim) {
        list.values().append_slice(row);
        list.append(true);
    }
    let mut fields = vec![
        Field::new("cell_id", DataType::Utf8, true),
        Field::new(
            "embedding",
            DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), dim as i32),
            true,
        ),
    ];
    let mut cols: Vec<ArrayRef> = vec![
        rb.column_by_name("cell_id").cloned().ok_or_else(|| Error::format(path, "shard has no cell_id"))?,
        Arc::new(list.finish()),
    ];
    for (f, c) in rb.schema().fields().iter().zip(rb.columns()) {
        if !["input_ids", "length", "cell_id", "atlas"].contains(&f.name().as_str()) {
            fields.push(f.as_ref().clone());
            cols.push(c.clone());
        }
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).map_err(|e| Error::parquet(path, e))
}

/// Copies `input` to `target` with the embeddings as `obsm["X_corrflow"]` (rows in obs order;
/// cells without embedding are NaN), written under a temporary name and renamed.
fn write_obsm(input: &Path, target: &Path, ids: &[String], emb: &[f32], dim: usize) -> Result<()> {
    use hdf5::types::VarLenUnicode;
    let tmp = crate::util::atomic::temp_path(target);
    std::fs::copy(input, &tmp).at(&tmp)?;
    let result = (|| -> Result<()> {
        let h5 = |e: hdf5::Error| Error::format(&tmp, format!("writing obsm: {e}"));
        let file = hdf5::File::open_rw(&tmp).map_err(h5)?;
        let legacy = || {
            Error::format(input, "--h5ad-out needs an AnnData ≥ 0.7 file (obs as a group with an _index attribute); this one is an older layout")
        };
        let obs = file.group("obs").map_err(|_| legacy())?;
        let index_name = crate::ingest::h5::attr_string(&obs, "_index").ok_or_else(legacy)?;
        let ds = obs.dataset(&index_name).map_err(h5)?;
        let names = crate::ingest::h5::read_strings(input, &ds, "obs index", None)?;
        let row: std::collections::HashMap<&str, usize> =
            ids.iter().enumerate().map(|(i, s)| (s.as_str(), i)).collect();
        let mut matrix = vec![f32::NAN; names.len() * dim];
        for (r, n) in names.iter().enumerate() {
            if let Some(&i) = row.get(n.as_str()) {
                matrix[r * dim..(r + 1) * dim].copy_from_slice(&emb[i * dim..(i + 1) * dim]);
            }
        }
        let obsm = match file.group("obsm") {
            Ok(g) => g,
            Err(_) => {
                let g = file.create_group("obsm").map_err(h5)?;
                for (k, v) in [("encoding-type", "dict"), ("encoding-version", "0.1.0")] {
                    let v: VarLenUnicode = v.parse().expect("ascii");
                    g.new_attr::<VarLenUnicode>().create(k).and_then(|a| a.write_scalar(&v)).map_err(h5)?;
                }
                g
            }
        };
        if obsm.link_exists("X_corrflow") {
            obsm.unlink("X_corrflow").map_err(h5)?;
        }
        let arr = ndarray::Array2::from_shape_vec((names.len(), dim), matrix)
            .map_err(|e| Error::format(&tmp, e.to_string()))?;
        let d = obsm.new_dataset_builder().with_data(&arr).create("X_corrflow").map_err(h5)?;
        for (k, v) in [("encoding-type", "array"), ("encoding-version", "0.2.0")] {
            let v: VarLenUnicode = v.parse().expect("ascii");
            d.new_attr::<VarLenUnicode>().create(k).and_then(|a| a.write_scalar(&v)).map_err(h5)?;
        }
        file.flush().map_err(h5)?;
        Ok(())
    })();
    match result {
        Ok(()) => crate::util::atomic::commit(&tmp, target),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}
