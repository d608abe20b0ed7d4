//! Embedding backends behind one trait: a model that turns padded token batches into cell
//! vectors. `corrflow-model` implements it with burn (checkpoints), this crate with ONNX
//! Runtime (exported models); `embed` and the server's batcher are written against the trait
//! only, so a new backend is one file implementing [`Encoder`] plus its registration where
//! models are opened (`corrflow_infer::registry`).

mod batch;

pub use batch::{encode_in_batches, plan_batches, PaddedBatch};

/// Cells as a model takes them: each cell's tokens and, for a value model, the value of each
/// token (`None` for rank models).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelCells {
    pub tokens: Vec<Vec<u32>>,
    pub values: Option<Vec<Vec<f32>>>,
}

impl ModelCells {
    /// Rank-value cells (tokens only).
    pub fn ranks(tokens: Vec<Vec<u32>>) -> Self {
        Self { tokens, values: None }
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

/// How cells are grouped into model batches: at most `token_budget` padded tokens (rows ×
/// longest cell) and `max_rows` cells per batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batching {
    pub token_budget: usize,
    pub max_rows: usize,
}

/// What a run of the model gives per cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// The cell vector (`dim` values).
    Embedding,
    /// The cell vector followed by the cell classifier's probabilities (`dim + classes`; only
    /// the vector for a model without a classifier).
    WithProbabilities,
}

use corrflow_algorithms::SequenceLayout;

use corrflow_io::error::Result;
use corrflow_io::vocab::Vocabulary;

/// A model that turns padded token batches into cell vectors.
pub trait Encoder: Send {
    /// Short name of the backend (`burn`, `onnxruntime`), reported in summaries.
    fn name(&self) -> &'static str;
    fn vocab(&self) -> &Vocabulary;
    /// How input cells are tokenized for it (cut to the length it was trained on).
    fn layout(&self) -> SequenceLayout;
    /// Length of a cell vector.
    fn dim(&self) -> usize;
    /// The encoder layer whose states are pooled.
    fn layer(&self) -> usize;
    /// Row-major `[rows, dim]` cell vectors of a batch.
    fn encode(&mut self, batch: &PaddedBatch) -> Result<Vec<f32>>;

    /// Row-major `[rows, len, dim]` token states of a batch (the layer cells are pooled from),
    /// for gene embeddings; a backend without them says so.
    fn token_states(&mut self, _batch: &PaddedBatch) -> Result<Vec<f32>> {
        Err(corrflow_io::Error::Usage(format!("the {} backend gives no token states", self.name())))
    }

    /// Class names of the model's cell head: a fine-tuned classifier's classes or a
    /// hierarchical head's leaves (empty: it has none).
    fn classes(&self) -> &[String] {
        &[]
    }

    /// The model's configuration, where the backend knows it (for memory estimates).
    fn config(&self) -> Option<&crate::model_meta::ModelConfig> {
        None
    }

    /// Row-major `[rows, dim + classes]`: each cell's vector followed by its class
    /// probabilities (only the vectors for a model without a cell classifier).
    fn encode_with_probabilities(&mut self, batch: &PaddedBatch) -> Result<Vec<f32>> {
        self.encode(batch)
    }
}

/// Refuses batches of `token_budget` padded tokens that `encoder`'s model could not run in the
/// memory available (the estimate of `model_meta::memory`), before any work.
pub fn check_batch_memory(encoder: &dyn Encoder, token_budget: usize) -> Result<()> {
    let Some(m) = encoder.config() else { return Ok(()) };
    let layout = encoder.layout();
    let max_len = layout.max_genes + usize::from(layout.cls.is_some()) + usize::from(layout.eos.is_some());
    crate::model_meta::memory::check_inference(m, encoder.vocab().len(), token_budget, max_len)
}

/// The rows of tokenized `cells`, in their order, encoded in length-sorted batches under
/// `batching`: `dim` values per cell, or `dim + classes` with [`Output::WithProbabilities`].
/// `on_batch` hears each batch's row count (progress). The one loop that `embed`, `annotate`,
/// `eval cells` and the Python package run a model with; a cell's row does not depend on the
/// batch it was in.
pub fn encode_cells(
    encoder: &mut dyn Encoder,
    cells: &ModelCells,
    batching: Batching,
    output: Output,
    mut on_batch: impl FnMut(usize),
) -> Result<Vec<f32>> {
    let width = match output {
        Output::Embedding => encoder.dim(),
        Output::WithProbabilities => encoder.dim() + encoder.classes().len(),
    };
    let pad = encoder.vocab().pad;
    let budget = (batching.token_budget, batching.max_rows);
    encode_in_batches(&cells.tokens, cells.values.as_deref(), pad, width, budget, |batch| {
        let rows = match output {
            Output::Embedding => encoder.encode(batch),
            Output::WithProbabilities => encoder.encode_with_probabilities(batch),
        };
        on_batch(batch.rows);
        rows
    })
}

/// Rows of [`Encoder::encode_with_probabilities`] (`dim + classes` values each) as the cell
/// vectors `[rows, dim]` and the class probabilities `[rows, classes]` (empty without classes).
pub fn split_probabilities(rows: Vec<f32>, dim: usize, classes: usize) -> (Vec<f32>, Vec<f32>) {
    if classes == 0 {
        return (rows, Vec::new());
    }
    let n = rows.len() / (dim + classes);
    let (mut vectors, mut probs) = (Vec::with_capacity(n * dim), Vec::with_capacity(n * classes));
    for row in rows.chunks(dim + classes) {
        vectors.extend_from_slice(&row[..dim]);
        probs.extend_from_slice(&row[dim..]);
    }
    (vectors, probs)
}

impl<E: Encoder + ?Sized> Encoder for Box<E> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn vocab(&self) -> &Vocabulary {
        (**self).vocab()
    }
    fn layout(&self) -> SequenceLayout {
        (**self).layout()
    }
    fn dim(&self) -> usize {
        (**self).dim()
    }
    fn layer(&self) -> usize {
        (**self).layer()
    }
    fn encode(&mut self, batch: &PaddedBatch) -> Result<Vec<f32>> {
        (**self).encode(batch)
    }
    fn token_states(&mut self, batch: &PaddedBatch) -> Result<Vec<f32>> {
        (**self).token_states(batch)
    }
    fn classes(&self) -> &[String] {
        (**self).classes()
    }
    fn config(&self) -> Option<&crate::model_meta::ModelConfig> {
        (**self).config()
    }
    fn encode_with_probabilities(&mut self, batch: &PaddedBatch) -> Result<Vec<f32>> {
        (**self).encode_with_probabilities(batch)
    }
}
