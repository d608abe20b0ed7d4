//! An exported encoder run by ONNX Runtime: multi-threaded CPU sessions, or the CUDA execution
//! provider when asked for and present. Only `cell_embedding` is fetched, so the much larger
//! `last_hidden_state` never leaves the runtime.

use std::path::{Path, PathBuf};

use ort::session::{OutputSelector, RunOptions, Session};
use ort::value::TensorRef;

use corrflow_algorithms::SequenceLayout;
use corrflow_io::encode::{Encoder, PaddedBatch};
use corrflow_io::error::{Error, Result};
use corrflow_io::model_meta::{open_exported, ModelMeta, ATTENTION_MASK, CELL_EMBEDDING, INPUT_IDS, LAST_HIDDEN_STATE};
use corrflow_io::vocab::Vocabulary;

use super::library;

/// Where the runtime computes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeDevice {
    #[default]
    Cpu,
    /// CUDA execution provider (needs the onnxruntime-gpu library); fails clearly without it.
    Cuda,
}

#[derive(Clone, Debug, Default)]
pub struct RuntimeOptions {
    /// Intra-op threads (0 = ONNX Runtime's default: one per core).
    pub threads: usize,
    pub device: RuntimeDevice,
}

pub struct OrtEncoder {
    session: Session,
    run_options: RunOptions<ort::session::HasSelectedOutputs>,
    /// Selects the token states instead (gene embeddings).
    states_options: RunOptions<ort::session::HasSelectedOutputs>,
    pub path: PathBuf,
    pub meta: ModelMeta,
    pub vocab: Vocabulary,
    /// The libonnxruntime.so in use.
    pub library: PathBuf,
}

/// The error of an ort call; the message is only formatted when the call failed (embed runs
/// once per batch).
fn ort_err<'a>(path: &'a Path, what: &'a str) -> impl FnOnce(ort::Error) -> Error + 'a {
    move |e| Error::Runtime(format!("{}: {what}: {e}", path.display()))
}

impl OrtEncoder {
    pub fn open(path: &Path, opts: &RuntimeOptions) -> Result<Self> {
        let exported = open_exported(path)?;
        let (library, env) = library::environment()?;
        let mut builder = Session::builder(env).map_err(ort_err(path, "session builder"))?;
        if opts.threads > 0 {
            builder = builder.with_intra_threads(opts.threads).map_err(|e| ort_err(path, "threads")(e.into()))?;
        }
        if opts.device == RuntimeDevice::Cuda {
            builder = builder.with_execution_providers([ort::ep::CUDA::default().build().error_on_failure()]).map_err(
                |e| ort_err(path, "CUDA execution provider (is this the onnxruntime-gpu library?)")(e.into()),
            )?;
        }
        let session = builder.commit_from_file(path).map_err(ort_err(path, "loading the model"))?;
        let run_options = RunOptions::new()
            .map_err(ort_err(path, "run options"))?
            .with_outputs(OutputSelector::no_default().with(CELL_EMBEDDING));
        let states_options = RunOptions::new()
            .map_err(ort_err(path, "run options"))?
            .with_outputs(OutputSelector::no_default().with(LAST_HIDDEN_STATE));
        Ok(Self {
            session,
            run_options,
            states_options,
            path: path.to_path_buf(),
            meta: exported.meta,
            vocab: exported.vocab,
            library: library.to_path_buf(),
        })
    }

    pub fn hidden(&self) -> usize {
        self.meta.model.hidden
    }

    /// Cell embeddings of a batch, row-major `[rows, hidden]`.
    pub fn embed(&mut self, batch: &PaddedBatch) -> Result<Vec<f32>> {
        self.run(batch, CELL_EMBEDDING, &[batch.rows, self.meta.model.hidden])
    }

    /// Final token states of a batch, row-major `[rows, len, hidden]`.
    pub fn states(&mut self, batch: &PaddedBatch) -> Result<Vec<f32>> {
        self.run(batch, LAST_HIDDEN_STATE, &[batch.rows, batch.len, self.meta.model.hidden])
    }

    /// The output `name` of a batch, which must have shape `want`.
    fn run(&mut self, batch: &PaddedBatch, name: &str, want: &[usize]) -> Result<Vec<f32>> {
        let shape = [batch.rows, batch.len];
        let ids = TensorRef::from_array_view((shape, batch.input_ids.as_slice()))
            .map_err(ort_err(&self.path, "input_ids"))?;
        let mask = TensorRef::from_array_view((shape, batch.attention_mask.as_slice()))
            .map_err(ort_err(&self.path, "attention_mask"))?;
        let options = if name == CELL_EMBEDDING { &self.run_options } else { &self.states_options };
        let outputs = self
            .session
            .run_with_options(ort::inputs![INPUT_IDS => ids, ATTENTION_MASK => mask], options)
            .map_err(ort_err(&self.path, "running the model"))?;
        let value =
            outputs.get(name).ok_or_else(|| Error::Runtime(format!("{}: no {name} output", self.path.display())))?;
        let (dims, data) = value.try_extract_tensor::<f32>().map_err(ort_err(&self.path, name))?;
        if !dims.iter().map(|&d| d as usize).eq(want.iter().copied()) {
            return Err(Error::Runtime(format!(
                "{}: {name} has shape {dims:?}, expected {want:?}",
                self.path.display()
            )));
        }
        Ok(data.to_vec())
    }
}

/// The ONNX Runtime embedding backend.
impl Encoder for OrtEncoder {
    fn name(&self) -> &'static str {
        "onnxruntime"
    }

    fn vocab(&self) -> &Vocabulary {
        &self.vocab
    }

    fn layout(&self) -> SequenceLayout {
        self.meta.tokenize_layout()
    }

    fn dim(&self) -> usize {
        self.hidden()
    }

    fn layer(&self) -> usize {
        self.meta.model.layers
    }

    fn encode(&mut self, batch: &PaddedBatch) -> Result<Vec<f32>> {
        self.embed(batch)
    }

    fn token_states(&mut self, batch: &PaddedBatch) -> Result<Vec<f32>> {
        self.states(batch)
    }
}
