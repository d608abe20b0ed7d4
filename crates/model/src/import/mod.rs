//! `corrflow import hf`: a Hugging Face BERT directory (`config.json` + `model.safetensors`, the
//! format Geneformer's models ship in) as a corrflow checkpoint, which `export onnx`, `embed` and
//! `serve` then use like a trained one.
//!
//! The mapping is exact: HF's `Linear` weights are `[out, in]` and burn's `[in, out]`; BERT adds a
//! token-type embedding (type 0 for every token) before its first LayerNorm, which is folded into
//! the position embeddings; the MLM head's transform uses the model's `hidden_act`.

mod hf_config;
mod safetensors_file;

use std::path::Path;

use burn::module::Param;
use burn::nn::{LayerNorm, Linear};
use burn::tensor::{Tensor, TensorData};
use corrflow_io::error::{Error, IoContext, Result};
use corrflow_io::vocab::Vocabulary;
use serde::Serialize;

pub use hf_config::{HfBertConfig, SUPPORTED};
use safetensors_file::Weights;

use crate::checkpoint::{self, CheckpointState, MODEL_FILE, OPTIM_FILE};
use crate::{CellEncoder, CpuBackend, CpuTraining, InitModel, TrainConfig};

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
}

/// Imports the model in `model_dir` with `vocab` into the run directory `out` (its vocabulary
/// and one checkpoint, step 0). Nothing is written when the model cannot be imported.
pub fn import_hf(model_dir: &Path, vocab: &Vocabulary, out: &Path) -> Result<ImportSummary> {
    let config_path = model_dir.join("config.json");
    let text = std::fs::read_to_string(&config_path).at(&config_path)?;
    let hf: HfBertConfig = serde_json::from_str(&text)
        .map_err(|e| Error::format(&config_path, format!("not a Hugging Face BERT config: {e}")))?;
    let (config, layout) = hf.to_corrflow(vocab).map_err(|msg| Error::format(&config_path, msg))?;
    let weights_path = model_dir.join("model.safetensors");
    if !weights_path.exists() {
        return Err(Error::format(
            model_dir,
            "no model.safetensors (a pytorch_model.bin must be converted first: transformers' save_pretrained(safe_serialization=True))",
        ));
    }
    let weights = Weights::open(&weights_path)?;
    let device = Default::default();
    let model: CellEncoder<CpuBackend> = config.init(vocab.len(), &device);
    let (model, used) = fill(model, &weights, &hf)?;
    let not_imported: Vec<String> = weights.names().into_iter().filter(|n| !used.contains(n)).collect();

    if checkpoint::checkpoints_dir(out).exists() {
        return Err(Error::conflict(out, "already holds checkpoints; import into a new directory"));
    }
    std::fs::create_dir_all(out).at(out)?;
    let vocab_dir = out.join("vocab");
    if !vocab_dir.exists() {
        vocab.publish_dir(&vocab_dir)?;
    }
    let train = TrainConfig { max_len: 0, ..TrainConfig::default() };
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
    })
}

/// The model record, and the record of a fresh AdamW (a run continued from the import starts its
/// moments at zero).
fn write_records(model: &CellEncoder<CpuBackend>, stage: &Path) -> Result<()> {
    use burn::module::Module;
    use burn::optim::{AdamWConfig, Optimizer};
    use burn::record::{BinFileRecorder, FullPrecisionSettings, Recorder};
    let rec = BinFileRecorder::<FullPrecisionSettings>::new();
    model.clone().save_file(stage.join(MODEL_FILE), &rec).map_err(|e| checkpoint::record_error(stage, e))?;
    let optim = AdamWConfig::new().init::<CpuTraining, CellEncoder<CpuTraining>>();
    rec.record(Optimizer::<CellEncoder<CpuTraining>, CpuTraining>::to_record(&optim), stage.join(OPTIM_FILE))
        .map_err(|e| checkpoint::record_error(stage, e))
}

/// Puts the file's weights into `model`; returns it with the names used.
fn fill(
    mut m: CellEncoder<CpuBackend>,
    w: &Weights,
    hf: &HfBertConfig,
) -> Result<(CellEncoder<CpuBackend>, Vec<String>)> {
    let mut used = Vec::new();
    let mut get = |name: &str, shape: &[usize]| -> Result<Vec<f32>> {
        let full = w.resolve(name)?;
        let values = w.f32(&full, shape)?;
        used.push(full);
        Ok(values)
    };
    let (h, v, p) = (hf.hidden_size, hf.vocab_size, hf.max_position_embeddings);
    m.tokens.weight = param2(get("embeddings.word_embeddings.weight", &[v, h])?, [v, h]);
    let mut positions = get("embeddings.position_embeddings.weight", &[p, h])?;
    // Token type 0 is added to every position: fold it in (exact).
    if w.resolve("embeddings.token_type_embeddings.weight").is_ok() {
        let types = w.resolve("embeddings.token_type_embeddings.weight")?;
        let rows = w.shape(&types)[0];
        let tt = get("embeddings.token_type_embeddings.weight", &[rows, h])?;
        for row in positions.chunks_mut(h) {
            row.iter_mut().zip(&tt[..h]).for_each(|(a, b)| *a += b);
        }
    }
    m.positions.weight = param2(positions, [p, h]);
    set_norm(&mut m.embed_norm, &mut get, "embeddings.LayerNorm", h)?;
    for (i, layer) in m.encoder.layers.iter_mut().enumerate() {
        let at = |s: &str| format!("encoder.layer.{i}.{s}");
        let mha = &mut layer.mha;
        set_linear(&mut mha.query, &mut get, &at("attention.self.query"), h, h)?;
        set_linear(&mut mha.key, &mut get, &at("attention.self.key"), h, h)?;
        set_linear(&mut mha.value, &mut get, &at("attention.self.value"), h, h)?;
        set_linear(&mut mha.output, &mut get, &at("attention.output.dense"), h, h)?;
        set_norm(&mut layer.norm_1, &mut get, &at("attention.output.LayerNorm"), h)?;
        set_linear(&mut layer.pwff.linear_inner, &mut get, &at("intermediate.dense"), h, hf.intermediate_size)?;
        set_linear(&mut layer.pwff.linear_outer, &mut get, &at("output.dense"), hf.intermediate_size, h)?;
        set_norm(&mut layer.norm_2, &mut get, &at("output.LayerNorm"), h)?;
    }
    // The MLM head, when the file has one (BertForMaskedLM); the decoder is tied to the token
    // embeddings, as in corrflow.
    if w.resolve("cls.predictions.transform.dense.weight").is_ok() {
        set_linear(&mut m.mlm_dense, &mut get, "cls.predictions.transform.dense", h, h)?;
        set_norm(&mut m.mlm_norm, &mut get, "cls.predictions.transform.LayerNorm", h)?;
        let bias = if w.resolve("cls.predictions.bias").is_ok() {
            get("cls.predictions.bias", &[v])?
        } else {
            get("cls.predictions.decoder.bias", &[v])?
        };
        m.mlm_bias = param1(bias);
        for tied in ["cls.predictions.decoder.weight", "cls.predictions.decoder.bias"] {
            if let Ok(name) = w.resolve(tied) {
                used.push(name);
            }
        }
    }
    Ok((m, used))
}

type Get<'a> = dyn FnMut(&str, &[usize]) -> Result<Vec<f32>> + 'a;

fn set_linear(l: &mut Linear<CpuBackend>, get: &mut Get<'_>, name: &str, d_in: usize, d_out: usize) -> Result<()> {
    let w = get(&format!("{name}.weight"), &[d_out, d_in])?;
    // [out, in] (PyTorch) → [in, out] (burn).
    let mut t = vec![0f32; w.len()];
    for o in 0..d_out {
        for i in 0..d_in {
            t[i * d_out + o] = w[o * d_in + i];
        }
    }
    l.weight = param2(t, [d_in, d_out]);
    l.bias = Some(param1(get(&format!("{name}.bias"), &[d_out])?));
    Ok(())
}

fn set_norm(n: &mut LayerNorm<CpuBackend>, get: &mut Get<'_>, name: &str, h: usize) -> Result<()> {
    n.gamma = param1(get(&format!("{name}.weight"), &[h])?);
    n.beta = Some(param1(get(&format!("{name}.bias"), &[h])?));
    Ok(())
}

fn param1(v: Vec<f32>) -> Param<Tensor<CpuBackend, 1>> {
    let n = v.len();
    Param::from_tensor(Tensor::from_data(TensorData::new(v, [n]), &Default::default()))
}

fn param2(v: Vec<f32>, shape: [usize; 2]) -> Param<Tensor<CpuBackend, 2>> {
    Param::from_tensor(Tensor::from_data(TensorData::new(v, shape), &Default::default()))
}
