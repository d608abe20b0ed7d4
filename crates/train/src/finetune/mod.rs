//! `corrflow finetune`: a classification head on a pre-trained encoder, trained on a labelled
//! corpus. Cells are classified from their pooled embedding, genes from their token states. A
//! seeded stratified train/validation/test split (cells, or genes for gene classification),
//! optional balanced class weights, the embeddings and first layers frozen on request, AdamW
//! with warmup and linear decay, validation macro-F1 after each epoch with early stopping, and
//! the best epoch's model scored on the test part. A value model (DESIGN.md §11) is fine-tuned on
//! cells only, each shown to it as `embed` shows it ([`value_inputs`]), from a corpus that keeps
//! expression.
//!
//! ```text
//! OUT/checkpoints/step-N/   model.bin, optim.bin, state.json (model.classifier names the classes),
//!                           finetune.json (settings, task and early-stopping state, for resuming)
//! OUT/vocab/                the base model's vocabulary
//! OUT/metrics.jsonl         training steps and validation scores
//! OUT/predictions.parquet   the best model's test predictions
//! OUT/results.json          the summary (written last: the run is finished)
//! ```
//! While running, the latest and the best checkpoints are kept; when finished, only the best.

mod batches;
mod checks;
mod collapse;
mod config;
mod evaluate;
mod labels;
mod outputs;
mod run_dir;
mod value_inputs;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use burn::module::{AutodiffModule, Module};
use burn::tensor::{Tensor, TensorData};
use corrflow_algorithms::batches::PlannedBatch;
use corrflow_algorithms::classes::{balanced_weights, Part};
use corrflow_fs::atomic::write_json_atomic;
use corrflow_fs::lock::DirLock;
use corrflow_infer::model_meta::{Classifier, ClassifierTask, ModelConfig};
use corrflow_io::corpus::Corpus;
use corrflow_io::error::{Error, IoContext, Result};
use corrflow_io::vocab::Vocabulary;
use corrflow_mask::dataflow::Feed;
use corrflow_mask::plan::DataPlan;
use corrflow_model::checkpoint;
use corrflow_model::classifier::cross_entropy;
use corrflow_model::{load_checkpoint, CellEncoder, InitModel, TrainingBackend};
use serde::{Deserialize, Serialize};

use crate::learner::{run_loop, AfterStep, Forward, Schedule, Stepped, TrainStep, Trainee};
use batches::BatchSpec;
use checks::{check_base, check_corpus};
pub use config::FinetuneConfig;
pub use evaluate::{ClassMetrics, Scores, SplitMetrics};
use labels::Supervision;
pub use labels::{FinetuneTask, PartSizes};
use run_dir::{clear_or_refuse, init_or_resume, prune, save, Best, FinetuneState};
use value_inputs::ValueInputs;

const PROGRESS_FILE: &str = "finetune.json";
const RESULTS_FILE: &str = "results.json";
const PREDICTIONS_FILE: &str = "predictions.parquet";

/// Everything `finetune` needs.
#[derive(Clone, Debug)]
pub struct FinetuneRequest {
    /// The pre-trained checkpoint (or run directory: its latest checkpoint).
    pub checkpoint: PathBuf,
    pub corpus: PathBuf,
    pub atlases: Vec<String>,
    pub task: FinetuneTask,
    pub out: PathBuf,
    pub config: FinetuneConfig,
    /// Discard what `out` holds instead of resuming or refusing.
    pub restart: bool,
    pub progress: bool,
    /// Stop after this step (a checkpoint is written there); the same request resumes.
    pub stop_after: Option<u64>,
}

/// What `finetune --json` prints and `results.json` holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FinetuneSummary {
    pub command: String,
    pub out: String,
    pub task: ClassifierTask,
    pub classes: Vec<String>,
    /// Items (cells, or genes) per part.
    pub split: PartSizes,
    pub trainable_parameters: usize,
    pub frozen_parameters: usize,
    pub steps: u64,
    pub total_steps: u64,
    pub epochs: u64,
    pub resumed_from: Option<u64>,
    pub stopped_early: bool,
    /// Whether the run has ended (all epochs or early stopping), not stopped by `--stop-at-step`.
    pub finished: bool,
    pub best_step: Option<u64>,
    /// The best model's scores.
    pub validation: Option<SplitMetrics>,
    pub test: Option<SplitMetrics>,
    pub cells_per_s: f64,
    pub seconds: f64,
    /// The best checkpoint (when finished), else the latest.
    pub checkpoint: Option<String>,
}

/// The base model, corpus and labels, checked against each other.
struct Setup<B: TrainingBackend> {
    base: corrflow_model::LoadedModel<B>,
    supervision: Supervision,
    plan: DataPlan,
    model: ModelConfig,
    per_epoch: u64,
    total: u64,
    /// A value model's inputs (its cells are planned with their expression).
    values: Option<ValueInputs>,
}

fn prepare<B: TrainingBackend>(req: &FinetuneRequest, device: &B::Device) -> Result<Setup<B>> {
    let c = &req.config;
    c.validate().map_err(Error::Usage)?;
    let base = load_checkpoint::<B>(&req.checkpoint, device)?;
    check_base(req, &base)?;
    let opened = Corpus::open(&req.corpus)?;
    check_corpus(req, &opened, &base)?;
    let index = opened.index(&req.atlases)?;
    let supervision =
        Supervision::resolve(&req.task, &index, &base.vocab, c.validation_fraction, c.test_fraction, c.seed)?;
    let m = &base.state.model;
    let max_len = if c.max_len == 0 { base.state.max_len() } else { c.max_len };
    let values = match corrflow_infer::inputs::value_settings(m) {
        Some(settings) => {
            let cls = corrflow_infer::inputs::cls_token(&base.vocab)?;
            let is_gene = Arc::new((0..base.vocab.len() as u32).map(|t| base.vocab.is_gene(t)).collect());
            Some(ValueInputs::open(&req.corpus, &index, settings, cls, is_gene)?)
        }
        None => None,
    };
    let plan = DataPlan {
        index,
        vocab_size: base.vocab.len(),
        layout: base.state.layout,
        batch_size: c.batch_size,
        group_batches: 50,
        shuffle_buffer: c.shuffle_buffer,
        epochs: c.epochs,
        // A value model's cells travel as their expression, which the plan does not cut.
        max_len: if values.is_some() { 0 } else { max_len },
        eval_fraction: 0.0,
        seed: c.seed,
        subset: (!supervision.genes).then(|| Arc::new(supervision.training_cells())),
        expression: values.as_ref().map(|v| v.is_gene.clone()),
    };
    let bytes =
        corrflow_model::memory::training_bytes(m, base.vocab.len(), c.batch_size, max_len) + plan.masking_bytes(4);
    corrflow_model::memory::check(
        "fine-tuning",
        bytes,
        "finetune.batch_size, finetune.max_len or finetune.shuffle_buffer",
    )?;
    let per_epoch = plan.batches_per_epoch();
    if per_epoch == 0 {
        return Err(Error::format(&req.corpus, "no training cells"));
    }
    let (task, source) = match &req.task {
        FinetuneTask::Cell { column, .. } => (ClassifierTask::Cell, column.clone()),
        FinetuneTask::Gene { labels, .. } => (ClassifierTask::Gene, labels.display().to_string()),
    };
    let classifier = Classifier { task, source, classes: supervision.classes.clone(), pooling: c.pooling };
    let model = ModelConfig { classifier: Some(classifier), ..m.clone() };
    Ok(Setup { base, supervision, plan, model, per_epoch, total: per_epoch * c.epochs as u64, values })
}

/// The embeddings and the first `layers` encoder layers without gradients (0: none).
fn freeze<B: TrainingBackend>(mut m: CellEncoder<B>, layers: usize) -> CellEncoder<B> {
    if layers == 0 {
        return m;
    }
    m.tokens = m.tokens.no_grad();
    m.positions = m.positions.no_grad();
    m.embed_norm = m.embed_norm.no_grad();
    m.encoder.layers =
        m.encoder.layers.into_iter().enumerate().map(|(i, l)| if i < layers { l.no_grad() } else { l }).collect();
    m
}

/// Parameters trained: the head and the encoder layers (and embeddings) not frozen. The MLM and
/// whole-cell heads of pre-training are kept but not trained.
fn trainable<B: TrainingBackend>(m: &CellEncoder<B>, frozen: usize) -> usize {
    let embeddings = m.tokens.num_params() + m.positions.num_params() + m.embed_norm.num_params();
    let layers: usize = m.encoder.layers.iter().skip(frozen).map(Module::num_params).sum();
    let head = m.label_head.as_ref().map_or(0, Module::num_params);
    head + layers + if frozen == 0 { embeddings } else { 0 }
}

/// Runs (or resumes) fine-tuning on backend `B`.
pub fn finetune<B: TrainingBackend>(req: &FinetuneRequest, device: B::Device) -> Result<FinetuneSummary> {
    let start = Instant::now();
    let setup = prepare::<B>(req, &device)?;
    std::fs::create_dir_all(&req.out).at(&req.out)?;
    let _lock = DirLock::inside(&req.out, "finetune")?;
    clear_or_refuse(req)?;
    let (mut trainee, progress) = init_or_resume(req, &setup, &device)?;
    setup.base.vocab.publish_dir(&req.out.join("vocab"))?;
    let c = &req.config;
    let mut summary = FinetuneSummary::started(req, &setup, &trainee);
    let weights = c.class_weights.then(|| {
        let w: Vec<f32> = balanced_weights(&setup.supervision.train_counts).iter().map(|&w| w as f32).collect();
        let n = w.len();
        Tensor::<B, 1>::from_data(TensorData::new(w, [n]), &device)
    });
    let schedule = Schedule {
        name: "finetune",
        seed: c.seed,
        lr: c.lr,
        warmup_steps: c.warmup_steps,
        total: setup.total,
        grad_clip: c.grad_clip,
        progress: req.progress,
        profile: false,
    };
    let mut kind = Finetuning { req, setup: &setup, weights, progress, ended: false, stopped_early: false };
    let metrics = req.out.join("metrics.jsonl");
    let report = with_planned_batches(&setup.plan, trainee.step, |batches| {
        run_loop(&mut kind, &mut trainee, batches, &schedule, &metrics, &device)
    })?;
    let (ended, progress) = (kind.ended, kind.progress);
    summary.stopped_early = kind.stopped_early;
    summary.checkpoint = report.checkpoint.map(|p| p.display().to_string());
    summary.cells_per_s = report.work as f64 / report.seconds.max(1e-9);
    summary.steps = trainee.step;
    summary.epochs = trainee.step / setup.per_epoch;
    summary.best_step = progress.best.map(|b| b.step);
    if ended || trainee.step >= setup.total {
        finish(req, &setup, &progress, &device, &mut summary)?;
    }
    summary.seconds = start.elapsed().as_secs_f64();
    if summary.finished {
        write_json_atomic(&req.out.join(RESULTS_FILE), &summary)?;
    }
    Ok(summary)
}

impl FinetuneSummary {
    /// The summary of a run starting (or resuming) at the trainee's step.
    fn started<B: TrainingBackend>(req: &FinetuneRequest, setup: &Setup<B>, trainee: &Trainee<B>) -> Self {
        let trainable_parameters = trainable(&trainee.model, req.config.freeze_layers);
        FinetuneSummary {
            command: "finetune".into(),
            out: req.out.display().to_string(),
            task: setup.model.classifier.as_ref().map(|c| c.task).unwrap_or_default(),
            classes: setup.supervision.classes.clone(),
            split: setup.supervision.sizes,
            trainable_parameters,
            frozen_parameters: trainee.model.num_params() - trainable_parameters,
            steps: trainee.step,
            total_steps: setup.total,
            epochs: 0,
            resumed_from: trainee.resumed_from,
            stopped_early: false,
            finished: false,
            best_step: None,
            validation: None,
            test: None,
            cells_per_s: 0.0,
            seconds: 0.0,
            checkpoint: None,
        }
    }
}

/// At the end of an epoch: scores the validation cells, keeps the best step and counts the
/// epochs without improvement (early stopping's patience); returns the metrics line.
fn end_of_epoch<B: TrainingBackend>(
    setup: &Setup<B>,
    (trainee, progress): (&Trainee<B>, &mut FinetuneState),
    c: &FinetuneConfig,
    device: &B::Device,
) -> Result<serde_json::Value> {
    let step = trainee.step;
    let scores = validate(setup, &trainee.model, c, device)?;
    let better = progress.best.is_none_or(|b| scores.items.macro_f1 > b.macro_f1);
    if better {
        progress.best = Some(Best { step, macro_f1: scores.items.macro_f1 });
        progress.stale = 0;
    } else {
        progress.stale += 1;
    }
    Ok(serde_json::json!({"step": step, "epoch": step / setup.per_epoch, "validation_loss": scores.items.loss,
        "validation_accuracy": scores.items.accuracy, "validation_macro_f1": scores.items.macro_f1,
        "best": better}))
}

/// Runs `f` on the planned batches of the run from batch `first` (read and planned on a thread
/// of its own); `f` may stop early, which stops the reader.
fn with_planned_batches<T>(
    plan: &DataPlan,
    first: u64,
    f: impl FnOnce(&mut dyn Iterator<Item = Result<PlannedBatch>>) -> Result<T>,
) -> Result<T> {
    let (tx, rx) = crossbeam_channel::bounded::<PlannedBatch>(4);
    let feed = plan.clone().feed(first, None);
    let reader = std::thread::spawn(move || {
        feed(&mut |item| match item {
            Feed::Batch(b) => tx.send(b).is_ok(),
            Feed::Graph(_) => true,
        })
    });
    let result = f(&mut rx.iter().map(Ok));
    drop(rx);
    let read = reader.join().map_err(|_| Error::internal("finetune", "the corpus reader panicked"))?;
    let out = result?;
    read.map(|()| out)
}

/// Fine-tuning as a [`TrainStep`]: classification batches of the planned cells (or genes), the
/// cross-entropy of the head, validation at the end of every epoch with early stopping, and a
/// checkpoint there (and at `--stop-at-step`).
struct Finetuning<'a, B: TrainingBackend> {
    req: &'a FinetuneRequest,
    setup: &'a Setup<B>,
    weights: Option<Tensor<B, 1>>,
    progress: FinetuneState,
    ended: bool,
    stopped_early: bool,
}

impl<B: TrainingBackend> TrainStep<B> for Finetuning<'_, B> {
    type Batch = PlannedBatch;

    fn forward(
        &mut self,
        model: &CellEncoder<B>,
        planned: &PlannedBatch,
        _step: u64,
        _phases: &mut crate::step::StepPhases,
        device: &B::Device,
    ) -> Result<Option<Forward<B>>> {
        let spec = BatchSpec {
            supervision: &self.setup.supervision,
            vocab: &self.setup.base.vocab,
            pooling: self.req.config.pooling,
            part: Part::Train,
            values: self.setup.values.as_ref(),
        };
        let batch = spec.build(&planned.cells)?;
        if batch.targets.is_empty() {
            return Ok(None);
        }
        let t = batch.tensors::<B>(device);
        let logits = if self.setup.supervision.genes {
            model.token_logits(t.input_ids, t.pad, t.index)
        } else {
            model.cell_logits(t.input_ids, t.values, t.pad, t.weights)
        };
        let loss = cross_entropy(logits, t.targets, self.weights.clone());
        Ok(Some(Forward { loss, parts: Vec::new(), masked: 0 }))
    }

    fn work(&self, planned: &PlannedBatch) -> u64 {
        planned.cells.len() as u64
    }

    fn after_step(
        &mut self,
        trainee: &mut Trainee<B>,
        planned: &PlannedBatch,
        stepped: Option<&Stepped>,
        device: &B::Device,
    ) -> Result<AfterStep> {
        let (c, step) = (&self.req.config, trainee.step);
        let mut after = AfterStep::default();
        if let Some(s) = stepped {
            after.message = format!("loss {:.4}", s.loss);
            if step.is_multiple_of(c.log_every) {
                after.lines.push(serde_json::json!({"step": step, "epoch": planned.epoch, "loss": s.loss, "lr": s.lr,
                    "cells_per_s": s.rate}));
            }
        }
        let epoch_end = step.is_multiple_of(self.setup.per_epoch);
        if epoch_end {
            after.lines.push(end_of_epoch(self.setup, (trainee, &mut self.progress), c, device)?);
            self.stopped_early = self.progress.stale >= c.patience && step < self.setup.total;
            self.ended = self.stopped_early || step >= self.setup.total;
        }
        after.checkpoint = epoch_end || self.req.stop_after == Some(step);
        after.stop = self.ended || self.req.stop_after == Some(step);
        Ok(after)
    }

    fn save(&mut self, trainee: &Trainee<B>, planned: &PlannedBatch) -> Result<std::path::PathBuf> {
        save(self.req, self.setup, (trainee, &self.progress), planned.epoch)
    }
}

/// Scores of the model (without dropout) on the validation part.
fn validate<B: TrainingBackend>(
    setup: &Setup<B>,
    model: &CellEncoder<B>,
    c: &FinetuneConfig,
    device: &B::Device,
) -> Result<SplitMetrics> {
    let spec = BatchSpec {
        supervision: &setup.supervision,
        vocab: &setup.base.vocab,
        pooling: c.pooling,
        part: Part::Validation,
        values: setup.values.as_ref(),
    };
    let p = evaluate::predict(&model.valid(), &setup.plan, &spec, c.gene_eval_cells, device)?;
    Ok(p.metrics(&setup.supervision.classes, setup.supervision.genes))
}

/// Scores the best checkpoint on validation and test, writes the test predictions and keeps
/// only the best checkpoint.
fn finish<B: TrainingBackend>(
    req: &FinetuneRequest,
    setup: &Setup<B>,
    progress: &FinetuneState,
    device: &B::Device,
    summary: &mut FinetuneSummary,
) -> Result<()> {
    let c = &req.config;
    let best = progress.best.ok_or_else(|| Error::internal("finetune", "finished without a validation score"))?;
    let dir = checkpoint::checkpoint_dir(&req.out, best.step);
    let model = checkpoint::load_model(setup.model.init::<B>(setup.base.vocab.len(), device), &dir, device)?;
    summary.validation = Some(validate(setup, &model, c, device)?);
    if setup.supervision.sizes.test > 0 {
        let spec = BatchSpec {
            supervision: &setup.supervision,
            vocab: &setup.base.vocab,
            pooling: c.pooling,
            part: Part::Test,
            values: setup.values.as_ref(),
        };
        let p = evaluate::predict(&model.valid(), &setup.plan, &spec, c.gene_eval_cells, device)?;
        summary.test = Some(p.metrics(&setup.supervision.classes, setup.supervision.genes));
        outputs::write_predictions(&req.out.join(PREDICTIONS_FILE), &p, &setup.supervision, &setup.base.vocab)?;
    }
    prune(&req.out, &[Some(dir.clone())])?;
    summary.checkpoint = Some(dir.display().to_string());
    summary.finished = true;
    Ok(())
}

/// The vocabulary's display name of a gene token (for predictions).
fn gene_name(vocab: &Vocabulary, token: u64) -> String {
    vocab.token(token as u32).unwrap_or("?").to_string()
}
