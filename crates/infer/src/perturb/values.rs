//! Perturbing the cells of a value model (DESIGN.md §11), which reads counts, not ranks:
//! - deletion sets each perturbed gene's count to 0: the gene stays measured and is seen as
//!   "measured, not detected", and the cell's total loses its count (the library without the
//!   gene's reads), so the other genes' values rise as they would;
//! - overexpression sets each perturbed gene's count to the cell's largest count (the value
//!   analogue of Geneformer moving the gene to the top rank), adding the difference to the total;
//!   a gene the input did not measure is then seen with that count.
//!
//! The perturbed genes are always among the genes the encoder sees, in the original cell and the
//! perturbed one alike; past `values.inference_genes` the rest is the cell's own seeded sample,
//! drawn from its original expression for both, so the shift measures the change of values, not
//! another sample. Both inputs are built per gene set (the random sets included), so a value
//! model's pass encodes each cell twice per set.

use std::path::Path;
use std::sync::Arc;

use corrflow_algorithms::perturb::Perturbation;
use corrflow_io::corpus::{for_each_shard_batch_with_expression, AtlasManifest, CorpusIndex, ExpressionBlock};
use corrflow_io::error::Result;

use crate::encode::{Encoder, ModelCells};
use crate::inputs::{cell_seed, cls_token, value_input_with, CellExpression};
use crate::model_meta::ValueModel;

use super::{applying, encode, record_shifts, Pass, RowWriter, Tally};

/// A cell's expression, owned: detected genes in rank order, their counts, the total.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Expression {
    pub genes: Vec<u32>,
    pub counts: Vec<f32>,
    pub total: f64,
}

impl Expression {
    fn view(&self) -> CellExpression<'_> {
        CellExpression { genes: &self.genes, counts: &self.counts, total: self.total }
    }
}

impl Pass<'_> {
    /// A value model's block: each set perturbs the cells' counts; both inputs are built per set
    /// (the set's genes are seen in both), so each cell is encoded twice per set.
    pub(super) fn value_block(
        &self,
        encoder: &mut dyn Encoder,
        cells: &ValueCells,
        ids: &[String],
        block: &[Expression],
        writer: &mut RowWriter,
        tally: &mut Tally,
    ) -> Result<()> {
        let (req, dim) = (self.req, encoder.dim());
        tally.cells += block.len() as u64;
        for (s, &set) in self.sets.iter().enumerate() {
            let (mut before, mut after, present) = cells.pairs(block, set, req.how);
            let applies = applying(req.how, &present);
            let original = encode(encoder, &take_rows(&mut before, &applies), req)?;
            let moved = encode(encoder, &take_rows(&mut after, &applies), req)?;
            let rows: Vec<usize> = (0..applies.len()).collect();
            let cosines = record_shifts(tally, s, block.len(), &applies, (&original, &rows), &moved, dim);
            if s == 0 {
                let present: Vec<u32> = present.iter().map(|&n| n as u32).collect();
                writer.write(ids, &present, &cosines)?;
            }
        }
        Ok(())
    }
}

/// The cell after perturbing `set`, and how many of `set` it detected.
pub(super) fn perturb_expression(cell: &Expression, set: &[u32], how: Perturbation) -> (Expression, usize) {
    let present = cell.genes.iter().filter(|g| set.contains(g)).count();
    match how {
        Perturbation::Delete => {
            let mut out = Expression { total: cell.total, ..Expression::default() };
            for (&g, &c) in cell.genes.iter().zip(&cell.counts) {
                if set.contains(&g) {
                    out.total -= f64::from(c);
                } else {
                    out.genes.push(g);
                    out.counts.push(c);
                }
            }
            out.total = out.total.max(0.0);
            (out, present)
        }
        Perturbation::Overexpress => {
            let top = cell.counts.iter().copied().fold(0.0f32, f32::max);
            let mut out = Expression { total: cell.total, ..Expression::default() };
            // The set first (the top of the cell), then the rest in their order.
            for &g in set {
                let before = cell.genes.iter().position(|&h| h == g).map_or(0.0, |i| cell.counts[i]);
                out.total += f64::from(top - before);
                out.genes.push(g);
                out.counts.push(top);
            }
            for (&g, &c) in cell.genes.iter().zip(&cell.counts) {
                if !set.contains(&g) {
                    out.genes.push(g);
                    out.counts.push(c);
                }
            }
            (out, present)
        }
    }
}

/// What a value model's inputs are built from, for one input file.
pub(super) struct ValueCells {
    settings: ValueModel,
    cls: u32,
    /// The genes the encoder may see: the input's measured genes (`ValueModel::visible_pool`).
    pool: Vec<u32>,
    is_gene: Arc<Vec<bool>>,
    vocab_size: usize,
}

impl ValueCells {
    /// `None` for a rank model.
    pub fn for_model(encoder: &dyn Encoder, index: &CorpusIndex) -> Result<Option<Self>> {
        let Some(settings) = encoder.config().and_then(crate::inputs::value_settings) else { return Ok(None) };
        let vocab = encoder.vocab();
        let measured = match index.shards.first().and_then(|s| s.path.parent()) {
            Some(dir) => AtlasManifest::load(dir)?.expression.map(|e| e.measured).unwrap_or_default(),
            None => Vec::new(),
        };
        Ok(Some(Self {
            pool: settings.visible_pool(&measured),
            settings: settings.clone(),
            cls: cls_token(vocab)?,
            is_gene: Arc::new((0..vocab.len() as u32).map(|t| vocab.is_gene(t)).collect()),
            vocab_size: vocab.len(),
        }))
    }

    /// The model inputs of `cells` before and after perturbing `set`, with how many of `set`
    /// each detected.
    pub fn pairs(&self, cells: &[Expression], set: &[u32], how: Perturbation) -> (ModelCells, ModelCells, Vec<usize>) {
        // Deletion: the set's measured genes are seen (at 0 after). Overexpression: every gene of
        // the set is seen after; before, those the input measured.
        let measured: Vec<u32> = set.iter().copied().filter(|g| self.pool.binary_search(g).is_ok()).collect();
        let after_always = if how == Perturbation::Overexpress { set } else { measured.as_slice() };
        let (mut before, mut after) = (empty(cells.len()), empty(cells.len()));
        let mut present = Vec::with_capacity(cells.len());
        for cell in cells {
            let seed = cell_seed(&cell.genes, &cell.counts);
            let (edited, n) = perturb_expression(cell, set, how);
            push(&mut before, value_input_with(self.cls, &self.settings, &self.pool, cell.view(), seed, &measured));
            push(&mut after, value_input_with(self.cls, &self.settings, &self.pool, edited.view(), seed, after_always));
            present.push(n);
        }
        (before, after, present)
    }

    /// Calls `f` with the ids and expression of the selected cells of each shard record batch.
    pub fn for_each_block(
        &self,
        index: &CorpusIndex,
        filter: Option<&(String, String)>,
        f: &mut dyn FnMut(&[String], &[Expression]) -> Result<()>,
    ) -> Result<()> {
        for shard in &index.shards {
            let p: &Path = &shard.path;
            for_each_shard_batch_with_expression(p, |rb| {
                let (rows, names) = super::selected(rb, p, filter)?;
                let mut block = ExpressionBlock::default();
                block.decode(rb, p, 0, self.vocab_size, &self.is_gene)?;
                let cells: Vec<Expression> = rows
                    .iter()
                    .map(|&i| Expression {
                        genes: block.genes(i).to_vec(),
                        counts: block.counts(i).to_vec(),
                        total: block.totals[i],
                    })
                    .collect();
                if cells.is_empty() {
                    Ok(())
                } else {
                    f(&names, &cells)
                }
            })?;
        }
        Ok(())
    }
}

/// Rows `rows` of `cells`, moved out (the rest are left empty).
pub(super) fn take_rows(cells: &mut ModelCells, rows: &[usize]) -> ModelCells {
    let tokens = rows.iter().map(|&i| std::mem::take(&mut cells.tokens[i])).collect();
    let values = cells.values.as_mut().map(|v| rows.iter().map(|&i| std::mem::take(&mut v[i])).collect());
    ModelCells { tokens, values }
}

fn empty(n: usize) -> ModelCells {
    ModelCells { tokens: Vec::with_capacity(n), values: Some(Vec::with_capacity(n)) }
}

fn push(cells: &mut ModelCells, (tokens, values): (Vec<u32>, Vec<f32>)) {
    cells.tokens.push(tokens);
    if let Some(v) = cells.values.as_mut() {
        v.push(values);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell() -> Expression {
        Expression { genes: vec![7, 3, 9], counts: vec![10.0, 4.0, 1.0], total: 100.0 }
    }

    #[test]
    fn deletion_zeroes_the_genes_and_takes_their_counts_off_the_total() {
        let (out, present) = perturb_expression(&cell(), &[3, 5], Perturbation::Delete);
        assert_eq!(present, 1);
        assert_eq!(out, Expression { genes: vec![7, 9], counts: vec![10.0, 1.0], total: 96.0 });
        let (same, none) = perturb_expression(&cell(), &[5], Perturbation::Delete);
        assert_eq!((same, none), (cell(), 0));
    }

    #[test]
    fn overexpression_raises_the_genes_to_the_cells_largest_count_and_puts_them_first() {
        let (out, present) = perturb_expression(&cell(), &[9, 5], Perturbation::Overexpress);
        assert_eq!(present, 1);
        // 9: 1 -> 10 (+9); 5, undetected: 0 -> 10 (+10).
        assert_eq!(out, Expression { genes: vec![9, 5, 7, 3], counts: vec![10.0, 10.0, 10.0, 4.0], total: 119.0 });
    }

    #[test]
    fn the_perturbed_genes_are_seen_before_and_after_within_the_same_sample() {
        let settings = ValueModel { inference_genes: 3, target_sum: 100.0, ..ValueModel::default() };
        let pool: Vec<u32> = (1..=40).collect();
        let cells = ValueCells { settings, cls: 0, pool, is_gene: Arc::new(vec![true; 41]), vocab_size: 41 };
        let (before, after, present) = cells.pairs(&[cell()], &[3], Perturbation::Delete);
        assert_eq!(present, vec![1]);
        let (b, a) = (&before.tokens[0], &after.tokens[0]);
        assert!(b.contains(&3) && a.contains(&3), "{b:?} {a:?}");
        // The same genes, in another order at most (3 moves from detected to zeros).
        let (mut bs, mut as_) = (b.clone(), a.clone());
        bs.sort_unstable();
        as_.sort_unstable();
        assert_eq!(bs, as_);
        let value = |cells: &ModelCells, g: u32| {
            let i = cells.tokens[0].iter().position(|&t| t == g).unwrap();
            cells.values.as_ref().unwrap()[0][i]
        };
        assert!(value(&before, 3) > 0.0);
        assert_eq!(value(&after, 3), 0.0);
    }
}
