//! Reading cells with their expression (shards written since value models): each cell's
//! detected vocabulary genes in rank order with their raw counts, and its total count.

use std::path::Path;

use arrow_array::{Array, Float32Array, Float64Array, Int32Array, ListArray, RecordBatch};

use super::cells::{CellBlock, CorpusIndex};
use super::columns::{missing, EXPRESSION_COUNTS, EXPRESSION_TAIL, EXPRESSION_TOTAL};
use crate::error::{Error, Result};

/// Consecutive cells with their expression: `genes(i)` and `counts(i)` are aligned, in rank
/// order (the genes of the cell's `input_ids` without special tokens, then those past the cut).
#[derive(Clone, Debug, Default)]
pub struct ExpressionBlock {
    pub cells: CellBlock,
    offsets: Vec<usize>,
    genes: Vec<u32>,
    counts: Vec<f32>,
    pub totals: Vec<f64>,
}

impl ExpressionBlock {
    pub fn len(&self) -> usize {
        self.totals.len()
    }

    pub fn is_empty(&self) -> bool {
        self.totals.is_empty()
    }

    pub fn genes(&self, i: usize) -> &[u32] {
        &self.genes[self.offsets[i]..self.offsets[i + 1]]
    }

    pub fn counts(&self, i: usize) -> &[f32] {
        &self.counts[self.offsets[i]..self.offsets[i + 1]]
    }

    /// Decodes a record batch read with the expression columns; `is_gene[t]` tells the genes of
    /// `input_ids` from its special tokens.
    pub fn decode(
        &mut self,
        rb: &RecordBatch,
        path: &Path,
        first_key: u64,
        vocab_size: usize,
        is_gene: &[bool],
    ) -> Result<()> {
        self.cells.decode(rb, path, first_key, vocab_size)?;
        let list = |name: &str| -> Result<&ListArray> {
            rb.column_by_name(name).and_then(|c| c.as_any().downcast_ref::<ListArray>()).ok_or_else(|| {
                Error::format(
                    path,
                    format!(
                        "shard has no '{name}' column: the corpus was ingested before corrflow kept expression \
                         values; ingest the atlas again (into a new corpus or under a new atlas name) for models \
                         that see expression"
                    ),
                )
            })
        };
        let counts = list(EXPRESSION_COUNTS)?;
        let tail = list(EXPRESSION_TAIL)?;
        let totals = rb
            .column_by_name(EXPRESSION_TOTAL)
            .and_then(|c| c.as_any().downcast_ref::<Float64Array>())
            .ok_or_else(|| missing(path, EXPRESSION_TOTAL))?;
        let count_values =
            counts.values().as_any().downcast_ref::<Float32Array>().ok_or_else(|| missing(path, EXPRESSION_COUNTS))?;
        let tail_values =
            tail.values().as_any().downcast_ref::<Int32Array>().ok_or_else(|| missing(path, EXPRESSION_TAIL))?;
        let (count_offsets, tail_offsets) = (counts.value_offsets(), tail.value_offsets());
        self.offsets.clear();
        self.offsets.push(0);
        self.genes.clear();
        self.counts.clear();
        self.totals.clear();
        for i in 0..rb.num_rows() {
            let head =
                self.cells.cell(i).iter().copied().filter(|&t| is_gene.get(t as usize).copied().unwrap_or(false));
            self.genes.extend(head);
            let tail = &tail_values.values()[tail_offsets[i] as usize..tail_offsets[i + 1] as usize];
            if let Some(&t) = tail.iter().find(|&&t| t < 0 || t as usize >= vocab_size) {
                return Err(Error::format(
                    path,
                    format!("cell {}: expression gene {t} outside the vocabulary", self.cells.cell_ids[i]),
                ));
            }
            self.genes.extend(tail.iter().map(|&t| t as u32));
            let c = &count_values.values()[count_offsets[i] as usize..count_offsets[i + 1] as usize];
            if c.len() != self.genes.len() - self.offsets[i] {
                return Err(Error::format(
                    path,
                    format!(
                        "cell {}: {} expression counts for {} genes",
                        self.cells.cell_ids[i],
                        c.len(),
                        self.genes.len() - self.offsets[i]
                    ),
                ));
            }
            self.counts.extend_from_slice(c);
            self.offsets.push(self.genes.len());
            let total = totals.value(i);
            if !(total > 0.0 && total.is_finite()) {
                return Err(Error::format(path, format!("cell {}: expression total {total}", self.cells.cell_ids[i])));
            }
            self.totals.push(total);
        }
        Ok(())
    }
}

impl CorpusIndex {
    /// Reads shard `i` with its cells' expression, block by block (at most 8,192 cells each),
    /// checking its checksum first; a shard written before corrflow kept expression is an error
    /// that says to ingest again.
    pub fn for_each_expression_block(
        &self,
        i: usize,
        vocab_size: usize,
        is_gene: &[bool],
        mut f: impl FnMut(&ExpressionBlock) -> Result<()>,
    ) -> Result<()> {
        let shard = &self.shards[i];
        let p = &shard.path;
        super::verify_shard(p, shard.bytes, &shard.sha256)?;
        let mut key = shard.first_key;
        let mut block = ExpressionBlock::default();
        super::read::for_each_shard_batch_with_expression(p, |rb| {
            block.decode(rb, p, key, vocab_size, is_gene)?;
            key += block.len() as u64;
            f(&block)
        })?;
        shard.check_cells(key - shard.first_key)
    }
}
