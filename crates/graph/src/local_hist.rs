//! ρ_local of a streamed build when the postings of the candidate pairs' genes do not fit the
//! memory budget. Gathering postings in rounds re-reads the corpus once per round, and the
//! rounds grow with the cells (session 53: 2 at 1M cells, 90 at 4M), so the build became
//! quadratic. Here a round holds, per candidate pair, the two score histograms of its
//! co-present cells (a count per score either gene takes anywhere, [`ScoreBins`]; at most
//! 2 · L_max, whatever the number of cells), and takes two passes:
//! (1) the histograms, summed over blocks of cells and over workers, become each side's doubled
//! mid-ranks; (2) `Σ R_u·R_v` over the co-present cells. These are the integer sums
//! [`spearman_average_ranks`](corrflow_algorithms::graph::spearman_average_ranks) forms from
//! the whole overlap, so ρ is the in-memory build's, bit for bit, and the rounds depend on the
//! candidate pairs and the budget, not on the cells.

use std::ops::Range;

use corrflow_algorithms::graph::{
    count_scores, doubled_ranks_in_place, rank_cross, rho_of_sums, GraphVocab, ScoreHistograms,
};
use rayon::prelude::*;

use super::overlap::{Overlaps, PostingBlock};
use super::parallel::{gather, ShardSet, To};
use corrflow_io::error::Result;

/// Bytes of a posting in a worker's block ([`PostingBlock`]: as added, then grouped).
const POSTING_BYTES: u64 = 16;

/// How a histogram round is sized within a memory budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HistogramSizing {
    /// Histogram bytes of a round's pairs, one copy (at least one pair a round).
    pub round_bytes: u64,
    /// Postings a worker holds at once: the block of cells whose overlaps are counted together.
    pub block_postings: usize,
}

impl HistogramSizing {
    /// Three quarters of `budget_bytes` for the histograms of a round: every worker of this
    /// process holds its partial and receives every worker's (`copies` = local workers × all
    /// workers); a quarter for the workers' posting blocks ([`POSTING_BYTES`] a posting).
    pub fn new(budget_bytes: u64, local_workers: usize, peers: usize) -> Self {
        let copies = (local_workers.max(1) * peers.max(1)) as u64;
        let block = budget_bytes / 4 / (POSTING_BYTES * local_workers.max(1) as u64);
        Self { round_bytes: budget_bytes / 4 * 3 / copies, block_postings: block.clamp(1 << 16, 1 << 24) as usize }
    }
}

/// Per gene, the scores it takes anywhere in the shard set, numbered in ascending order. A
/// pair's co-present cells are among the gene's cells, so its histograms need a bin only for
/// these (on the driver's atlases 32% of `2 · L_max` per pair at 59k cells, 42% at 944k), and
/// mid-ranks depend only on the order of the scores: counting in these bins gives the same
/// integer sums as counting by score.
pub(crate) struct ScoreBins {
    l_max: usize,
    /// `bin[u · l_max + s]`: gene u's bin for score s (`u16::MAX` where u never has s).
    bin: Vec<u16>,
    /// Bins per gene.
    len: Vec<usize>,
}

impl ScoreBins {
    pub fn new(hist: &ScoreHistograms) -> Self {
        let l = hist.l_max;
        let mut bin = vec![u16::MAX; hist.counts.len()];
        let len = bin
            .chunks_mut(l)
            .zip(hist.counts.chunks(l))
            .map(|(b, counts)| {
                let mut k = 0;
                for (b, _) in b.iter_mut().zip(counts).filter(|(_, &c)| c > 0) {
                    // k < l_max ≤ 65,535 (GraphParams::validate), so never u16::MAX.
                    *b = k as u16;
                    k += 1;
                }
                k
            })
            .collect();
        Self { l_max: l, bin, len }
    }

    /// Histogram counts of a pair (both sides).
    fn pair_bins(&self, (u, v): (usize, usize)) -> usize {
        self.len[u] + self.len[v]
    }

    /// Consecutive pairs whose histograms fill at most `bytes` each (one pair at least).
    fn rounds(&self, pairs: &[(usize, usize)], bytes: u64) -> Vec<Range<usize>> {
        let mut rounds = Vec::new();
        let (mut start, mut held) = (0, 0u64);
        for (i, &p) in pairs.iter().enumerate() {
            let size = 4 * self.pair_bins(p) as u64;
            if i > start && held + size > bytes {
                rounds.push(start..i);
                (start, held) = (i, 0);
            }
            held += size;
        }
        if start < pairs.len() {
            rounds.push(start..pairs.len());
        }
        rounds
    }

    /// What [`ShardSet::posting_blocks`] stores for each (gene, score): the bin for the genes
    /// of `round`, nothing (`u16::MAX`) for the others.
    fn stored(&self, round: &[(usize, usize)]) -> Vec<u16> {
        let mut stored = vec![u16::MAX; self.bin.len()];
        let l = self.l_max;
        for &(u, v) in round {
            for x in [u, v] {
                stored[x * l..(x + 1) * l].copy_from_slice(&self.bin[x * l..(x + 1) * l]);
            }
        }
        stored
    }
}

/// Start of each pair's histograms (side u, then side v) in a round's buffer, and its end.
fn offsets(bins: &ScoreBins, round: &[(usize, usize)]) -> Vec<usize> {
    let mut at = Vec::with_capacity(round.len() + 1);
    at.push(0);
    round.iter().for_each(|&p| at.push(at[at.len() - 1] + bins.pair_bins(p)));
    at
}

/// Each pair's part of a round's buffer, and the length of its side u.
fn split_pairs<'a>(
    mut buffer: &'a mut [u32],
    at: &[usize],
    bins: &ScoreBins,
    round: &[(usize, usize)],
) -> Vec<(&'a mut [u32], usize)> {
    let mut parts = Vec::with_capacity(round.len());
    for (w, &(u, _)) in at.windows(2).zip(round) {
        let (part, rest) = std::mem::take(&mut buffer).split_at_mut(w[1] - w[0]);
        parts.push((part, bins.len[u]));
        buffer = rest;
    }
    parts
}

/// ρ_local of `pairs` (indices into `genes`) over every cell of the shard set, in rounds of
/// at most [`HistogramSizing::round_bytes`] of histograms: `Some` on worker 0, with the rounds
/// taken.
pub(crate) fn local_by_histograms(
    worker: &mut timely::worker::Worker,
    set: &ShardSet,
    mine: &[usize],
    genes: &GraphVocab,
    bins: &ScoreBins,
    pairs: &[(usize, usize)],
    sizing: HistogramSizing,
) -> Result<(Option<Vec<f64>>, usize)> {
    let mut rho = (worker.index() == 0).then(|| Vec::with_capacity(pairs.len()));
    let rounds = bins.rounds(pairs, sizing.round_bytes);
    for range in &rounds {
        let round = &pairs[range.clone()];
        let stored = bins.stored(round);
        let each_block = |f: &mut dyn FnMut(&Overlaps<PostingBlock>)| {
            set.posting_blocks(mine, genes, bins.l_max, &stored, sizing.block_postings, |block| {
                f(&Overlaps::new(block, block.cells()))
            })
        };
        let at = offsets(bins, round);
        // (1) Both sides' histograms (in the genes' bins) on each pair's co-present cells.
        let mut hist = vec![0u32; at[round.len()]];
        let mut parts = split_pairs(&mut hist, &at, bins, round);
        let read = each_block(&mut |overlaps| {
            parts.par_iter_mut().zip(round.par_iter()).with_min_len(8).for_each(|((h, side), &(u, v))| {
                let (ha, hb) = h.split_at_mut(*side);
                overlaps.with(u, v, |o| count_scores(o, ha, hb))
            })
        });
        drop(parts);
        let counted = read.map(|()| hist);
        let add = |t: &mut Vec<u32>, p: &Vec<u32>| t.iter_mut().zip(p).for_each(|(a, b)| *a += b);
        let mut ranks = gather(worker, counted, &add, To::Everyone)?.expect("every worker receives"); // ok: To::Everyone

        // Cells per pair and Σ R² per side; the histograms become doubled mid-ranks.
        let sums: Vec<(u64, i128, i128)> = split_pairs(&mut ranks, &at, bins, round)
            .into_par_iter()
            .map(|(h, side)| {
                let n = h[..side].iter().map(|&c| u64::from(c)).sum::<u64>();
                let (ha, hb) = h.split_at_mut(side);
                (n, doubled_ranks_in_place(ha), doubled_ranks_in_place(hb))
            })
            .collect();
        // (2) Σ R_u·R_v on the co-present cells.
        let mut cross = vec![0i128; round.len()];
        let read = each_block(&mut |overlaps| {
            cross.par_iter_mut().enumerate().with_min_len(8).for_each(|(i, c)| {
                let ((u, v), n) = (round[i], sums[i].0);
                let (ra, rb) = ranks[at[i]..at[i + 1]].split_at(bins.len[u]);
                *c += overlaps.with(u, v, |o| rank_cross(o, ra, rb, 2 * n + 1));
            })
        });
        let summed = read.map(|()| cross);
        let add = |t: &mut Vec<i128>, p: &Vec<i128>| t.iter_mut().zip(p).for_each(|(a, b)| *a += b);
        if let (Some(cross), Some(rho)) = (gather(worker, summed, &add, To::First)?, rho.as_mut()) {
            rho.extend(sums.iter().zip(&cross).map(|(&(n, sq_u, sq_v), &c)| rho_of_sums(n, c, sq_u, sq_v)));
        }
    }
    Ok((rho, rounds.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_fit_the_budget_and_hold_at_least_one_pair() {
        // 3 GB, one worker: three quarters for the histograms, blocks at most 2^24 postings.
        let s = HistogramSizing::new(3 << 30, 1, 1);
        assert_eq!(s.round_bytes, (3u64 << 30) / 4 * 3);
        assert_eq!(s.block_postings, 1 << 24);
        // Two workers in one process: each holds its own and both partials.
        assert_eq!(HistogramSizing::new(3 << 30, 2, 2).round_bytes, s.round_bytes / 4);
        let tiny = HistogramSizing::new(1 << 10, 4, 8);
        assert_eq!(tiny.block_postings, 1 << 16);
    }

    #[test]
    fn bins_number_each_genes_scores_and_rounds_split_by_their_bytes() {
        // Gene 0 takes scores 1 and 3, gene 1 only 0, gene 2 all four.
        let mut hist = ScoreHistograms::new(3, 4);
        hist.counts = vec![0, 5, 0, 2, 7, 0, 0, 0, 1, 1, 1, 1];
        let bins = ScoreBins::new(&hist);
        assert_eq!(bins.len, vec![2, 1, 4]);
        assert_eq!(&bins.bin[..4], &[u16::MAX, 0, u16::MAX, 1]);
        let pairs = [(0, 1), (0, 2), (1, 2), (0, 1)];
        // 3, 6, 5 and 3 bins: 12, 24, 20 and 12 bytes.
        assert_eq!(bins.rounds(&pairs, 36), vec![0..2, 2..4]);
        assert_eq!(bins.rounds(&pairs, 1), vec![0..1, 1..2, 2..3, 3..4]);
        assert_eq!(bins.rounds(&pairs, 1 << 20), vec![0..4]);
        assert_eq!(offsets(&bins, &pairs), vec![0, 3, 9, 14, 17]);
        let stored = bins.stored(&pairs[..1]);
        assert_eq!(
            stored,
            vec![u16::MAX, 0, u16::MAX, 1, 0, u16::MAX, u16::MAX, u16::MAX, u16::MAX, u16::MAX, u16::MAX, u16::MAX]
        );
    }
}
