//! What a value model trains on, validated and opened once: every atlas must keep expression
//! (else: ingest again), the decoding set resolved from `model.values.decode`, the vocabulary
//! with a `<cls>` token, and the data plan that reads cells with their expression.

use std::sync::Arc;

use corrflow_algorithms::SequenceLayout;
use corrflow_infer::model_meta::ModelConfig;
use corrflow_io::corpus::{CellLabels, Corpus};
use corrflow_io::error::{Error, Result};
use corrflow_io::vocab::Vocabulary;
use corrflow_mask::plan::DataPlan;
use corrflow_mask::MaskContext;

use crate::length::RunLength;
use crate::run::TrainRequest;
use corrflow_mask::values::{atlas_measured, decoding_set, CellAtlases, VisibleFrom};

/// A value model's run, resolved.
pub(crate) struct ValueSetup {
    /// The corpus' vocabulary with `<cls>` (and `<eos>`) added when it has none.
    pub vocab: Vocabulary,
    /// The layout checkpoints record: `<cls>` first, then at most `inference_genes` genes.
    pub layout: SequenceLayout,
    /// `model` with its decoding set resolved (`values.decode_genes`).
    pub model: ModelConfig,
    pub plan: DataPlan,
    pub atlases: Arc<CellAtlases>,
    /// The masking parameters and graph of the hidden/visible choice.
    pub ctx: Arc<MaskContext>,
    pub length: RunLength,
    pub total: u64,
    /// The hierarchical head's per-cell labels (WCED + HCE multitask), when the model has one.
    pub labels: Option<CellLabels>,
    /// `is_gene[t]`: token `t` is a gene of the vocabulary.
    pub is_gene: Arc<Vec<bool>>,
}

pub(crate) fn prepare(req: &TrainRequest) -> Result<ValueSetup> {
    let (t, m) = (&req.train, &req.model);
    t.validate().map_err(|msg| Error::invalid(&req.out, msg))?;
    m.validate().map_err(|msg| Error::invalid(&req.out, msg))?;
    req.mask.validate().map_err(|msg| Error::invalid(&req.out, msg))?;
    let corpus_dir = t.corpus.clone().ok_or_else(|| Error::Usage("train needs train.corpus (or --corpus)".into()))?;
    let opened = Corpus::open(&corpus_dir)?;
    let index = opened.index(&t.atlases)?;
    let measured = atlas_measured(&corpus_dir, &index)?;
    let vocab = if opened.vocab.cls.is_some() { opened.vocab.clone() } else { opened.vocab.clone().with_v2_specials() };
    let cls = vocab.cls.ok_or_else(|| Error::internal("train", "a vocabulary with <cls> has no <cls>"))?;
    let is_gene: Arc<Vec<bool>> = Arc::new((0..vocab.len() as u32).map(|t| vocab.is_gene(t)).collect());
    let graph = read_graph(req)?;
    let values = m.values.clone().ok_or_else(|| Error::internal("train", "a value model without model.values"))?;
    let plan = DataPlan {
        index: index.clone(),
        vocab_size: opened.vocab.len(),
        layout: opened.info.layout,
        batch_size: t.batch_size,
        group_batches: t.group_batches,
        shuffle_buffer: t.shuffle_buffer,
        epochs: t.epochs,
        max_len: 0,
        eval_fraction: t.eval_fraction,
        seed: t.seed,
        subset: None,
        expression: Some(is_gene.clone()),
    };
    let decode_genes = decoding_set(&values.decode, &plan, &measured, graph.as_ref(), &is_gene)?;
    if decode_genes.is_empty() {
        return Err(Error::format(&corpus_dir, "the decoding set is empty (no measured gene)"));
    }
    let model = ModelConfig {
        values: Some(corrflow_infer::model_meta::ValueModel { decode_genes, ..values.clone() }),
        ..m.clone()
    };
    let decode = model.values.as_ref().map(|v| v.decode_genes.clone()).unwrap_or_default();
    let from =
        VisibleFrom { decoded_only: values.visible.decoded_only(), detected_only: values.visible.detected_only() };
    let atlases = Arc::new(CellAtlases::new(&index, measured, &decode, from));
    let graph_dir = t.graph.clone().unwrap_or_default();
    let ctx = Arc::new(MaskContext::load(
        &opened.info,
        &opened.vocab,
        &index,
        graph.as_ref(),
        &graph_dir,
        req.mask.clone(),
        false,
    )?);
    let length = RunLength::new(t.epochs, plan.batches_per_epoch(), t.max_steps);
    if let Some(w) = length.unreached_max_steps() {
        tracing::warn!("{w}");
    }
    let total = length.total();
    if total == 0 {
        return Err(Error::format(&corpus_dir, "no training cells (corpus empty or all held out)"));
    }
    let layout = SequenceLayout { max_genes: values.inference_genes, cls: Some(cls), eos: None };
    let labels = head_labels(&model, &plan, &corpus_dir)?;
    Ok(ValueSetup { vocab, layout, model, plan, atlases, ctx, length, total, is_gene, labels })
}

/// The run's dependency graph, required when the masking strategy draws structural masks.
fn read_graph(req: &TrainRequest) -> Result<Option<corrflow_io::graph_files::Graph>> {
    match &req.train.graph {
        Some(g) => Ok(Some(corrflow_io::graph_files::read_graph(g)?)),
        None if req.mask.strategy.needs_graph() && req.mask.strategy.get().structural_share(&req.mask) > 0.0 => {
            Err(Error::Usage(format!(
                "masking strategy '{}' needs a dependency graph: set train.graph (or --graph)",
                req.mask.strategy
            )))
        }
        None => Ok(None),
    }
}

/// The hierarchical head's per-cell labels, coded as the head's classes (none without a head).
fn head_labels(model: &ModelConfig, plan: &DataPlan, corpus_dir: &std::path::Path) -> Result<Option<CellLabels>> {
    let Some(head) = &model.hce else { return Ok(None) };
    let labels = CellLabels::read(&plan.index, &head.column)?;
    let names = corrflow_model::objective::for_model::<corrflow_model::CpuBackend>(model)
        .map_err(Error::Usage)?
        .label_names()
        .unwrap_or_default();
    labels.recode(&names).map(Some).map_err(|unknown| {
        Error::invalid(
            corpus_dir,
            format!("labels of obs column '{}' the model's head does not have: {}", head.column, unknown.join(", ")),
        )
    })
}
