//! `corrflow export onnx`: a checkpoint's encoder as a self-contained ONNX model.
//!
//! ```text
//! model.onnx        opset 17; inputs input_ids, attention_mask (int64 [batch, sequence]);
//!                   outputs last_hidden_state [batch, sequence, hidden], cell_embedding [batch, hidden],
//!                   and for a fine-tuned classifier logits, probabilities [batch, classes]
//!                   (cells) or [batch, sequence, classes] (genes);
//!                   metadata_props: corrflow.config (model config JSON), corrflow.vocab_hash,
//!                   corrflow.meta (everything a runtime needs to tokenize: layout, max length, pooling)
//! model.vocab/      the vocabulary's tables (token, median, symbol TSVs), hash-checked on load,
//!                   and model.sha256: the model file's sha256 (`sha256sum`'s line), which every
//!                   reader checks before it uses the model (`model_meta::integrity`)
//! ```
//! The sidecar is published first and the model last, so a model file that exists is complete
//! and finds its vocabulary; a stale sidecar is caught by the hashes.

pub mod encoder;
pub mod graph;
pub mod hf;
pub use corrflow_infer::model_meta::proto;

use std::path::{Path, PathBuf};

use prost::Message;
use serde::{Deserialize, Serialize};

use corrflow_fs::atomic::{commit, publish_dir, temp_path};
use corrflow_infer::model_meta::integrity::write_model_checksum;
use corrflow_infer::model_meta::{
    vocab_sidecar, ClassifierTask, ModelMeta, Pooling, CONFIG_KEY, IR_VERSION, META_KEY, OPSET, VOCAB_HASH_KEY,
};
use corrflow_io::error::{Error, IoContext, Result};
use corrflow_io::vocab::Vocabulary;
use proto::{GraphProto, ModelProto, OperatorSetIdProto, StringStringEntryProto};

use crate::burn_encoder::load_checkpoint;
use crate::checkpoint::CheckpointState;

#[derive(Clone, Debug)]
pub struct ExportRequest {
    pub checkpoint: PathBuf,
    pub out: PathBuf,
    /// What `cell_embedding` pools; `None`: mean for rank models, the CLS state for value models.
    pub pooling: Option<Pooling>,
    /// The layer whose states the model outputs (`embed --layer`'s numbering: 1..=layers, −1 =
    /// last, −2 = second to last): the model exported is the checkpoint's first layers up to it.
    pub layer: i64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ExportSummary {
    pub command: String,
    pub out: String,
    pub vocab_dir: String,
    pub bytes: u64,
    pub nodes: usize,
    pub parameters: usize,
    pub hidden: usize,
    pub layers: usize,
    pub vocab_size: usize,
    pub vocab_hash: String,
    pub step: u64,
}

pub fn export_onnx(req: &ExportRequest) -> Result<ExportSummary> {
    let device = Default::default();
    let loaded = load_checkpoint::<crate::CpuBackend>(&req.checkpoint, &device)?;
    let (state, vocab) = (&loaded.state, &loaded.vocab);
    let pooling = req.pooling.unwrap_or_else(|| crate::burn_encoder::default_pooling(&state.model));
    let head_task = exported_head(state, vocab, pooling)?;
    let layers = exported_layers(state, req.layer, head_task.is_some())?;
    let flags: Vec<f32> = (0..vocab.len() as u32)
        .map(|t| match pooling {
            Pooling::Mean => f32::from(u8::from(vocab.is_gene(t))),
            Pooling::Cls => f32::from(u8::from(Some(t) == vocab.cls)),
        })
        .collect();
    let graph = encoder::encoder_graph(&loaded.model, layers, state.model.layer_norm_eps, &flags, head_task);
    let nodes = graph.node.len();
    let parameters = graph
        .initializer
        .iter()
        .filter(|t| t.data_type == proto::dtype::FLOAT && !t.dims.is_empty())
        .map(|t| t.dims.iter().product::<i64>() as usize)
        .sum();
    // A model cut at layer k is a k-layer model: its metadata says so, and runtimes report it.
    let mut cut = state.clone();
    cut.model.layers = layers;
    let bytes = model_proto(graph, &cut, vocab, pooling).encode_to_vec();
    let sidecar = vocab_sidecar(&req.out);
    write_model(&bytes, vocab, &sidecar, &req.out)?;
    Ok(ExportSummary {
        command: "export onnx".into(),
        out: req.out.display().to_string(),
        vocab_dir: sidecar.display().to_string(),
        bytes: bytes.len() as u64,
        nodes,
        parameters,
        hidden: state.model.hidden,
        layers,
        vocab_size: vocab.len(),
        vocab_hash: vocab.hash().to_string(),
        step: state.step,
    })
}

/// How many of the checkpoint's layers the export keeps for `layer` (1..=L, or counted back
/// from the last when negative). A fine-tuned classifier reads the last layer, so its model is
/// exported whole.
fn exported_layers(state: &CheckpointState, layer: i64, classifier: bool) -> Result<usize> {
    let n = state.model.layers as i64;
    let k = if layer < 0 { n + 1 + layer } else { layer };
    if !(1..=n).contains(&k) {
        return Err(Error::Usage(format!(
            "--layer {layer}: this model has {n} layers; export takes 1..={n} or -1..=-{n} (-1 = last; the \
             embeddings alone, layer 0, cannot be exported)"
        )));
    }
    if classifier && k != n {
        return Err(Error::Usage(format!(
            "--layer {layer}: this fine-tuned classifier reads the last layer ({n}); it is exported whole"
        )));
    }
    Ok(k as usize)
}

/// The cell head the exported graph carries (a hierarchical cell-type head is exported as a
/// cell classifier over its leaves), after checking that the pooling suits the model.
fn exported_head(state: &CheckpointState, vocab: &Vocabulary, pooling: Pooling) -> Result<Option<ClassifierTask>> {
    if pooling == Pooling::Cls && vocab.cls.is_none() {
        return Err(Error::Usage("--pooling cls needs a V2 (<cls>) model; this one is V1".into()));
    }
    if let Some(p) = state.model.cell_head_pooling().filter(|&p| p != pooling) {
        return Err(Error::Usage(format!(
            "this model's cell head reads {p:?} pooling: export it with --pooling {}",
            if p == Pooling::Cls { "cls" } else { "mean" }
        )));
    }
    Ok(state.model.classifier.as_ref().map(|c| c.task).or(state.model.hce.as_ref().map(|_| ClassifierTask::Cell)))
}

/// The ONNX model around the encoder graph, with corrflow's metadata (config, layout,
/// pooling, vocabulary hash) in its properties.
fn model_proto(graph: GraphProto, state: &CheckpointState, vocab: &Vocabulary, pooling: Pooling) -> ModelProto {
    let meta = ModelMeta {
        format_version: 1,
        model: state.model.clone(),
        layout: state.layout,
        max_len: state.max_len(),
        pooling,
        vocab_name: vocab.name().to_string(),
        vocab_hash: vocab.hash().to_string(),
        vocab_size: vocab.len(),
        pad: vocab.pad,
        step: state.step,
    };
    ModelProto {
        ir_version: IR_VERSION,
        producer_name: "corrflow".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        domain: String::new(),
        model_version: state.step as i64,
        doc_string: "corrflow cell encoder (Geneformer-style BERT); see corrflow.meta".into(),
        graph: Some(graph),
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: OPSET }],
        metadata_props: vec![
            StringStringEntryProto { key: META_KEY.into(), value: json(&meta) },
            StringStringEntryProto { key: CONFIG_KEY.into(), value: json(&state.model) },
            StringStringEntryProto { key: VOCAB_HASH_KEY.into(), value: vocab.hash().into() },
        ],
    }
}

/// The model and its sidecar (vocabulary and the model's checksum), atomically. The model is
/// written first, under its temporary name, so that a full disk cannot leave a sidecar without
/// its model; it is renamed into place after the sidecar. (Replacing an export, a crash between
/// the two leaves the old model with the new checksum: refused on load, never used.)
fn write_model(bytes: &[u8], vocab: &Vocabulary, sidecar: &Path, out: &Path) -> Result<()> {
    let tmp = temp_path(out);
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).at(parent)?;
    }
    let written = std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
        .at(&tmp)
        .and_then(|()| {
            publish_dir(sidecar, |stage| {
                vocab.write_dir(stage)?;
                write_model_checksum(stage, out, bytes)
            })
        })
        .and_then(|()| Ok(commit(&tmp, out)?));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// JSON text of a plain struct (its serialization cannot fail).
fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("plain struct serializes")
}
