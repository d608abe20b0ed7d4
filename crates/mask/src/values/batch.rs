//! A value model's batch: each cell's visible genes with their values behind a `<cls>` token,
//! and its decoding targets (the count of every decoding gene, and which of them its atlas
//! measured), built on the host from the plan's expression cells. Plain data: the burn trainer
//! makes tensors of it, the Python package hands it to PyTorch.

use std::borrow::Cow;

use corrflow_algorithms::mask::{MaskPlan, MaskScratch};
use corrflow_io::corpus::CellLabels;

use crate::plan::ExpressionCell;
use crate::MaskContext;

use super::visible::{choose_visible, visible_count, CellAtlases};

/// One batch, row-major: `input_ids`, `values` and `attention_mask` are `[rows, len]`;
/// `counts` and `measured` are `[rows, genes]` over the decoding set; `totals` `[rows]`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ValueBatch {
    pub epoch: u64,
    pub rows: usize,
    pub len: usize,
    pub genes: usize,
    pub input_ids: Vec<i64>,
    pub values: Vec<f32>,
    pub attention_mask: Vec<bool>,
    pub counts: Vec<f32>,
    pub measured: Vec<f32>,
    pub totals: Vec<f32>,
    /// Genes the encoder saw (CLS tokens not counted).
    pub visible: usize,
    /// Each row's label code (`NO_LABEL` where the cell has none), with a hierarchical head.
    pub label_codes: Option<Vec<i64>>,
}

/// How batches are built: the cells' atlases, the value settings, the masking context.
pub struct BatchMaker<'a> {
    pub atlases: &'a CellAtlases,
    /// L of the values `x = ln(1 + c / n_counts · L)`.
    pub target_sum: f64,
    /// The decoding set's size.
    pub decode_genes: usize,
    pub ctx: &'a MaskContext,
    pub cls: u32,
    pub pad: u32,
    /// `train.visible_genes` (0: from `mask.p`).
    pub visible_genes: usize,
    /// Per-cell labels of a hierarchical head (WCED + HCE multitask).
    pub labels: Option<&'a CellLabels>,
}

impl BatchMaker<'_> {
    /// The batch of `cells` (keys and packed expression cells) of `epoch`.
    pub fn build(&self, epoch: u64, cells: &[(u64, ExpressionCell)]) -> ValueBatch {
        let genes = self.decode_genes;
        let (mut scratch, mut plan, mut chosen) = (MaskScratch::default(), MaskPlan::default(), Vec::new());
        let mut rows: Vec<(Vec<u32>, Vec<f32>)> = Vec::with_capacity(cells.len());
        let mut b = ValueBatch { epoch, rows: cells.len(), genes, ..Default::default() };
        b.counts = vec![0.0; cells.len() * genes];
        b.measured = Vec::with_capacity(cells.len() * genes);
        for (r, (key, cell)) in cells.iter().enumerate() {
            let atlas = self.atlases.of(*key);
            let mut value = cell_values(&atlas.pool, cell);
            let pool: Cow<'_, [u32]> = if self.atlases.detected_only {
                let mut detected = atlas.pool.clone();
                keep_detected(&mut detected, &mut value);
                Cow::Owned(detected)
            } else {
                Cow::Borrowed(&atlas.pool)
            };
            let k = visible_count(self.visible_genes, self.ctx.params.p, pool.len());
            choose_visible(
                &pool,
                k,
                &self.ctx.params,
                self.ctx.tables(),
                (epoch, *key),
                &mut scratch,
                &mut plan,
                &mut chosen,
            );
            let mut tokens = Vec::with_capacity(chosen.len() + 1);
            let mut vals = Vec::with_capacity(chosen.len() + 1);
            tokens.push(self.cls);
            vals.push(0.0);
            for &i in &chosen {
                tokens.push(pool[i as usize]);
                vals.push(value_of(f64::from(value[i as usize]), cell.total, self.target_sum));
            }
            b.visible += chosen.len();
            rows.push((tokens, vals));
            for (&g, &c) in cell.genes.iter().zip(&cell.counts) {
                if let Some(d) = self.atlases.decode_index(g) {
                    b.counts[r * genes + d] = c;
                }
            }
            b.measured.extend_from_slice(&atlas.decode_measured);
            b.totals.push(cell.total as f32);
        }
        b.label_codes = self.labels.map(|l| cells.iter().map(|(k, _)| l.code(*k)).collect());
        b.len = rows.iter().map(|r| r.0.len()).max().unwrap_or(1);
        b.input_ids = vec![i64::from(self.pad); b.rows * b.len];
        b.values = vec![0.0; b.rows * b.len];
        b.attention_mask = vec![false; b.rows * b.len];
        for (r, (tokens, vals)) in rows.iter().enumerate() {
            for (c, (&t, &v)) in tokens.iter().zip(vals).enumerate() {
                b.input_ids[r * b.len + c] = i64::from(t);
                b.values[r * b.len + c] = v;
                b.attention_mask[r * b.len + c] = true;
            }
        }
        b
    }
}

/// Each measured gene's raw count in the cell (0 where it was not detected), by a merge of the
/// measured list (ascending) with the cell's detected genes sorted by token.
fn cell_values(measured: &[u32], cell: &ExpressionCell) -> Vec<f32> {
    let mut detected: Vec<(u32, f32)> = cell.genes.iter().copied().zip(cell.counts.iter().copied()).collect();
    detected.sort_unstable_by_key(|d| d.0);
    let mut out = vec![0.0; measured.len()];
    let mut j = 0;
    for (i, &t) in measured.iter().enumerate() {
        while j < detected.len() && detected[j].0 < t {
            j += 1;
        }
        if j < detected.len() && detected[j].0 == t {
            out[i] = detected[j].1;
        }
    }
    out
}

/// Keeps the genes of `pool` with a count above zero, and their counts (`values.visible =
/// "detected"`).
fn keep_detected(pool: &mut Vec<u32>, value: &mut Vec<f32>) {
    let mut kept = 0;
    for i in 0..pool.len() {
        if value[i] > 0.0 {
            pool[kept] = pool[i];
            value[kept] = value[i];
            kept += 1;
        }
    }
    pool.truncate(kept);
    value.truncate(kept);
}

/// `ln(1 + c / n · L)` (0 for a cell without counts): the value model's input value, as
/// `corrflow_infer::model_meta::ValueModel::value` computes it.
pub fn value_of(count: f64, total: f64, target_sum: f64) -> f32 {
    if total > 0.0 {
        (count / total * target_sum).ln_1p() as f32
    } else {
        0.0
    }
}

impl ValueBatch {
    /// Tokens the encoder computed over (CLS included, padding not).
    pub fn tokens(&self) -> u64 {
        self.attention_mask.iter().filter(|&&m| m).count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cells_values_follow_the_measured_list_with_zeros_for_undetected_genes() {
        let cell = ExpressionCell { genes: vec![9, 2, 5], counts: vec![4.0, 1.0, 2.0], total: 10.0 };
        assert_eq!(cell_values(&[1, 2, 5, 7, 9], &cell), vec![0.0, 1.0, 2.0, 0.0, 4.0]);
        // A detected gene the atlas list lacks (not possible from ingest) is ignored.
        assert_eq!(cell_values(&[2, 9], &cell), vec![1.0, 4.0]);
    }

    #[test]
    fn a_detected_pool_keeps_the_genes_with_counts_in_order() {
        let (mut pool, mut value) = (vec![1, 2, 5, 7, 9], vec![0.0, 1.0, 2.0, 0.0, 4.0]);
        keep_detected(&mut pool, &mut value);
        assert_eq!((pool, value), (vec![2, 5, 9], vec![1.0, 2.0, 4.0]));
        let (mut pool, mut value) = (vec![3u32], vec![0.0f32]);
        keep_detected(&mut pool, &mut value);
        assert!(pool.is_empty() && value.is_empty());
    }
}
