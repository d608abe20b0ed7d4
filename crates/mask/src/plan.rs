//! The training data: the corpus split into training and held-out cells by a seeded hash of the
//! cell key, epochs read in a seeded shard order through a shuffle buffer, length-grouped into
//! planned batches for the masking dataflow (which polls a [`GraphWatch`] between batches).

use corrflow_algorithms::SequenceLayout;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use corrflow_algorithms::batches::{LengthGrouper, PlannedBatch};
use corrflow_io::corpus::CorpusIndex;
use corrflow_io::error::Result;

use crate::dataflow::{Feed, FeedSource};
use crate::GraphWatch;

/// Cells decoded per block while reading an epoch (an ingested shard's row group). With one block
/// per thread decoding and one waiting for the planner, the cells read ahead stay under a
/// thousand, well under the shuffle buffer and a small corpus: the loader's memory does not grow
/// with the corpus (BENCHMARKS.md, "Python loader memory"; 512-cell blocks, two per thread,
/// made the peak at 64× Kang 1.3× the peak at 1×).
const READ_CELLS: usize = 256;

/// How cells become planned batches.
#[derive(Clone, Debug)]
pub struct DataPlan {
    pub index: CorpusIndex,
    pub vocab_size: usize,
    pub layout: SequenceLayout,
    pub batch_size: usize,
    pub group_batches: usize,
    pub shuffle_buffer: usize,
    pub epochs: usize,
    /// Longest sequence kept (tokens beyond are cut; a trailing `<eos>` is kept).
    pub max_len: usize,
    pub eval_fraction: f64,
    pub seed: u64,
    /// When set, the training cells are exactly the keys marked here (a fine-tuning split) and
    /// `eval_fraction` is not used.
    pub subset: Option<std::sync::Arc<Vec<bool>>>,
    /// Plan cells with their expression (value models): each planned cell's payload is then an
    /// [`ExpressionCell`] packed by [`ExpressionCell::pack`], not tokens, and `max_len` does not
    /// cut it. The table marks the vocabulary's genes (`input_ids` also holds special tokens).
    pub expression: Option<std::sync::Arc<Vec<bool>>>,
}

/// A cell's expression as the plan carries it: its detected genes in rank order with their raw
/// counts, and its total count. The plan's shuffle buffer and length grouping move `Vec<u32>`
/// payloads; a value model's cell travels through them packed into one:
/// `[n, genes (n), counts as f32 bits (n), total as f64 bits (2)]`.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpressionCell {
    pub genes: Vec<u32>,
    pub counts: Vec<f32>,
    pub total: f64,
}

impl ExpressionCell {
    pub fn pack(genes: &[u32], counts: &[f32], total: f64) -> Vec<u32> {
        let mut out = Vec::with_capacity(3 + 2 * genes.len());
        out.push(genes.len() as u32);
        out.extend_from_slice(genes);
        out.extend(counts.iter().map(|c| c.to_bits()));
        let bits = total.to_bits();
        out.extend([(bits >> 32) as u32, bits as u32]);
        out
    }

    /// The cell packed by [`Self::pack`]; `None` for a payload that is not one.
    pub fn unpack(payload: &[u32]) -> Option<Self> {
        let n = *payload.first()? as usize;
        if payload.len() != 3 + 2 * n {
            return None;
        }
        let genes = payload[1..1 + n].to_vec();
        let counts = payload[1 + n..1 + 2 * n].iter().map(|&b| f32::from_bits(b)).collect();
        let total = f64::from_bits((u64::from(payload[1 + 2 * n]) << 32) | u64::from(payload[2 + 2 * n]));
        Some(Self { genes, counts, total })
    }
}

fn mix(mut z: u64) -> u64 {
    // splitmix64 finaliser
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl DataPlan {
    /// Whether cell `key` is held out.
    pub fn is_eval(&self, key: u64) -> bool {
        if let Some(subset) = &self.subset {
            return !subset.get(key as usize).copied().unwrap_or(false);
        }
        (mix(key ^ mix(self.seed ^ 0x5eed)) as f64 / u64::MAX as f64) < self.eval_fraction
    }

    pub fn truncate(&self, mut tokens: Vec<u32>) -> Vec<u32> {
        if self.max_len > 0 && tokens.len() > self.max_len {
            let eos = self.layout.eos.filter(|e| tokens.last() == Some(e));
            tokens.truncate(self.max_len);
            if let Some(e) = eos {
                *tokens.last_mut().expect("max_len > 0") = e;
            }
        }
        tokens
    }

    /// [`Self::truncate`] of a borrowed cell, copying only the tokens kept.
    fn truncate_slice(&self, tokens: &[u32]) -> Vec<u32> {
        if self.max_len > 0 && tokens.len() > self.max_len {
            let mut kept = tokens[..self.max_len].to_vec();
            if let Some(e) = self.layout.eos.filter(|e| tokens.last() == Some(e)) {
                *kept.last_mut().expect("max_len > 0") = e;
            }
            kept
        } else {
            tokens.to_vec()
        }
    }

    /// Bytes the plan and the masking dataflow hold at most (the pre-flight estimate): the
    /// shuffle buffer and one length group of cells of up to `max_len` tokens, and `batches`
    /// planned or masked batches in flight (tokens, labels, masked positions and the attention
    /// mask, each up to `batch_size × max_len`).
    pub fn masking_bytes(&self, batches: usize) -> u128 {
        let longest =
            self.layout.max_genes + usize::from(self.layout.cls.is_some()) + usize::from(self.layout.eos.is_some());
        let len = if self.max_len > 0 { self.max_len } else { longest } as u128;
        // An expression cell: its genes, their counts and the total (detected genes past the
        // token cut included: the layout's longest is the estimate).
        let payload = if self.expression.is_some() { 2 * longest as u128 + 3 } else { len };
        let per_cell = 48 + 4 * payload;
        let cells = self.shuffle_buffer.max(1) as u128 + self.batch_size as u128 * self.group_batches as u128;
        cells * per_cell + batches as u128 * self.batch_size as u128 * len * 4 * 4
    }

    pub fn train_cells(&self) -> u64 {
        (0..self.index.cells).filter(|&k| !self.is_eval(k)).count() as u64
    }

    /// Batches per epoch: full groups of `group_batches`, then the last group's remainder.
    pub fn batches_per_epoch(&self) -> u64 {
        let n = self.train_cells();
        let group = (self.batch_size * self.group_batches) as u64;
        (n / group) * self.group_batches as u64 + (n % group).div_ceil(self.batch_size as u64)
    }

    /// The first `n` held-out cells (key order): the fixed evaluation set.
    pub fn eval_set(&self, n: usize) -> Result<Vec<(u64, Vec<u32>)>> {
        let mut out = Vec::new();
        for s in 0..self.index.shards.len() {
            if out.len() >= n {
                break;
            }
            self.index.for_each_block(s, self.vocab_size, |b| {
                for i in 0..b.len() {
                    let key = b.first_key + i as u64;
                    if out.len() < n && self.is_eval(key) {
                        out.push((key, self.truncate(b.cell(i).to_vec())));
                    }
                }
                Ok(())
            })?;
        }
        Ok(out)
    }

    /// The feed of the masking dataflow from batch `first_seq` on; batches before it are planned
    /// (to keep the order) but not emitted. `graph` is polled every `poll` batches.
    pub fn feed(self, first_seq: u64, graph: Option<GraphWatch>) -> FeedSource {
        Box::new(move |emit| {
            let mut watch = graph;
            let per_epoch = self.batches_per_epoch();
            for epoch in 0..self.epochs as u64 {
                let go_on = self.plan_epoch(epoch, epoch * per_epoch, &mut |b| {
                    if b.seq < first_seq {
                        return true;
                    }
                    if let Some(changes) = watch.as_mut().and_then(|w| w.poll(b.seq)) {
                        if !emit(Feed::Graph(changes)) {
                            return false;
                        }
                    }
                    emit(Feed::Batch(b))
                })?;
                if !go_on {
                    break;
                }
            }
            Ok(())
        })
    }

    /// The feed of one rank's shard of `epoch` for data-parallel training over `world` ranks:
    /// batch `k` of the epoch goes to rank `k mod world`, and the cells of the epoch's last
    /// `batches mod world` batches are split into `world` contiguous parts, one more batch per
    /// rank, so every rank gets the same number of batches and every cell is in exactly one
    /// shard. (Only when those last batches hold fewer cells than there are ranks do some ranks
    /// repeat a cell of them: DDP needs every rank to take the same number of steps.) Batches are
    /// numbered from 0 within the shard; masks depend on (seed, epoch, cell) only, so a cell is
    /// masked the same in any shard. With `world == 1` this is the trainer's epoch. Batches of the
    /// shard before `first` are planned (the order needs them) but not emitted: a run resumed
    /// mid-epoch does not mask what it skips.
    pub fn shard_feed(self, epoch: u64, rank: usize, world: usize, first: u64) -> FeedSource {
        Box::new(move |emit| {
            let per_epoch = self.batches_per_epoch();
            let world = world.max(1) as u64;
            let rank = rank as u64;
            let full = per_epoch / world * world;
            let mut local = 0u64;
            let mut tail: Vec<(u64, Vec<u32>)> = Vec::new();
            let go_on = self.plan_epoch(epoch, 0, &mut |b| {
                if b.seq >= full {
                    tail.extend(b.cells);
                    return true;
                }
                if b.seq % world != rank {
                    return true;
                }
                local += 1;
                local <= first || emit(Feed::Batch(PlannedBatch { seq: local - 1 - first, ..b }))
            })?;
            if go_on && !tail.is_empty() && local >= first {
                let cells = split_part(tail, rank as usize, world as usize);
                emit(Feed::Batch(PlannedBatch { seq: local - first, epoch, cells }));
            }
            Ok(())
        })
    }

    /// Plans the batches of `epoch`, numbered from `first_seq`, into `send`; returns false when
    /// `send` asked to stop. Shards are read and decoded on a thread of their own, a couple of
    /// blocks ahead, so reading overlaps planning and masking (the order is fixed up front: the
    /// batches are the same).
    fn plan_epoch(&self, epoch: u64, first_seq: u64, send: &mut dyn FnMut(PlannedBatch) -> bool) -> Result<bool> {
        let mut rng = ChaCha8Rng::seed_from_u64(mix(self.seed ^ mix(epoch + 1)));
        let mut order: Vec<usize> = (0..self.index.shards.len()).collect();
        order.shuffle(&mut rng);
        let mut grouper = LengthGrouper::new(self.batch_size, self.group_batches, self.seed, epoch, first_seq);
        // Grows as cells arrive: a large buffer over a small corpus never fills.
        let mut buffer: Vec<(u64, Vec<u32>)> = Vec::with_capacity(self.shuffle_buffer.clamp(1, 1 << 16));
        std::thread::scope(|scope| {
            let (tx, rx) = crossbeam_channel::bounded::<Result<Vec<(u64, Vec<u32>)>>>(1);
            scope.spawn(move || self.read_training_cells(&order, &tx));
            for block in rx {
                for (k, t) in block? {
                    buffer.push((k, t));
                    if buffer.len() >= self.shuffle_buffer.max(1) {
                        let j = rng.random_range(0..buffer.len());
                        let (k, t) = buffer.swap_remove(j);
                        if !grouper.push(k, t).into_iter().all(&mut *send) {
                            return Ok(false); // the reader stops at its next send
                        }
                    }
                }
            }
            buffer.shuffle(&mut rng);
            for (k, t) in buffer.drain(..) {
                if !grouper.push(k, t).into_iter().all(&mut *send) {
                    return Ok(false);
                }
            }
            Ok(grouper.flush().into_iter().all(send))
        })
    }

    /// Sends the training cells of `shards`, in order, a block at a time (cut to `max_len`);
    /// stops when the receiver has gone, sends the error when a shard cannot be read.
    fn read_training_cells(&self, shards: &[usize], tx: &crossbeam_channel::Sender<Result<Vec<(u64, Vec<u32>)>>>) {
        if let Some(is_gene) = &self.expression {
            return self.read_expression_cells(shards, is_gene, tx);
        }
        for &s in shards {
            let mut gone = false;
            let read = self.index.for_each_block_parallel(s, self.vocab_size, READ_CELLS, |b| {
                let cells = (0..b.len())
                    .map(|i| (b.first_key + i as u64, i))
                    .filter(|&(key, _)| !self.is_eval(key))
                    .map(|(key, i)| (key, self.truncate_slice(b.cell(i))))
                    .collect();
                gone = tx.send(Ok(cells)).is_err();
                if gone {
                    Err(corrflow_io::error::Error::Usage("stopped".into()))
                } else {
                    Ok(())
                }
            });
            if gone {
                return;
            }
            if let Err(e) = read {
                let _ = tx.send(Err(e));
                return;
            }
        }
    }
}

impl DataPlan {
    /// [`Self::read_training_cells`] for value models: each cell packed as an
    /// [`ExpressionCell`].
    fn read_expression_cells(
        &self,
        shards: &[usize],
        is_gene: &[bool],
        tx: &crossbeam_channel::Sender<Result<Vec<(u64, Vec<u32>)>>>,
    ) {
        for &s in shards {
            let mut gone = false;
            let read = self.index.for_each_expression_block(s, self.vocab_size, is_gene, |b| {
                // Blocks of a few hundred cells, as the token reader sends (the planner's memory).
                for start in (0..b.len()).step_by(READ_CELLS) {
                    let cells = (start..(start + READ_CELLS).min(b.len()))
                        .map(|i| (b.cells.first_key + i as u64, i))
                        .filter(|&(key, _)| !self.is_eval(key))
                        .map(|(key, i)| (key, ExpressionCell::pack(b.genes(i), b.counts(i), b.totals[i])))
                        .collect();
                    gone = tx.send(Ok(cells)).is_err();
                    if gone {
                        return Err(corrflow_io::error::Error::Usage("stopped".into()));
                    }
                }
                Ok(())
            });
            if gone {
                return;
            }
            if let Err(e) = read {
                let _ = tx.send(Err(e));
                return;
            }
        }
    }

    /// The first `n` held-out cells (key order) with their expression: a value model's fixed
    /// evaluation set.
    pub fn eval_expression_set(&self, n: usize, is_gene: &[bool]) -> Result<Vec<(u64, ExpressionCell)>> {
        let mut out = Vec::new();
        for s in 0..self.index.shards.len() {
            if out.len() >= n {
                break;
            }
            self.index.for_each_expression_block(s, self.vocab_size, is_gene, |b| {
                for i in 0..b.len() {
                    let key = b.cells.first_key + i as u64;
                    if out.len() < n && self.is_eval(key) {
                        let cell = ExpressionCell {
                            genes: b.genes(i).to_vec(),
                            counts: b.counts(i).to_vec(),
                            total: b.totals[i],
                        };
                        out.push((key, cell));
                    }
                }
                Ok(())
            })?;
        }
        Ok(out)
    }
}

/// Part `rank` of `world` contiguous, nearly equal parts of `cells`; when there are fewer cells
/// than parts, a part past the end takes the cell its rank wraps onto.
fn split_part(cells: Vec<(u64, Vec<u32>)>, rank: usize, world: usize) -> Vec<(u64, Vec<u32>)> {
    let n = cells.len();
    if n < world {
        return vec![cells[rank % n].clone()];
    }
    let (base, extra) = (n / world, n % world);
    let start = rank * base + rank.min(extra);
    let len = base + usize::from(rank < extra);
    cells.into_iter().skip(start).take(len).collect()
}

#[cfg(test)]
mod tests {
    use super::{split_part, DataPlan};

    #[test]
    fn the_masking_estimate_grows_linearly_with_the_buffer_and_the_batch_plan() {
        let plan = DataPlan {
            index: Default::default(),
            vocab_size: 100,
            layout: corrflow_algorithms::SequenceLayout::v1(),
            batch_size: 8,
            group_batches: 50,
            shuffle_buffer: 10_000,
            epochs: 1,
            max_len: 256,
            eval_fraction: 0.0,
            seed: 0,
            subset: None,
            expression: None,
        };
        let base = plan.masking_bytes(4);
        let doubled_buffer = DataPlan { shuffle_buffer: 20_000, ..plan.clone() }.masking_bytes(4);
        // 10,000 more cells of (48 + 4 × 256) bytes each.
        assert_eq!(doubled_buffer - base, 10_000 * (48 + 4 * 256));
        assert!(DataPlan { batch_size: 16, ..plan.clone() }.masking_bytes(4) > base);
        assert!(DataPlan { max_len: 512, ..plan.clone() }.masking_bytes(4) > base);
        // Unlimited length: the layout's longest sequence.
        let unlimited = DataPlan { max_len: 0, ..plan.clone() }.masking_bytes(4);
        assert_eq!(unlimited, DataPlan { max_len: 2048, ..plan }.masking_bytes(4));
    }

    fn cells(n: u64) -> Vec<(u64, Vec<u32>)> {
        (0..n).map(|k| (k, vec![k as u32])).collect()
    }

    #[test]
    fn an_expression_cell_survives_packing_and_other_payloads_are_not_one() {
        let cell = super::ExpressionCell { genes: vec![5, 3, 9], counts: vec![7.0, 2.5, 1.0], total: 1234.5 };
        let packed = super::ExpressionCell::pack(&cell.genes, &cell.counts, cell.total);
        assert_eq!(super::ExpressionCell::unpack(&packed), Some(cell));
        assert_eq!(super::ExpressionCell::unpack(&[2, 1, 2]), None);
        assert_eq!(super::ExpressionCell::unpack(&[]), None);
    }

    #[test]
    fn tail_parts_cover_every_cell_once_in_order_with_sizes_differing_by_at_most_one() {
        for (n, world) in [(7, 2), (7, 3), (12, 4), (5, 5), (9, 8)] {
            let parts: Vec<Vec<u64>> =
                (0..world).map(|r| split_part(cells(n), r, world).into_iter().map(|c| c.0).collect()).collect();
            assert_eq!(parts.concat(), (0..n).collect::<Vec<_>>(), "n={n} world={world}");
            let sizes: Vec<usize> = parts.iter().map(Vec::len).collect();
            assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1, "{sizes:?}");
        }
    }

    #[test]
    fn fewer_tail_cells_than_ranks_still_gives_every_rank_a_cell() {
        let parts: Vec<u64> = (0..4).map(|r| split_part(cells(3), r, 4)[0].0).collect();
        assert_eq!(parts, vec![0, 1, 2, 0]);
    }
}
