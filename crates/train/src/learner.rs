//! The one training loop (burn's `Learner` idea, made ours). A kind of training implements
//! [`TrainStep`]: what a batch is, the loss of one on the model, and what happens after an
//! optimizer step (metric lines, held-out evaluation, early stopping, when to checkpoint). The
//! loop owns the rest, the same for every kind: the per-step seed (dropout repeats on resume),
//! backward, the learning-rate schedule (linear warm-up and decay), AdamW with global-norm
//! clipping, a diverged loss, the step count and its end, progress, the metrics file and
//! throughput. Pre-training (`run.rs`), fine-tuning (`finetune/`) and the value models
//! (`values/`) are its three implementations.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::config::{learning_rate, TrainConfig};
use burn::optim::GradientsParams;
use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Tensor};
use corrflow_io::error::{Error, IoContext, Result};
use corrflow_model::{CellEncoder, TrainingBackend};

use crate::metrics::progress_bar;
use crate::optim::FlatAdamW;
use crate::step::StepPhases;

/// The model and its optimizer at the step a run continues from.
pub struct Trainee<B: TrainingBackend> {
    pub model: CellEncoder<B>,
    pub optim: FlatAdamW<B>,
    /// Optimizer steps done (skipped batches included).
    pub step: u64,
    /// The checkpoint step a resumed run continued from.
    pub resumed_from: Option<u64>,
}

/// A run's schedule: what the loop needs from its configuration.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// `train`, `finetune`: the progress task's name and the start of a divergence message.
    pub name: &'static str,
    pub seed: u64,
    pub lr: f64,
    pub warmup_steps: u64,
    /// Optimizer steps of the whole run (the schedule's length; the loop ends there).
    pub total: u64,
    /// Global gradient-norm bound.
    pub grad_clip: f64,
    pub progress: bool,
    /// Wait for the device after each phase of a step (`train --profile-steps`).
    pub profile: bool,
}

/// A batch's forward pass: the loss to minimise and its named parts.
pub struct Forward<B: Backend> {
    pub loss: Tensor<B, 1>,
    pub parts: Vec<(&'static str, Tensor<B, 1>)>,
    /// Masked tokens (pre-training's `masked` metric; 0 where there are none).
    pub masked: usize,
}

/// One optimizer step that ran.
#[derive(Clone, Debug)]
pub struct Stepped {
    /// The step count after it (1 for the first).
    pub step: u64,
    pub loss: f64,
    pub lr: f64,
    pub parts: Vec<(&'static str, f64)>,
    pub masked: usize,
    /// Wall time of the step, and its units of work (tokens or cells) per second.
    pub seconds: f64,
    pub rate: f64,
    /// Per-phase milliseconds, when profiling.
    pub phases: Option<serde_json::Value>,
}

/// What the loop does after a step.
#[derive(Debug, Default)]
pub struct AfterStep {
    /// Lines appended to `metrics.jsonl`.
    pub lines: Vec<serde_json::Value>,
    /// Write a checkpoint at this step.
    pub checkpoint: bool,
    /// End the run after this step.
    pub stop: bool,
    /// The progress task's message (`loss 7.1`); empty keeps the last one.
    pub message: String,
}

impl Stepped {
    /// Its `metrics.jsonl` line: step, loss, learning rate, rate (`tokens_per_s`), each loss
    /// part as `loss_NAME`, the profiled phases, and `fields`, the training kind's own.
    pub fn metrics_line(&self, fields: serde_json::Value) -> serde_json::Value {
        let mut line = serde_json::json!({
            "step": self.step, "loss": self.loss, "lr": self.lr, "tokens_per_s": self.rate,
        });
        if let (Some(line), serde_json::Value::Object(fields)) = (line.as_object_mut(), fields) {
            line.extend(fields);
        }
        for (name, value) in &self.parts {
            line[format!("loss_{name}")] = (*value).into();
        }
        if let Some(p) = &self.phases {
            line["phase_ms"] = p.clone();
        }
        line
    }
}

impl AfterStep {
    /// A pre-training schedule's answer to step `s` of `total`: `line` logged every
    /// `log_every` steps, at an evaluation (an `eval_loss` in it) and at the last step; a
    /// checkpoint every `checkpoint_every` steps and at the last; the run stopped at
    /// `stop_after`.
    pub fn scheduled(
        line: serde_json::Value,
        s: &Stepped,
        total: u64,
        stop_after: Option<u64>,
        train: &TrainConfig,
    ) -> Self {
        let last = s.step == total || stop_after == Some(s.step);
        let log = s.step.is_multiple_of(train.log_every) || line.get("eval_loss").is_some() || last;
        AfterStep {
            lines: if log { vec![line] } else { Vec::new() },
            checkpoint: s.step.is_multiple_of(train.checkpoint_every) || last,
            stop: stop_after == Some(s.step),
            message: format!("loss {:.4} lr {:.2e} {:.0} tok/s", s.loss, s.lr, s.rate),
        }
    }
}

/// One kind of training.
pub trait TrainStep<B: TrainingBackend> {
    type Batch;

    /// Before a step, outside its timing (`train --dump-batches`).
    fn before_step(&mut self, _batch: &Self::Batch, _step: u64) -> Result<()> {
        Ok(())
    }

    /// The loss of `batch` on the training model at `step` (the loop has seeded the backend);
    /// `None` when the batch teaches nothing (the step is counted, nothing is optimised).
    fn forward(
        &mut self,
        model: &CellEncoder<B>,
        batch: &Self::Batch,
        step: u64,
        phases: &mut StepPhases,
        device: &B::Device,
    ) -> Result<Option<Forward<B>>>;

    /// Units of work in a batch (tokens, cells), for the rate.
    fn work(&self, batch: &Self::Batch) -> u64;

    /// After step `trainee.step` (`stepped` is `None` when the batch was skipped): metric lines,
    /// evaluation, checkpoints and the end of the run.
    fn after_step(
        &mut self,
        trainee: &mut Trainee<B>,
        batch: &Self::Batch,
        stepped: Option<&Stepped>,
        device: &B::Device,
    ) -> Result<AfterStep>;

    /// Writes a checkpoint of `trainee`, returning its directory.
    fn save(&mut self, trainee: &Trainee<B>, batch: &Self::Batch) -> Result<PathBuf>;
}

/// What a loop did.
#[derive(Clone, Debug, Default)]
pub struct LoopReport {
    pub first_loss: Option<f64>,
    pub last_loss: Option<f64>,
    /// Units of work of the steps that ran, and their wall time.
    pub work: u64,
    pub seconds: f64,
    /// The last checkpoint written.
    pub checkpoint: Option<PathBuf>,
}

/// Trains `trainee` on `batches` (from its step on) until the schedule's end, the batches' end
/// or the step's own stop; metric lines are appended to `metrics` (a run's `metrics.jsonl`).
pub fn run_loop<B: TrainingBackend, S: TrainStep<B>>(
    kind: &mut S,
    trainee: &mut Trainee<B>,
    batches: impl IntoIterator<Item = Result<S::Batch>>,
    schedule: &Schedule,
    metrics: &Path,
    device: &B::Device,
) -> Result<LoopReport> {
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(metrics).at(metrics)?;
    let bar = progress_bar(schedule.name, schedule.progress, schedule.total, trainee.step);
    let mut report = LoopReport::default();
    for batch in batches {
        let batch = batch?;
        if trainee.step >= schedule.total {
            break;
        }
        kind.before_step(&batch, trainee.step)?;
        let stepped = optimise(kind, trainee, &batch, schedule, device)?;
        trainee.step += 1;
        if let Some(s) = &stepped {
            report.first_loss.get_or_insert(s.loss);
            report.last_loss = Some(s.loss);
            report.work += kind.work(&batch);
            report.seconds += s.seconds;
            bar.set_position(trainee.step);
        }
        let after = kind.after_step(trainee, &batch, stepped.as_ref(), device)?;
        if !after.message.is_empty() {
            bar.set_message(after.message);
        }
        for line in &after.lines {
            writeln!(file, "{line}").at(metrics)?;
        }
        if after.checkpoint {
            report.checkpoint = Some(kind.save(trainee, &batch)?);
        }
        if after.stop {
            break;
        }
    }
    bar.finish();
    file.flush().at(metrics)?;
    Ok(report)
}

/// Forward, backward, clipping and the AdamW update of one batch.
fn optimise<B: TrainingBackend, S: TrainStep<B>>(
    kind: &mut S,
    trainee: &mut Trainee<B>,
    batch: &S::Batch,
    schedule: &Schedule,
    device: &B::Device,
) -> Result<Option<Stepped>> {
    let step = trainee.step;
    let t0 = Instant::now();
    let mut phases = StepPhases::start(schedule.profile, t0);
    // Dropout draws depend on (seed, step) only: a resumed run repeats them.
    B::seed(device, mix(schedule.seed, step));
    let Some(out) = kind.forward(&trainee.model, batch, step, &mut phases, device)? else {
        return Ok(None);
    };
    let loss = out.loss.clone().into_scalar().elem::<f64>();
    let parts: Vec<(&'static str, f64)> =
        out.parts.iter().map(|(n, p)| (*n, p.clone().into_scalar().elem::<f64>())).collect();
    if !loss.is_finite() {
        let what = if schedule.name == "finetune" { "fine-tuning" } else { "training" };
        return Err(Error::Usage(format!("{what} diverged at step {step}: loss is {loss}")));
    }
    phases.mark::<B>("forward", device);
    let grads = GradientsParams::from_grads(out.loss.backward(), &trainee.model);
    phases.mark::<B>("backward", device);
    let lr = learning_rate(schedule.lr, step, schedule.warmup_steps, schedule.total);
    trainee.model = trainee.optim.step(lr, trainee.model.clone(), grads, schedule.grad_clip);
    phases.mark::<B>("optimizer", device);
    let seconds = t0.elapsed().as_secs_f64();
    let rate = kind.work(batch) as f64 / seconds.max(1e-9);
    let phases = schedule.profile.then(|| phases.to_json());
    Ok(Some(Stepped { step: step + 1, loss, lr, parts, masked: out.masked, seconds, rate, phases }))
}

/// The seed of step `b` of a run seeded with `a` (a resumed run draws the same dropout).
pub(crate) fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
