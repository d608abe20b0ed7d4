//! `corrflow import values`: a value model trained in PyTorch (`corrflow.pretrain` with objective
//! `txfm` or `wced`) as a corrflow checkpoint, which `export onnx`, `embed`, `serve` and
//! `annotate` then use like one `corrflow train` wrote.
//!
//! The directory `corrflow.pretrain` writes (`RUN/values/`):
//! - `config.json`: [`ValueModelFile`] — the `[model]` section with its decoding set resolved,
//!   the sequence layout (`<cls>` first), the longest sequence trained on and the step;
//! - `model.safetensors`: the weights under the names of corrflow's ONNX export
//!   (`embeddings.tokens`, `layer0.attention.query.weight`, `decoder.out.bias`, ...), `Linear`
//!   weights as PyTorch stores them (`[out, in]`);
//! - `vocab/`: the corpus vocabulary's TSV tables (with `<cls>`);
//! - `corrflow_sha256.txt`: the sha256 of each file, checked before anything is read.
//!
//! Every weight of the model must be in the file, with its shape, and nothing else may be:
//! a file that does not fit the config is refused naming the tensor.

use std::path::Path;

use burn::module::Param;
use burn::tensor::Tensor;
use corrflow_algorithms::SequenceLayout;
use corrflow_infer::model_meta::ModelConfig;
use corrflow_io::error::{Error, IoContext, Result};
use corrflow_io::vocab::Vocabulary;
use serde::{Deserialize, Serialize};

use super::from_file::FromFile;
use super::mapping::{self, Slots};
use super::record::Record;
use super::safetensors_file::Weights;
use crate::checkpoint::{self, CheckpointState};
use crate::{CellEncoder, CpuBackend, InitModel, TrainSettings};

/// The `format` of a value model directory's `config.json`.
pub const VALUE_MODEL_FORMAT: &str = "corrflow-value-model";
/// The version of that format this corrflow reads.
pub const VALUE_MODEL_VERSION: u32 = 1;
/// The directory's vocabulary tables.
pub const VOCAB_DIR: &str = "vocab";

/// A value model directory's `config.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValueModelFile {
    pub format: String,
    pub format_version: u32,
    /// `[model]`, `values.decode_genes` resolved.
    pub model: ModelConfig,
    pub layout: SequenceLayout,
    /// Longest sequence trained on (tokens, specials included; 0: `model.max_positions`).
    pub max_len: usize,
    pub step: u64,
    /// Who wrote it (`corrflow.pretrain`), for the summary.
    #[serde(default)]
    pub written_by: String,
}

/// What `import values --json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct ValueImportSummary {
    pub command: String,
    pub model: String,
    pub out: String,
    pub checkpoint: String,
    pub objective: String,
    pub input: String,
    pub decode_genes: usize,
    pub vocab_size: usize,
    pub hidden: usize,
    pub layers: usize,
    pub step: u64,
    pub parameters: usize,
    pub written_by: String,
    /// Files checked against the directory's sha256 record (`None`: it has none).
    pub sha256_checked: Option<usize>,
}

/// Imports the value model in `model_dir` into the run directory `out` (its vocabulary and one
/// checkpoint at the model's step). Nothing is written when the model cannot be imported.
pub fn import_values(model_dir: &Path, out: &Path) -> Result<ValueImportSummary> {
    let mut record = Record::open(model_dir)?;
    let config_path = model_dir.join("config.json");
    let text = super::read_checked(&mut record, model_dir, "config.json")?;
    let file: ValueModelFile = serde_json::from_slice(&text)
        .map_err(|e| Error::format(&config_path, format!("not a corrflow value model config: {e}")))?;
    let weights_path = model_dir.join("model.safetensors");
    let weights =
        Weights::from_bytes(&weights_path, super::read_checked(&mut record, model_dir, "model.safetensors")?)?;
    // The vocabulary's tables and the rest, before they are read.
    let sha256_checked = record.as_mut().map(Record::check_rest).transpose()?;
    let vocab = Vocabulary::resolve(&model_dir.join(VOCAB_DIR).display().to_string())?;
    check_file(&file, &vocab).map_err(|msg| Error::format(&config_path, msg))?;

    let device = Default::default();
    <CpuBackend as burn::tensor::backend::Backend>::seed(&device, 0);
    let mut model: CellEncoder<CpuBackend> = file.model.init(vocab.len(), &device);
    let mut from = FromFile::exact(&weights);
    walk_values(&mut model, &mut from, &file.model)?;
    let unused: Vec<String> = weights.names().into_iter().filter(|n| !from.used.contains(n)).collect();
    if !unused.is_empty() {
        return Err(Error::format(
            &weights_path,
            format!(
                "holds tensors a {} model of this config has no place for: {}",
                file.model.objective,
                unused.join(", ")
            ),
        ));
    }
    let parameters = from.used.iter().map(|n| weights.len(n)).sum();
    zero_unused(&mut model, &file.model);

    if checkpoint::checkpoints_dir(out).exists() {
        return Err(Error::conflict(out, "already holds checkpoints; import into a new directory"));
    }
    std::fs::create_dir_all(out).at(out)?;
    if !out.join("vocab").exists() {
        vocab.publish_dir(&out.join("vocab"))?;
    }
    let state = CheckpointState {
        format_version: 1,
        step: file.step,
        epoch: 0,
        total_steps: file.step,
        model: file.model.clone(),
        train: TrainSettings::with_max_len(file.max_len),
        mask: Default::default(),
        vocab_hash: vocab.hash().to_string(),
        vocab_size: vocab.len(),
        layout: file.layout,
        model_sha256: String::new(),
        optim_sha256: String::new(),
    };
    let dir = checkpoint::save(out, state, 1, |stage| super::write_records(&model, stage))?;
    let values = file.model.values.as_ref().map_or(0, |v| v.decode_genes.len());
    Ok(ValueImportSummary {
        command: "import values".into(),
        model: model_dir.display().to_string(),
        out: out.display().to_string(),
        checkpoint: dir.display().to_string(),
        objective: file.model.objective.clone(),
        input: format!("{:?}", file.model.input).to_lowercase(),
        decode_genes: values,
        vocab_size: vocab.len(),
        hidden: file.model.hidden,
        layers: file.model.layers,
        step: file.step,
        parameters,
        written_by: file.written_by,
        sha256_checked,
    })
}

/// The config against this corrflow and the vocabulary: a value model (txfm or wced, no
/// hierarchical head: the file has no place for one), a `<cls>`-first layout and a decoding set
/// of the vocabulary's genes.
fn check_file(f: &ValueModelFile, vocab: &Vocabulary) -> std::result::Result<(), String> {
    if f.format != VALUE_MODEL_FORMAT || f.format_version != VALUE_MODEL_VERSION {
        return Err(format!(
            "format {:?} version {}: this corrflow reads {VALUE_MODEL_FORMAT:?} version {VALUE_MODEL_VERSION}",
            f.format, f.format_version
        ));
    }
    f.model.validate()?;
    let Some(values) = f.model.values.as_ref() else {
        return Err("model.input is 'rank': a rank model is imported with `corrflow import hf`".into());
    };
    if !matches!(f.model.objective.as_str(), "txfm" | "wced") {
        return Err(format!("model.objective {:?}: a value model is trained with 'txfm' or 'wced'", f.model.objective));
    }
    if f.model.hce.is_some() || f.model.classifier.is_some() {
        return Err("a hierarchical head or a classifier cannot be imported with a value model".into());
    }
    if f.layout.cls.is_none() || f.layout.cls != vocab.cls {
        return Err(format!(
            "layout.cls {:?} is not the vocabulary's <cls> ({:?}): a value model reads its CLS state",
            f.layout.cls, vocab.cls
        ));
    }
    if values.decode_genes.is_empty() {
        return Err("model.values.decode_genes is empty".into());
    }
    if let Some(&t) = values.decode_genes.iter().find(|&&t| t as usize >= vocab.len() || !vocab.is_gene(t)) {
        return Err(format!(
            "model.values.decode_genes holds {t}, not a gene of the vocabulary ({} tokens)",
            vocab.len()
        ));
    }
    Ok(())
}

/// Every weight of a value model by its ONNX export name.
fn walk_values(m: &mut CellEncoder<CpuBackend>, s: &mut impl Slots, config: &ModelConfig) -> Result<()> {
    let values = config.values.as_ref().ok_or_else(|| Error::internal("import values", "no model.values"))?;
    s.matrix("embeddings.tokens", &mut m.tokens.weight, false)?;
    if values.positions {
        s.matrix("embeddings.positions", &mut m.positions.weight, false)?;
    }
    mapping::norm_named(s, "embeddings.norm", &mut m.embed_norm, ("gamma", "beta"))?;
    for (i, layer) in m.encoder.layers.iter_mut().enumerate() {
        let at = |part: &str| format!("layer{i}.{part}");
        let mha = &mut layer.mha;
        mapping::linear(s, &at("attention.query"), &mut mha.query)?;
        mapping::linear(s, &at("attention.key"), &mut mha.key)?;
        mapping::linear(s, &at("attention.value"), &mut mha.value)?;
        mapping::linear(s, &at("attention.output"), &mut mha.output)?;
        mapping::norm_named(s, &at("norm_1"), &mut layer.norm_1, ("gamma", "beta"))?;
        mapping::linear(s, &at("ffn.inner"), &mut layer.pwff.linear_inner)?;
        mapping::linear(s, &at("ffn.outer"), &mut layer.pwff.linear_outer)?;
        mapping::norm_named(s, &at("norm_2"), &mut layer.norm_2, ("gamma", "beta"))?;
    }
    let parts = m.value.as_mut().ok_or_else(|| Error::internal("import values", "a value model without its parts"))?;
    if let Some(bins) = parts.bins.as_mut() {
        s.matrix("embeddings.value_bins", &mut bins.weight, false)?;
    }
    for (i, layer) in parts.decoder.iter_mut().enumerate() {
        mapping::linear(s, &format!("decoder.{i}"), layer)?;
    }
    mapping::linear(s, "decoder.out", &mut parts.decoder_out)
}

/// The parts a value model never reads (the rank models' MLM head; the position table when
/// `values.positions` is off) are zero, so that an import's checkpoint depends on the file only.
fn zero_unused(m: &mut CellEncoder<CpuBackend>, config: &ModelConfig) {
    fn zeros<const D: usize>(p: &mut Param<Tensor<CpuBackend, D>>) {
        *p = Param::from_tensor(Tensor::zeros(p.val().dims(), &Default::default()));
    }
    zeros(&mut m.mlm_dense.weight);
    if let Some(b) = m.mlm_dense.bias.as_mut() {
        zeros(b);
    }
    zeros(&mut m.mlm_norm.gamma);
    if let Some(b) = m.mlm_norm.beta.as_mut() {
        zeros(b);
    }
    zeros(&mut m.mlm_bias);
    if !config.values.as_ref().is_some_and(|v| v.positions) {
        zeros(&mut m.positions.weight);
    }
}
