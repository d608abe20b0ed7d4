//! An exported encoder run by ONNX Runtime: multi-threaded CPU sessions, or the CUDA execution
//! provider when asked for and present. Only `cell_embedding` is fetched, so the much larger
//! `last_hidden_state` never leaves the runtime.

use std::path::{Path, PathBuf};

use ort::session::{OutputSelector, RunOptions, Session};
use ort::value::TensorRef;

use crate::encode::{Encoder, PaddedBatch};
use crate::model_meta::{
    read_exported, ModelMeta, ATTENTION_MASK, CELL_EMBEDDING, INPUT_IDS, LAST_HIDDEN_STATE, PROBABILITIES, VALUES,
};
use corrflow_algorithms::SequenceLayout;
use corrflow_io::error::{Error, Result};
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
    /// Selects the cell embeddings and a cell classifier's probabilities.
    classified_options: RunOptions<ort::session::HasSelectedOutputs>,
    pub path: PathBuf,
    pub meta: ModelMeta,
    pub vocab: Vocabulary,
    /// The libonnxruntime.so in use.
    pub library: PathBuf,
}

/// The error of an ort call; the message is only formatted when the call failed (embed runs
/// once per batch).
fn ort_err<'a>(path: &'a Path, what: &'a str) -> impl FnOnce(ort::Error) -> Error + 'a {
    move |e| Error::backend(super::BACKEND, format!("{}: {what}: {e}", path.display()))
}

impl OrtEncoder {
    /// Opens an exported model: checked against the checksum its sidecar records
    /// ([`read_exported`]), and the session built from the very bytes that were checked.
    pub fn open(path: &Path, opts: &RuntimeOptions) -> Result<Self> {
        let (exported, bytes) = read_exported(path)?;
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
        let session = builder.commit_from_memory(&bytes).map_err(ort_err(path, "loading the model"))?;
        drop(bytes);
        let run_options = RunOptions::new()
            .map_err(ort_err(path, "run options"))?
            .with_outputs(OutputSelector::no_default().with(CELL_EMBEDDING));
        let states_options = RunOptions::new()
            .map_err(ort_err(path, "run options"))?
            .with_outputs(OutputSelector::no_default().with(LAST_HIDDEN_STATE));
        let mut both = OutputSelector::no_default().with(CELL_EMBEDDING);
        if !exported.meta.model.cell_classes().is_empty() {
            both = both.with(PROBABILITIES);
        }
        let classified_options = RunOptions::new().map_err(ort_err(path, "run options"))?.with_outputs(both);
        Ok(Self {
            session,
            run_options,
            states_options,
            classified_options,
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
        let hidden = self.meta.model.hidden;
        Ok(self.run(batch, Selection::Embeddings, &[(CELL_EMBEDDING, &[batch.rows, hidden])])?.remove(0))
    }

    /// Final token states of a batch, row-major `[rows, len, hidden]`.
    pub fn states(&mut self, batch: &PaddedBatch) -> Result<Vec<f32>> {
        let want = [batch.rows, batch.len, self.meta.model.hidden];
        Ok(self.run(batch, Selection::States, &[(LAST_HIDDEN_STATE, &want)])?.remove(0))
    }

    /// Cell embeddings and the cell classifier's probabilities in one run, each row the
    /// embedding followed by the probabilities.
    pub fn embed_classified(&mut self, batch: &PaddedBatch) -> Result<Vec<f32>> {
        let (hidden, classes) = (self.meta.model.hidden, self.classes().len());
        if classes == 0 {
            return self.embed(batch);
        }
        let outs = self.run(
            batch,
            Selection::Classified,
            &[(CELL_EMBEDDING, &[batch.rows, hidden]), (PROBABILITIES, &[batch.rows, classes])],
        )?;
        let mut rows = Vec::with_capacity(batch.rows * (hidden + classes));
        for r in 0..batch.rows {
            rows.extend_from_slice(&outs[0][r * hidden..(r + 1) * hidden]);
            rows.extend_from_slice(&outs[1][r * classes..(r + 1) * classes]);
        }
        Ok(rows)
    }

    /// The outputs `wanted` (name and expected shape) of a batch.
    fn run(&mut self, batch: &PaddedBatch, selection: Selection, wanted: &[(&str, &[usize])]) -> Result<Vec<Vec<f32>>> {
        let shape = [batch.rows, batch.len];
        let ids = TensorRef::from_array_view((shape, batch.input_ids.as_slice()))
            .map_err(ort_err(&self.path, "input_ids"))?;
        let mask = TensorRef::from_array_view((shape, batch.attention_mask.as_slice()))
            .map_err(ort_err(&self.path, "attention_mask"))?;
        let options = match selection {
            Selection::Embeddings => &self.run_options,
            Selection::States => &self.states_options,
            Selection::Classified => &self.classified_options,
        };
        let outputs = if self.meta.model.input.sees_values() {
            if batch.values.len() != batch.input_ids.len() {
                return Err(Error::Usage(format!(
                    "{}: a value model runs on tokens with their values; this batch has none",
                    self.path.display()
                )));
            }
            let values =
                TensorRef::from_array_view((shape, batch.values.as_slice())).map_err(ort_err(&self.path, "values"))?;
            self.session
                .run_with_options(ort::inputs![INPUT_IDS => ids, VALUES => values, ATTENTION_MASK => mask], options)
        } else {
            self.session.run_with_options(ort::inputs![INPUT_IDS => ids, ATTENTION_MASK => mask], options)
        }
        .map_err(ort_err(&self.path, "running the model"))?;
        let mut out = Vec::with_capacity(wanted.len());
        for &(name, want) in wanted {
            let value = outputs
                .get(name)
                .ok_or_else(|| Error::backend(super::BACKEND, format!("{}: no {name} output", self.path.display())))?;
            let (dims, data) = value.try_extract_tensor::<f32>().map_err(ort_err(&self.path, name))?;
            if !dims.iter().map(|&d| d as usize).eq(want.iter().copied()) {
                return Err(Error::backend(
                    super::BACKEND,
                    format!("{}: {name} has shape {dims:?}, expected {want:?}", self.path.display()),
                ));
            }
            out.push(data.to_vec());
        }
        Ok(out)
    }
}

/// Which outputs a run fetches.
#[derive(Clone, Copy)]
enum Selection {
    Embeddings,
    States,
    Classified,
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

    fn classes(&self) -> &[String] {
        self.meta.model.cell_classes()
    }

    fn config(&self) -> Option<&crate::model_meta::ModelConfig> {
        Some(&self.meta.model)
    }

    fn encode_with_probabilities(&mut self, batch: &PaddedBatch) -> Result<Vec<f32>> {
        self.embed_classified(batch)
    }
}
