//! What describes a model apart from its weights: the architecture ([`ModelConfig`]), how cells
//! are pooled ([`Pooling`]), and the metadata an exported ONNX model carries ([`ModelMeta`],
//! read by [`open_exported`] without running the model, after checking the file against the
//! checksum its sidecar records: [`integrity`]). Plain data, so the server and the ONNX Runtime
//! backend read it without depending on burn.

pub mod integrity;
pub mod memory;
pub mod proto;
pub mod values;

use std::path::{Path, PathBuf};

use corrflow_algorithms::SequenceLayout;
use prost::Message;
use serde::{Deserialize, Serialize};

use corrflow_io::error::{Error, IoContext, Result};
use corrflow_io::vocab::Vocabulary;
use proto::ModelMetadataProto;
pub use values::{DecodeSet, ModelInput, ValueModel, VisiblePool};

pub const OPSET: i64 = 17;
/// IR version 8 is the one that goes with opset 17.
pub const IR_VERSION: i64 = 8;
pub const META_KEY: &str = "corrflow.meta";
pub const CONFIG_KEY: &str = "corrflow.config";
pub const VOCAB_HASH_KEY: &str = "corrflow.vocab_hash";

/// Names of the exported graph's inputs and outputs.
pub const INPUT_IDS: &str = "input_ids";
pub const ATTENTION_MASK: &str = "attention_mask";
/// A value model's third input: each token's value, float32 `[batch, sequence]`.
pub const VALUES: &str = "values";
/// A value model's decoder outputs from the CLS state, float32 `[batch, genes × outputs per
/// gene]` over its decoding set (`values.decode_genes`): txfm's logits before the rectified
/// tanh; wced's detection logits, then levels.
pub const DECODED: &str = "decoded";
pub const LAST_HIDDEN_STATE: &str = "last_hidden_state";
pub const CELL_EMBEDDING: &str = "cell_embedding";
/// A fine-tuned classifier's outputs: class logits and their softmax (per cell for a cell
/// classifier, per token for a gene classifier).
pub const LOGITS: &str = "logits";
pub const PROBABILITIES: &str = "probabilities";

/// The objective a model is trained with by default (masked-token prediction).
pub const DEFAULT_OBJECTIVE: &str = "mlm";

/// Model sizes (`[model]` in the config; `configs/paper.toml` = the paper's Table 5).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    pub hidden: usize,
    pub ffn: usize,
    pub heads: usize,
    pub layers: usize,
    /// Learned absolute positions.
    pub max_positions: usize,
    pub dropout: f64,
    pub layer_norm_eps: f64,
    /// The pre-training objective by name (`mlm`, `wced`, `poisson`, ...): which heads the model
    /// has and what loss trains it; the objectives live with the model (`corrflow-model`).
    pub objective: String,
    /// The activation of the MLM head's transform: BERT's GELU for models trained here; an
    /// imported Hugging Face model uses its `hidden_act` (ReLU for Geneformer). Left out of the
    /// serialized config when GELU, so configs and checkpoints written before it are unchanged.
    #[serde(skip_serializing_if = "HeadActivation::is_gelu")]
    pub mlm_activation: HeadActivation,
    /// A classification head added by `finetune` (its classes and what it classifies); absent
    /// from pre-trained models' configs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classifier: Option<Classifier>,
    /// A hierarchical cell-type head trained with hierarchical cross-entropy alongside the
    /// objective (`train --hce-ontology`): its ontology slice, label column and loss weight.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hce: Option<OntologyHead>,
    /// What tokens carry: rank (Geneformer, the default, left out of serialized configs so
    /// those written before it are unchanged), or values (DESIGN.md §11).
    #[serde(skip_serializing_if = "ModelInput::is_rank")]
    pub input: ModelInput,
    /// A value model's normalization, positions and decoder (absent for rank models).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values: Option<ValueModel>,
}

/// A hierarchical cell-type head (BMFM-RNA's HCE): a softmax over the leaves of an ontology
/// slice (every leaf under a training label, and their ancestors), from the pooled embedding.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OntologyHead {
    /// The ontology release the slice was cut from (`v2026-03-26`); a file of another release
    /// is refused where one is given.
    pub ontology_version: String,
    /// The obs column of term ids it learns from (`cl_id` from `ingest --cell-type-map`).
    pub column: String,
    /// The HCE term's weight next to the reconstruction loss.
    pub weight: f64,
    /// Reconstruction-only steps before the HCE term starts (BMFM-RNA's warm-up).
    #[serde(default)]
    pub warmup_steps: u64,
    #[serde(default)]
    pub pooling: Pooling,
    /// The slice, sorted by id.
    pub terms: Vec<corrflow_algorithms::ontology::Term>,
    /// The head's outputs: the slice's leaves in term order (what `embed` and the server
    /// report probabilities of).
    pub leaves: Vec<String>,
}

impl OntologyHead {
    /// The slice as a DAG with the head's outputs.
    pub fn leaf_head(&self) -> Result<corrflow_algorithms::ontology::hce::LeafHead, String> {
        let o = corrflow_algorithms::ontology::Ontology::new(self.terms.clone())
            .map_err(|e| format!("model.hce's ontology slice: {e}"))?;
        Ok(corrflow_algorithms::ontology::hce::LeafHead::new(o))
    }

    /// The ids of the slice's leaves in term order: what `leaves` must be.
    pub fn leaf_ids(terms: &[corrflow_algorithms::ontology::Term]) -> Vec<String> {
        let parents: std::collections::HashSet<&str> =
            terms.iter().flat_map(|t| t.parents.iter().map(String::as_str)).collect();
        terms.iter().filter(|t| !parents.contains(t.id.as_str())).map(|t| t.id.clone()).collect()
    }
}

impl ModelConfig {
    /// The classes a cell-level head gives probabilities of: a fine-tuned cell classifier's
    /// classes, or a hierarchical head's leaves (term ids); empty without such a head.
    pub fn cell_classes(&self) -> &[String] {
        match (&self.classifier, &self.hce) {
            (Some(c), _) => Classifier::cell_classes(Some(c)),
            (None, Some(h)) => &h.leaves,
            (None, None) => &[],
        }
    }

    /// The pooling the cell-level head reads, when there is one.
    pub fn cell_head_pooling(&self) -> Option<Pooling> {
        match (&self.classifier, &self.hce) {
            (Some(c), _) => (c.task == ClassifierTask::Cell).then_some(c.pooling),
            (None, Some(h)) => Some(h.pooling),
            (None, None) => None,
        }
    }
}

/// What a fine-tuned classification head predicts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Classifier {
    pub task: ClassifierTask,
    /// Where the labels came from: the obs column (cells) or the gene labels file (genes).
    pub source: String,
    /// Class names; the head's output `c` is `classes[c]`.
    pub classes: Vec<String>,
    /// The cell vector a cell classifier reads (ignored for genes, which read token states).
    #[serde(default)]
    pub pooling: Pooling,
}

/// Whether a classifier labels whole cells (from the pooled embedding) or genes (from each
/// gene token's state).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClassifierTask {
    #[default]
    Cell,
    Gene,
}

impl Classifier {
    /// The classes of a cell classifier (empty for none or a gene classifier): what `embed` and
    /// the server return probabilities of.
    pub fn cell_classes(c: Option<&Self>) -> &[String] {
        match c {
            Some(c) if c.task == ClassifierTask::Cell => &c.classes,
            _ => &[],
        }
    }
}

/// An activation of the MLM head's transform.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HeadActivation {
    #[default]
    Gelu,
    Relu,
}

impl HeadActivation {
    pub fn is_gelu(&self) -> bool {
        *self == Self::Gelu
    }
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            hidden: 256,
            ffn: 512,
            heads: 4,
            layers: 6,
            max_positions: 2048,
            dropout: 0.02,
            layer_norm_eps: 1e-12,
            objective: DEFAULT_OBJECTIVE.into(),
            mlm_activation: HeadActivation::Gelu,
            classifier: None,
            hce: None,
            input: ModelInput::Rank,
            values: None,
        }
    }
}

impl ModelConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.hidden == 0 || self.ffn == 0 || self.heads == 0 || self.layers == 0 || self.max_positions == 0 {
            return Err("model.hidden, ffn, heads, layers and max_positions must be > 0".into());
        }
        // Far beyond any single-cell model; past these the sizes overflow estimates and allocations.
        for (name, value, most) in [
            ("hidden", self.hidden, 1 << 16),
            ("ffn", self.ffn, 1 << 18),
            ("heads", self.heads, 1 << 10),
            ("layers", self.layers, 1 << 10),
            ("max_positions", self.max_positions, 1 << 20),
        ] {
            if value > most {
                return Err(format!("model.{name} = {value} is more than the largest supported, {most}"));
            }
        }
        if !self.hidden.is_multiple_of(self.heads) {
            return Err(format!("model.hidden ({}) must be a multiple of model.heads ({})", self.hidden, self.heads));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(format!("model.dropout must be in [0, 1), got {}", self.dropout));
        }
        if !(self.layer_norm_eps > 0.0) {
            return Err("model.layer_norm_eps must be > 0".into());
        }
        if let Some(c) = &self.classifier {
            if c.classes.len() < 2 {
                return Err(format!("model.classifier has {} classes; at least 2 are needed", c.classes.len()));
            }
        }
        match (self.input.sees_values(), &self.values) {
            (true, Some(v)) => {
                v.validate(self.input)?;
                if self.input == ModelInput::Value && self.hidden < 2 {
                    return Err("a value model's token is [E_gene (hidden − 1); x]: model.hidden must be ≥ 2".into());
                }
            }
            (true, None) => return Err("model.input = 'value' or 'bins' needs a [model.values] section".into()),
            (false, Some(_)) => {
                return Err("[model.values] is for value models: set model.input = 'value' or 'bins'".into())
            }
            (false, None) => {}
        }
        if let Some(h) = &self.hce {
            if self.classifier.is_some() {
                return Err("a model has either a hierarchical head (model.hce) or a classifier, not both".into());
            }
            if !(h.weight >= 0.0 && h.weight.is_finite()) {
                return Err(format!("the HCE weight must be a finite number >= 0, got {}", h.weight));
            }
            let leaves = h.leaf_head()?.width();
            if leaves < 2 {
                return Err(format!("model.hce's ontology slice has {leaves} leaves; at least 2 are needed"));
            }
            if h.leaves != OntologyHead::leaf_ids(&h.terms) {
                return Err("model.hce.leaves are not the leaves of its ontology slice in term order".into());
            }
        }
        Ok(())
    }
}

/// How a cell's token states become one vector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// Mean over gene positions (Geneformer's `cell` mode).
    #[default]
    Mean,
    /// The `<cls>` position (V2 layout).
    Cls,
}

/// The layout input cells are tokenized with for a model trained on `max_len` tokens: cut as
/// in training, since positions beyond it were never trained.
pub fn inference_layout(layout: SequenceLayout, max_len: usize) -> SequenceLayout {
    let specials = usize::from(layout.cls.is_some()) + usize::from(layout.eos.is_some());
    let mut layout = layout;
    layout.max_genes = layout.max_genes.min(max_len.saturating_sub(specials).max(1));
    layout
}

/// What a runtime needs besides the graph: how to tokenize for this model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelMeta {
    pub format_version: u32,
    pub model: ModelConfig,
    pub layout: SequenceLayout,
    /// Longest sequence the model was trained on (tokens, specials included).
    pub max_len: usize,
    pub pooling: Pooling,
    pub vocab_name: String,
    pub vocab_hash: String,
    pub vocab_size: usize,
    pub pad: u32,
    /// Checkpoint step the weights come from.
    pub step: u64,
}

impl ModelMeta {
    /// The sequence layout for tokenizing input cells: at most `max_len` tokens.
    pub fn tokenize_layout(&self) -> SequenceLayout {
        inference_layout(self.layout, self.max_len)
    }
}

/// `model.onnx` → `model.vocab`.
pub fn vocab_sidecar(model: &Path) -> PathBuf {
    model.with_extension("vocab")
}

/// An exported model's metadata and vocabulary, checked against each other.
pub struct ExportedModel {
    pub path: PathBuf,
    pub meta: ModelMeta,
    pub vocab: Vocabulary,
}

/// Reads `model.onnx`'s metadata (without running it) and its vocabulary sidecar, after checking
/// the file against the checksum the sidecar records.
pub fn open_exported(path: &Path) -> Result<ExportedModel> {
    read_exported(path).map(|(model, _)| model)
}

/// [`open_exported`], and the model file's bytes that were checked, so that a runtime builds its
/// session from exactly those.
pub fn read_exported(path: &Path) -> Result<(ExportedModel, Vec<u8>)> {
    let bytes = std::fs::read(path).at(path)?;
    let sidecar = vocab_sidecar(path);
    if !sidecar.is_dir() {
        return Err(Error::format(
            path,
            format!("its vocabulary directory {} is missing (export writes it next to the model)", sidecar.display()),
        ));
    }
    integrity::verify_model(path, &bytes)?;
    let model = ModelMetadataProto::decode(bytes.as_slice())
        .map_err(|e| Error::format(path, format!("not an ONNX model (protobuf decoding failed: {e})")))?;
    let meta = model
        .metadata_props
        .iter()
        .find(|p| p.key == META_KEY)
        .ok_or_else(|| Error::format(path, format!("no {META_KEY} metadata: not a model exported by corrflow")))?;
    let meta: ModelMeta = serde_json::from_str(&meta.value)
        .map_err(|e| Error::format(path, format!("invalid {META_KEY} metadata: {e}")))?;
    let vocab = Vocabulary::load_dir(&sidecar)?;
    let vocab = if meta.layout.cls.is_some() { vocab.with_v2_specials() } else { vocab };
    if vocab.hash() != meta.vocab_hash || vocab.len() != meta.vocab_size {
        return Err(Error::conflict(
            &sidecar,
            format!("vocabulary hash {} does not match the model's {}", vocab.hash(), meta.vocab_hash),
        ));
    }
    Ok((ExportedModel { path: path.to_path_buf(), meta, vocab }, bytes))
}
