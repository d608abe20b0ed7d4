//! `corrflow export hf-model`: a checkpoint as a Hugging Face `BertForMaskedLM` directory, the
//! reverse of `import hf` through the same name mapping (`crate::import::mapping`).
//!
//! ```text
//! DIR/config.json                   BERT's config (ReLU, absolute positions, the vocabulary's
//!                                   pad id) and a `corrflow` section: what BERT cannot say
//!                                   (objective, MLM-head activation, heads, layout, max length)
//! DIR/model.safetensors             bert.* and cls.predictions.* (F32); token types are zero
//! DIR/vocab/                        the vocabulary's TSV tables (what `import hf` reads)
//! DIR/token_dictionary.pkl, gene_median_dictionary.pkl, gene_name_id_dict.pkl
//!                                   Geneformer's pickled dictionaries
//! DIR/corrflow_heads.safetensors    heads BERT has no slot for (WCED / Poisson, HCE, a
//! DIR/corrflow_heads.json           classifier), and what each is; only when the model has one
//! DIR/corrflow_sha256.txt           the sha256 of every file above (`sha256sum -c` reads it),
//!                                   which `import hf` checks each file against
//! ```
//! The directory is staged and renamed into place, so it is the old one or the complete new one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{json, Value};

use corrflow_algorithms::SequenceLayout;
use corrflow_fs::atomic::publish_dir;
use corrflow_infer::model_meta::{ClassifierTask, HeadActivation, ModelConfig};
use corrflow_io::error::{Error, IoContext, Result};

use crate::burn_encoder::load_checkpoint;
use crate::import::mapping::{self, Matrix, Slots, Vector};
use crate::import::{CorrflowSection, CORRFLOW_SECTION_VERSION};
use crate::CpuBackend;

pub use crate::import::heads::{HEADS_FILE, HEADS_LISTING};

/// The vocabulary's TSV tables, inside the model directory.
pub const VOCAB_DIR: &str = "vocab";

#[derive(Clone, Debug)]
pub struct HfModelRequest {
    pub checkpoint: PathBuf,
    pub out: PathBuf,
}

/// What `export hf-model --json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct HfModelSummary {
    pub command: String,
    pub checkpoint: String,
    pub step: u64,
    pub out: String,
    pub architecture: String,
    pub vocab: String,
    pub vocab_size: usize,
    pub hidden: usize,
    pub layers: usize,
    pub max_positions: usize,
    /// Parameters in `model.safetensors` (the zero token types included).
    pub parameters: usize,
    /// The files written, relative to `out`.
    pub files: Vec<String>,
    /// Heads BERT has no slot for, written to `corrflow_heads.safetensors`.
    pub heads: Vec<HeadSummary>,
    /// Where transformers' model does not do what corrflow's does.
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct HeadSummary {
    /// `cell_head` or `label_head`: the tensors' prefix in the heads file.
    pub name: String,
    pub role: String,
    /// What the head reads.
    pub input: String,
    pub forward: String,
    pub outputs: usize,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<String>,
    pub tensors: Vec<TensorSummary>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TensorSummary {
    pub name: String,
    pub shape: Vec<usize>,
}

pub fn export_hf_model(req: &HfModelRequest) -> Result<HfModelSummary> {
    refuse_foreign_dir(&req.out)?;
    let loaded = load_checkpoint::<CpuBackend>(&req.checkpoint, &Default::default())?;
    let (state, vocab) = (&loaded.state, &loaded.vocab);
    let cfg = &state.model;
    let mut model = loaded.model.clone();
    let mut bert = ToFile { bert_prefix: true, tensors: Vec::new() };
    mapping::walk(&mut model, &mut bert, true)?;
    // BERT adds a token-type embedding (type 0 everywhere); corrflow has none: zeros are exact.
    bert.tensors.push((
        "bert.embeddings.token_type_embeddings.weight".into(),
        vec![2, cfg.hidden],
        vec![0.0; 2 * cfg.hidden],
    ));
    let mut heads = ToFile { bert_prefix: false, tensors: Vec::new() };
    mapping::walk_heads(&mut model, &mut heads)?;
    let head_list = describe_heads(cfg, &heads.tensors);
    let section = CorrflowSection {
        format_version: CORRFLOW_SECTION_VERSION,
        model: cfg.clone(),
        layout: state.layout,
        max_len: state.train.max_len(),
        heads_file: (!heads.tensors.is_empty()).then(|| HEADS_FILE.to_string()),
    };
    let config = bert_config(cfg, vocab.len(), vocab.pad, &section);
    let parameters = bert.tensors.iter().map(|t| t.2.len()).sum();
    let files = publish_dir(&req.out, |stage| {
        let mut files = vec!["config.json".to_string(), "model.safetensors".to_string()];
        let text = serde_json::to_string_pretty(&config).map_err(|e| Error::format(stage, e.to_string()))?;
        std::fs::write(stage.join("config.json"), text).at(stage.join("config.json"))?;
        write_safetensors(&stage.join("model.safetensors"), &bert.tensors)?;
        vocab.write_dir(&stage.join(VOCAB_DIR))?;
        files.push(format!("{VOCAB_DIR}/"));
        for p in vocab.write_pickles(stage)? {
            files.extend(p.file_name().map(|n| n.to_string_lossy().into_owned()));
        }
        if !heads.tensors.is_empty() {
            write_heads(stage, &heads.tensors, &head_list, cfg)?;
            files.extend([HEADS_FILE.to_string(), HEADS_LISTING.to_string()]);
        }
        // Last: it records every file above.
        crate::import::record::write(stage)?;
        files.push(crate::import::RECORD_FILE.to_string());
        Ok::<_, Error>(files)
    })?;
    Ok(HfModelSummary {
        command: "export hf-model".into(),
        checkpoint: req.checkpoint.display().to_string(),
        step: state.step,
        out: req.out.display().to_string(),
        architecture: "BertForMaskedLM".into(),
        vocab: vocab.name().to_string(),
        vocab_size: vocab.len(),
        hidden: cfg.hidden,
        layers: cfg.layers,
        max_positions: cfg.max_positions,
        parameters,
        files,
        heads: head_list,
        notes: notes(cfg, &state.layout),
    })
}

/// The heads BERT has no slot for, in a safetensors file of their own and its JSON listing.
fn write_heads(stage: &Path, tensors: &[NamedTensor], heads: &[HeadSummary], cfg: &ModelConfig) -> Result<()> {
    write_safetensors(&stage.join(HEADS_FILE), tensors)?;
    let listing = json!({
        "format_version": CORRFLOW_SECTION_VERSION,
        "file": HEADS_FILE,
        "heads": heads,
        "model": cfg,
    });
    let text = serde_json::to_string_pretty(&listing).map_err(|e| Error::format(stage, e.to_string()))?;
    std::fs::write(stage.join(HEADS_LISTING), text).at(stage.join(HEADS_LISTING))
}

/// What a transformers user should know about the export.
fn notes(cfg: &ModelConfig, layout: &SequenceLayout) -> Vec<String> {
    let mut notes = Vec::new();
    if cfg.mlm_activation == HeadActivation::Gelu {
        notes.push(
            "the MLM head's transform was trained with GELU, and BertForMaskedLM applies hidden_act (relu) there: \
             transformers' masked-token logits differ from corrflow's (the encoder's hidden states and embeddings are \
             exact); `import hf` restores GELU from config.json's corrflow section"
                .to_string(),
        );
    }
    if layout.cls.is_some() {
        notes.push(
            "inputs are <cls> genes <eos> (Geneformer V2's layout); the cell embedding is the mean over the genes"
                .into(),
        );
    }
    notes
}

/// An existing `--out` is replaced whole: only when it is empty or a model directory (it has a
/// `config.json`), never some other directory the user keeps files in.
fn refuse_foreign_dir(out: &Path) -> Result<()> {
    let Ok(mut entries) = std::fs::read_dir(out) else { return Ok(()) };
    if entries.next().is_none() || out.join("config.json").is_file() {
        return Ok(());
    }
    Err(Error::conflict(
        out,
        "is a directory with other files (no config.json): export hf-model replaces its --out whole; choose a new or empty directory",
    ))
}

/// transformers' `BertConfig` of the model, with the corrflow section.
fn bert_config(cfg: &ModelConfig, vocab_size: usize, pad: u32, section: &CorrflowSection) -> Value {
    json!({
        "architectures": ["BertForMaskedLM"],
        "model_type": "bert",
        "vocab_size": vocab_size,
        "hidden_size": cfg.hidden,
        "num_hidden_layers": cfg.layers,
        "num_attention_heads": cfg.heads,
        "intermediate_size": cfg.ffn,
        "hidden_act": "relu",
        "hidden_dropout_prob": cfg.dropout,
        "attention_probs_dropout_prob": cfg.dropout,
        "max_position_embeddings": cfg.max_positions,
        "type_vocab_size": 2,
        "initializer_range": 0.02,
        "layer_norm_eps": cfg.layer_norm_eps,
        "pad_token_id": pad,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": true,
        "torch_dtype": "float32",
        "corrflow": section,
    })
}

fn describe_heads(cfg: &ModelConfig, tensors: &[NamedTensor]) -> Vec<HeadSummary> {
    let pooled = "the mean of the final hidden states over gene tokens (corrflow embed's cell embedding)";
    ["cell_head", "label_head"]
        .into_iter()
        .filter_map(|name| {
            let own: Vec<TensorSummary> = tensors
                .iter()
                .filter(|t| t.0.starts_with(&format!("{name}.")))
                .map(|t| TensorSummary { name: t.0.clone(), shape: t.1.clone() })
                .collect();
            let outputs = own.iter().find(|t| t.name == format!("{name}.out.weight"))?.shape[0];
            let (role, input, classes) = match (name, &cfg.classifier, &cfg.hce) {
                ("label_head", Some(c), _) => {
                    let input =
                        if c.task == ClassifierTask::Gene { "each gene token's final hidden state" } else { pooled };
                    (
                        format!(
                            "fine-tuned classifier of {} ({})",
                            c.source,
                            serde_json::to_string(&c.task).unwrap_or_default()
                        ),
                        input,
                        c.classes.clone(),
                    )
                }
                ("label_head", None, Some(h)) => (
                    format!("HCE cell-type head on '{}' (ontology {})", h.column, h.ontology_version),
                    pooled,
                    Vec::new(),
                ),
                _ => (format!("the '{}' objective's {name}", cfg.objective), pooled, Vec::new()),
            };
            Some(HeadSummary {
                name: name.to_string(),
                role,
                input: input.to_string(),
                forward: format!("{name}.out(relu({name}.dense(x))); weights [out, in] as torch.nn.Linear"),
                outputs,
                classes,
                tensors: own,
            })
        })
        .collect()
}

/// The export direction of the mapping: each slot read out under its file name.
/// A tensor as written: its name, shape and values.
type NamedTensor = (String, Vec<usize>, Vec<f32>);

struct ToFile {
    bert_prefix: bool,
    tensors: Vec<NamedTensor>,
}

impl ToFile {
    fn name(&self, name: &str) -> String {
        if self.bert_prefix && !name.starts_with("cls.") {
            format!("bert.{name}")
        } else {
            name.to_string()
        }
    }
}

impl Slots for ToFile {
    fn matrix(&mut self, name: &str, p: &mut Matrix, linear: bool) -> Result<()> {
        let [rows, cols] = p.val().dims();
        let values = values(p.val().into_data());
        // burn's [in, out] → PyTorch's [out, in].
        let (values, shape) = if linear {
            (mapping::transpose(&values, rows, cols), vec![cols, rows])
        } else {
            (values, vec![rows, cols])
        };
        self.tensors.push((self.name(name), shape, values));
        Ok(())
    }

    fn vector(&mut self, name: &str, p: &mut Vector) -> Result<()> {
        let values = values(p.val().into_data());
        self.tensors.push((self.name(name), vec![values.len()], values));
        Ok(())
    }
}

fn values(data: burn::tensor::TensorData) -> Vec<f32> {
    // `convert` makes the data f32, so `to_vec::<f32>` cannot fail.
    data.convert::<f32>().to_vec::<f32>().expect("f32 data")
}

fn write_safetensors(path: &Path, tensors: &[NamedTensor]) -> Result<()> {
    let bytes: Vec<Vec<u8>> = tensors.iter().map(|t| t.2.iter().flat_map(|x| x.to_le_bytes()).collect()).collect();
    let views = tensors
        .iter()
        .zip(&bytes)
        .map(|(t, b)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, t.1.clone(), b)
                .map(|v| (t.0.clone(), v))
                .map_err(|e| Error::format(path, format!("'{}': {e}", t.0)))
        })
        .collect::<Result<Vec<_>>>()?;
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    let out = safetensors::serialize(views, Some(meta)).map_err(|e| Error::format(path, e.to_string()))?;
    std::fs::write(path, out).at(path)
}
