//! Checkpoints: model and optimiser records plus the run position, published atomically.
//!
//! ```text
//! OUT/checkpoints/step-00000100/model.bin   burn record (full precision)
//!                               optim.bin   AdamW moments (per parameter)
//!                               state.json  step, next batch, epoch, config, vocabulary hash,
//!                                           sha256 of the two records (written last), and as
//!                                           its last field state_sha256: the sha256 of its own
//!                                           bytes before it (`corrflow_fs::sealed`)
//! OUT/checkpoints/.step-00000100.partial/   a checkpoint being written
//! ```
//! The learning-rate schedule and every random stream are functions of the step and the seed,
//! so `state.json` holds all a resumed run needs to continue exactly.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::train_settings::TrainSettings;
use corrflow_fs::atomic::{publish_dir, write_atomic};
use corrflow_fs::sealed;
use corrflow_infer::model_meta::ModelConfig;
use corrflow_io::error::{Error, IoContext, Result};

pub const MODEL_FILE: &str = "model.bin";
pub const OPTIM_FILE: &str = "optim.bin";
pub const STATE_FILE: &str = "state.json";
/// The last field of `state.json`: the sha256 of the file's bytes before it.
pub const STATE_CHECKSUM_KEY: &str = "state_sha256";

/// `state.json` of a checkpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointState {
    pub format_version: u32,
    /// Optimiser steps done (= batches consumed).
    pub step: u64,
    pub epoch: u64,
    pub total_steps: u64,
    pub model: ModelConfig,
    /// The run's `[train]` settings as written (the trainer owns their type).
    pub train: TrainSettings,
    pub mask: corrflow_algorithms::mask::MaskParams,
    pub vocab_hash: String,
    pub vocab_size: usize,
    pub layout: corrflow_algorithms::SequenceLayout,
    pub model_sha256: String,
    pub optim_sha256: String,
}

impl CheckpointState {
    /// Longest sequence the model was trained on (specials included).
    pub fn max_len(&self) -> usize {
        let trained = self.train.max_len();
        if trained == 0 {
            self.model.max_positions
        } else {
            trained.min(self.model.max_positions)
        }
    }
}

pub use corrflow_infer::model_meta::inference_layout;

pub fn checkpoints_dir(out: &Path) -> PathBuf {
    out.join("checkpoints")
}

pub fn checkpoint_dir(out: &Path, step: u64) -> PathBuf {
    checkpoints_dir(out).join(format!("step-{step:08}"))
}

/// What a checkpoint is loaded for: inference needs (and checks) only the model weights;
/// resuming training also the optimizer state (about twice their size).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    Inference,
    Resume,
}

/// A finished checkpoint directory: its state, checked against its own checksum, and the
/// records `purpose` needs, checked against the checksums the state records. The one check of a
/// checkpoint before it is used.
pub fn load_state(dir: &Path, purpose: Purpose) -> Result<CheckpointState> {
    let p = dir.join(STATE_FILE);
    let bytes = std::fs::read(&p).at(&p)?;
    sealed::verify(&p, &bytes, STATE_CHECKSUM_KEY)?;
    let state: CheckpointState =
        serde_json::from_slice(&bytes).map_err(|e| Error::format(&p, format!("invalid checkpoint state: {e}")))?;
    let mut files = vec![(MODEL_FILE, &state.model_sha256)];
    if purpose == Purpose::Resume {
        files.push((OPTIM_FILE, &state.optim_sha256));
    }
    for (file, sum) in files {
        let f = dir.join(file);
        let actual = corrflow_fs::hash::sha256_file(&f)?;
        if &actual != sum {
            return Err(Error::format(
                &f,
                format!(
                    "checkpoint file does not match its checksum (truncated or modified): sha256 {actual}, \
                     {STATE_FILE} records {sum}"
                ),
            ));
        }
    }
    Ok(state)
}

/// Writes a checkpoint's `state.json` (atomically), sealed with the checksum of its bytes.
pub fn write_state(path: &Path, state: &CheckpointState) -> Result<()> {
    Ok(write_atomic(path, &sealed::to_sealed_json(path, state, STATE_CHECKSUM_KEY)?)?)
}

/// The latest finished checkpoint of a run directory.
pub fn latest(out: &Path) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(checkpoints_dir(out))
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("step-")) && p.join(STATE_FILE).is_file()
        })
        .collect();
    dirs.sort();
    dirs.pop()
}

/// Resolves `--checkpoint`: a checkpoint directory, or a run directory (its latest checkpoint).
pub fn resolve(path: &Path) -> Result<PathBuf> {
    if path.join(STATE_FILE).is_file() {
        return Ok(path.to_path_buf());
    }
    latest(path)
        .ok_or_else(|| Error::format(path, "not a checkpoint (no state.json) nor a run directory with checkpoints"))
}

/// The error of a burn recorder writing into `dir`. burn wraps I/O errors in a debug dump
/// (`Unknown("Io { inner: Os { code: 28, …, message: \"No space left on device\" } … }")`): the
/// operating system's message, where there is one, is what the user needs.
pub fn record_error(dir: &Path, e: impl std::fmt::Display) -> Error {
    let text = e.to_string();
    let os = ["message: \\\"", "message: \""]
        .iter()
        .find_map(|open| text.split_once(open).map(|(_, rest)| rest.split(['\\', '"']).next().unwrap_or(rest)));
    Error::format(dir, format!("cannot write the checkpoint's records: {}", os.unwrap_or(&text)))
}

/// Writes a checkpoint: `write_records` fills a staging directory with the two record files,
/// then `state.json` (with their checksums) is written and the directory renamed into place.
/// Older checkpoints beyond `keep` are removed.
pub fn save(
    out: &Path,
    mut state: CheckpointState,
    keep: usize,
    write_records: impl FnOnce(&Path) -> Result<()>,
) -> Result<PathBuf> {
    let dir = checkpoint_dir(out, state.step);
    publish_dir(&dir, |stage| {
        write_records(stage)?;
        state.model_sha256 = corrflow_fs::hash::sha256_file(&stage.join(MODEL_FILE))?;
        state.optim_sha256 = corrflow_fs::hash::sha256_file(&stage.join(OPTIM_FILE))?;
        write_state(&stage.join(STATE_FILE), &state)
    })?;
    let mut all: Vec<PathBuf> = std::fs::read_dir(checkpoints_dir(out))
        .at(checkpoints_dir(out))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("step-")))
        .collect();
    all.sort();
    while all.len() > keep {
        let old = all.remove(0);
        std::fs::remove_dir_all(&old).at(&old)?;
    }
    Ok(dir)
}

/// Shapes of a module's parameters, in module order.
struct Shapes(Vec<Vec<usize>>);

impl<B: burn::tensor::backend::Backend> burn::module::ModuleVisitor<B> for Shapes {
    fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<burn::tensor::Tensor<B, D>>) {
        self.0.push(param.val().dims().to_vec());
    }
}

fn shapes<B: burn::tensor::backend::Backend>(model: &crate::CellEncoder<B>) -> Vec<Vec<usize>> {
    let mut s = Shapes(Vec::new());
    burn::module::Module::visit(model, &mut s);
    s.0
}

/// Loads `model.bin` of checkpoint `dir` into `model` (built from the checkpoint's
/// configuration and vocabulary), refusing a record whose parameter shapes are not the model's
/// (weights of another vocabulary or configuration) instead of failing later inside the backend.
/// Writes a model's weights to `path`. A rank model is written in the record layout rank
/// models always had (without the value parts' slot), so its checkpoints are byte for byte what
/// they were before value models, and any corrflow reads them; a value model has the new layout.
pub fn save_model<B: burn::tensor::backend::Backend>(model: &crate::CellEncoder<B>, path: &Path) -> Result<()> {
    use burn::module::Module;
    use burn::record::{BinFileRecorder, FullPrecisionSettings};
    let recorder = BinFileRecorder::<FullPrecisionSettings>::new();
    let dir = path.parent().unwrap_or(path);
    if model.value.is_none() {
        let (old, _) = crate::legacy::RankEncoderV1::of(model.clone());
        old.save_file(path, &recorder).map_err(|e| record_error(dir, e))
    } else {
        model.clone().save_file(path, &recorder).map_err(|e| record_error(dir, e))
    }
}

pub fn load_model<B: burn::tensor::backend::Backend>(
    model: crate::CellEncoder<B>,
    dir: &Path,
    device: &B::Device,
) -> Result<crate::CellEncoder<B>> {
    use burn::module::Module;
    use burn::record::{BinFileRecorder, FullPrecisionSettings};
    let path = dir.join(MODEL_FILE);
    let expected = shapes(&model);
    let recorder = BinFileRecorder::<FullPrecisionSettings>::new();
    let cannot = |e: burn::record::RecorderError| Error::format(&path, format!("cannot load the model: {e}"));
    // Rank models keep the record layout they always had (see `save_model`).
    let loaded = if model.value.is_none() {
        let (old, template) = crate::legacy::RankEncoderV1::of(model);
        old.load_file(&path, &recorder, device).map_err(cannot)?.into_current(template)
    } else {
        model.load_file(&path, &recorder, device).map_err(cannot)?
    };
    let found = shapes(&loaded);
    if found != expected {
        let at = expected.iter().zip(&found).position(|(a, b)| a != b).unwrap_or(expected.len().min(found.len()));
        return Err(Error::format(
            &path,
            format!(
                "holds weights of another shape than its state.json describes (parameter {at}: {:?}, expected {:?}; \
                 {} parameters, expected {}): weights of another vocabulary or model configuration",
                found.get(at),
                expected.get(at),
                found.len(),
                expected.len()
            ),
        ));
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorder_io_error_is_reported_by_its_operating_system_message() {
        let burn_text = r#"Unknown("Io { inner: Os { code: 28, kind: StorageFull, message: \"No space left on device\" }, index: 149 }")"#;
        let e = record_error(Path::new("run/checkpoints/.step-4.partial"), burn_text).to_string();
        assert_eq!(
            e,
            "run/checkpoints/.step-4.partial: cannot write the checkpoint's records: No space left on device"
        );
        let other = record_error(Path::new("d"), "something else").to_string();
        assert!(other.ends_with("cannot write the checkpoint's records: something else"), "{other}");
    }
}
