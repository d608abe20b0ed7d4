//! ρ_local of a streamed build when the postings of the candidate pairs' genes do not fit the
//! memory budget. Gathering postings in rounds re-reads the corpus once per round, and the
//! rounds grow with the cells (session 53: 2 at 1M cells, 90 at 4M), so the build became
//! quadratic. Here a round holds, per candidate pair, the two score histograms of its
//! co-present cells (2 · L_max counts, whatever the number of cells), and takes two passes:
//! (1) the histograms, summed over blocks of cells and over workers, become each side's doubled
//! mid-ranks; (2) `Σ R_u·R_v` over the co-present cells. These are the integer sums
//! [`spearman_average_ranks`](corrflow_algorithms::graph::spearman_average_ranks) forms from
//! the whole overlap, so ρ is the in-memory build's, bit for bit, and the rounds depend on the
//! candidate pairs and the budget, not on the cells.

use corrflow_algorithms::graph::{count_scores, doubled_ranks_in_place, rank_cross, rho_of_sums, GraphVocab};
use rayon::prelude::*;

use super::overlap::Overlaps;
use super::parallel::{gather, ShardSet, To};
use corrflow_io::error::Result;

/// How a histogram round is sized within a memory budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HistogramSizing {
    /// Candidate pairs per round (two passes each).
    pub pairs_per_round: usize,
    /// Postings a worker holds at once: the block of cells whose overlaps are counted together.
    pub block_postings: usize,
}

impl HistogramSizing {
    /// Three quarters of `budget_bytes` for the histograms of a round: every worker of this
    /// process holds its partial and receives every worker's (`copies` = local workers × all
    /// workers); a quarter for the workers' posting blocks (8 bytes a posting).
    pub fn new(budget_bytes: u64, l_max: usize, local_workers: usize, peers: usize) -> Self {
        let copies = (local_workers.max(1) * peers.max(1)) as u64;
        let per_pair = 2 * l_max.max(1) as u64 * 4 * copies;
        let pairs_per_round = ((budget_bytes / 4 * 3) / per_pair).max(1) as usize;
        let block = budget_bytes / 4 / (8 * local_workers.max(1) as u64);
        Self { pairs_per_round, block_postings: block.clamp(1 << 16, 1 << 24) as usize }
    }
}

/// ρ_local of `pairs` (indices into `genes`) over every cell of the shard set, in rounds of
/// [`HistogramSizing::pairs_per_round`] pairs: `Some` on worker 0, with the rounds taken.
pub(crate) fn local_by_histograms(
    worker: &mut timely::worker::Worker,
    set: &ShardSet,
    mine: &[usize],
    genes: &GraphVocab,
    l: usize,
    pairs: &[(usize, usize)],
    sizing: HistogramSizing,
) -> Result<(Option<Vec<f64>>, usize)> {
    let mut rho = (worker.index() == 0).then(|| Vec::with_capacity(pairs.len()));
    let mut rounds = 0;
    for round in pairs.chunks(sizing.pairs_per_round) {
        rounds += 1;
        let mut wanted = vec![false; genes.len()];
        round.iter().for_each(|&(u, v)| (wanted[u], wanted[v]) = (true, true));
        let each_block = |f: &mut dyn FnMut(&Overlaps)| {
            set.posting_blocks(mine, genes, l, &wanted, sizing.block_postings, |postings, cells| {
                f(&Overlaps::new(postings, cells))
            })
        };
        // (1) Both sides' score histograms on each pair's co-present cells.
        let mut hist = vec![0u32; round.len() * 2 * l];
        let read = each_block(&mut |overlaps| {
            hist.par_chunks_mut(2 * l).zip(round.par_iter()).with_min_len(8).for_each(|(h, &(u, v))| {
                let (ha, hb) = h.split_at_mut(l);
                overlaps.with(u, v, |o| count_scores(o, ha, hb))
            })
        });
        let counted = read.map(|()| hist);
        let add = |t: &mut Vec<u32>, p: &Vec<u32>| t.iter_mut().zip(p).for_each(|(a, b)| *a += b);
        let mut ranks = gather(worker, counted, &add, To::Everyone)?.expect("every worker receives"); // ok: To::Everyone

        // Cells per pair and Σ R² per side; the histograms become doubled mid-ranks.
        let sums: Vec<(u64, i128, i128)> = ranks
            .par_chunks_mut(2 * l)
            .map(|h| {
                let n = h[..l].iter().map(|&c| u64::from(c)).sum::<u64>();
                let (ha, hb) = h.split_at_mut(l);
                (n, doubled_ranks_in_place(ha), doubled_ranks_in_place(hb))
            })
            .collect();
        // (2) Σ R_u·R_v on the co-present cells.
        let mut cross = vec![0i128; round.len()];
        let read = each_block(&mut |overlaps| {
            cross
                .par_iter_mut()
                .zip(round.par_iter())
                .zip(ranks.par_chunks(2 * l))
                .zip(sums.par_iter())
                .with_min_len(8)
                .for_each(|(((c, &(u, v)), r), &(n, _, _))| {
                    *c += overlaps.with(u, v, |o| rank_cross(o, &r[..l], &r[l..], 2 * n + 1));
                })
        });
        let summed = read.map(|()| cross);
        let add = |t: &mut Vec<i128>, p: &Vec<i128>| t.iter_mut().zip(p).for_each(|(a, b)| *a += b);
        if let (Some(cross), Some(rho)) = (gather(worker, summed, &add, To::First)?, rho.as_mut()) {
            rho.extend(sums.iter().zip(&cross).map(|(&(n, sq_u, sq_v), &c)| rho_of_sums(n, c, sq_u, sq_v)));
        }
    }
    Ok((rho, rounds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_fit_the_budget_and_hold_at_least_one_pair() {
        // 3 GB, L_max 2,048, one worker: 16 KB a pair, 144k pairs a round.
        let s = HistogramSizing::new(3 << 30, 2048, 1, 1);
        assert_eq!(s.pairs_per_round, ((3u64 << 30) / 4 * 3 / 16384) as usize);
        assert_eq!(s.block_postings, 1 << 24);
        // Two workers in one process: each holds its own and both partials.
        assert_eq!(HistogramSizing::new(3 << 30, 2048, 2, 2).pairs_per_round, s.pairs_per_round / 4);
        let tiny = HistogramSizing::new(1 << 10, 2048, 4, 8);
        assert_eq!((tiny.pairs_per_round, tiny.block_postings), (1, 1 << 16));
    }
}
