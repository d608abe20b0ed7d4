//! `corrflow.MaskedBatches`: the trainer's masked batches for a PyTorch (or any) training loop,
//! from the same data plan and masking dataflow as `corrflow train`, sharded for data-parallel
//! ranks.

use std::path::PathBuf;
use std::sync::Arc;

use corrflow_algorithms::batches::TrainingBatch;
use corrflow_algorithms::mask::{MaskParams, MaskStrategy};
use corrflow_io::corpus::Corpus;
use corrflow_mask::fixed::FixedGraphBatches;
use corrflow_mask::plan::DataPlan;
use corrflow_mask::MaskContext;
use numpy::{PyArray1, PyArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::py_err;

/// Rows yielded between two trims of the heap (a trim costs milliseconds: every 384 rows it
/// halved the loader's speed).
const TRIM_ROWS: usize = 16_384;

/// Returns the free memory of glibc's arenas to the system. Batches are allocated on the masking
/// threads and freed by NumPy on the consumer's, in sizes that vary with each length group;
/// glibc then keeps more and more freed memory (and raises its mmap threshold after the first
/// large frees), so without trims the loader's RSS crept up over an epoch and with the corpus
/// (BENCHMARKS.md, "Python loader memory").
fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim is thread-safe and frees nothing in use.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// An iterator over one epoch's masked batches (of one rank's shard) as dicts of NumPy arrays:
/// `input_ids`, `attention_mask`, `labels` (int64, `[rows, len]`; labels −100 where nothing is
/// predicted) and `cell_index` (int64: the cells' corpus keys).
#[pyclass(module = "corrflow._native")]
pub(crate) struct MaskedBatches {
    inner: Option<FixedGraphBatches>,
    len: usize,
    yielded: usize,
    untrimmed_rows: usize,
}

#[pymethods]
impl MaskedBatches {
    #[new]
    #[pyo3(signature = (corpus, graph=None, strategy="corrmask", batch_size=12, max_len=2048, epoch=0, seed=0, rank=0, world_size=1, group_batches=50, shuffle_buffer=10_000, eval_fraction=0.05, num_threads=None, atlases=Vec::new(), mask_params="{}", start=0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        corpus: PathBuf,
        graph: Option<PathBuf>,
        strategy: &str,
        batch_size: usize,
        max_len: usize,
        epoch: u64,
        seed: u64,
        rank: usize,
        world_size: usize,
        group_batches: usize,
        shuffle_buffer: usize,
        eval_fraction: f64,
        num_threads: Option<usize>,
        atlases: Vec<String>,
        mask_params: &str,
        start: u64,
    ) -> PyResult<Self> {
        if world_size == 0 || rank >= world_size {
            return Err(PyValueError::new_err(format!("rank {rank} is not one of world_size {world_size} ranks")));
        }
        if batch_size == 0 || group_batches == 0 || max_len == 0 {
            return Err(PyValueError::new_err("batch_size, group_batches and max_len must be at least 1"));
        }
        if !(0.0..1.0).contains(&eval_fraction) {
            return Err(PyValueError::new_err(format!("eval_fraction must be in [0, 1), got {eval_fraction}")));
        }
        let strategy = MaskStrategy::parse(strategy).ok_or_else(|| {
            PyValueError::new_err(format!("unknown masking strategy '{strategy}' (known: {})", MaskStrategy::names()))
        })?;
        let defaults = MaskParams { strategy, seed, ..MaskParams::default() };
        let params = crate::graph::with_overrides(defaults, mask_params, "mask parameters")?;
        let workers = num_threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let (ctx, plan) = py
            .detach(|| {
                open(&corpus, graph.as_ref(), &atlases, params, |index, vocab_size, layout| DataPlan {
                    index,
                    vocab_size,
                    layout,
                    batch_size,
                    group_batches,
                    shuffle_buffer,
                    epochs: epoch as usize + 1,
                    max_len,
                    eval_fraction,
                    seed,
                    subset: None,
                    expression: None,
                })
            })
            .map_err(py_err)?;
        let per_epoch = plan.batches_per_epoch() as usize;
        // `start`: a run resumed mid-epoch skips the batches before it unmasked.
        let len = per_epoch.div_ceil(world_size).saturating_sub(start as usize);
        // Queued batches are memory; 8 keep a Python consumer as fast as 32 and 64 did (BENCHMARKS.md).
        let inner =
            FixedGraphBatches::spawn(Arc::new(ctx), plan.shard_feed(epoch, rank, world_size, start), workers, 8);
        Ok(Self { inner: Some(inner), len, yielded: 0, untrimmed_rows: 0 })
    }

    /// Batches this rank gets in the epoch (the same on every rank).
    fn __len__(&self) -> usize {
        self.len
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(inner) = self.inner.as_mut() else { return Ok(None) };
        let trim = self.untrimmed_rows >= TRIM_ROWS;
        if trim {
            self.untrimmed_rows = 0;
        }
        let next = py.detach(|| {
            if trim {
                trim_heap();
            }
            inner.next().map(|b| b.map(Columns::of))
        });
        py.check_signals()?;
        match next {
            None => {
                self.inner = None;
                Ok(None)
            }
            Some(Err(e)) => {
                self.inner = None;
                Err(py_err(e))
            }
            Some(Ok(c)) => {
                self.yielded += 1;
                self.untrimmed_rows += c.rows;
                Ok(Some(c.into_dict(py)?))
            }
        }
    }

    /// Drains the iterator in Rust (no NumPy conversion) and returns the cells; for benchmarks.
    fn _drain(&mut self, py: Python<'_>) -> PyResult<usize> {
        let Some(inner) = self.inner.take() else { return Ok(0) };
        py.detach(|| inner.map(|b| b.map(|b| b.rows)).sum::<corrflow_io::Result<usize>>()).map_err(py_err)
    }

    /// Stops the masking threads (iteration ends); dropping the iterator does the same.
    fn close(&mut self) {
        self.inner = None;
    }
}

/// The trainer's held-out evaluation set (`corrflow train`'s `eval_loss` / `eval_accuracy`): the
/// first `eval_cells` held-out cells (key order), masked once (a fixed evaluation epoch, so every
/// evaluation sees the same masks), sorted by length and padded into batches of `batch_size`; as
/// a list of dicts like `MaskedBatches`' batches.
#[pyfunction]
#[pyo3(signature = (corpus, graph=None, strategy="corrmask", batch_size=12, max_len=2048, seed=0, eval_fraction=0.05, eval_cells=512, atlases=Vec::new(), mask_params="{}"))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn held_out_batches<'py>(
    py: Python<'py>,
    corpus: PathBuf,
    graph: Option<PathBuf>,
    strategy: &str,
    batch_size: usize,
    max_len: usize,
    seed: u64,
    eval_fraction: f64,
    eval_cells: usize,
    atlases: Vec<String>,
    mask_params: &str,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    if batch_size == 0 || max_len == 0 {
        return Err(PyValueError::new_err("batch_size and max_len must be at least 1"));
    }
    if !(0.0..1.0).contains(&eval_fraction) {
        return Err(PyValueError::new_err(format!("eval_fraction must be in [0, 1), got {eval_fraction}")));
    }
    let strategy = MaskStrategy::parse(strategy).ok_or_else(|| {
        PyValueError::new_err(format!("unknown masking strategy '{strategy}' (known: {})", MaskStrategy::names()))
    })?;
    let defaults = MaskParams { strategy, seed, ..MaskParams::default() };
    let params = crate::graph::with_overrides(defaults, mask_params, "mask parameters")?;
    let columns = py
        .detach(|| {
            let (ctx, plan) = open(&corpus, graph.as_ref(), &atlases, params, |index, vocab_size, layout| DataPlan {
                index,
                vocab_size,
                layout,
                batch_size,
                group_batches: 1,
                shuffle_buffer: 1,
                epochs: 1,
                max_len,
                eval_fraction,
                seed,
                subset: None,
                expression: None,
            })?;
            let cells = plan.eval_set(eval_cells)?;
            let batches = corrflow_mask::held_out_batches(&ctx, &cells, batch_size);
            Ok::<_, corrflow_io::Error>(batches.into_iter().map(Columns::of).collect::<Vec<_>>())
        })
        .map_err(py_err)?;
    columns.into_iter().map(|c| c.into_dict(py)).collect()
}

/// A batch's arrays in the layout `transformers` takes, built without the GIL.
struct Columns {
    rows: usize,
    len: usize,
    input_ids: Vec<i64>,
    attention_mask: Vec<i64>,
    labels: Vec<i64>,
    cell_index: Vec<i64>,
}

impl Columns {
    fn of(b: TrainingBatch) -> Self {
        Self {
            rows: b.rows,
            len: b.len,
            input_ids: b.input_ids.iter().map(|&t| i64::from(t)).collect(),
            attention_mask: b.attention_mask.iter().map(|&m| i64::from(m)).collect(),
            labels: b.labels,
            cell_index: b.cell_keys.iter().map(|&k| k as i64).collect(),
        }
    }

    fn into_dict(self, py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
        let shape = [self.rows, self.len];
        let d = PyDict::new(py);
        d.set_item("input_ids", PyArray1::from_vec(py, self.input_ids).reshape(shape)?)?;
        d.set_item("attention_mask", PyArray1::from_vec(py, self.attention_mask).reshape(shape)?)?;
        d.set_item("labels", PyArray1::from_vec(py, self.labels).reshape(shape)?)?;
        d.set_item("cell_index", PyArray1::from_vec(py, self.cell_index))?;
        Ok(d)
    }
}

/// The masking context and data plan of a corpus (and graph), as the trainer opens them.
fn open(
    corpus: &std::path::Path,
    graph: Option<&PathBuf>,
    atlases: &[String],
    params: MaskParams,
    plan: impl FnOnce(corrflow_io::corpus::CorpusIndex, usize, corrflow_algorithms::SequenceLayout) -> DataPlan,
) -> corrflow_io::Result<(MaskContext, DataPlan)> {
    let opened = Corpus::open(corpus)?;
    let index = opened.index(atlases)?;
    let strategy = params.strategy;
    let g = match graph {
        Some(dir) => Some(corrflow_io::graph_files::read_graph(dir)?),
        None if strategy.needs_graph() && strategy.get().structural_share(&params) > 0.0 => {
            return Err(corrflow_io::Error::Usage(format!(
                "masking strategy '{strategy}' needs a dependency graph: pass graph="
            )))
        }
        None => None,
    };
    let dir = graph.cloned().unwrap_or_default();
    let ctx = MaskContext::load(&opened.info, &opened.vocab, &index, g.as_ref(), &dir, params, false)?;
    let plan = plan(index, opened.vocab.len(), opened.info.layout);
    Ok((ctx, plan))
}
