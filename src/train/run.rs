//! `corrflow train`: the loop. Batches come from the masking dataflow; AdamW with weight decay,
//! linear warmup and decay, gradient clipping; periodic held-out evaluation; metrics as JSON
//! lines; atomic checkpoints from which a stopped run resumes to the same weights.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use burn::module::{AutodiffModule, Module};
use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use burn::record::{BinFileRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, Tensor};
use corrflow_operators::mask::{MaskParams, MaskScratch, MaskStrategy, MaskedSequence};
use serde::{Deserialize, Serialize};

use super::checkpoint::{self, CheckpointState, MODEL_FILE, OPTIM_FILE};
use super::config::{learning_rate, TrainConfig};
use super::data::{DataPlan, GraphWatch};
use super::model::{CellEncoder, ModelConfig, Objective};
use super::objective::{batch_tensors, loss};
use crate::corpus::CorpusIndex;
use crate::error::{Error, IoContext, Result};
use crate::mask::batches::TrainingBatch;
use crate::mask::dataflow::{MaskedBatches, MaskingOptions};
use crate::mask::MaskContext;

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
    /// Test hook: stop (as if killed) after this many steps, leaving the checkpoints.
    pub stop_after: Option<u64>,
    /// Wait for the device after each phase of a step and log each phase's milliseconds as
    /// `phase_ms` in metrics.jsonl (see [`StepPhases`]).
    pub profile_steps: bool,
}

/// What `train --json` prints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrainSummary {
    pub command: String,
    pub out: String,
    pub device: String,
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
}

type Rec = BinFileRecorder<FullPrecisionSettings>;

fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Runs (or resumes) training on backend `B`.
pub fn train<B: AutodiffBackend>(req: &TrainRequest, device: B::Device) -> Result<TrainSummary> {
    let start = Instant::now();
    let (t, m) = (&req.train, &req.model);
    t.validate().map_err(|msg| Error::invalid(&req.out, msg))?;
    m.validate().map_err(|msg| Error::invalid(&req.out, msg))?;
    req.mask.validate().map_err(|msg| Error::invalid(&req.out, msg))?;
    let corpus = t.corpus.clone().ok_or_else(|| Error::Usage("train needs train.corpus (or --corpus)".into()))?;
    let (info, vocab) = crate::graph::load_corpus_meta(&corpus)?;
    let index = CorpusIndex::open(&corpus, &t.atlases)?;
    let graph = match (&t.graph, req.mask.strategy) {
        (Some(g), _) => Some(crate::graph::read_graph(g)?),
        (None, MaskStrategy::Corrmask) if req.mask.lambda > 0.0 => {
            return Err(Error::Usage("CorrMask needs a dependency graph: set train.graph (or --graph)".into()))
        }
        (None, _) => None,
    };
    let graph_dir = t.graph.clone().unwrap_or_default();
    let ctx = Arc::new(MaskContext::load(&info, &vocab, &index, graph.as_ref(), &graph_dir, req.mask.clone(), false)?);
    let max_len = if t.max_len == 0 { m.max_positions } else { t.max_len.min(m.max_positions) };
    let plan = DataPlan {
        index: index.clone(),
        vocab_size: vocab.len(),
        layout: info.layout,
        batch_size: t.batch_size,
        group_batches: t.group_batches,
        shuffle_buffer: t.shuffle_buffer,
        epochs: t.epochs,
        max_len,
        eval_fraction: t.eval_fraction,
        seed: t.seed,
    };
    let per_epoch = plan.batches_per_epoch();
    let mut total = per_epoch * t.epochs as u64;
    if t.max_steps > 0 {
        total = total.min(t.max_steps);
    }
    if total == 0 {
        return Err(Error::format(&corpus, "no training cells (corpus empty or all held out)"));
    }

    // Resume from the latest checkpoint, or start fresh.
    std::fs::create_dir_all(&req.out).at(&req.out)?;
    if req.restart && checkpoint::checkpoints_dir(&req.out).exists() {
        std::fs::remove_dir_all(checkpoint::checkpoints_dir(&req.out)).at(&req.out)?;
        let _ = std::fs::remove_file(req.out.join("metrics.jsonl"));
    }
    let is_special: Vec<bool> = (0..vocab.len() as u32).map(|t| !vocab.is_gene(t)).collect();
    B::seed(&device, t.seed);
    let mut model: CellEncoder<B> = m.init(vocab.len(), &device);
    let mut optim = {
        // Clipping is done here, by the global norm (as PyTorch's clip_grad_norm_), not by
        // burn's per-tensor clipping.
        AdamWConfig::new().with_weight_decay(t.weight_decay as f32).init::<B, CellEncoder<B>>()
    };
    let mut step = 0u64;
    let mut resumed_from = None;
    if let Some(dir) = checkpoint::latest(&req.out) {
        let state = checkpoint::load_state(&dir, checkpoint::Purpose::Resume)?;
        let same = state.model == *m
            && state.mask == req.mask
            && state.vocab_hash == vocab.hash()
            && same_run(&state.train, t);
        if !same {
            return Err(Error::conflict(
                &dir,
                "the run directory holds checkpoints of a different configuration, corpus or vocabulary; use --restart to discard them or another --out",
            ));
        }
        model = model
            .load_file(dir.join(MODEL_FILE), &Rec::new(), &device)
            .map_err(|e| Error::format(dir.join(MODEL_FILE), e.to_string()))?;
        let record = Rec::new()
            .load(dir.join(OPTIM_FILE), &device)
            .map_err(|e| Error::format(dir.join(OPTIM_FILE), e.to_string()))?;
        optim = optim.load_record(record);
        step = state.step;
        resumed_from = Some(step);
        truncate_metrics(&req.out.join("metrics.jsonl"), step)?;
        tracing::info!(step, "resumed from {}", dir.display());
    }
    vocab.write_dir(&req.out.join("vocab"))?;

    let eval_set = EvalSet::new(&ctx, &plan.eval_set(t.eval_cells)?, t.batch_size);
    let initial: Vec<(u32, u32)> =
        graph.as_ref().map(|g| g.edges.iter().map(|e| (e.u, e.v)).collect()).unwrap_or_default();
    let watch = graph.as_ref().map(|g| GraphWatch {
        dir: graph_dir.clone(),
        every: 50,
        hash: g.info.content_hash.clone(),
        edges: initial.iter().copied().collect(),
    });
    let batches = MaskedBatches::spawn(
        ctx.clone(),
        initial,
        plan.clone().feed(step, watch),
        MaskingOptions { workers: t.mask_workers, capacity: 4, first_seq: step },
    );

    let bar = progress_bar(req.progress, total, step);
    let mut metrics =
        std::fs::OpenOptions::new().create(true).append(true).open(req.out.join("metrics.jsonl")).at(&req.out)?;
    let mut summary = TrainSummary {
        command: "train".into(),
        out: req.out.display().to_string(),
        device: format!("{device:?}"),
        steps: step,
        total_steps: total,
        resumed_from,
        parameters: model.num_params(),
        first_loss: None,
        last_loss: None,
        eval_loss: None,
        eval_accuracy: None,
        unigram_accuracy: None,
        tokens_per_s: 0.0,
        seconds: 0.0,
        checkpoint: None,
    };
    let (mut tokens_done, mut train_secs) = (0u64, 0.0f64);
    let save = |model: &CellEncoder<B>, optim: &_, step: u64, epoch: u64| -> Result<PathBuf> {
        let state = CheckpointState {
            format_version: 1,
            step,
            epoch,
            total_steps: total,
            model: m.clone(),
            train: t.clone(),
            mask: req.mask.clone(),
            vocab_hash: vocab.hash().to_string(),
            vocab_size: vocab.len(),
            layout: info.layout,
            model_sha256: String::new(),
            optim_sha256: String::new(),
        };
        checkpoint::save(&req.out, state, t.keep_checkpoints, |dir| {
            let rec = Rec::new();
            model.clone().save_file(dir.join(MODEL_FILE), &rec).map_err(|e| Error::format(dir, e.to_string()))?;
            rec.record(Optimizer::<CellEncoder<B>, B>::to_record(optim), dir.join(OPTIM_FILE))
                .map_err(|e| Error::format(dir, e.to_string()))
        })
    };
    for batch in batches {
        let batch = batch?;
        if step >= total {
            break;
        }
        debug_assert_eq!(batch.seq, step);
        let t0 = Instant::now();
        let mut phases = StepPhases::start(req.profile_steps, t0);
        // Dropout draws depend on (seed, step) only: a resumed run repeats them.
        B::seed(&device, mix(t.seed, step));
        let tensors = batch_tensors::<B>(&batch, &is_special, vocab.len(), m.objective, m.max_positions, &device);
        if m.objective == Objective::Mlm && tensors.masked == 0 {
            step += 1;
            continue;
        }
        phases.mark::<B>("prepare", &device);
        let out = loss(&model, &tensors, m.objective, m.max_positions);
        let loss_value = out.loss.clone().into_scalar().elem::<f64>();
        if !loss_value.is_finite() {
            return Err(Error::Usage(format!("training diverged at step {step}: loss is {loss_value}")));
        }
        phases.mark::<B>("forward", &device);
        let mut grads = GradientsParams::from_grads(out.loss.backward(), &model);
        phases.mark::<B>("backward", &device);
        if t.grad_clip > 0.0 {
            clip_global_norm::<B>(&model, &mut grads, t.grad_clip);
        }
        phases.mark::<B>("clip", &device);
        let lr = learning_rate(t.lr, step, t.warmup_steps, total);
        model = optim.step(lr, model, grads);
        phases.mark::<B>("optimizer", &device);
        step += 1;
        let secs = t0.elapsed().as_secs_f64();
        let tokens = batch.tokens() as u64;
        tokens_done += tokens;
        train_secs += secs;
        summary.first_loss.get_or_insert(loss_value);
        summary.last_loss = Some(loss_value);
        let tps = tokens as f64 / secs.max(1e-9);
        bar.set_position(step);
        bar.set_message(format!("loss {loss_value:.4} lr {lr:.2e} {tps:.0} tok/s"));
        let mut line = serde_json::json!({
            "step": step, "epoch": batch.epoch, "loss": loss_value, "lr": lr, "tokens_per_s": tps,
            "tokens": tokens, "masked": tensors.masked, "graph_time": batch.graph_time,
        });
        if req.profile_steps {
            line["phase_ms"] = phases.to_json();
        }
        let last = step == total || req.stop_after == Some(step);
        if step.is_multiple_of(t.eval_every) || step == total {
            let e = evaluate(&model.valid(), &eval_set, &is_special, vocab.len(), m, &device);
            if let Some(e) = e {
                line["eval_loss"] = e.loss.into();
                line["eval_accuracy"] = e.accuracy.into();
                line["unigram_accuracy"] = e.unigram_accuracy.into();
                summary.eval_loss = Some(e.loss);
                summary.eval_accuracy = Some(e.accuracy);
                summary.unigram_accuracy = Some(e.unigram_accuracy);
            }
        }
        if step.is_multiple_of(t.log_every) || line.get("eval_loss").is_some() || last {
            writeln!(metrics, "{line}").at(&req.out)?;
        }
        if step.is_multiple_of(t.checkpoint_every) || last {
            summary.checkpoint = Some(save(&model, &optim, step, batch.epoch)?.display().to_string());
        }
        if req.stop_after == Some(step) {
            break;
        }
    }
    bar.finish_and_clear();
    metrics.flush().at(&req.out)?;
    summary.steps = step;
    summary.tokens_per_s = tokens_done as f64 / train_secs.max(1e-9);
    summary.seconds = start.elapsed().as_secs_f64();
    Ok(summary)
}

/// Wall time of the phases of one training step (prepare, forward, backward, clip, optimizer),
/// with a device sync at the end of each. The syncs stop host and device work from overlapping,
/// so a profiled step is slower: this finds where a step's time goes, it does not measure speed.
struct StepPhases {
    on: bool,
    last: Instant,
    ms: Vec<(&'static str, f64)>,
}

impl StepPhases {
    fn start(on: bool, now: Instant) -> Self {
        StepPhases { on, last: now, ms: Vec::new() }
    }

    fn mark<B: Backend>(&mut self, phase: &'static str, device: &B::Device) {
        if self.on {
            // A failed sync shows up again at the next read of a tensor; here it only ends the phase.
            let _ = B::sync(device);
            let now = Instant::now();
            self.ms.push((phase, (now - self.last).as_secs_f64() * 1e3));
            self.last = now;
        }
    }

    fn to_json(&self) -> serde_json::Value {
        self.ms.iter().map(|&(k, v)| (k.to_string(), serde_json::Value::from(v))).collect()
    }
}

/// Parameter ids in module order: a fixed order for reductions over all gradients.
struct ParamOrder(Vec<(burn::module::ParamId, usize)>);

impl<B: Backend> burn::module::ModuleVisitor<B> for ParamOrder {
    fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<burn::tensor::Tensor<B, D>>) {
        self.0.push((param.id, D));
    }
}

/// Scales all gradients by `min(1, max_norm / ‖g‖)`, ‖g‖ the norm of all of them together,
/// summed in module order (deterministic, unlike a hash-map order).
fn clip_global_norm<B: AutodiffBackend>(model: &CellEncoder<B>, grads: &mut GradientsParams, max_norm: f64) {
    fn sq<BI: Backend, const D: usize>(g: &GradientsParams, id: burn::module::ParamId) -> Option<Tensor<BI, 1>> {
        g.get::<BI, D>(id).map(|t| t.square().sum())
    }
    fn scale<BI: Backend, const D: usize>(g: &mut GradientsParams, id: burn::module::ParamId, c: f64) {
        if let Some(t) = g.remove::<BI, D>(id) {
            g.register::<BI, D>(id, t.mul_scalar(c));
        }
    }
    let mut order = ParamOrder(Vec::new());
    burn::module::Module::<B>::visit(model, &mut order);
    let squares: Vec<Tensor<B::InnerBackend, 1>> = order
        .0
        .iter()
        .filter_map(|&(id, d)| match d {
            1 => sq::<B::InnerBackend, 1>(grads, id),
            2 => sq::<B::InnerBackend, 2>(grads, id),
            3 => sq::<B::InnerBackend, 3>(grads, id),
            _ => None,
        })
        .collect();
    if squares.is_empty() {
        return;
    }
    // One read-back for all parameters (on a GPU each read is a device sync), then the same
    // f64 sum in module order as reading them one by one.
    let total: f64 = Tensor::cat(squares, 0).into_data().iter::<f64>().sum();
    let coef = max_norm / (total.sqrt() + 1e-6);
    if coef < 1.0 {
        for &(id, d) in &order.0 {
            match d {
                1 => scale::<B::InnerBackend, 1>(grads, id, coef),
                2 => scale::<B::InnerBackend, 2>(grads, id, coef),
                3 => scale::<B::InnerBackend, 3>(grads, id, coef),
                _ => {}
            }
        }
    }
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

/// Drops metric lines past `step` (a resumed run rewrites them).
fn truncate_metrics(path: &Path, step: u64) -> Result<()> {
    let Ok(text) = std::fs::read_to_string(path) else { return Ok(()) };
    let kept: String = text
        .lines()
        .filter(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .and_then(|v| v["step"].as_u64())
                .is_some_and(|s| s <= step)
        })
        .map(|l| format!("{l}\n"))
        .collect();
    crate::util::atomic::write_atomic(path, kept.as_bytes())
}

fn progress_bar(show: bool, total: u64, pos: u64) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total).with_style(
        indicatif::ProgressStyle::with_template("train {bar:30} {pos}/{len} steps {msg} (eta {eta})")
            .expect("static template"),
    );
    bar.set_position(pos);
    bar
}

/// Held-out masked-token loss and accuracy, with the unigram baseline (always predicting the
/// most frequent masked token).
pub struct EvalResult {
    pub loss: f64,
    pub accuracy: f64,
    pub unigram_accuracy: f64,
}

/// The held-out cells, masked once (the evaluation epoch is fixed, so every evaluation sees the
/// same masks) and padded into length-sorted batches.
pub struct EvalSet {
    batches: Vec<TrainingBatch>,
    masked: u64,
    unigram_accuracy: f64,
}

impl EvalSet {
    pub fn new(ctx: &MaskContext, cells: &[(u64, Vec<u32>)], batch_size: usize) -> Self {
        let masker = ctx.masker();
        let mut scratch = MaskScratch::default();
        let mut masked: Vec<(u64, MaskedSequence)> = cells
            .iter()
            .map(|(key, tokens)| {
                let mut out = MaskedSequence::default();
                masker.mask(tokens, u64::MAX, *key, &mut scratch, &mut out);
                (*key, out)
            })
            .collect();
        masked.sort_by_key(|(_, c)| std::cmp::Reverse(c.input_ids.len()));
        let batches: Vec<TrainingBatch> = masked
            .chunks(batch_size.max(1))
            .map(|chunk| {
                let seqs: Vec<MaskedSequence> = chunk.iter().map(|c| c.1.clone()).collect();
                TrainingBatch::pad(0, 0, chunk.iter().map(|c| c.0).collect(), &seqs, ctx.pad)
            })
            .collect();
        let mut label_counts = std::collections::HashMap::<i64, u64>::new();
        for b in &batches {
            for &l in b.labels.iter().filter(|&&l| l != corrflow_operators::mask::IGNORE_INDEX) {
                *label_counts.entry(l).or_default() += 1;
            }
        }
        let total: u64 = label_counts.values().sum();
        let top = label_counts.values().copied().max().unwrap_or(0);
        Self { batches, masked: total, unigram_accuracy: top as f64 / total.max(1) as f64 }
    }
}

pub fn evaluate<B: Backend>(
    model: &CellEncoder<B>,
    set: &EvalSet,
    is_special: &[bool],
    vocab: usize,
    m: &ModelConfig,
    device: &B::Device,
) -> Option<EvalResult> {
    if set.batches.is_empty() {
        return None;
    }
    let (mut loss_sum, mut weight, mut correct) = (0.0f64, 0.0f64, 0u64);
    for b in &set.batches {
        let t = batch_tensors::<B>(b, is_special, vocab, m.objective, m.max_positions, device);
        if m.objective == Objective::Mlm && t.masked == 0 {
            continue;
        }
        let out = loss(model, &t, m.objective, m.max_positions);
        let w = if m.objective == Objective::Mlm { t.masked as f64 } else { b.rows as f64 };
        loss_sum += out.loss.into_scalar().elem::<f64>() * w;
        weight += w;
        if let Some(c) = out.correct {
            correct += c.into_scalar().elem::<i64>() as u64;
        }
    }
    Some(EvalResult {
        loss: loss_sum / weight.max(1.0),
        accuracy: correct as f64 / set.masked.max(1) as f64,
        unigram_accuracy: set.unigram_accuracy,
    })
}
