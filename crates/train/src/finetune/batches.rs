//! Cells as classification batches: padded tokens (with a value model's values), pooling
//! weights and the targets of one part of the split (a label per cell, or a label per labelled
//! gene position), and the evaluation cells of a part streamed from the corpus in length-sorted
//! batches.

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor, TensorData};
use corrflow_algorithms::classes::Part;
use corrflow_infer::model_meta::Pooling;
use corrflow_io::corpus::CorpusIndex;
use corrflow_io::error::Result;
use corrflow_io::vocab::Vocabulary;
use corrflow_mask::plan::{DataPlan, ExpressionCell};

use super::labels::Supervision;
use super::value_inputs::ValueInputs;

/// A padded batch with the targets of one part.
#[derive(Debug, Default)]
pub(crate) struct ClassBatch {
    pub rows: usize,
    pub len: usize,
    pub input_ids: Vec<i64>,
    /// A value model's token values (`<cls>` and padding 0); empty for rank models.
    pub values: Vec<f32>,
    pub pad: Vec<bool>,
    /// 1 where the cell vector pools (gene positions, or `<cls>`).
    pub weights: Vec<f32>,
    /// Cells: the row of each target; genes: its flattened position `row · len + col`.
    pub index: Vec<i64>,
    pub targets: Vec<i64>,
    /// The item each target belongs to: the cell key (cells) or the gene token (genes).
    pub items: Vec<u64>,
    /// Real tokens in the batch.
    pub tokens: usize,
}

/// What a batch is built from: which part's targets, and how cells are pooled.
pub(crate) struct BatchSpec<'a> {
    pub supervision: &'a Supervision,
    pub vocab: &'a Vocabulary,
    pub pooling: Pooling,
    pub part: Part,
    /// A value model's inputs: each planned cell is then its packed expression, not tokens.
    pub values: Option<&'a ValueInputs>,
}

impl BatchSpec<'_> {
    /// The batch of `cells` (`(key, tokens)`, or `(key, packed expression)` for a value model);
    /// cells of a cell task outside the part are expected to be filtered out before.
    pub fn build(&self, cells: &[(u64, Vec<u32>)]) -> Result<ClassBatch> {
        let inputs: Vec<(u64, Vec<u32>, Vec<f32>)> = match self.values {
            Some(v) => cells
                .iter()
                .map(|(key, payload)| v.of(*key, payload).map(|(t, x)| (*key, t, x)))
                .collect::<Result<_>>()?,
            None => cells.iter().map(|(key, tokens)| (*key, tokens.clone(), Vec::new())).collect(),
        };
        Ok(self.build_inputs(&inputs))
    }

    fn build_inputs(&self, cells: &[(u64, Vec<u32>, Vec<f32>)]) -> ClassBatch {
        let rows = cells.len();
        let len = cells.iter().map(|c| c.1.len()).max().unwrap_or(0);
        let pad_token = i64::from(self.vocab.pad);
        let mut b = ClassBatch {
            rows,
            len,
            input_ids: vec![pad_token; rows * len],
            values: if self.values.is_some() { vec![0.0; rows * len] } else { Vec::new() },
            pad: vec![true; rows * len],
            weights: vec![0.0; rows * len],
            ..ClassBatch::default()
        };
        for (r, (key, tokens, values)) in cells.iter().enumerate() {
            b.tokens += tokens.len();
            for (c, &t) in tokens.iter().enumerate() {
                let i = r * len + c;
                b.input_ids[i] = i64::from(t);
                if let Some(&x) = values.get(c) {
                    b.values[i] = x;
                }
                b.pad[i] = false;
                let pooled = match self.pooling {
                    Pooling::Mean => self.vocab.is_gene(t),
                    Pooling::Cls => c == 0 && Some(t) == self.vocab.cls,
                };
                b.weights[i] = f32::from(u8::from(pooled));
                if self.supervision.genes {
                    if let Some((class, part)) = self.supervision.of(u64::from(t)) {
                        if part == self.part {
                            b.index.push(i as i64);
                            b.targets.push(class as i64);
                            b.items.push(u64::from(t));
                        }
                    }
                }
            }
            if !self.supervision.genes {
                if let Some((class, part)) = self.supervision.of(*key) {
                    if part == self.part {
                        b.index.push(r as i64);
                        b.targets.push(class as i64);
                        b.items.push(*key);
                    }
                }
            }
        }
        b
    }
}

/// A batch's tensors on a device.
pub(crate) struct BatchTensors<B: Backend> {
    pub input_ids: Tensor<B, 2, Int>,
    pub values: Option<Tensor<B, 2>>,
    pub pad: Tensor<B, 2, Bool>,
    pub weights: Tensor<B, 2>,
    pub index: Tensor<B, 1, Int>,
    pub targets: Tensor<B, 1, Int>,
}

impl ClassBatch {
    pub fn tensors<B: Backend>(&self, device: &B::Device) -> BatchTensors<B> {
        let shape = [self.rows, self.len];
        let n = self.targets.len();
        BatchTensors {
            input_ids: Tensor::from_data(TensorData::new(self.input_ids.clone(), shape), device),
            values: (!self.values.is_empty())
                .then(|| Tensor::from_data(TensorData::new(self.values.clone(), shape), device)),
            pad: Tensor::from_data(TensorData::new(self.pad.clone(), shape), device),
            weights: Tensor::from_data(TensorData::new(self.weights.clone(), shape), device),
            index: Tensor::from_data(TensorData::new(self.index.clone(), [n]), device),
            targets: Tensor::from_data(TensorData::new(self.targets.clone(), [n]), device),
        }
    }
}

/// Streams the evaluation cells of `part` in key order, `batch_size` at a time, each group of
/// 8 batches sorted by length first (less padding), with each row's cell id: for cells, the
/// cells labelled in the part; for genes, the first `gene_eval_cells` cells (the part's genes
/// are the targets).
pub(crate) fn for_each_eval_batch(
    plan: &DataPlan,
    spec: &BatchSpec<'_>,
    gene_eval_cells: usize,
    mut f: impl FnMut(ClassBatch, &[String]) -> Result<()>,
) -> Result<()> {
    let index: &CorpusIndex = &plan.index;
    let size = plan.batch_size.max(1);
    let mut pending: Vec<((u64, Vec<u32>), String)> = Vec::with_capacity(size * 8);
    let flush = |pending: &mut Vec<((u64, Vec<u32>), String)>,
                 f: &mut dyn FnMut(ClassBatch, &[String]) -> Result<()>| {
        pending.sort_by_key(|c| std::cmp::Reverse(c.0 .1.len()));
        let (cells, names): (Vec<(u64, Vec<u32>)>, Vec<String>) = pending.drain(..).unzip();
        for (chunk, names) in cells.chunks(size).zip(names.chunks(size)) {
            let b = spec.build(chunk)?;
            if !b.targets.is_empty() {
                f(b, names)?;
            }
        }
        Ok(())
    };
    if let Some(v) = spec.values {
        // A value model's cells, with their expression (cell tasks only).
        for s in 0..index.shards.len() {
            index.for_each_expression_block(s, plan.vocab_size, &v.is_gene, |b| {
                for i in 0..b.len() {
                    let key = b.cells.first_key + i as u64;
                    if spec.supervision.of(key).is_some_and(|(_, p)| p == spec.part) {
                        let cell = ExpressionCell::pack(b.genes(i), b.counts(i), b.totals[i]);
                        pending.push(((key, cell), b.cells.cell_ids[i].clone()));
                        if pending.len() >= size * 8 {
                            flush(&mut pending, &mut f)?;
                        }
                    }
                }
                Ok(())
            })?;
        }
        return flush(&mut pending, &mut f);
    }
    let mut seen = 0usize;
    for s in 0..index.shards.len() {
        if spec.supervision.genes && seen >= gene_eval_cells {
            break;
        }
        index.for_each_block(s, plan.vocab_size, |block| {
            for i in 0..block.len() {
                let key = block.first_key + i as u64;
                let wanted = if spec.supervision.genes {
                    seen += 1;
                    seen <= gene_eval_cells
                } else {
                    spec.supervision.of(key).is_some_and(|(_, p)| p == spec.part)
                };
                if wanted {
                    pending.push(((key, plan.truncate(block.cell(i).to_vec())), block.cell_ids[i].clone()));
                    if pending.len() >= size * 8 {
                        flush(&mut pending, &mut f)?;
                    }
                }
            }
            Ok(())
        })?;
    }
    flush(&mut pending, &mut f)
}
