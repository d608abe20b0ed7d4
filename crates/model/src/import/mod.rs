//! `corrflow import hf`: a Hugging Face BERT directory (`config.json` + `model.safetensors`, the
//! format Geneformer's models ship in) as a corrflow checkpoint, which `export onnx`, `embed` and
//! `serve` then use like a trained one.
//!
//! The mapping is exact: HF's `Linear` weights are `[out, in]` and burn's `[in, out]`; BERT adds a
//! token-type embedding (type 0 for every token) before its first LayerNorm, which is folded into
//! the position embeddings; the MLM head's transform uses the model's `hidden_act`.
//!
//! A directory `export hf-model` wrote carries the sha256 of each file (`record`); every file is
//! checked against it before it is used.

mod from_file;
pub(crate) mod heads;
mod hf_config;
pub(crate) mod mapping;
pub(crate) mod record;
mod safetensors_file;
mod safetensors_header;
mod values;

use std::path::Path;

use corrflow_infer::model_meta::HeadActivation;
use corrflow_io::error::{Error, IoContext, Result};
use corrflow_io::vocab::Vocabulary;
use serde::Serialize;

use from_file::FromFile;
pub use hf_config::{CorrflowSection, HfBertConfig, CORRFLOW_SECTION_VERSION, SUPPORTED};
use record::Record;
pub use record::RECORD_FILE;
use safetensors_file::Weights;
pub use values::{import_values, ValueImportSummary, ValueModelFile, VALUE_MODEL_FORMAT, VALUE_MODEL_VERSION};

use crate::checkpoint::{self, CheckpointState, MODEL_FILE, OPTIM_FILE};
use crate::{CellEncoder, CpuBackend, CpuTraining, InitModel, TrainSettings};

/// What `import hf --json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct ImportSummary {
    pub command: String,
    pub model: String,
    pub architecture: String,
    pub out: String,
    pub checkpoint: String,
    pub vocab: String,
    pub vocab_size: usize,
    pub hidden: usize,
    pub layers: usize,
    pub max_positions: usize,
    pub parameters: usize,
    /// Weights in the file that a corrflow checkpoint has no place for (a classifier, a pooler).
    pub not_imported: Vec<String>,
    /// The activation of the MLM head's transform, and where it was read.
    pub mlm_activation: HeadActivation,
    pub mlm_activation_from: String,
    /// Files checked against the sha256 record `export hf-model` wrote (`corrflow_sha256.txt`);
    /// `None`: the directory has no record (not written by corrflow), nothing was checked.
    pub sha256_checked: Option<usize>,
}

/// Imports the model in `model_dir` with `vocab` into the run directory `out` (its vocabulary
/// and one checkpoint, step 0). Nothing is written when the model cannot be imported.
pub fn import_hf(model_dir: &Path, vocab: &Vocabulary, out: &Path) -> Result<ImportSummary> {
    let mut record = Record::open(model_dir)?;
    let config_path = model_dir.join("config.json");
    let text = read_checked(&mut record, model_dir, "config.json")?;
    let hf: HfBertConfig = serde_json::from_slice(&text)
        .map_err(|e| Error::format(&config_path, format!("not a Hugging Face BERT config: {e}")))?;
    let (config, layout) = hf.to_corrflow(vocab).map_err(|msg| Error::format(&config_path, msg))?;
    let weights_path = model_dir.join("model.safetensors");
    if !weights_path.exists() {
        return Err(Error::format(
            model_dir,
            "no model.safetensors (a pytorch_model.bin must be converted first: transformers' save_pretrained(safe_serialization=True))",
        ));
    }
    let weights = Weights::from_bytes(&weights_path, read_checked(&mut record, model_dir, "model.safetensors")?)?;
    let device = Default::default();
    let model: CellEncoder<CpuBackend> = config.init(vocab.len(), &device);
    let has_heads = model.cell_head.is_some() || model.label_head.is_some();
    let heads = heads::open(model_dir, &hf, has_heads, &mut record)?;
    let (model, used) = fill(model, &weights, heads.as_ref())?;
    let not_imported: Vec<String> = weights.names().into_iter().filter(|n| !used.contains(n)).collect();
    // The vocabulary's tables and the rest, before anything is written.
    let sha256_checked = record.as_mut().map(Record::check_rest).transpose()?;

    if checkpoint::checkpoints_dir(out).exists() {
        return Err(Error::conflict(out, "already holds checkpoints; import into a new directory"));
    }
    std::fs::create_dir_all(out).at(out)?;
    let vocab_dir = out.join("vocab");
    if !vocab_dir.exists() {
        vocab.publish_dir(&vocab_dir)?;
    }
    let max_len = hf.corrflow.as_ref().map_or(0, |c| c.max_len);
    let train = TrainSettings::with_max_len(max_len);
    let state = CheckpointState {
        format_version: 1,
        step: 0,
        epoch: 0,
        total_steps: 0,
        model: config.clone(),
        train,
        mask: Default::default(),
        vocab_hash: vocab.hash().to_string(),
        vocab_size: vocab.len(),
        layout,
        model_sha256: String::new(),
        optim_sha256: String::new(),
    };
    let dir = checkpoint::save(out, state, 1, |stage| write_records(&model, stage))?;
    let activation_from =
        if hf.corrflow.is_some() { "config.json's corrflow section" } else { "config.json's hidden_act" };
    let parameters = weights.names().iter().filter(|n| used.contains(*n)).map(|n| weights.len(n)).sum();
    Ok(ImportSummary {
        command: "import hf".into(),
        model: model_dir.display().to_string(),
        architecture: hf.architectures.first().cloned().unwrap_or_else(|| "BertModel".into()),
        out: out.display().to_string(),
        checkpoint: dir.display().to_string(),
        vocab: vocab.name().to_string(),
        vocab_size: vocab.len(),
        hidden: config.hidden,
        layers: config.layers,
        max_positions: config.max_positions,
        parameters,
        not_imported,
        mlm_activation: config.mlm_activation,
        mlm_activation_from: activation_from.into(),
        sha256_checked,
    })
}

/// The bytes of `dir`'s file `name`, checked against the directory's sha256 record when it has
/// one (before they are parsed: a damaged file is named as such, not as a parse error).
fn read_checked(record: &mut Option<Record>, dir: &Path, name: &str) -> Result<Vec<u8>> {
    let path = dir.join(name);
    let bytes = std::fs::read(&path).at(&path)?;
    if let Some(r) = record.as_mut() {
        r.check_bytes(name, &bytes)?;
    }
    Ok(bytes)
}

/// The model record, and the record of a fresh AdamW (a run continued from the import starts its
/// moments at zero).
fn write_records(model: &CellEncoder<CpuBackend>, stage: &Path) -> Result<()> {
    use burn::optim::{AdamWConfig, Optimizer};
    use burn::record::{BinFileRecorder, FullPrecisionSettings, Recorder};
    let rec = BinFileRecorder::<FullPrecisionSettings>::new();
    checkpoint::save_model(model, &stage.join(MODEL_FILE))?;
    let optim = AdamWConfig::new().init::<CpuTraining, CellEncoder<CpuTraining>>();
    rec.record(Optimizer::<CellEncoder<CpuTraining>, CpuTraining>::to_record(&optim), stage.join(OPTIM_FILE))
        .map_err(|e| checkpoint::record_error(stage, e))
}

/// Puts the file's weights into `model` through the shared name mapping; returns it with the
/// names used.
fn fill(
    mut m: CellEncoder<CpuBackend>,
    w: &Weights,
    heads: Option<&Weights>,
) -> Result<(CellEncoder<CpuBackend>, Vec<String>)> {
    let mlm_head = w.resolve(mapping::MLM_HEAD).is_ok();
    let mut from = FromFile::bert(w);
    mapping::walk(&mut m, &mut from, mlm_head)?;
    let mut used = from.used;
    // The decoder is tied to the token embeddings, in BERT as in corrflow.
    used.extend(
        ["cls.predictions.decoder.weight", "cls.predictions.decoder.bias"].iter().filter_map(|t| w.resolve(t).ok()),
    );
    if let Some(h) = heads {
        let mut from = FromFile::bert(h);
        mapping::walk_heads(&mut m, &mut from)?;
        heads::refuse_unused(h, &from.used)?;
    }
    Ok((m, used))
}
