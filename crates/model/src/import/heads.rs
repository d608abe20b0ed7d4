//! The heads BERT has no slot for (`corrflow_heads.safetensors`, beside an `export hf-model`
//! directory's `config.json`): read when the `corrflow` section names the file, and refused when
//! they lie there unnamed, so that a head (and the MLM head's activation the section records) is
//! never dropped silently.

use std::path::{Component, Path};

use corrflow_io::error::{Error, Result};

use super::hf_config::HfBertConfig;
use super::record::Record;
use super::safetensors_file::Weights;
/// The heads `export hf-model` writes beside a BERT directory (the import reads them back).
pub const HEADS_FILE: &str = "corrflow_heads.safetensors";
pub const HEADS_LISTING: &str = "corrflow_heads.json";

/// The heads file to fill the model's heads from (`has_heads`: the configuration has some), its
/// bytes checked against the record when there is one.
pub(super) fn open(
    model_dir: &Path,
    hf: &HfBertConfig,
    has_heads: bool,
    record: &mut Option<Record>,
) -> Result<Option<Weights>> {
    let config = model_dir.join("config.json");
    let Some(name) = hf.corrflow.as_ref().and_then(|c| c.heads_file.as_deref()) else {
        if has_heads {
            return Err(Error::format(
                &config,
                "the corrflow section describes heads (an objective's, HCE's or a classifier's) but names no heads file",
            ));
        }
        let beside: Vec<&str> =
            [HEADS_FILE, HEADS_LISTING].into_iter().filter(|f| model_dir.join(f).exists()).collect();
        if beside.is_empty() {
            return Ok(None);
        }
        let why = if hf.corrflow.is_none() {
            format!(
                "it has no corrflow section, which export hf-model writes and which alone describes those heads and \
                 the MLM head's activation (without it the heads would be dropped and the MLM head would use \
                 hidden_act '{}')",
                hf.hidden_act
            )
        } else {
            "its corrflow section names no heads file".to_string()
        };
        let files = beside.join(" and ");
        return Err(Error::format(
            &config,
            format!(
                "{files} lie beside it, but {why}; restore the config.json export hf-model wrote (or export again), \
                 or delete {files} to import the BERT model alone"
            ),
        ));
    };
    let mut parts = Path::new(name).components();
    if !matches!((parts.next(), parts.next()), (Some(Component::Normal(_)), None)) {
        return Err(Error::format(
            &config,
            format!("the corrflow section's heads_file '{name}' is not a file name in the model directory"),
        ));
    }
    let bytes = super::read_checked(record, model_dir, name)?;
    Weights::from_bytes(&model_dir.join(name), bytes).map(Some)
}

/// Refuses a heads file holding tensors the model's heads did not take (`used`): heads its
/// configuration does not have, which would be dropped.
pub(super) fn refuse_unused(heads: &Weights, used: &[String]) -> Result<()> {
    let unused: Vec<String> = heads.names().into_iter().filter(|n| !used.contains(n)).collect();
    if unused.is_empty() {
        return Ok(());
    }
    Err(Error::format(
        heads.path(),
        format!(
            "holds tensors no head of the model takes ({}): the corrflow section's model has no such head; \
             restore the config.json export hf-model wrote, or export again",
            unused.join(", ")
        ),
    ))
}
