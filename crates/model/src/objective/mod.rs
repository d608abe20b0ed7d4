//! Pre-training objectives (docs/DESIGN.md §7.3) as one open extension point: an [`Objective`] owns
//! its head (which of the model's head slots it uses, and their width), the targets it needs
//! from a batch, and its loss and metrics. The trainer, the synthetic experiments and
//! checkpoint loading know objectives only through this trait.
//!
//! The corpus stores rank-value encoded cells, so the whole-cell targets are derived from ranks:
//! a gene is *detected* when it is among the cell's tokens, and its *expression* is its rank
//! score `s = L_max − position` (the quantity Geneformer's encoding preserves).
//!
//! Adding one: a file with the type and its `impl<B: Backend> Objective<B>`, plus its line in
//! [`builtin`].

mod hce;
mod mlm;
mod multitask;
mod poisson;
mod txfm;
mod wced_rank;
mod wced_values;

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor, TensorData};
use corrflow_algorithms::batches::TrainingBatch;
use corrflow_algorithms::mask::IGNORE_INDEX;
use corrflow_io::corpus::CellLabels;

use crate::encoder::CellEncoder;
use crate::fused::FusedOps;
pub use hce::Hce;
pub use mlm::Mlm;
pub use multitask::Multitask;
pub use poisson::Poisson;
pub use txfm::{txfm_loss, Txfm};
pub use wced_rank::WcedRank;
pub use wced_values::{wced_loss, Wced, WCED_TARGET_SUM};

/// The model's optional heads an objective asks for: widths given the vocabulary size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Heads {
    /// A two-layer MLP from the pooled cell embedding (whole-cell decoding): its output width.
    pub cell: Option<usize>,
    /// A two-layer MLP from the pooled embedding to per-cell label logits: the label count.
    pub label: Option<usize>,
    /// A value model's decoder from the CLS state: outputs per gene of the decoding set.
    pub decoder: Option<usize>,
}

/// A pre-training loss over masked batches.
pub trait Objective<B: FusedOps>: Send + Sync {
    /// The name in `model.objective` (configs, checkpoints, the CLI).
    fn name(&self) -> &'static str;

    /// The heads the model needs for this objective (the MLM head is always there).
    fn heads(&self, _vocab_size: usize) -> Heads {
        Heads::default()
    }

    /// Whether batches carry the whole-cell targets (`detected`, `score` over the vocabulary).
    fn whole_cell_targets(&self) -> bool {
        false
    }

    /// The obs column whose values are this objective's per-cell labels (read once by the
    /// trainer into a [`CellLabels`] table and handed to each batch as `BatchTensors::labels`).
    fn label_column(&self) -> Option<&str> {
        None
    }

    /// Whether the loss is over masked tokens, so that a batch without any teaches nothing
    /// (it is skipped) and evaluation weighs batches by masked tokens rather than cells.
    fn per_masked_token(&self) -> bool {
        false
    }

    /// The names a label code indexes, when the objective has a fixed label list (its head's
    /// terms): the trainer recodes the label column to them and refuses values outside it.
    fn label_names(&self) -> Option<Vec<String>> {
        None
    }

    /// Whether the objective trains a value model (batches of visible genes with their values,
    /// decoding targets over the decoding set) rather than a rank model on masked tokens.
    fn sees_values(&self) -> bool {
        false
    }

    /// The loss of a batch from the encoder's final token states `[rows, len, hidden]` (computed
    /// once, so objectives combined by [`Multitask`] share them), and, where the objective has
    /// one, the number of correct predictions (an accuracy's numerator).
    fn loss(
        &self,
        model: &CellEncoder<B>,
        states: &Tensor<B, 3>,
        t: &BatchTensors<B>,
        max_positions: usize,
    ) -> LossOutput<B>;
}

/// The built-in objectives. A new built-in objective is one line here.
pub fn builtin<B: FusedOps>() -> Vec<Box<dyn Objective<B>>> {
    vec![Box::new(Mlm), Box::new(Txfm), Box::new(Wced), Box::new(WcedRank), Box::new(Poisson)]
}

/// The objective named `name`.
pub fn objective<B: FusedOps>(name: &str) -> Option<Box<dyn Objective<B>>> {
    builtin::<B>().into_iter().find(|o| o.name() == name)
}

/// The known objective names, comma-separated (for error messages).
pub fn names() -> String {
    builtin::<crate::CpuBackend>().iter().map(|o| o.name()).collect::<Vec<_>>().join(", ")
}

/// The objective named `name`, or an error listing the known ones.
pub fn require<B: FusedOps>(name: &str) -> Result<Box<dyn Objective<B>>, String> {
    objective::<B>(name).ok_or_else(|| format!("model.objective '{name}' is unknown (known: {})", names()))
}

/// What trains a model of configuration `m`: `model.objective`, plus the hierarchical
/// cell-type loss when the model has a hierarchical head (`model.hce`).
pub fn for_model<B: FusedOps>(m: &crate::ModelConfig) -> Result<Box<dyn Objective<B>>, String> {
    // Models trained before WCED decoded values named its rank proxy `wced`.
    let name = if m.objective == "wced" && m.input.is_rank() { "wced-rank" } else { m.objective.as_str() };
    let base = require::<B>(name)?;
    if base.sees_values() != m.input.sees_values() {
        return Err(if base.sees_values() {
            format!(
                "model.objective '{}' decodes expression values: it needs model.input = 'value' or 'bins' and a \
                 [model.values] section (see configs/txfm-tiny.toml)",
                m.objective
            )
        } else {
            format!(
                "model.objective '{}' is a rank objective; a value model (model.input = '{:?}') needs txfm or wced",
                m.objective, m.input
            )
        });
    }
    match &m.hce {
        None => Ok(base),
        Some(head) => Ok(Box::new(Multitask::new(base, Hce::new(head)?, head.weight, head.warmup_steps))),
    }
}

/// A value model's parts, settings and batch (its objectives are only built for value models,
/// and the trainer gives them value batches: a missing one is a bug, not bad input).
fn value_parts<'a, B: Backend>(
    model: &'a CellEncoder<B>,
    t: &'a BatchTensors<B>,
) -> (&'a crate::value::ValueParts<B>, &'a corrflow_infer::model_meta::ValueModel, &'a ValueTensors<B>) {
    let parts = model.value.as_ref().expect("a value model has its decoder"); // ok: invariant
    let config = model.value_config.as_ref().expect("a value model has its settings"); // ok: invariant
    let v = t.value.as_ref().expect("value objectives get value batches"); // ok: invariant
    (parts, config, v)
}

/// The CLS token's final states `[rows, hidden]` (the first position of every row).
pub fn cls_states<B: Backend>(states: &Tensor<B, 3>) -> Tensor<B, 2> {
    let [rows, _, hidden] = states.dims();
    states.clone().narrow(1, 0, 1).reshape([rows, hidden])
}

/// The mean of `per_gene` `[rows, genes]` over each row's genes where `weights` is 1, then over
/// the rows.
fn masked_cell_mean<B: Backend>(per_gene: Tensor<B, 2>, weights: Tensor<B, 2>) -> Tensor<B, 1> {
    let per_cell = (per_gene * weights.clone()).sum_dim(1) / weights.sum_dim(1).clamp_min(1.0);
    per_cell.mean()
}

/// The loss of a batch and, for MLM, the number of masked tokens predicted correctly.
pub struct LossOutput<B: Backend> {
    pub loss: Tensor<B, 1>,
    pub correct: Option<Tensor<B, 1, Int>>,
    /// Named components of a combined loss (logged as `loss_<name>`, `eval_<name>`).
    pub parts: Vec<(&'static str, Tensor<B, 1>)>,
}

impl<B: Backend> LossOutput<B> {
    pub fn new(loss: Tensor<B, 1>, correct: Option<Tensor<B, 1, Int>>) -> Self {
        Self { loss, correct, parts: Vec::new() }
    }
}

/// A training batch as tensors.
#[derive(Clone, Debug)]
pub struct BatchTensors<B: Backend> {
    pub input_ids: Tensor<B, 2, Int>,
    pub pad: Tensor<B, 2, Bool>,
    /// 1 on gene positions (not specials, not padding).
    pub gene_weights: Tensor<B, 2>,
    /// Flattened `row * len + col` of the masked positions, and their original tokens.
    pub masked_index: Tensor<B, 1, Int>,
    pub targets: Tensor<B, 1, Int>,
    /// The same targets on the host (the fused decoder loss takes them as plain data).
    pub masked_targets: std::sync::Arc<Vec<u32>>,
    pub masked: usize,
    /// Whole-cell targets `[rows, vocab]` (WCED / Poisson only): detected, and rank score in (0, 1].
    pub detected: Option<Tensor<B, 2>>,
    pub score: Option<Tensor<B, 2>>,
    /// Each row's label code (`NO_LABEL` where the cell has none), when the objective has a
    /// label column; on the device and on the host.
    pub labels: Option<Tensor<B, 1, Int>>,
    pub label_codes: Option<std::sync::Arc<Vec<i64>>>,
    /// The optimiser step the batch is for (losses with a warm-up read it).
    pub step: u64,
    /// A value model's batch (DESIGN.md §11); `None` for rank models.
    pub value: Option<ValueTensors<B>>,
}

/// What a value model's batch adds: the encoder's token values and the decoding targets.
#[derive(Clone, Debug)]
pub struct ValueTensors<B: Backend> {
    /// Each token's value `[rows, len]` (0 on the CLS token and padding).
    pub values: Tensor<B, 2>,
    /// Each cell's raw count of every gene of the decoding set `[rows, genes]` (0 where it was
    /// not detected).
    pub counts: Tensor<B, 2>,
    /// Each cell's total count `[rows, 1]`.
    pub n_counts: Tensor<B, 2>,
    /// 1 where the cell's atlas measured the decoding gene, 0 where it did not: unmeasured genes
    /// are left out of the cell's loss, never taken as zero `[rows, genes]`.
    pub measured: Tensor<B, 2>,
}

impl<B: Backend> ValueTensors<B> {
    /// `ln(1 + c / n · L)` of every decoding gene `[rows, genes]`.
    pub fn log_normalized(&self, target_sum: f64) -> Tensor<B, 2> {
        (self.counts.clone() / self.n_counts.clone() * target_sum).log1p()
    }
}

/// What a batch's tensors hold beyond the tokens, as its objective asks.
#[derive(Clone, Copy, Debug, Default)]
pub struct Targets<'a> {
    /// The whole-cell targets (see [`Objective::whole_cell_targets`]).
    pub whole_cell: bool,
    /// Per-cell labels, looked up by the batch's cell keys.
    pub labels: Option<&'a CellLabels>,
    /// The optimiser step (see [`BatchTensors::step`]).
    pub step: u64,
}

/// Builds the tensors of a batch. `is_special[t]` marks special tokens.
pub fn batch_tensors<B: Backend>(
    b: &TrainingBatch,
    is_special: &[bool],
    vocab: usize,
    wanted: Targets<'_>,
    max_positions: usize,
    device: &B::Device,
) -> BatchTensors<B> {
    let (rows, len) = (b.rows, b.len);
    let ids: Vec<i64> = b.input_ids.iter().map(|&t| i64::from(t)).collect();
    let pad: Vec<bool> = b.attention_mask.iter().map(|&m| m == 0).collect();
    let mut weights = vec![0f32; rows * len];
    let (mut index, mut targets) = (Vec::new(), Vec::new());
    let whole = wanted.whole_cell;
    let (mut detected, mut score) =
        if whole { (vec![0f32; rows * vocab], vec![0f32; rows * vocab]) } else { (vec![], vec![]) };
    for r in 0..rows {
        let mut gene_pos = 0usize;
        for c in 0..len {
            let i = r * len + c;
            if b.attention_mask[i] == 0 {
                continue;
            }
            let label = b.labels[i];
            let original = if label == IGNORE_INDEX { b.input_ids[i] } else { label as u32 };
            if label != IGNORE_INDEX {
                index.push(i as i64);
                targets.push(label);
            }
            if is_special.get(original as usize).copied().unwrap_or(false) {
                continue;
            }
            weights[i] = 1.0;
            if whole {
                let s = max_positions.saturating_sub(gene_pos) as f32 / max_positions as f32;
                detected[r * vocab + original as usize] = 1.0;
                score[r * vocab + original as usize] = s;
            }
            gene_pos += 1;
        }
    }
    let masked = index.len();
    let codes: Option<Vec<i64>> = wanted.labels.map(|l| b.cell_keys.iter().map(|&k| l.code(k)).collect());
    let int1 = |v: Vec<i64>| Tensor::<B, 1, Int>::from_data(TensorData::new(v.clone(), [v.len()]), device);
    BatchTensors {
        input_ids: Tensor::from_data(TensorData::new(ids, [rows, len]), device),
        pad: Tensor::from_data(TensorData::new(pad, [rows, len]), device),
        gene_weights: Tensor::from_data(TensorData::new(weights, [rows, len]), device),
        masked_index: int1(index),
        masked_targets: std::sync::Arc::new(targets.iter().map(|&t| t as u32).collect()),
        targets: int1(targets),
        masked,
        detected: whole.then(|| Tensor::from_data(TensorData::new(detected, [rows, vocab]), device)),
        score: whole.then(|| Tensor::from_data(TensorData::new(score, [rows, vocab]), device)),
        labels: codes.as_ref().map(|c| int1(c.to_vec())),
        label_codes: codes.map(std::sync::Arc::new),
        step: wanted.step,
        value: None,
    }
}
