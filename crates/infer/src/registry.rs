//! Which backend opens a model: one [`Backend`] per kind of [`ModelSource`]. ONNX Runtime is
//! built in; the burn backend lives in `corrflow-model` (which depends on this crate for the
//! model metadata), so the binary registers it with [`register_backend`] at start. A new
//! backend is one file implementing [`Backend`] and [`Encoder`] plus that registration line.

use std::path::{Path, PathBuf};
use std::sync::RwLock;

use corrflow_io::error::{Error, Result};

use crate::encode::Encoder;
use crate::model_meta::{open_exported, ModelConfig, Pooling};
use crate::onnxruntime::{OrtEncoder, RuntimeOptions};

/// Which model computes the embeddings.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelSource {
    /// A training checkpoint (or run directory), run by burn on the CPU.
    Checkpoint(PathBuf),
    /// A model written by `export onnx`, run by ONNX Runtime.
    Onnx(PathBuf),
}

impl ModelSource {
    pub fn path(&self) -> &Path {
        match self {
            Self::Checkpoint(p) | Self::Onnx(p) => p,
        }
    }

    /// The flag that names this kind of source on the command line.
    pub fn flag(&self) -> &'static str {
        match self {
            Self::Checkpoint(_) => "--checkpoint",
            Self::Onnx(_) => "--model",
        }
    }
}

/// How a model is opened for inference.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// Checkpoints: mean (default) or cls. Exported models pool as exported; a different
    /// request is an error.
    pub pooling: Option<Pooling>,
    /// Encoder layer whose states are pooled (counted from 1; 0 = the embeddings); negative
    /// counts from the end (−1 = the last layer). Exported models: their own layer only.
    pub layer: i64,
    pub runtime: RuntimeOptions,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self { pooling: None, layer: -1, runtime: RuntimeOptions::default() }
    }
}

/// One kind of model source and how to run it.
pub trait Backend: Sync {
    /// Short name (`burn`, `onnxruntime`).
    fn name(&self) -> &'static str;
    /// Whether it opens this source.
    fn opens(&self, source: &ModelSource) -> bool;
    /// The model's configuration and the resolved path, without loading its weights.
    fn config(&self, source: &ModelSource) -> Result<(ModelConfig, PathBuf)>;
    fn open(&self, source: &ModelSource, opts: &OpenOptions) -> Result<Box<dyn Encoder>>;
}

/// ONNX Runtime: files written by `export onnx`.
pub struct OnnxRuntime;

impl Backend for OnnxRuntime {
    fn name(&self) -> &'static str {
        "onnxruntime"
    }

    fn opens(&self, source: &ModelSource) -> bool {
        matches!(source, ModelSource::Onnx(_))
    }

    fn config(&self, source: &ModelSource) -> Result<(ModelConfig, PathBuf)> {
        Ok((open_exported(source.path())?.meta.model, source.path().to_path_buf()))
    }

    fn open(&self, source: &ModelSource, opts: &OpenOptions) -> Result<Box<dyn Encoder>> {
        Ok(Box::new(open_onnx(source.path(), opts)?))
    }
}

/// An exported model: it pools as exported and gives its last layer's states.
fn open_onnx(path: &Path, opts: &OpenOptions) -> Result<OrtEncoder> {
    let encoder = OrtEncoder::open(path, &opts.runtime)?;
    let meta = &encoder.meta;
    if opts.pooling.is_some_and(|p| p != meta.pooling) {
        return Err(Error::Usage(format!(
            "{} pools {:?}; re-export it with --pooling to change that",
            path.display(),
            meta.pooling
        )));
    }
    if opts.layer != -1 && opts.layer != meta.model.layers as i64 {
        return Err(Error::Usage(
            "--layer applies to checkpoints; an exported model gives the states of the layer it was exported at \
             (re-export it with `corrflow export onnx --layer N` or `--emb-layer N`)"
                .into(),
        ));
    }
    Ok(encoder)
}

static BUILTIN: [&dyn Backend; 1] = [&OnnxRuntime];
static REGISTERED: RwLock<Vec<&'static dyn Backend>> = RwLock::new(Vec::new());

/// Adds a backend; registered backends are asked before the built-in ones. Registering the
/// same backend twice has no effect.
pub fn register_backend(backend: &'static dyn Backend) {
    let mut list = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    if !list.iter().any(|b| b.name() == backend.name()) {
        list.push(backend);
    }
}

/// The backend that opens `source`.
pub fn backend_for(source: &ModelSource) -> Result<&'static dyn Backend> {
    let registered = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
    registered.iter().copied().chain(BUILTIN.iter().copied()).find(|b| b.opens(source)).ok_or_else(|| {
        Error::Usage(format!(
            "{} {}: no backend here runs this kind of model (checkpoints need the corrflow command, which runs \
             burn; export one with `corrflow export onnx` to run it with ONNX Runtime)",
            source.flag(),
            source.path().display()
        ))
    })
}

/// Opens the encoder a request names.
pub fn open_encoder(source: &ModelSource, opts: &OpenOptions) -> Result<Box<dyn Encoder>> {
    backend_for(source)?.open(source, opts)
}

/// The configuration of the model a request names, without loading its weights.
pub fn model_config(source: &ModelSource) -> Result<(ModelConfig, PathBuf)> {
    backend_for(source)?.config(source)
}
