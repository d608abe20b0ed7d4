//! Geneformer's second output of a perturbation: how far each other gene's contextual embedding
//! moves. For every perturbed cell, the token states of the original and the perturbed sequence
//! are compared gene by gene (1 − cosine of the same gene's states), and averaged per gene over
//! the cells. Computed a batch at a time, both sequences of the same cells together, so only one
//! batch of states is held.

use std::path::Path;
use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, RecordBatch, StringArray, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use corrflow_algorithms::perturb::cosine;

use crate::encode::{plan_batches, Encoder, PaddedBatch};
use corrflow_io::error::{Error, Result};
use corrflow_io::util::parquet_out::write_parquet_atomic;
use corrflow_io::vocab::Vocabulary;

/// Per-gene sums of embedding shifts.
pub(super) struct GeneShifts {
    sum: Vec<f64>,
    cells: Vec<u64>,
}

impl GeneShifts {
    pub(super) fn new(vocab_size: usize) -> Self {
        Self { sum: vec![0.0; vocab_size], cells: vec![0; vocab_size] }
    }

    /// Adds the shifts of the genes of `pairs` (original, perturbed sequence of one cell), except
    /// the perturbed `genes`.
    pub(super) fn add(
        &mut self,
        encoder: &mut dyn Encoder,
        vocab: &Vocabulary,
        pairs: &[(&[u32], &[u32])],
        genes: &[u32],
        budget: (usize, usize),
    ) -> Result<()> {
        let dim = encoder.dim();
        let lengths: Vec<usize> = pairs.iter().map(|p| p.0.len().max(p.1.len())).collect();
        for rows in plan_batches(&lengths, budget.0, budget.1) {
            let original = PaddedBatch::new(rows.iter().map(|&i| pairs[i].0), vocab.pad);
            let perturbed = PaddedBatch::new(rows.iter().map(|&i| pairs[i].1), vocab.pad);
            let (so, sp) = (encoder.token_states(&original)?, encoder.token_states(&perturbed)?);
            for (r, &i) in rows.iter().enumerate() {
                let (o, p) = pairs[i];
                let mut at: Vec<(u32, usize)> = p.iter().copied().zip(0..).collect();
                at.sort_unstable();
                for (pos, &t) in o.iter().enumerate() {
                    if !vocab.is_gene(t) || genes.contains(&t) {
                        continue;
                    }
                    let Ok(k) = at.binary_search_by_key(&t, |e| e.0) else { continue };
                    let a = &so[(r * original.len + pos) * dim..(r * original.len + pos + 1) * dim];
                    let j = at[k].1;
                    let b = &sp[(r * perturbed.len + j) * dim..(r * perturbed.len + j + 1) * dim];
                    self.sum[t as usize] += 1.0 - cosine(a, b);
                    self.cells[t as usize] += 1;
                }
            }
        }
        Ok(())
    }

    /// `gene_id`, `symbol`, `token_id`, `n_cells`, `mean_shift` of every gene seen, largest shift
    /// first; written atomically.
    pub(super) fn write(&self, vocab: &Vocabulary, out: &Path) -> Result<usize> {
        let mut seen: Vec<usize> = (0..self.cells.len()).filter(|&t| self.cells[t] > 0).collect();
        let mean = |t: usize| self.sum[t] / self.cells[t] as f64;
        seen.sort_by(|&a, &b| mean(b).total_cmp(&mean(a)).then(a.cmp(&b)));
        let symbols = vocab.symbols_by_token();
        let schema = Arc::new(Schema::new(vec![
            Field::new("gene_id", DataType::Utf8, false),
            Field::new("symbol", DataType::Utf8, true),
            Field::new("token_id", DataType::UInt32, false),
            Field::new("n_cells", DataType::UInt64, false),
            Field::new("mean_shift", DataType::Float64, false),
        ]));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(seen.iter().map(|&t| vocab.token(t as u32).unwrap_or_default()))),
            Arc::new(StringArray::from_iter(seen.iter().map(|&t| symbols.get(&(t as u32)).map(String::as_str)))),
            Arc::new(UInt32Array::from_iter_values(seen.iter().map(|&t| t as u32))),
            Arc::new(UInt64Array::from_iter_values(seen.iter().map(|&t| self.cells[t]))),
            Arc::new(Float64Array::from_iter_values(seen.iter().map(|&t| mean(t)))),
        ];
        let rb = RecordBatch::try_new(schema, columns).map_err(|e| Error::parquet(out, e))?;
        write_parquet_atomic(out, &rb)?;
        Ok(seen.len())
    }
}
