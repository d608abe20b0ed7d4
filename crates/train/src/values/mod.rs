//! Training models that see expression (DESIGN.md §11): TxFM's masked autoencoder (`txfm`) and
//! BMFM-RNA's whole-cell expression decoding (`wced`), the third implementation of the training
//! loop ([`crate::learner`]). Cells come from the data plan with their expression; each batch
//! shows the encoder a `<cls>` token and the visible genes with their values ([`visible`]), and
//! the objective decodes the whole decoding set from the CLS state.

mod batch;
mod setup;

use std::path::PathBuf;
use std::time::Instant;

use burn::module::AutodiffModule;
use burn::tensor::ElementConversion;
use corrflow_fs::lock::DirLock;
use corrflow_io::error::{Error, Result};
use corrflow_mask::dataflow::Feed;
use corrflow_mask::plan::ExpressionCell;
use corrflow_model::objective::{self, Objective};
use corrflow_model::{CellEncoder, FusedOps, TrainingBackend};

use crate::learner::{run_loop, AfterStep, Forward, Schedule, Stepped, TrainStep, Trainee};
use crate::run::{init_or_resume, save_checkpoint, TrainRequest, TrainSummary};
use crate::step::StepPhases;
use corrflow_mask::values::{BatchMaker, ValueBatch};
use setup::{prepare, ValueSetup};

/// Value batches built ahead of the trainer (each holds its cells' decoding targets).
const BATCHES_AHEAD: usize = 4;

/// Trains (or resumes) a value model on backend `B`.
pub(crate) fn train_values<B: TrainingBackend>(req: &TrainRequest, device: B::Device) -> Result<TrainSummary> {
    let start = Instant::now();
    if matches!(req.mask.strategy.name(), "pmi" | "pmi-rand") {
        return Err(Error::Usage(format!(
            "masking strategy '{}' hides spans of adjacent rank positions; a value model's cell is a set of measured \
             genes: use random or corrmask",
            req.mask.strategy
        )));
    }
    let resolved = crate::run::with_hce_head(req)?;
    let setup = prepare(&resolved)?;
    let req = &TrainRequest { model: setup.model.clone(), ..resolved.clone() };
    let objective = objective::for_model::<B>(&req.model).map_err(|msg| Error::invalid(&req.out, msg))?;
    let eval_objective =
        objective::for_model::<B::InnerBackend>(&req.model).map_err(|msg| Error::invalid(&req.out, msg))?;
    let _lock = DirLock::inside(&req.out, "train")?;
    let mut trainee = init_or_resume::<B>(req, &setup.vocab, &device)?;
    setup.vocab.publish_dir(&req.out.join("vocab"))?;
    let t = &req.train;
    let values = req.model.values.as_ref().ok_or_else(|| Error::internal("train", "a value model without values"))?;
    let maker = BatchMaker {
        atlases: &setup.atlases,
        target_sum: values.target_sum,
        decode_genes: values.decode_genes.len(),
        ctx: &setup.ctx,
        cls: setup.layout.cls.unwrap_or_default(),
        pad: setup.vocab.pad,
        visible_genes: t.visible_genes,
        labels: setup.labels.as_ref(),
    };
    let eval: Vec<ValueBatch> = setup
        .plan
        .eval_expression_set(t.eval_cells, &setup.is_gene)?
        .chunks(t.batch_size.max(1))
        .map(|cells| maker.build(u64::MAX, cells))
        .collect();
    let mut summary = TrainSummary::started(&req.out, format!("{device:?}"), setup.total, &trainee);
    summary.limit = setup.length.clone();
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
    let report = std::thread::scope(|scope| {
        let (tx, rx) = crossbeam_channel::bounded::<Result<ValueBatch>>(BATCHES_AHEAD);
        let (from, cells, maker) = (trainee.step, &setup, &maker);
        scope.spawn(move || feed_value_batches(cells, from, maker, tx));
        let mut kind = ValueTraining {
            req,
            setup: &setup,
            objective: objective.as_ref(),
            eval_objective: eval_objective.as_ref(),
            eval,
            summary: &mut summary,
        };
        let report = run_loop(&mut kind, &mut trainee, rx.iter(), &schedule, &req.out.join("metrics.jsonl"), &device);
        drop(rx);
        report
    })?;
    summary.record(report, trainee.step, start);
    Ok(summary)
}

/// Sends the value batches of the planned cells from step `from` on, then a read error if any
/// (the trainer stops at the first error it receives, or when it drops the receiver).
fn feed_value_batches(
    setup: &ValueSetup,
    from: u64,
    maker: &BatchMaker<'_>,
    tx: crossbeam_channel::Sender<Result<ValueBatch>>,
) {
    let feed = setup.plan.clone().feed(from, None);
    let read = feed(&mut |item| match item {
        Feed::Batch(b) => {
            let cells: Option<Vec<(u64, ExpressionCell)>> =
                b.cells.iter().map(|(k, p)| ExpressionCell::unpack(p).map(|c| (*k, c))).collect();
            let batch = cells
                .map(|c| maker.build(b.epoch, &c))
                .ok_or_else(|| Error::internal("train", "a planned cell without its expression"));
            tx.send(batch).is_ok()
        }
        Feed::Graph(_) => true,
    });
    if let Err(e) = read {
        let _ = tx.send(Err(e));
    }
}

/// A value model's training as a [`TrainStep`].
struct ValueTraining<'a, B: TrainingBackend> {
    req: &'a TrainRequest,
    setup: &'a ValueSetup,
    objective: &'a dyn Objective<B>,
    /// The same objective on the backend without autodiff (held-out evaluation).
    eval_objective: &'a dyn Objective<B::InnerBackend>,
    eval: Vec<ValueBatch>,
    summary: &'a mut TrainSummary,
}

impl<B: TrainingBackend> TrainStep<B> for ValueTraining<'_, B> {
    type Batch = ValueBatch;

    fn forward(
        &mut self,
        model: &CellEncoder<B>,
        batch: &ValueBatch,
        step: u64,
        phases: &mut StepPhases,
        device: &B::Device,
    ) -> Result<Option<Forward<B>>> {
        let t = batch::tensors::<B>(batch, step, device);
        phases.mark::<B>("prepare", device);
        let out = value_loss(model, self.objective, &t, self.req.model.max_positions);
        Ok(Some(Forward { loss: out.loss, parts: out.parts, masked: 0 }))
    }

    fn work(&self, batch: &ValueBatch) -> u64 {
        batch.tokens()
    }

    fn after_step(
        &mut self,
        trainee: &mut Trainee<B>,
        batch: &ValueBatch,
        stepped: Option<&Stepped>,
        device: &B::Device,
    ) -> Result<AfterStep> {
        let Some(s) = stepped else { return Ok(AfterStep::default()) };
        let (t, step) = (&self.req.train, s.step);
        let mut line = s.metrics_line(
            serde_json::json!({"epoch": batch.epoch, "tokens": batch.tokens(), "visible": batch.visible}),
        );
        if (step.is_multiple_of(t.eval_every) || step == self.setup.total) && !self.eval.is_empty() {
            let model = trainee.model.valid();
            let loss = evaluate(&model, self.eval_objective, &self.eval, self.req.model.max_positions, device);
            line["eval_loss"] = loss.into();
            self.summary.eval_loss = Some(loss);
        }
        Ok(AfterStep::scheduled(line, s, self.setup.total, self.req.stop_after, t))
    }

    fn save(&mut self, trainee: &Trainee<B>, batch: &ValueBatch) -> Result<PathBuf> {
        let s = self.setup;
        save_checkpoint(self.req, (&s.vocab, s.layout, s.total), trainee, batch.epoch)
    }
}

/// The objective's loss of a value batch's tensors.
fn value_loss<B: FusedOps>(
    model: &CellEncoder<B>,
    objective: &dyn Objective<B>,
    t: &corrflow_model::objective::BatchTensors<B>,
    max_positions: usize,
) -> corrflow_model::objective::LossOutput<B> {
    let values = t.value.as_ref().map(|v| v.values.clone());
    let states = model.states_with_values(t.input_ids.clone(), values, t.pad.clone(), model.encoder.layers.len());
    objective.loss(model, &states, t, max_positions)
}

/// The held-out loss: the mean over the evaluation set's cells (batches weighed by their rows).
fn evaluate<B: FusedOps>(
    model: &CellEncoder<B>,
    objective: &dyn Objective<B>,
    eval: &[ValueBatch],
    max_positions: usize,
    device: &B::Device,
) -> f64 {
    let (mut sum, mut rows) = (0.0, 0usize);
    for b in eval {
        let t = batch::tensors::<B>(b, 0, device);
        let loss = value_loss(model, objective, &t, max_positions).loss.into_scalar().elem::<f64>();
        sum += loss * b.rows as f64;
        rows += b.rows;
    }
    sum / rows.max(1) as f64
}
