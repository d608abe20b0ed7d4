//! Checkpoints as embedding models: burn's forward on the CPU backend.

use std::path::Path;

use burn::module::Module;
use burn::tensor::activation::softmax;
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor, TensorData};

use corrflow_infer::encode::{Encoder, PaddedBatch};
use corrflow_infer::model_meta::{inference_layout, ModelConfig, Pooling};
use corrflow_io::error::{Error, Result};
use corrflow_io::vocab::Vocabulary;

use crate::checkpoint::{self, CheckpointState};
use crate::encoder::CellEncoder;
use crate::init::InitModel;
use crate::CpuBackend;
use corrflow_algorithms::SequenceLayout;

/// The backend's name in its errors (`corrflow_io::error::Error::Backend`).
pub const BACKEND: &str = "model";

/// A burn failure as this backend's error: `model: {what}: {e:?}`.
pub fn burn_error(what: &str, e: impl std::fmt::Debug) -> Error {
    Error::backend(BACKEND, format!("{what}: {e:?}"))
}

/// A trained encoder with its checkpoint state and vocabulary.
pub struct LoadedModel<B: Backend> {
    pub model: CellEncoder<B>,
    pub state: CheckpointState,
    pub vocab: Vocabulary,
}

/// Loads a checkpoint (directory, or run directory = its latest) with the run's vocabulary.
pub fn load_checkpoint<B: Backend>(path: &Path, device: &B::Device) -> Result<LoadedModel<B>> {
    let dir = checkpoint::resolve(path)?;
    let state = checkpoint::load_state(&dir, checkpoint::Purpose::Inference)?;
    let run = dir
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| Error::format(&dir, "checkpoint is not inside a run directory"))?;
    let vocab = Vocabulary::load_dir(&run.join("vocab"))?;
    let vocab = if state.layout.cls.is_some() { vocab.with_v2_specials() } else { vocab };
    if vocab.hash() != state.vocab_hash || vocab.len() != state.vocab_size {
        return Err(Error::conflict(&dir, "the run's vocabulary does not match the checkpoint's"));
    }
    let model: CellEncoder<B> = state.model.init(vocab.len(), device);
    let model = checkpoint::load_model(model, &dir, device)?;
    Ok(LoadedModel { model, state, vocab })
}

impl<B: crate::fused::FusedOps> LoadedModel<B> {
    /// burn's forward on a padded batch: the states after `layer` encoder layers
    /// (`[rows, len, hidden]`) and the cell vectors pooled from them (`[rows, hidden]`).
    pub fn forward(&self, batch: &PaddedBatch, layer: usize, pooling: Pooling) -> (Tensor<B, 3>, Tensor<B, 2>) {
        let (input, pad, weights) = self.batch_tensors(batch, pooling);
        let values = values_tensor(batch, &input.device());
        let states = self.model.states_with_values(input, values, pad, layer);
        let pooled = CellEncoder::mean_pool(states.clone(), weights);
        (states, pooled)
    }

    /// The cell classifier's probabilities `[rows, classes]` of a padded batch.
    pub fn cell_probabilities(&self, batch: &PaddedBatch, pooling: Pooling) -> Tensor<B, 2> {
        let (input, pad, weights) = self.batch_tensors(batch, pooling);
        let values = values_tensor(batch, &input.device());
        softmax(self.model.cell_logits(input, values, pad, weights), 1)
    }

    /// Token ids, padding and pooling weights of a padded batch.
    fn batch_tensors(
        &self,
        batch: &PaddedBatch,
        pooling: Pooling,
    ) -> (Tensor<B, 2, Int>, Tensor<B, 2, Bool>, Tensor<B, 2>) {
        let device = self.model.devices().into_iter().next().unwrap_or_default();
        let shape = [batch.rows, batch.len];
        let pad: Vec<bool> = batch.attention_mask.iter().map(|&k| k == 0).collect();
        let weights: Vec<f32> = batch
            .input_ids
            .iter()
            .zip(&batch.attention_mask)
            .enumerate()
            .map(|(i, (&t, &k))| {
                let t = t as u32;
                let use_it = k == 1
                    && match pooling {
                        Pooling::Mean => self.vocab.is_gene(t),
                        Pooling::Cls => Some(t) == self.vocab.cls && i % batch.len == 0,
                    };
                f32::from(u8::from(use_it))
            })
            .collect();
        let input = Tensor::<B, 2, Int>::from_data(TensorData::new(batch.input_ids.clone(), shape), &device);
        let pad = Tensor::<B, 2, Bool>::from_data(TensorData::new(pad, shape), &device);
        let weights = Tensor::<B, 2>::from_data(TensorData::new(weights, shape), &device);
        (input, pad, weights)
    }
}

/// The cell vector a model gives when no pooling is asked for: the one its cell head (a
/// fine-tuned classifier, a hierarchical head) reads, else a value model's CLS state (what its
/// decoder reads), else the mean of the gene states.
pub fn default_pooling(model: &ModelConfig) -> Pooling {
    model.cell_head_pooling().unwrap_or(if model.input.sees_values() { Pooling::Cls } else { Pooling::Mean })
}

/// A value model's token values `[rows, len]` (none in a rank model's batch).
fn values_tensor<B: Backend>(batch: &PaddedBatch, device: &B::Device) -> Option<Tensor<B, 2>> {
    (!batch.values.is_empty())
        .then(|| Tensor::<B, 2>::from_data(TensorData::new(batch.values.clone(), [batch.rows, batch.len]), device))
}

/// A checkpoint's model on the CPU backend behind non-generic functions: the burn [`Encoder`]
/// backend of `embed`. Callers in other crates (the tests among them) link to this one compiled
/// copy of the model's code; calling the generic [`load_checkpoint`] and
/// [`LoadedModel::forward`] with a concrete backend instead compiles the model again in the
/// calling crate (~100 s each on 2 cores).
pub struct BurnEncoder {
    loaded: LoadedModel<CpuBackend>,
    pooling: Pooling,
    layer: usize,
}

/// Every float parameter of a module with its path (`encoder.layers.0.mha.query.weight`).
struct NamedParameters {
    path: Vec<String>,
    found: Vec<(String, Vec<f32>)>,
}

impl<B: Backend> burn::module::ModuleVisitor<B> for NamedParameters {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<B, D>>) {
        // `convert` makes the data f32, so `to_vec::<f32>` cannot fail.
        let values = param.val().into_data().convert::<f32>().to_vec::<f32>().expect("f32 data");
        self.found.push((self.path.join("."), values));
    }
}

impl BurnEncoder {
    pub fn open(path: &Path, pooling: Option<Pooling>, layer: i64) -> Result<Self> {
        let loaded = load_checkpoint::<CpuBackend>(path, &Default::default())?;
        let n_layers = loaded.state.model.layers as i64;
        let resolved = if layer < 0 { n_layers + 1 + layer } else { layer };
        if !(0..=n_layers).contains(&resolved) {
            return Err(Error::Usage(format!(
                "--layer {layer} is outside the model's 0..={n_layers} (or −1..=−{})",
                n_layers + 1
            )));
        }
        let pooling = pooling.unwrap_or_else(|| default_pooling(&loaded.state.model));
        if pooling == Pooling::Cls && loaded.state.layout.cls.is_none() {
            return Err(Error::Usage("--pooling cls needs a V2 (<cls>) model; this one is V1".into()));
        }
        Ok(Self { loaded, pooling, layer: resolved as usize })
    }

    /// Every float parameter of the model, named by its module path, in module order.
    pub fn parameters(&self) -> Vec<(String, Vec<f32>)> {
        let mut visitor = NamedParameters { path: Vec::new(), found: Vec::new() };
        self.loaded.model.visit(&mut visitor);
        visitor.found
    }
}

impl Encoder for BurnEncoder {
    fn name(&self) -> &'static str {
        "burn"
    }

    fn vocab(&self) -> &Vocabulary {
        &self.loaded.vocab
    }

    fn layout(&self) -> SequenceLayout {
        inference_layout(self.loaded.state.layout, self.loaded.state.max_len())
    }

    fn dim(&self) -> usize {
        self.loaded.state.model.hidden
    }

    fn layer(&self) -> usize {
        self.layer
    }

    fn encode(&mut self, batch: &PaddedBatch) -> Result<Vec<f32>> {
        let (_, pooled) = self.loaded.forward(batch, self.layer, self.pooling);
        pooled.into_data().to_vec().map_err(|e| burn_error("burn forward", e))
    }

    fn token_states(&mut self, batch: &PaddedBatch) -> Result<Vec<f32>> {
        let (states, _) = self.loaded.forward(batch, self.layer, self.pooling);
        states.into_data().to_vec().map_err(|e| burn_error("burn forward", e))
    }

    fn classes(&self) -> &[String] {
        self.loaded.state.model.cell_classes()
    }

    fn config(&self) -> Option<&corrflow_infer::model_meta::ModelConfig> {
        Some(&self.loaded.state.model)
    }

    fn encode_with_probabilities(&mut self, batch: &PaddedBatch) -> Result<Vec<f32>> {
        let Some(pooling) = self.loaded.state.model.cell_head_pooling().filter(|_| !self.classes().is_empty()) else {
            return self.encode(batch);
        };
        let vectors = self.encode(batch)?;
        let probs: Vec<f32> = self
            .loaded
            .cell_probabilities(batch, pooling)
            .into_data()
            .to_vec()
            .map_err(|e| burn_error("burn forward", e))?;
        let (dim, k) = (self.dim(), self.classes().len());
        Ok((0..batch.rows)
            .flat_map(|r| vectors[r * dim..(r + 1) * dim].iter().chain(&probs[r * k..(r + 1) * k]).copied())
            .collect())
    }
}
