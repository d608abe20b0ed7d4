//! `corrflow._native.train_settings`: `[train]` of a preset read by the trainer's own type
//! (`corrflow_train::TrainConfig`: its keys, defaults and checks), so that `corrflow.pretrain`
//! keeps no copy of them.

use crate::CorrflowError;
use pyo3::prelude::*;

/// `table`: the `[train]` table as JSON. Returns it with every default filled in, as JSON, or
/// raises `CorrflowError` naming the key and what is allowed.
#[pyfunction]
pub(crate) fn train_settings(table: &str) -> PyResult<String> {
    let bad = |msg: String| CorrflowError::new_err(format!("[train]: {msg}"));
    // Through a `Value`, so that errors carry no position in this JSON text, only the key.
    let value: serde_json::Value = serde_json::from_str(table).map_err(|e| bad(e.to_string()))?;
    let config: corrflow_train::TrainConfig = serde_path_to_error::deserialize(value).map_err(|e| {
        let at = match e.path().to_string().as_str() {
            "." => "[train]".to_string(),
            key => format!("[train].{key}"),
        };
        CorrflowError::new_err(format!("{at}: {}", e.into_inner()))
    })?;
    config.validate().map_err(bad)?;
    let mut resolved = serde_json::to_value(&config).map_err(|e| bad(e.to_string()))?;
    // A checkpoint leaves `visible_genes = 0` out; Python's settings name every key.
    resolved["visible_genes"] = config.visible_genes.into();
    Ok(resolved.to_string())
}
