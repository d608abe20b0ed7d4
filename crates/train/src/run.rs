//! `corrflow train`: the loop. Batches come from the masking dataflow; AdamW with weight decay,
//! linear warmup and decay, gradient clipping; periodic held-out evaluation; metrics as JSON
//! lines; atomic checkpoints from which a stopped run resumes to the same weights.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::TrainConfig;
use burn::module::{AutodiffModule, Module};
use burn::record::{BinFileRecorder, FullPrecisionSettings, Recorder};
use corrflow_algorithms::batches::TrainingBatch;
use corrflow_algorithms::mask::MaskParams;
use corrflow_algorithms::SequenceLayout;
use corrflow_fs::lock::DirLock;
use corrflow_io::corpus::{CellLabels, Corpus};
use corrflow_io::error::{Error, IoContext, Result};
use corrflow_io::graph_files::Graph;
use corrflow_io::vocab::Vocabulary;
use corrflow_mask::dataflow::{MaskedBatches, MaskingOptions};
use corrflow_mask::MaskContext;
use corrflow_model::checkpoint::{self, CheckpointState, MODEL_FILE, OPTIM_FILE};
use corrflow_model::fused::AdamWHyper;
use corrflow_model::objective::{self, batch_tensors, Objective, Targets};
use corrflow_model::{CellEncoder, FusedOps, InitModel, ModelConfig, TrainSettings, TrainingBackend};
use serde::{Deserialize, Serialize};

use crate::held_out::{evaluate, EvalSet};
use crate::learner::{run_loop, AfterStep, Forward, Schedule, Stepped, TrainStep, Trainee};
use crate::length::RunLength;
use crate::metrics::{truncate_metrics, BatchDump};
use crate::optim::FlatAdamW;
use crate::step::StepPhases;
use corrflow_mask::plan::DataPlan;
use corrflow_mask::GraphWatch;

/// Masked batches queued between the masking dataflow and the trainer.
const MASKING_QUEUE: usize = 4;

/// Everything `train` needs.
#[derive(Clone, Debug)]
pub struct TrainRequest {
    pub model: ModelConfig,
    pub train: TrainConfig,
    pub mask: MaskParams,
    pub out: PathBuf,
    /// Discard checkpoints in `out` instead of resuming from the latest.
    pub restart: bool,
    pub progress: bool,
    /// Stop after this step (a checkpoint is written there), as a preempted job would; running
    /// the same request again resumes from it.
    pub stop_after: Option<u64>,
    /// Wait for the device after each phase of a step and log each phase's milliseconds as
    /// `phase_ms` in metrics.jsonl (see [`StepPhases`]).
    pub profile_steps: bool,
    /// Append each step's batch (tokens, attention mask, MLM labels) as a JSON line to this
    /// file, outside the step's timing: the batches a side-by-side benchmark replays.
    pub dump_batches: Option<PathBuf>,
    /// Multitask pre-training with a hierarchical cell-type head (`--hce-ontology`).
    pub hce: Option<crate::hce::HceOptions>,
    /// Start from this checkpoint's weights instead of a random initialisation (a run that
    /// already has checkpoints resumes from its own).
    pub init_from: Option<PathBuf>,
}

/// What `train --json` prints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrainSummary {
    pub command: String,
    pub out: String,
    pub device: String,
    /// The CPU trainer's f32 products (`gemm` or `matrixmultiply`, chosen by the CPU): a run
    /// repeats its bits where the same one runs. `None` on the GPU backends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_products: Option<String>,
    pub steps: u64,
    pub total_steps: u64,
    pub resumed_from: Option<u64>,
    pub parameters: usize,
    pub first_loss: Option<f64>,
    pub last_loss: Option<f64>,
    pub eval_loss: Option<f64>,
    pub eval_accuracy: Option<f64>,
    pub unigram_accuracy: Option<f64>,
    pub tokens_per_s: f64,
    pub seconds: f64,
    pub checkpoint: Option<String>,
    /// The run's epochs, their steps, and which bound ends it.
    #[serde(default)]
    pub limit: RunLength,
}

impl TrainSummary {
    /// A `max_steps` the epochs do not reach; a held-out accuracy not above the unigram baseline.
    pub fn warnings(&self) -> Vec<String> {
        crate::length::summary_warnings(&self.limit, self.eval_accuracy, self.unigram_accuracy)
    }
}

type Rec = BinFileRecorder<FullPrecisionSettings>;

/// What a run trains on, validated and opened once.
struct RunSetup {
    vocab: Vocabulary,
    layout: SequenceLayout,
    graph: Option<Graph>,
    graph_dir: PathBuf,
    ctx: Arc<MaskContext>,
    plan: DataPlan,
    /// `is_special[t]`: token `t` is not a gene.
    is_special: Vec<bool>,
    length: RunLength,
    /// The objective's per-cell labels, when it has a label column.
    labels: Option<CellLabels>,
    /// Optimiser steps of the whole run (the learning-rate schedule's length).
    total: u64,
}

/// Checks the configuration and opens the corpus, the graph and the masking context.
fn prepare<B: TrainingBackend>(req: &TrainRequest) -> Result<(RunSetup, Box<dyn Objective<B>>)> {
    let (t, m) = (&req.train, &req.model);
    t.validate().map_err(|msg| Error::invalid(&req.out, msg))?;
    m.validate().map_err(|msg| Error::invalid(&req.out, msg))?;
    let objective = objective::for_model::<B>(m).map_err(|msg| Error::invalid(&req.out, msg))?;
    req.mask.validate().map_err(|msg| Error::invalid(&req.out, msg))?;
    let corpus = t.corpus.clone().ok_or_else(|| Error::Usage("train needs train.corpus (or --corpus)".into()))?;
    let opened = Corpus::open(&corpus)?;
    let index = opened.index(&t.atlases)?;
    let (info, vocab) = (opened.info, opened.vocab);
    let strategy = req.mask.strategy;
    let graph = match &t.graph {
        Some(g) => Some(corrflow_io::graph_files::read_graph(g)?),
        None if strategy.needs_graph() && strategy.get().structural_share(&req.mask) > 0.0 => {
            return Err(Error::Usage(format!(
                "masking strategy '{strategy}' needs a dependency graph: set train.graph (or --graph)"
            )))
        }
        None => None,
    };
    let graph_dir = t.graph.clone().unwrap_or_default();
    let ctx = Arc::new(MaskContext::load(&info, &vocab, &index, graph.as_ref(), &graph_dir, req.mask.clone(), false)?);
    let plan = DataPlan {
        index,
        vocab_size: vocab.len(),
        layout: info.layout,
        batch_size: t.batch_size,
        group_batches: t.group_batches,
        shuffle_buffer: t.shuffle_buffer,
        epochs: t.epochs,
        max_len: if t.max_len == 0 { m.max_positions } else { t.max_len.min(m.max_positions) },
        eval_fraction: t.eval_fraction,
        seed: t.seed,
        subset: None,
        expression: None,
    };
    let bytes = corrflow_model::memory::training_bytes(m, vocab.len(), t.batch_size, plan.max_len)
        + plan.masking_bytes(MASKING_QUEUE + t.mask_workers + 1);
    corrflow_model::memory::check(
        "training (model, batch and masking data plan)",
        bytes,
        "model sizes, train.batch_size, train.max_len, train.shuffle_buffer or train.group_batches",
    )?;
    let length = RunLength::new(t.epochs, plan.batches_per_epoch(), t.max_steps);
    if let Some(w) = length.unreached_max_steps() {
        tracing::warn!("{w}");
    }
    let total = length.total();
    if total == 0 {
        return Err(Error::format(&corpus, "no training cells (corpus empty or all held out)"));
    }
    let is_special = (0..vocab.len() as u32).map(|t| !vocab.is_gene(t)).collect();
    let labels = objective.label_column().map(|c| CellLabels::read(&plan.index, c)).transpose()?;
    let labels = match (labels, objective.label_names()) {
        (Some(l), Some(names)) => Some(l.recode(&names).map_err(|unknown| {
            Error::invalid(
                &corpus,
                format!("labels of obs column '{}' the model's head does not have: {}", l.column, unknown.join(", ")),
            )
        })?),
        (labels, _) => labels,
    };
    let setup = RunSetup { vocab, layout: info.layout, graph, graph_dir, ctx, plan, is_special, labels, total, length };
    Ok((setup, objective))
}

/// The model and optimiser at the step the run continues from: the latest checkpoint of `out`
/// (which must belong to the same run), or freshly initialised at step 0.
pub(crate) fn init_or_resume<B: TrainingBackend>(
    req: &TrainRequest,
    vocab: &Vocabulary,
    device: &B::Device,
) -> Result<Trainee<B>> {
    let (t, m) = (&req.train, &req.model);
    std::fs::create_dir_all(&req.out).at(&req.out)?;
    if req.restart && checkpoint::checkpoints_dir(&req.out).exists() {
        std::fs::remove_dir_all(checkpoint::checkpoints_dir(&req.out)).at(&req.out)?;
        let _ = std::fs::remove_file(req.out.join("metrics.jsonl"));
    }
    B::seed(device, t.seed);
    let model: CellEncoder<B> = m.init(vocab.len(), device);
    // Clipping is by the global norm (as PyTorch's clip_grad_norm_), inside the optimizer step.
    let hyper = AdamWHyper { weight_decay: t.weight_decay as f32, ..AdamWHyper::default() };
    let Some(dir) = checkpoint::latest(&req.out) else {
        // A run killed before its first checkpoint starts again from step 0: its metric lines go.
        truncate_metrics(&req.out.join("metrics.jsonl"), 0)?;
        let model = match &req.init_from {
            Some(from) => crate::init_from::from_checkpoint(model, m, vocab, from, device)?,
            None => model,
        };
        let optim = FlatAdamW::new(hyper, &model, device);
        return Ok(Trainee { model, optim, step: 0, resumed_from: None });
    };
    let state = checkpoint::load_state(&dir, checkpoint::Purpose::Resume)?;
    let written: TrainConfig = state.train.parse().map_err(|e| {
        Error::format(dir.join(checkpoint::STATE_FILE), format!("invalid train settings in checkpoint state: {e}"))
    })?;
    let same = state.model == *m && state.mask == req.mask && state.vocab_hash == vocab.hash() && same_run(&written, t);
    if !same {
        return Err(Error::conflict(
            &dir,
            "the run directory holds checkpoints of a different configuration, corpus or vocabulary; use --restart to discard them or another --out",
        ));
    }
    let model = checkpoint::load_model(model, &dir, device)?;
    let record = Rec::new()
        .load(dir.join(OPTIM_FILE), device)
        .map_err(|e| Error::format(dir.join(OPTIM_FILE), e.to_string()))?;
    let mut optim = FlatAdamW::new(hyper, &model, device);
    optim.load_record(record).map_err(|e| Error::format(dir.join(OPTIM_FILE), e))?;
    truncate_metrics(&req.out.join("metrics.jsonl"), state.step)?;
    tracing::info!(step = state.step, "resumed from {}", dir.display());
    Ok(Trainee { model, optim, step: state.step, resumed_from: Some(state.step) })
}

/// Starts the masking dataflow at `step`, watching the graph directory for updates.
fn start_masking(setup: &RunSetup, t: &TrainConfig, step: u64) -> MaskedBatches {
    let initial: Vec<(u32, u32)> =
        setup.graph.as_ref().map(|g| g.edges.iter().map(|e| (e.u, e.v)).collect()).unwrap_or_default();
    let watch = setup.graph.as_ref().map(|g| GraphWatch {
        dir: setup.graph_dir.clone(),
        every: 50,
        hash: g.info.content_hash.clone(),
        edges: initial.iter().copied().collect(),
    });
    MaskedBatches::spawn(
        setup.ctx.clone(),
        initial,
        setup.plan.clone().feed(step, watch),
        MaskingOptions { workers: t.mask_workers, capacity: MASKING_QUEUE, first_seq: step },
    )
}

/// Writes a checkpoint of `model` and `optim` at `step`.
pub(crate) fn save_checkpoint<B: TrainingBackend>(
    req: &TrainRequest,
    (vocab, layout, total): (&Vocabulary, SequenceLayout, u64),
    trainee: &Trainee<B>,
    epoch: u64,
) -> Result<PathBuf> {
    let state = CheckpointState {
        format_version: 1,
        step: trainee.step,
        epoch,
        total_steps: total,
        model: req.model.clone(),
        train: settings_of(&req.train)?,
        mask: req.mask.clone(),
        vocab_hash: vocab.hash().to_string(),
        vocab_size: vocab.len(),
        layout,
        model_sha256: String::new(),
        optim_sha256: String::new(),
    };
    checkpoint::save(&req.out, state, req.train.keep_checkpoints, |dir| {
        let rec = Rec::new();
        checkpoint::save_model(&trainee.model, &dir.join(MODEL_FILE))?;
        rec.record(trainee.optim.to_record(), dir.join(OPTIM_FILE)).map_err(|e| checkpoint::record_error(dir, e))
    })
}

impl TrainSummary {
    /// Takes a finished loop's losses, checkpoint and throughput, the trainee's step and the
    /// run's wall time since `start`.
    pub(crate) fn record(&mut self, report: crate::learner::LoopReport, steps: u64, start: Instant) {
        self.first_loss = report.first_loss;
        self.last_loss = report.last_loss;
        self.checkpoint = report.checkpoint.map(|p| p.display().to_string());
        self.steps = steps;
        self.tokens_per_s = report.work as f64 / report.seconds.max(1e-9);
        self.seconds = start.elapsed().as_secs_f64();
    }

    /// The summary of a `train` run starting (or resuming) at the trainee's step.
    pub(crate) fn started<B: TrainingBackend>(
        out: &Path,
        device: String,
        total_steps: u64,
        trainee: &Trainee<B>,
    ) -> Self {
        TrainSummary {
            command: "train".into(),
            out: out.display().to_string(),
            device,
            cpu_products: None,
            steps: trainee.step,
            total_steps,
            resumed_from: trainee.resumed_from,
            parameters: trainee.model.num_params(),
            first_loss: None,
            last_loss: None,
            eval_loss: None,
            eval_accuracy: None,
            unigram_accuracy: None,
            tokens_per_s: 0.0,
            seconds: 0.0,
            checkpoint: None,
            limit: RunLength::default(),
        }
    }
}

/// The request with `model.hce` filled in from `req.hce` (unchanged without it). Here rather
/// than in `hce`, so that `hce` does not depend on the run (no module cycle).
pub(crate) fn with_hce_head(req: &TrainRequest) -> Result<TrainRequest> {
    let Some(options) = &req.hce else { return Ok(req.clone()) };
    let mut out = req.clone();
    out.model.hce = Some(crate::hce::head_for(options, &req.train.corpus, &req.train.atlases)?);
    Ok(out)
}

/// Runs (or resumes) training of a rank model on backend `B` (`crate::train` dispatches).
pub(crate) fn train_ranks<B: TrainingBackend>(req: &TrainRequest, device: B::Device) -> Result<TrainSummary> {
    let start = Instant::now();
    let resolved = with_hce_head(req)?;
    let req = &resolved;
    let t = &req.train;
    let (setup, objective) = prepare::<B>(req)?;
    // One run per folder: a second `train` into it is refused while this one runs.
    let _lock = DirLock::inside(&req.out, "train")?;
    let mut trainee = init_or_resume::<B>(req, &setup.vocab, &device)?;
    setup.vocab.publish_dir(&req.out.join("vocab"))?;
    let eval_set = EvalSet::new(&setup.ctx, &setup.plan.eval_set(t.eval_cells)?, t.batch_size);
    let batches = start_masking(&setup, t, trainee.step);
    let mut summary = TrainSummary::started(&req.out, format!("{device:?}"), setup.total, &trainee);
    summary.limit = setup.length.clone();
    let dump = req.dump_batches.as_deref().map(BatchDump::create).transpose()?;
    let schedule = Schedule {
        name: "train",
        seed: t.seed,
        lr: t.lr,
        warmup_steps: t.warmup_steps,
        total: setup.total,
        grad_clip: t.grad_clip,
        progress: req.progress,
        profile: req.profile_steps,
    };
    let mut kind =
        Pretraining { req, setup: &setup, objective: objective.as_ref(), eval_set, dump, summary: &mut summary };
    let report = run_loop(&mut kind, &mut trainee, batches, &schedule, &req.out.join("metrics.jsonl"), &device)?;
    summary.record(report, trainee.step, start);
    Ok(summary)
}

/// Pre-training as a [`TrainStep`]: masked batches from the masking dataflow, the objective's
/// loss, held-out evaluation every `eval_every` steps, checkpoints every `checkpoint_every`.
struct Pretraining<'a, B: TrainingBackend> {
    req: &'a TrainRequest,
    setup: &'a RunSetup,
    objective: &'a dyn Objective<B>,
    eval_set: EvalSet,
    dump: Option<BatchDump>,
    summary: &'a mut TrainSummary,
}

impl<B: TrainingBackend> TrainStep<B> for Pretraining<'_, B> {
    type Batch = TrainingBatch;

    fn before_step(&mut self, batch: &TrainingBatch, step: u64) -> Result<()> {
        debug_assert_eq!(batch.seq, step);
        match self.dump.as_mut() {
            Some(dump) => dump.write(step + 1, batch),
            None => Ok(()),
        }
    }

    fn forward(
        &mut self,
        model: &CellEncoder<B>,
        batch: &TrainingBatch,
        step: u64,
        phases: &mut StepPhases,
        device: &B::Device,
    ) -> Result<Option<Forward<B>>> {
        let (setup, m) = (self.setup, &self.req.model);
        let objective = self.objective;
        let targets = Targets { whole_cell: objective.whole_cell_targets(), labels: setup.labels.as_ref(), step };
        let bucketed;
        let batch = match self.req.train.device.length_bucket() {
            1 => batch,
            bucket => {
                bucketed = batch.padded_to_multiple(bucket, m.max_positions, setup.vocab.pad);
                &bucketed
            }
        };
        let tensors = batch_tensors::<B>(batch, &setup.is_special, setup.vocab.len(), targets, m.max_positions, device);
        if objective.per_masked_token() && tensors.masked == 0 {
            return Ok(None);
        }
        phases.mark::<B>("prepare", device);
        let states = model.hidden(tensors.input_ids.clone(), tensors.pad.clone());
        let out = objective.loss(model, &states, &tensors, m.max_positions);
        Ok(Some(Forward { loss: out.loss, parts: out.parts, masked: tensors.masked }))
    }

    fn work(&self, batch: &TrainingBatch) -> u64 {
        batch.tokens() as u64
    }

    fn after_step(
        &mut self,
        trainee: &mut Trainee<B>,
        batch: &TrainingBatch,
        stepped: Option<&Stepped>,
        device: &B::Device,
    ) -> Result<AfterStep> {
        let Some(s) = stepped else { return Ok(AfterStep::default()) };
        let (t, step) = (&self.req.train, s.step);
        let mut line = s.metrics_line(serde_json::json!({
            "epoch": batch.epoch, "tokens": batch.tokens() as u64, "masked": s.masked, "graph_time": batch.graph_time,
        }));
        if step.is_multiple_of(t.eval_every) || step == self.setup.total {
            let at = (self.setup, self.req, step);
            evaluate_into(&trainee.model.valid(), &self.eval_set, at, device, &mut line, self.summary);
        }
        Ok(AfterStep::scheduled(line, s, self.setup.total, self.req.stop_after, t))
    }

    fn save(&mut self, trainee: &Trainee<B>, batch: &TrainingBatch) -> Result<PathBuf> {
        save_checkpoint(self.req, (&self.setup.vocab, self.setup.layout, self.setup.total), trainee, batch.epoch)
    }
}

/// Evaluates on the held-out set (at `step`, for losses with a warm-up) and records the result
/// in the metrics line and the summary.
fn evaluate_into<B: FusedOps>(
    model: &CellEncoder<B>,
    set: &EvalSet,
    (setup, req, step): (&RunSetup, &TrainRequest, u64),
    device: &B::Device,
    line: &mut serde_json::Value,
    summary: &mut TrainSummary,
) {
    let targets = Targets { labels: setup.labels.as_ref(), step, ..Default::default() };
    if let Some(e) = evaluate(model, set, &setup.is_special, setup.vocab.len(), targets, &req.model, device) {
        for (name, value) in &e.parts {
            line[format!("eval_{name}")] = (*value).into();
        }
        line["eval_loss"] = e.loss.into();
        line["eval_accuracy"] = e.accuracy.into();
        line["unigram_accuracy"] = e.unigram_accuracy.into();
        summary.eval_loss = Some(e.loss);
        summary.eval_accuracy = Some(e.accuracy);
        summary.unigram_accuracy = Some(e.unigram_accuracy);
    }
}

/// `[train]` as a checkpoint records it.
pub(crate) fn settings_of(t: &TrainConfig) -> Result<TrainSettings> {
    TrainSettings::of(t).map_err(|e| Error::internal("train settings", e.to_string()))
}

/// Checkpoints of another run must not be continued: everything but the bookkeeping knobs
/// (how often to log, evaluate, checkpoint) has to match.
fn same_run(a: &TrainConfig, b: &TrainConfig) -> bool {
    let norm = |c: &TrainConfig| TrainConfig {
        eval_every: 0,
        checkpoint_every: 0,
        log_every: 0,
        keep_checkpoints: 0,
        mask_workers: 0,
        ..c.clone()
    };
    // max_steps stays: the learning-rate schedule depends on it.
    norm(a) == norm(b)
}
