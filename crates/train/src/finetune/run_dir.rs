//! The run directory of `finetune`: checkpoints (weights, optimizer, `finetune.json` with early
//! stopping's state), resuming from the latest, `--restart`, and pruning to the latest and best.

use std::path::{Path, PathBuf};

use crate::TrainConfig;
use burn::record::{BinFileRecorder, FullPrecisionSettings, Recorder};
use corrflow_fs::atomic::write_json_atomic;
use corrflow_io::error::{Error, IoContext, Result};
use corrflow_model::checkpoint::{self, CheckpointState, MODEL_FILE, OPTIM_FILE};
use corrflow_model::fused::AdamWHyper;
use corrflow_model::{head, InitModel, TrainingBackend};
use serde::{Deserialize, Serialize};

use super::{
    freeze, FinetuneConfig, FinetuneRequest, FinetuneTask, Setup, PREDICTIONS_FILE, PROGRESS_FILE, RESULTS_FILE,
};
use crate::learner::Trainee;
use crate::metrics::truncate_metrics;
use crate::optim::FlatAdamW;

type Rec = BinFileRecorder<FullPrecisionSettings>;

/// The best validation score so far.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct Best {
    pub(super) step: u64,
    pub(super) macro_f1: f64,
}

/// `finetune.json` of a checkpoint: what a resumed run must match, and early stopping's state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct FinetuneState {
    /// sha256 of the base checkpoint's weights.
    pub(super) base_model_sha256: String,
    pub(super) task: FinetuneTask,
    pub(super) config: FinetuneConfig,
    pub(super) best: Option<Best>,
    /// Epochs since the best one.
    pub(super) stale: usize,
}

/// The latest checkpoint of `req.out` (which must be of the same base model, task and
/// settings), or the base model with a new head at step 0; with early stopping's state.
pub(super) fn init_or_resume<B: TrainingBackend>(
    req: &FinetuneRequest,
    setup: &Setup<B>,
    device: &B::Device,
) -> Result<(Trainee<B>, FinetuneState)> {
    let c = &req.config;
    let hyper = AdamWHyper { weight_decay: c.weight_decay as f32, ..AdamWHyper::default() };
    let fresh = FinetuneState {
        base_model_sha256: setup.base.state.model_sha256.clone(),
        task: req.task.clone(),
        config: c.clone(),
        best: None,
        stale: 0,
    };
    let Some(dir) = checkpoint::latest(&req.out) else {
        // A run killed before its first checkpoint starts again from step 0: its metric lines go.
        truncate_metrics(&req.out.join("metrics.jsonl"), 0)?;
        B::seed(device, c.seed);
        let mut model = setup.base.model.clone();
        model.label_head = Some(head(setup.model.hidden, setup.supervision.classes.len(), device));
        let model = freeze(model, c.freeze_layers);
        let optim = FlatAdamW::new(hyper, &model, device);
        return Ok((Trainee { model, optim, step: 0, resumed_from: None }, fresh));
    };
    let ckpt = checkpoint::load_state(&dir, checkpoint::Purpose::Resume)?;
    let p = dir.join(PROGRESS_FILE);
    let text = std::fs::read_to_string(&p).at(&p)?;
    let state: FinetuneState =
        serde_json::from_str(&text).map_err(|e| Error::format(&p, format!("invalid fine-tuning state: {e}")))?;
    let same = ckpt.model == setup.model
        && state.base_model_sha256 == fresh.base_model_sha256
        && state.task == fresh.task
        && FinetuneConfig { log_every: 0, ..state.config.clone() } == FinetuneConfig { log_every: 0, ..c.clone() };
    if !same {
        return Err(Error::conflict(
            &dir,
            "the run directory holds a fine-tuning run of another base model, task or settings; use --restart to discard it or another --out",
        ));
    }
    let model = checkpoint::load_model(setup.model.init(setup.base.vocab.len(), device), &dir, device)?;
    let record = Rec::new()
        .load(dir.join(OPTIM_FILE), device)
        .map_err(|e| Error::format(dir.join(OPTIM_FILE), e.to_string()))?;
    let model = freeze(model, c.freeze_layers);
    let mut optim = FlatAdamW::new(hyper, &model, device);
    optim.load_record(record).map_err(|e| Error::format(dir.join(OPTIM_FILE), e))?;
    truncate_metrics(&req.out.join("metrics.jsonl"), ckpt.step)?;
    tracing::info!(step = ckpt.step, "resumed from {}", dir.display());
    Ok((Trainee { model, optim, step: ckpt.step, resumed_from: Some(ckpt.step) }, state))
}

/// Clears a run directory for `--restart`, or refuses one that holds a finished run.
pub(super) fn clear_or_refuse(req: &FinetuneRequest) -> Result<()> {
    let finished = req.out.join(RESULTS_FILE);
    if req.restart {
        for f in [RESULTS_FILE, PREDICTIONS_FILE, "metrics.jsonl"] {
            let _ = std::fs::remove_file(req.out.join(f));
        }
        let dir = checkpoint::checkpoints_dir(&req.out);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).at(&dir)?;
        }
    } else if finished.is_file() {
        return Err(Error::conflict(
            &finished,
            "this fine-tuning run has finished; use --restart to run it again or another --out",
        ));
    }
    Ok(())
}

/// Writes a checkpoint at the trainee's step, then removes those that are neither the latest
/// nor the best.
pub(super) fn save<B: TrainingBackend>(
    req: &FinetuneRequest,
    setup: &Setup<B>,
    (trainee, progress): (&Trainee<B>, &FinetuneState),
    epoch: u64,
) -> Result<PathBuf> {
    let c = &req.config;
    let train = TrainConfig {
        corpus: Some(req.corpus.clone()),
        atlases: req.atlases.clone(),
        batch_size: c.batch_size,
        epochs: c.epochs,
        max_len: setup.plan.max_len,
        lr: c.lr,
        weight_decay: c.weight_decay,
        warmup_steps: c.warmup_steps,
        grad_clip: c.grad_clip,
        seed: c.seed,
        ..TrainConfig::default()
    };
    let state = CheckpointState {
        format_version: 1,
        step: trainee.step,
        epoch,
        total_steps: setup.total,
        model: setup.model.clone(),
        train: crate::run::settings_of(&train)?,
        mask: Default::default(),
        vocab_hash: setup.base.vocab.hash().to_string(),
        vocab_size: setup.base.vocab.len(),
        layout: setup.base.state.layout,
        model_sha256: String::new(),
        optim_sha256: String::new(),
    };
    let dir = checkpoint::save(&req.out, state, usize::MAX, |dir| {
        let rec = Rec::new();
        checkpoint::save_model(&trainee.model, &dir.join(MODEL_FILE))?;
        rec.record(trainee.optim.to_record(), dir.join(OPTIM_FILE)).map_err(|e| checkpoint::record_error(dir, e))?;
        Ok(write_json_atomic(&dir.join(PROGRESS_FILE), progress)?)
    })?;
    let best = progress.best.map(|b| checkpoint::checkpoint_dir(&req.out, b.step));
    prune(&req.out, &[Some(dir.clone()), best])?;
    Ok(dir)
}

/// Removes the checkpoints of `out` other than `keep`.
pub(super) fn prune(out: &Path, keep: &[Option<PathBuf>]) -> Result<()> {
    let dir = checkpoint::checkpoints_dir(out);
    for entry in std::fs::read_dir(&dir).at(&dir)?.flatten() {
        let p = entry.path();
        let is_checkpoint = p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("step-"));
        if is_checkpoint && !keep.iter().flatten().any(|k| *k == p) {
            std::fs::remove_dir_all(&p).at(&p)?;
        }
    }
    Ok(())
}
