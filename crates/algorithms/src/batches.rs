//! Training batches: cells grouped by length (so little of a batch is padding), padded, with
//! attention masks and labels.

use crate::mask::{prefetch_cell, MaskScratch, MaskedSequence, Masker, IGNORE_INDEX};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Cells of one batch, chosen before masking: `(cell key, tokens)`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedBatch {
    /// Position of the batch in the run (the dataflow's time).
    pub seq: u64,
    pub epoch: u64,
    pub cells: Vec<(u64, Vec<u32>)>,
}

/// A masked, padded batch, row-major `rows × len`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrainingBatch {
    pub seq: u64,
    pub epoch: u64,
    pub rows: usize,
    pub len: usize,
    pub input_ids: Vec<u32>,
    /// 1 for tokens, 0 for padding.
    pub attention_mask: Vec<u8>,
    /// Original token at masked positions, `IGNORE_INDEX` elsewhere and on padding.
    pub labels: Vec<i64>,
    pub cell_keys: Vec<u64>,
    /// Time of the latest graph change these masks saw (0: the initial graph).
    pub graph_time: u64,
    /// Edges of the graph these masks used.
    pub graph_edges: usize,
}

impl TrainingBatch {
    /// Pads masked cells to the longest one with `pad`.
    pub fn pad(seq: u64, epoch: u64, keys: Vec<u64>, cells: &[MaskedSequence], pad: u32) -> Self {
        let rows = cells.len();
        let len = cells.iter().map(|c| c.input_ids.len()).max().unwrap_or(0);
        let mut b = Self {
            seq,
            epoch,
            rows,
            len,
            input_ids: vec![pad; rows * len],
            attention_mask: vec![0; rows * len],
            labels: vec![IGNORE_INDEX; rows * len],
            cell_keys: keys,
            ..Self::default()
        };
        for (r, c) in cells.iter().enumerate() {
            let n = c.input_ids.len();
            b.input_ids[r * len..r * len + n].copy_from_slice(&c.input_ids);
            b.attention_mask[r * len..r * len + n].fill(1);
            b.labels[r * len..r * len + n].copy_from_slice(&c.labels);
        }
        b
    }

    /// Masks the cells of a planned batch with `masker` (masks depend on the batch's epoch and
    /// each cell's key only) and pads them with `pad`; `scratch` and `masked` are reused buffers.
    pub fn mask(
        planned: &PlannedBatch,
        masker: &Masker<'_>,
        pad: u32,
        scratch: &mut MaskScratch,
        masked: &mut Vec<MaskedSequence>,
    ) -> Self {
        let cells = &planned.cells;
        masked.resize_with(cells.len(), MaskedSequence::default);
        for (i, ((key, tokens), out)) in cells.iter().zip(masked.iter_mut()).enumerate() {
            if let Some((_, next)) = cells.get(i + 1) {
                prefetch_cell(next);
            }
            masker.mask(tokens, planned.epoch, *key, scratch, out);
        }
        let keys = cells.iter().map(|c| c.0).collect();
        Self::pad(planned.seq, planned.epoch, keys, &masked[..cells.len()], pad)
    }

    /// The batch widened with padding to a length that is a multiple of `multiple`, at most
    /// `limit` (never narrower than it is). GPU kernels compile once per sequence length; with
    /// lengths in buckets they compile for a few shapes instead of one per batch.
    pub fn padded_to_multiple(&self, multiple: usize, limit: usize, pad: u32) -> Self {
        let len = self.len.next_multiple_of(multiple.max(1)).min(limit.max(self.len));
        if len == self.len {
            return self.clone();
        }
        Self {
            len,
            input_ids: widen_rows(&self.input_ids, self.len, len, pad),
            attention_mask: widen_rows(&self.attention_mask, self.len, len, 0),
            labels: widen_rows(&self.labels, self.len, len, IGNORE_INDEX),
            cell_keys: self.cell_keys.clone(),
            ..*self
        }
    }

    /// Positions that are predicted.
    pub fn masked_tokens(&self) -> usize {
        self.labels.iter().filter(|&&l| l != IGNORE_INDEX).count()
    }

    /// Real (non-padding) tokens.
    pub fn tokens(&self) -> usize {
        self.attention_mask.iter().map(|&m| m as usize).sum()
    }
}

/// Rows of `from` values widened to `to` with `fill`.
fn widen_rows<T: Copy>(v: &[T], from: usize, to: usize, fill: T) -> Vec<T> {
    let mut out = Vec::with_capacity(v.len() / from.max(1) * to);
    for row in v.chunks(from.max(1)) {
        out.extend_from_slice(row);
        out.resize(out.len() + to - row.len(), fill);
    }
    out
}

/// Groups a stream of cells into length-grouped batches, as Hugging Face's
/// `LengthGroupedSampler` (which Geneformer trains with): `group_batches` batches' worth of
/// cells are sorted by length, longest first, cut into batches, and the batches' order is
/// shuffled (seeded by run seed, epoch and group).
#[derive(Debug)]
pub struct LengthGrouper {
    batch_size: usize,
    group_batches: usize,
    seed: u64,
    epoch: u64,
    group: u64,
    next_seq: u64,
    pending: Vec<(u64, Vec<u32>)>,
}

impl LengthGrouper {
    pub fn new(batch_size: usize, group_batches: usize, seed: u64, epoch: u64, first_seq: u64) -> Self {
        assert!(batch_size > 0 && group_batches > 0, "batch size and group size are validated by the config");
        Self { batch_size, group_batches, seed, epoch, group: 0, next_seq: first_seq, pending: Vec::new() }
    }

    /// Adds a cell; returns the batches of a group when it is full.
    pub fn push(&mut self, key: u64, tokens: Vec<u32>) -> Vec<PlannedBatch> {
        self.pending.push((key, tokens));
        if self.pending.len() >= self.batch_size * self.group_batches {
            self.flush()
        } else {
            Vec::new()
        }
    }

    /// The batches of the cells still pending (the last, partial group of an epoch).
    pub fn flush(&mut self) -> Vec<PlannedBatch> {
        let mut cells = std::mem::take(&mut self.pending);
        cells.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
        let mut chunks: Vec<Vec<(u64, Vec<u32>)>> = Vec::new();
        let mut it = cells.into_iter().peekable();
        while it.peek().is_some() {
            chunks.push(it.by_ref().take(self.batch_size).collect());
        }
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ (self.epoch << 40) ^ self.group.wrapping_mul(0x9e37_79b9));
        chunks.shuffle(&mut rng);
        self.group += 1;
        chunks
            .into_iter()
            .map(|cells| {
                let seq = self.next_seq;
                self.next_seq += 1;
                PlannedBatch { seq, epoch: self.epoch, cells }
            })
            .collect()
    }

    /// Sequence number the next batch will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_to_a_multiple_keeps_every_token_and_label_and_adds_only_padding() {
        let cells = [
            MaskedSequence {
                input_ids: vec![5, 6, 7],
                labels: vec![IGNORE_INDEX, 9, IGNORE_INDEX],
                ..Default::default()
            },
            MaskedSequence { input_ids: vec![8], labels: vec![4], ..Default::default() },
        ];
        let b = TrainingBatch::pad(3, 1, vec![10, 11], &cells, 0);
        let wide = b.padded_to_multiple(4, 100, 0);
        assert_eq!(wide.len, 4);
        assert_eq!(wide.input_ids, vec![5, 6, 7, 0, 8, 0, 0, 0]);
        assert_eq!(wide.attention_mask, vec![1, 1, 1, 0, 1, 0, 0, 0]);
        assert_eq!(
            wide.labels,
            vec![IGNORE_INDEX, 9, IGNORE_INDEX, IGNORE_INDEX, 4, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX]
        );
        assert_eq!((wide.tokens(), wide.masked_tokens(), wide.cell_keys.clone()), (4, 2, vec![10, 11]));
        // Never past the model's positions, never narrower, unchanged when already a multiple.
        assert_eq!(b.padded_to_multiple(64, 50, 0).len, 50);
        assert_eq!(b.padded_to_multiple(64, 2, 0).len, 3);
        assert_eq!(wide.padded_to_multiple(2, 100, 0), wide);
    }

    #[test]
    fn groups_cells_of_similar_length_and_numbers_batches_consecutively() {
        let mut g = LengthGrouper::new(2, 3, 7, 0, 10);
        let mut batches = Vec::new();
        for k in 0..7u64 {
            batches.extend(g.push(k, vec![1; (k as usize * 37) % 11 + 1]));
        }
        assert_eq!(batches.len(), 3, "a full group of 6 cells");
        batches.extend(g.flush());
        assert_eq!(batches.iter().map(|b| b.seq).collect::<Vec<_>>(), vec![10, 11, 12, 13]);
        let mut keys: Vec<u64> = batches.iter().flat_map(|b| b.cells.iter().map(|c| c.0)).collect();
        keys.sort_unstable();
        assert_eq!(keys, (0..7).collect::<Vec<_>>(), "every cell once");
        // Within the group, batches hold lengths adjacent in sorted order.
        let mut spans: Vec<(usize, usize)> = batches[..3]
            .iter()
            .map(|b| {
                (b.cells.iter().map(|c| c.1.len()).min().unwrap(), b.cells.iter().map(|c| c.1.len()).max().unwrap())
            })
            .collect();
        spans.sort_unstable();
        assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "{spans:?}");
    }

    #[test]
    fn padding_masks_and_ignores_the_pad_positions() {
        let cells = vec![
            MaskedSequence { input_ids: vec![5, 1, 7], labels: vec![-100, 6, -100], ..Default::default() },
            MaskedSequence { input_ids: vec![9], labels: vec![-100], ..Default::default() },
        ];
        let b = TrainingBatch::pad(3, 0, vec![10, 11], &cells, 0);
        assert_eq!((b.rows, b.len), (2, 3));
        assert_eq!(b.input_ids, vec![5, 1, 7, 9, 0, 0]);
        assert_eq!(b.attention_mask, vec![1, 1, 1, 1, 0, 0]);
        assert_eq!(b.labels, vec![-100, 6, -100, -100, -100, -100]);
        assert_eq!((b.masked_tokens(), b.tokens()), (1, 4));
    }
}
