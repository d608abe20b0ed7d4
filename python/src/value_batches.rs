//! `corrflow.ValueBatches`: a value model's training batches (DESIGN.md §11) for a PyTorch loop:
//! the same data plan, hidden/visible choice and decoding targets as `corrflow train` builds for
//! `txfm` / `wced` (`corrflow_mask::values`), sharded for data-parallel ranks.

use std::path::PathBuf;
use std::sync::Arc;

use corrflow_algorithms::mask::{MaskParams, MaskStrategy};
use corrflow_infer::model_meta::VisiblePool;
use corrflow_io::corpus::Corpus;
use corrflow_mask::dataflow::Feed;
use corrflow_mask::plan::{DataPlan, ExpressionCell};
use corrflow_mask::values::{atlas_measured, decoding_set, BatchMaker, CellAtlases, ValueBatch, VisibleFrom};
use corrflow_mask::MaskContext;
use numpy::{PyArray1, PyArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::py_err;

/// Batches built ahead of the consumer.
const AHEAD: usize = 4;

/// An iterator over one epoch's value batches (of one rank's shard) as dicts of NumPy arrays:
/// `input_ids` (int64), `values` (float32), `attention_mask` (int64) `[rows, len]` (`<cls>` first);
/// `counts`, `measured` (float32 `[rows, genes]` over the decoding set) and `totals` (float32
/// `[rows]`). `decode_genes` (the decoding set's token ids) and `cls` are attributes.
#[pyclass(module = "corrflow._native")]
pub(crate) struct ValueBatches {
    rx: Option<crossbeam_channel::Receiver<corrflow_io::Result<ValueBatch>>>,
    #[pyo3(get)]
    decode_genes: Vec<u32>,
    #[pyo3(get)]
    cls: u32,
    len: usize,
}

#[pymethods]
impl ValueBatches {
    #[new]
    #[pyo3(signature = (corpus, graph=None, strategy="random", batch_size=12, epoch=0, seed=0, rank=0, world_size=1, visible_genes=256, mask_p=0.9, mask_lambda=0.5, decode="hvg:1024", visible="measured", target_sum=1e5, group_batches=50, shuffle_buffer=10_000, eval_fraction=0.05, atlases=Vec::new(), start=0, mask_params="{}"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        corpus: PathBuf,
        graph: Option<PathBuf>,
        strategy: &str,
        batch_size: usize,
        epoch: u64,
        seed: u64,
        rank: usize,
        world_size: usize,
        visible_genes: usize,
        mask_p: f64,
        mask_lambda: f64,
        decode: &str,
        visible: &str,
        target_sum: f64,
        group_batches: usize,
        shuffle_buffer: usize,
        eval_fraction: f64,
        atlases: Vec<String>,
        start: u64,
        mask_params: &str,
    ) -> PyResult<Self> {
        if world_size == 0 || rank >= world_size {
            return Err(PyValueError::new_err(format!("rank {rank} is not one of world_size {world_size} ranks")));
        }
        let spec = ValueSpec {
            corpus,
            graph,
            strategy,
            batch_size,
            group_batches,
            shuffle_buffer,
            epochs: epoch as usize + 1,
            seed,
            mask_p,
            mask_lambda,
            decode,
            visible,
            target_sum,
            eval_fraction,
            atlases,
            mask_params,
        };
        let data = spec.open(py)?;
        let len = (data.plan.batches_per_epoch() as usize).div_ceil(world_size).saturating_sub(start as usize);
        let feed = data.plan.clone().shard_feed(epoch, rank, world_size, start);
        let (decode_genes, cls) = (data.decode.clone(), data.cls);
        let (tx, rx) = crossbeam_channel::bounded(AHEAD);
        std::thread::spawn(move || {
            let maker = data.maker(visible_genes);
            let read = feed(&mut |item| match item {
                Feed::Batch(b) => {
                    let cells: Option<Vec<(u64, ExpressionCell)>> =
                        b.cells.iter().map(|(k, p)| ExpressionCell::unpack(p).map(|c| (*k, c))).collect();
                    let batch = cells.map(|c| maker.build(b.epoch, &c)).ok_or_else(|| {
                        corrflow_io::Error::internal("ValueBatches", "a planned cell without its expression")
                    });
                    tx.send(batch).is_ok()
                }
                Feed::Graph(_) => true,
            });
            if let Err(e) = read {
                let _ = tx.send(Err(e));
            }
        });
        Ok(Self { rx: Some(rx), decode_genes, cls, len })
    }

    fn __len__(&self) -> usize {
        self.len
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(rx) = self.rx.as_ref() else { return Ok(None) };
        let next = py.detach(|| rx.recv().ok());
        py.check_signals()?;
        match next {
            None => {
                self.rx = None;
                Ok(None)
            }
            Some(Err(e)) => {
                self.rx = None;
                Err(py_err(e))
            }
            Some(Ok(b)) => Ok(Some(batch_dict(py, b)?)),
        }
    }

    /// Stops the reader (iteration ends); dropping the iterator does the same.
    fn close(&mut self) {
        self.rx = None;
    }
}

/// `corrflow train`'s held-out evaluation set of a value model (its `eval_loss`): the first
/// `eval_cells` held-out cells (key order), their visible genes drawn once for a fixed evaluation
/// epoch (so every evaluation sees the same inputs), in batches of `batch_size`; as a list of
/// dicts like `ValueBatches`' batches.
#[pyfunction]
#[pyo3(signature = (corpus, graph=None, strategy="random", batch_size=12, seed=0, visible_genes=256, mask_p=0.9, mask_lambda=0.5, decode="hvg:1024", visible="measured", target_sum=1e5, eval_fraction=0.05, eval_cells=512, atlases=Vec::new(), mask_params="{}"))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn held_out_value_batches<'py>(
    py: Python<'py>,
    corpus: PathBuf,
    graph: Option<PathBuf>,
    strategy: &str,
    batch_size: usize,
    seed: u64,
    visible_genes: usize,
    mask_p: f64,
    mask_lambda: f64,
    decode: &str,
    visible: &str,
    target_sum: f64,
    eval_fraction: f64,
    eval_cells: usize,
    atlases: Vec<String>,
    mask_params: &str,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let spec = ValueSpec {
        corpus,
        graph,
        strategy,
        batch_size,
        group_batches: 1,
        shuffle_buffer: 1,
        epochs: 1,
        seed,
        mask_p,
        mask_lambda,
        decode,
        visible,
        target_sum,
        eval_fraction,
        atlases,
        mask_params,
    };
    let data = spec.open(py)?;
    let batches = py
        .detach(|| -> corrflow_io::Result<Vec<ValueBatch>> {
            let maker = data.maker(visible_genes);
            let cells = data.plan.eval_expression_set(eval_cells, &data.is_gene)?;
            // The trainer's evaluation epoch (crates/train/src/values).
            Ok(cells.chunks(batch_size).map(|c| maker.build(u64::MAX, c)).collect())
        })
        .map_err(py_err)?;
    batches.into_iter().map(|b| batch_dict(py, b)).collect()
}

/// What a value model's batches are made from, as the Python calls give it.
struct ValueSpec<'a> {
    corpus: PathBuf,
    graph: Option<PathBuf>,
    strategy: &'a str,
    batch_size: usize,
    group_batches: usize,
    shuffle_buffer: usize,
    epochs: usize,
    seed: u64,
    mask_p: f64,
    mask_lambda: f64,
    decode: &'a str,
    visible: &'a str,
    target_sum: f64,
    eval_fraction: f64,
    atlases: Vec<String>,
    /// JSON overrides of the masking parameters (`[mask]` less its strategy: its seed, `k_max`,
    /// ...), applied over `seed`, `mask_p` and `mask_lambda`.
    mask_params: &'a str,
}

/// The corpus opened for value batches: the data plan, the decoding set, the atlases' measured
/// genes and the hidden/visible choice, as `corrflow train` resolves them
/// (`crates/train/src/values/setup.rs`).
struct ValueData {
    plan: DataPlan,
    decode: Vec<u32>,
    atlases: CellAtlases,
    ctx: MaskContext,
    cls: u32,
    pad: u32,
    target_sum: f64,
    is_gene: Arc<Vec<bool>>,
}

impl ValueData {
    fn maker(&self, visible_genes: usize) -> BatchMaker<'_> {
        BatchMaker {
            atlases: &self.atlases,
            target_sum: self.target_sum,
            decode_genes: self.decode.len(),
            ctx: &self.ctx,
            cls: self.cls,
            pad: self.pad,
            visible_genes,
            labels: None,
        }
    }
}

impl ValueSpec<'_> {
    /// Checks the arguments (errors name them) and opens the corpus without the GIL.
    fn open(self, py: Python<'_>) -> PyResult<ValueData> {
        if self.batch_size == 0 || self.group_batches == 0 {
            return Err(PyValueError::new_err("batch_size and group_batches must be at least 1"));
        }
        let target_sum = self.target_sum;
        if !(target_sum > 0.0 && target_sum.is_finite()) {
            return Err(PyValueError::new_err(format!("target_sum must be a finite number > 0, got {target_sum}")));
        }
        if !(0.0..1.0).contains(&self.eval_fraction) {
            return Err(PyValueError::new_err(format!("eval_fraction must be in [0, 1), got {}", self.eval_fraction)));
        }
        let pool = VisiblePool::parse(self.visible).ok_or_else(|| {
            PyValueError::new_err(format!("visible must be one of {:?}, got '{}'", VisiblePool::NAMES, self.visible))
        })?;
        let from = VisibleFrom { decoded_only: pool.decoded_only(), detected_only: pool.detected_only() };
        let strategy =
            MaskStrategy::parse(self.strategy).filter(|s| !matches!(s.name(), "pmi" | "pmi-rand")).ok_or_else(
                || PyValueError::new_err(format!("strategy must be 'random' or 'corrmask', got '{}'", self.strategy)),
            )?;
        let defaults =
            MaskParams { strategy, seed: self.seed, p: self.mask_p, lambda: self.mask_lambda, ..MaskParams::default() };
        let params = crate::graph::with_overrides(defaults, self.mask_params, "mask_params")?;
        params.validate().map_err(PyValueError::new_err)?;
        let mask_lambda = params.lambda;
        py.detach(|| -> corrflow_io::Result<_> {
            let c = Corpus::open(&self.corpus)?;
            let index = c.index(&self.atlases)?;
            let measured = atlas_measured(&self.corpus, &index)?;
            let vocab = if c.vocab.cls.is_some() { c.vocab.clone() } else { c.vocab.clone().with_v2_specials() };
            let is_gene: Arc<Vec<bool>> = Arc::new((0..vocab.len() as u32).map(|t| vocab.is_gene(t)).collect());
            let g = self.graph.as_ref().map(|dir| corrflow_io::graph_files::read_graph(dir)).transpose()?;
            if g.is_none() && strategy.needs_graph() && mask_lambda > 0.0 {
                return Err(corrflow_io::Error::Usage(format!(
                    "strategy '{strategy}' needs a dependency graph: pass graph="
                )));
            }
            let plan = DataPlan {
                index: index.clone(),
                vocab_size: c.vocab.len(),
                layout: c.info.layout,
                batch_size: self.batch_size,
                group_batches: self.group_batches,
                shuffle_buffer: self.shuffle_buffer,
                epochs: self.epochs,
                max_len: 0,
                eval_fraction: self.eval_fraction,
                seed: self.seed,
                subset: None,
                expression: Some(is_gene.clone()),
            };
            let decode = decoding_set(self.decode, &plan, &measured, g.as_ref(), &is_gene)?;
            let dir = self.graph.clone().unwrap_or_default();
            let ctx = MaskContext::load(&c.info, &c.vocab, &index, g.as_ref(), &dir, params, false)?;
            let atlases = CellAtlases::new(&index, measured, &decode, from);
            let (cls, pad) = (vocab.cls.unwrap_or_default(), vocab.pad);
            Ok(ValueData { plan, decode, atlases, ctx, cls, pad, target_sum, is_gene })
        })
        .map_err(py_err)
    }
}

fn batch_dict(py: Python<'_>, b: ValueBatch) -> PyResult<Bound<'_, PyDict>> {
    let (shape, targets) = ([b.rows, b.len], [b.rows, b.genes]);
    let d = PyDict::new(py);
    d.set_item("input_ids", PyArray1::from_vec(py, b.input_ids).reshape(shape)?)?;
    d.set_item("values", PyArray1::from_vec(py, b.values).reshape(shape)?)?;
    let mask: Vec<i64> = b.attention_mask.iter().map(|&m| i64::from(m)).collect();
    d.set_item("attention_mask", PyArray1::from_vec(py, mask).reshape(shape)?)?;
    d.set_item("counts", PyArray1::from_vec(py, b.counts).reshape(targets)?)?;
    d.set_item("measured", PyArray1::from_vec(py, b.measured).reshape(targets)?)?;
    d.set_item("totals", PyArray1::from_vec(py, b.totals))?;
    d.set_item("epoch", b.epoch)?;
    Ok(d)
}
