//! A Hugging Face BERT `config.json`, and whether corrflow's encoder can hold the model it
//! describes.

use corrflow_algorithms::SequenceLayout;
use corrflow_infer::model_meta::{HeadActivation, ModelConfig, DEFAULT_OBJECTIVE};
use corrflow_io::vocab::Vocabulary;
use serde::{Deserialize, Serialize};

/// The fields of `config.json` the import reads (the rest are ignored).
#[derive(Clone, Debug, Deserialize)]
pub struct HfBertConfig {
    pub model_type: Option<String>,
    #[serde(default)]
    pub architectures: Vec<String>,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    /// The activation of the feed-forward layers and of the MLM head's transform; transformers'
    /// `BertConfig` defaults to GELU when the key is absent.
    #[serde(default = "gelu")]
    pub hidden_act: String,
    pub max_position_embeddings: usize,
    #[serde(default = "eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "absolute")]
    pub position_embedding_type: String,
    #[serde(default)]
    pub hidden_dropout_prob: f64,
    #[serde(default)]
    pub pad_token_id: Option<u32>,
    /// `BertForSequenceClassification`: the number of classes.
    #[serde(default)]
    pub id2label: Option<std::collections::BTreeMap<String, String>>,
    /// Newer transformers write `"is_decoder"` / `"add_cross_attention"`; a decoder is not BERT's
    /// encoder.
    #[serde(default)]
    pub is_decoder: bool,
    /// What `export hf-model` adds (transformers keeps keys it does not know through
    /// `save_pretrained`): what a BERT config cannot say about a corrflow model.
    #[serde(default)]
    pub corrflow: Option<CorrflowSection>,
}

/// The `corrflow` section of an exported model's `config.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CorrflowSection {
    pub format_version: u32,
    /// The model's full configuration: its objective, the MLM head's activation, its heads.
    pub model: ModelConfig,
    pub layout: SequenceLayout,
    /// The longest sequence the model was trained on (0: its positions).
    #[serde(default)]
    pub max_len: usize,
    /// The file beside `config.json` holding the heads BERT has no slot for.
    #[serde(default)]
    pub heads_file: Option<String>,
}

/// The version of the section this build writes and reads.
pub const CORRFLOW_SECTION_VERSION: u32 = 1;

fn gelu() -> String {
    "gelu".into()
}
fn eps() -> f64 {
    1e-12
}
fn absolute() -> String {
    "absolute".into()
}

/// The names transformers' `ACT2FN` knows (`hidden_act`; transformers 5.24), for the message
/// refusing one.
const TRANSFORMERS_ACTIVATIONS: [&str; 24] = [
    "gelu",
    "gelu_10",
    "gelu_accurate",
    "gelu_fast",
    "gelu_new",
    "gelu_python",
    "gelu_python_tanh",
    "gelu_pytorch_tanh",
    "hardswish",
    "laplace",
    "leaky_relu",
    "linear",
    "mish",
    "prelu",
    "quick_gelu",
    "relu",
    "relu2",
    "relu6",
    "sigmoid",
    "silu",
    "sqrtsoftplus",
    "swish",
    "tanh",
    "xielu",
];

/// Architectures the import reads the weights of.
pub const SUPPORTED: [&str; 3] = ["BertForMaskedLM", "BertForSequenceClassification", "BertModel"];

impl HfBertConfig {
    /// corrflow's model configuration for this model with `vocab`, and the sequence layout its
    /// inputs have; the reason when the encoder cannot hold it.
    pub fn to_corrflow(&self, vocab: &Vocabulary) -> Result<(ModelConfig, SequenceLayout), String> {
        if self.model_type.as_deref().is_some_and(|t| t != "bert") {
            return Err(format!(
                "model_type '{}' is not supported: corrflow's encoder is a post-LayerNorm BERT (model_type 'bert')",
                self.model_type.as_deref().unwrap_or_default()
            ));
        }
        if let Some(a) = self.architectures.iter().find(|a| !SUPPORTED.contains(&a.as_str())) {
            return Err(format!("architecture '{a}' is not supported (supported: {})", SUPPORTED.join(", ")));
        }
        if self.is_decoder {
            return Err("a decoder (is_decoder: true) is not supported: corrflow's encoder is bidirectional".into());
        }
        let activation = self.activation()?;
        if self.position_embedding_type != "absolute" {
            return Err(format!(
                "position_embedding_type '{}' is not supported: corrflow learns absolute positions",
                self.position_embedding_type
            ));
        }
        if self.vocab_size != vocab.len() {
            return Err(format!(
                "the model has {} tokens but vocabulary '{}' has {} (V2 models count <cls> and <eos>: pass the V2 dictionaries)",
                self.vocab_size,
                vocab.name(),
                vocab.len()
            ));
        }
        if let Some(pad) = self.pad_token_id.filter(|&p| p != vocab.pad) {
            return Err(format!("pad_token_id {pad} is not the vocabulary's <pad> ({})", vocab.pad));
        }
        let config = ModelConfig {
            hidden: self.hidden_size,
            ffn: self.intermediate_size,
            heads: self.num_attention_heads,
            layers: self.num_hidden_layers,
            max_positions: self.max_position_embeddings,
            dropout: self.hidden_dropout_prob.clamp(0.0, 0.99),
            layer_norm_eps: self.layer_norm_eps,
            objective: DEFAULT_OBJECTIVE.into(),
            mlm_activation: activation,
            classifier: None,
            hce: None,
            ..ModelConfig::default()
        };
        config.validate()?;
        if let Some(section) = &self.corrflow {
            return self.section_model(section, &config, vocab);
        }
        // The layout follows the dictionaries: with <cls> and <eos> it is V2's, cut to the
        // positions the model has.
        let mut layout = match (vocab.cls, vocab.eos) {
            (Some(cls), Some(eos)) => SequenceLayout::v2(cls, eos),
            _ => SequenceLayout::v1(),
        };
        let specials = usize::from(layout.cls.is_some()) + usize::from(layout.eos.is_some());
        layout.max_genes = layout.max_genes.min(self.max_position_embeddings.saturating_sub(specials)).max(1);
        Ok((config, layout))
    }

    /// The model and layout an exported corrflow model recorded, checked against the BERT fields
    /// and the vocabulary.
    fn section_model(
        &self,
        section: &CorrflowSection,
        bert: &ModelConfig,
        vocab: &Vocabulary,
    ) -> Result<(ModelConfig, SequenceLayout), String> {
        if section.format_version != CORRFLOW_SECTION_VERSION {
            return Err(format!(
                "the corrflow section has format_version {}; this build reads {CORRFLOW_SECTION_VERSION}",
                section.format_version
            ));
        }
        let m = &section.model;
        let sizes = |c: &ModelConfig| (c.hidden, c.ffn, c.heads, c.layers, c.max_positions);
        if sizes(m) != sizes(bert) {
            return Err(format!(
                "the corrflow section's model (hidden, ffn, heads, layers, positions) {:?} disagrees with the BERT fields {:?}",
                sizes(m),
                sizes(bert)
            ));
        }
        if (section.layout.cls, section.layout.eos) != (vocab.cls, vocab.eos) {
            return Err(format!(
                "the corrflow section's layout has <cls> {:?} / <eos> {:?}, the vocabulary {:?} / {:?}",
                section.layout.cls, section.layout.eos, vocab.cls, vocab.eos
            ));
        }
        m.validate()?;
        Ok((m.clone(), section.layout))
    }

    /// The activation `hidden_act` names. transformers applies it in every feed-forward layer
    /// and in the MLM head's transform; corrflow's feed-forward is ReLU (as Geneformer's), so
    /// only `relu` describes a model it can hold. A missing key is transformers' default, GELU.
    pub fn activation(&self) -> Result<HeadActivation, String> {
        let act = self.hidden_act.as_str();
        if act == "relu" {
            return Ok(HeadActivation::Relu);
        }
        let what = if TRANSFORMERS_ACTIVATIONS.contains(&act) {
            "transformers applies it in the encoder's feed-forward layers and the MLM head, and corrflow's \
             feed-forward is ReLU, as in Geneformer"
        } else {
            "it is not an activation transformers knows"
        };
        Err(format!("hidden_act '{act}' is not supported: {what} (allowed: relu)"))
    }

    /// Classes of a `BertForSequenceClassification` head.
    pub fn classes(&self) -> usize {
        self.id2label.as_ref().map_or(0, |m| m.len())
    }
}
