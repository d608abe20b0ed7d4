//! `corrflow demo`: the pipeline (ingest, tokenization, dependency graph, masking audit, a short
//! CorrMask pre-training of a tiny model, ONNX export, embeddings by ONNX Runtime) on the bundled dataset (1,000 real PBMCs from 10x
//! Genomics' pbmc3k, compiled into the binary), with no network access.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::corpus::{self, read_atlas_tokens};
use crate::error::{Error, IoContext, Result};
use crate::formats::ReadOptions;
use crate::fs::atomic::write_atomic;
use crate::ingest::{run_ingest, IngestRequest, IngestSummary};
use crate::tokenize::{TokenizeOptions, ValueTransform};
use crate::vocab::{Vocabulary, BUILTIN};

/// The bundled dataset (see `datasets/default/README.md`).
pub const DEFAULT_DATASET: &[u8] = include_bytes!("../datasets/default/pbmc1k.h5ad");
pub const DEFAULT_DATASET_NAME: &str = "pbmc1k.h5ad";
const MARKER: &str = ".corrflow-demo";

/// What `demo --json` prints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DemoSummary {
    pub command: String,
    pub out: String,
    pub ingest: IngestSummary,
    pub mean_tokens_per_cell: f64,
    /// Gene symbols (or ids) of the first cell's top tokens.
    pub first_cell_top_genes: Vec<String>,
    /// The dependency graph built from the bundled cells (CorrMask Algorithm 1).
    pub graph: crate::graph::BuildSummary,
    /// CD74's strongest graph neighbours (symbol, ρ_local).
    pub cd74_neighbours: Vec<(String, f64)>,
    /// Masking audit (Table 3 columns): random and CorrMask (λ 0.5).
    pub audit: Vec<crate::mask::AuditRow>,
    /// A 40-step CorrMask pre-training of a 2-layer, 64-wide model.
    pub train: crate::train::TrainSummary,
    /// The trained encoder exported to ONNX.
    pub export: crate::export::ExportSummary,
    /// The bundled cells embedded with the exported model by ONNX Runtime.
    pub embed: crate::embed::EmbedSummary,
}

/// Writes the bundled dataset to `dir` and returns its path.
pub fn write_default_dataset(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).at(dir)?;
    let p = dir.join(DEFAULT_DATASET_NAME);
    write_atomic(&p, DEFAULT_DATASET)?;
    Ok(p)
}

/// Runs the demo into `out` (recreated on each run; only a directory made by the demo is
/// ever cleared).
pub fn run_demo(out: &Path, config: &crate::config::Config, show_progress: bool) -> Result<DemoSummary> {
    prepare_out(out)?;
    let dataset = write_default_dataset(&out.join("data"))?;
    let vocab = Vocabulary::resolve(BUILTIN)?;
    let corpus_dir = out.join("corpus");
    let ingest = ingest_dataset(&dataset, &corpus_dir, &vocab, config, show_progress)?;
    let cells = read_atlas_tokens(&corpus::atlas_dir(&corpus_dir, "pbmc1k"))?;
    let symbols = vocab.symbols_by_token();
    let name = |t: u32| symbols.get(&t).cloned().unwrap_or_else(|| vocab.token(t).unwrap_or("?").to_string());
    let first_cell_top_genes =
        cells.input_ids.first().map(|t| t.iter().take(10).map(|&id| name(id)).collect()).unwrap_or_default();
    let total: usize = cells.input_ids.iter().map(Vec::len).sum();

    // The dependency graph of the bundled cells: Table 4 parameters over all 1,000 cells.
    let params = corrflow_algorithms::graph::GraphParams { n_sub: 0, ..config.graph.clone() };
    let (mut graph, mut graph_summary) = crate::graph::build_exact(&corpus_dir, &[], &params)?;
    let graph_dir = out.join("graph");
    crate::graph::write_graph(&graph_dir, &mut graph)?;
    graph_summary.out = graph_dir.display().to_string();
    let cd74_neighbours = top_neighbours(&graph, vocab.lookup("CD74").map(|m| m.token()), 5, name);

    // Masking audit: how often CorrMask masks a gene's graph partners together, against random.
    let opened = corpus::Corpus::open(&corpus_dir)?;
    let index = opened.index(&[])?;
    let ctx = crate::mask::MaskContext::load(
        &opened.info,
        &opened.vocab,
        &index,
        Some(&graph),
        &graph_dir,
        config.mask.clone(),
        false,
    )?;
    let hidden = crate::progress::Task::hidden();
    let audit = [corrflow_algorithms::mask::MaskStrategy::RANDOM, corrflow_algorithms::mask::MaskStrategy::CORRMASK]
        .into_iter()
        .map(|s| crate::mask::run_audit(&ctx.with_strategy(s, config.mask.lambda), &index, 0, None, &hidden))
        .collect::<Result<Vec<_>>>()?;

    let train = train_tiny(&corpus_dir, &graph_dir, &out.join("run"), config, show_progress)?;
    // The trained encoder as ONNX, and the bundled cells embedded by ONNX Runtime.
    let export = crate::export::export_onnx(&crate::export::ExportRequest {
        checkpoint: out.join("run"),
        out: out.join("model.onnx"),
        pooling: Some(crate::embed::Pooling::Mean),
        layer: -1,
    })?;
    let embed = embed_onnx(&out.join("model.onnx"), &dataset, &out.join("embeddings.parquet"))?;
    Ok(DemoSummary {
        command: "demo".into(),
        export,
        embed,
        out: out.display().to_string(),
        mean_tokens_per_cell: total as f64 / cells.input_ids.len().max(1) as f64,
        ingest,
        first_cell_top_genes,
        graph: graph_summary,
        cd74_neighbours,
        audit,
        train,
    })
}

/// Creates `out`, clearing it first only if an earlier demo made it.
fn prepare_out(out: &Path) -> Result<()> {
    if out.exists() {
        if !out.join(MARKER).exists() {
            return Err(Error::conflict(out, "exists and was not made by `corrflow demo`; choose another --out"));
        }
        std::fs::remove_dir_all(out).at(out)?;
    }
    std::fs::create_dir_all(out).at(out)?;
    Ok(write_atomic(&out.join(MARKER), b"made by corrflow demo\n")?)
}

/// The bundled cells into a corpus (atlas `pbmc1k`) with the built-in vocabulary.
fn ingest_dataset(
    input: &Path,
    corpus_dir: &Path,
    vocab: &Vocabulary,
    config: &crate::config::Config,
    show_progress: bool,
) -> Result<IngestSummary> {
    run_ingest(&IngestRequest {
        corpus: corpus_dir.to_path_buf(),
        atlas: "pbmc1k".into(),
        inputs: vec![input.to_path_buf()],
        vocab: vocab.clone(),
        read: ReadOptions {
            gene_column: Some("gene_ids".into()),
            obs_columns: vec!["n_counts".into()],
            chunk_cells: config.ingest.chunk_cells,
            ..ReadOptions::default()
        },
        tokenize: TokenizeOptions {
            layout: corrflow_algorithms::SequenceLayout::v1(),
            allow_normalized: false,
            transform: ValueTransform::None,
        },
        shard_cells: config.ingest.shard_cells,
        zstd_level: config.ingest.zstd_level,
        restart: false,
        show_progress,
        cancel: Default::default(),
        cell_types: None,
        expression: true,
    })
}

/// A gene's `n` strongest graph partners by |ρ_local|, named.
fn top_neighbours(
    graph: &crate::graph::Graph,
    gene: Option<u32>,
    n: usize,
    name: impl Fn(u32) -> String,
) -> Vec<(String, f64)> {
    let mut partners: Vec<(String, f64)> = graph
        .edges
        .iter()
        .filter_map(|e| match gene {
            Some(t) if e.u == t => Some((e.v, e.rho)),
            Some(t) if e.v == t => Some((e.u, e.rho)),
            _ => None,
        })
        .map(|(t, r)| (name(t), r))
        .collect();
    partners.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()).then(a.0.cmp(&b.0)));
    partners.truncate(n);
    partners
}

/// A short pre-training run of a tiny model on batches from the masking dataflow.
fn train_tiny(
    corpus_dir: &Path,
    graph_dir: &Path,
    out: &Path,
    config: &crate::config::Config,
    show_progress: bool,
) -> Result<crate::train::TrainSummary> {
    crate::train::train_on_device(&crate::train::TrainRequest {
        model: crate::model::ModelConfig { hidden: 64, ffn: 128, heads: 4, layers: 2, ..Default::default() },
        train: crate::train::TrainConfig {
            corpus: Some(corpus_dir.to_path_buf()),
            graph: Some(graph_dir.to_path_buf()),
            batch_size: 8,
            group_batches: 10,
            epochs: 1,
            max_steps: 40,
            max_len: 256,
            warmup_steps: 5,
            eval_cells: 48,
            eval_every: 40,
            checkpoint_every: 40,
            log_every: 5,
            ..Default::default()
        },
        mask: config.mask.clone(),
        out: out.to_path_buf(),
        restart: true,
        progress: show_progress,
        stop_after: None,
        profile_steps: false,
        dump_batches: None,
        hce: None,
        init_from: None,
    })
}

/// The bundled cells embedded by the exported model (ONNX Runtime).
fn embed_onnx(model: &Path, input: &Path, out: &Path) -> Result<crate::embed::EmbedSummary> {
    let cells = crate::infer::CellsRun {
        model: crate::embed::ModelSource::Onnx(model.to_path_buf()),
        input: input.to_path_buf(),
        read: ReadOptions { gene_column: Some("gene_ids".into()), ..Default::default() },
        allow_normalized: false,
        transform: ValueTransform::None,
        batching: crate::encode::Batching { token_budget: 16384, max_rows: 64 },
        runtime: Default::default(),
        progress: false,
    };
    crate::embed::embed(&crate::embed::EmbedRequest {
        cells,
        out: out.to_path_buf(),
        h5ad_out: None,
        pooling: None,
        layer: -1,
        genes: false,
    })
}
