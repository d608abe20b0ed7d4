//! What a training run writes besides checkpoints: the per-step lines of `metrics.jsonl`, the
//! batches of `--dump-batches`, and the progress task.

use std::io::Write;
use std::path::{Path, PathBuf};

use corrflow_algorithms::batches::TrainingBatch;
use corrflow_io::error::{IoContext, Result};

/// `train --dump-batches`: each step's batch as a JSON line, for replaying it elsewhere.
pub(crate) struct BatchDump {
    path: PathBuf,
    out: std::io::BufWriter<std::fs::File>,
}

impl BatchDump {
    pub(crate) fn create(path: &Path) -> Result<Self> {
        Ok(Self { path: path.to_path_buf(), out: std::io::BufWriter::new(std::fs::File::create(path).at(path)?) })
    }

    pub(crate) fn write(&mut self, step: u64, batch: &TrainingBatch) -> Result<()> {
        let line = serde_json::json!({
            "step": step, "rows": batch.rows, "len": batch.len, "input_ids": batch.input_ids,
            "attention_mask": batch.attention_mask, "labels": batch.labels,
        });
        writeln!(self.out, "{line}").and_then(|()| self.out.flush()).at(&self.path)
    }
}

/// Drops metric lines past `step` (a resumed run rewrites them).
pub(crate) fn truncate_metrics(path: &Path, step: u64) -> Result<()> {
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
    Ok(corrflow_fs::atomic::write_atomic(path, kept.as_bytes())?)
}

pub(crate) fn progress_bar(name: &str, show: bool, total: u64, pos: u64) -> corrflow_io::progress::Task {
    corrflow_io::progress::Task::start(show, name, "steps", Some(total), pos)
}
