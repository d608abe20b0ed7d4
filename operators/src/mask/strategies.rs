//! Choosing the masked positions of one cell (before the 80/10/10 replacement).

use rand::Rng;

use super::neighbours::NONE_LOCAL;
use super::{MaskParams, MaskRng, MaskStrategy, NeighbourTable, PmiTable};

/// The masked positions of one cell (indices into its gene tokens, ascending) and how many of
/// them the structural phase chose (CorrMask seeds and partners, or PMI spans).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MaskPlan {
    pub positions: Vec<u32>,
    pub structural: usize,
}

/// What the strategies read: the dependency graph, and the PMI table for `pmi`/`pmi-rand`.
#[derive(Clone, Copy, Debug)]
pub struct MaskTables<'a> {
    pub graph: &'a NeighbourTable,
    pub pmi: Option<&'a PmiTable>,
}

/// Reusable per-thread buffers, so masking a cell allocates nothing in the steady state.
#[derive(Debug, Default)]
pub struct MaskScratch {
    /// Bit set over graph-local ids: the cell's graph genes; `pos[l]` is gene `l`'s position.
    present_bits: Vec<u64>,
    pos: Vec<u32>,
    masked: Vec<u64>,
    /// Seeds: (position, local id) of the cell's genes that have neighbours (the first `n_seeds`).
    seeds: Vec<(u32, u32)>,
    n_seeds: usize,
    candidates: Vec<u32>,
    present: Vec<u32>,
    spans: Vec<(u32, u32)>,
}

impl MaskScratch {
    fn start(&mut self, genes: &[u32], graph: Option<&NeighbourTable>) {
        self.masked.clear();
        self.masked.resize(genes.len().div_ceil(64), 0);
        let Some(graph) = graph else { return };
        self.present_bits.clear();
        self.present_bits.resize(graph.words(), 0);
        if self.pos.len() < graph.genes() {
            self.pos.resize(graph.genes(), 0);
        }
        if self.seeds.len() < genes.len() {
            self.seeds.resize(genes.len(), (0, 0));
        }
        // Branch-free: write every position, keep those of graph genes (the buffer only grows).
        let mut n = 0;
        for (i, &t) in genes.iter().enumerate() {
            let l = u32::from(graph.local_u16(t));
            self.seeds[n] = (i as u32, l);
            n += usize::from(l != NONE_LOCAL);
        }
        for &(i, l) in &self.seeds[..n] {
            self.present_bits[l as usize / 64] |= 1 << (l % 64);
            self.pos[l as usize] = i;
        }
        self.n_seeds = n;
    }

    #[inline]
    fn is_masked(&self, i: u32) -> bool {
        self.masked[i as usize / 64] & (1 << (i % 64)) != 0
    }

    /// Adds position `i`; false if it was already masked.
    #[inline]
    fn mask(&mut self, i: u32, plan: &mut MaskPlan) -> bool {
        let (w, b) = (i as usize / 64, 1u64 << (i % 64));
        if self.masked[w] & b != 0 {
            return false;
        }
        self.masked[w] |= b;
        plan.positions.push(i);
        true
    }
}

/// Chooses the masked positions of one cell's gene tokens into `plan`, exactly `⌊L·p⌋` of them.
pub fn mask_cell(
    genes: &[u32],
    params: &MaskParams,
    tables: MaskTables<'_>,
    rng: &mut MaskRng,
    scratch: &mut MaskScratch,
    plan: &mut MaskPlan,
) {
    plan.positions.clear();
    plan.structural = 0;
    let (budget, quota) = params.budgets(genes.len());
    match params.strategy {
        MaskStrategy::Corrmask => {
            scratch.start(genes, (quota > 0).then_some(tables.graph));
            if quota > 0 {
                correlated_seeds(tables.graph, params.k_max, quota, rng, scratch, plan);
            }
        }
        MaskStrategy::Pmi | MaskStrategy::PmiRand => {
            scratch.start(genes, None);
            if let Some(pmi) = tables.pmi.filter(|_| quota > 0) {
                pmi_spans(genes, pmi, quota, rng, scratch, plan);
            }
        }
        MaskStrategy::Random => scratch.start(genes, None),
    }
    plan.structural = plan.positions.len();
    top_up(genes.len(), budget, rng, scratch, plan);
    // Ascending order straight from the bitmap (cheaper than sorting).
    plan.positions.clear();
    for (w, &word) in scratch.masked.iter().enumerate() {
        let mut bits = word;
        while bits != 0 {
            plan.positions.push((w * 64) as u32 + bits.trailing_zeros());
            bits &= bits - 1;
        }
    }
}

/// Algorithm 2's structural phase: shuffled seeds (genes with neighbours), each followed by up
/// to `k_max` partners sampled from its neighbours present in the cell, until `quota`.
fn correlated_seeds(
    graph: &NeighbourTable,
    k_max: usize,
    quota: usize,
    rng: &mut MaskRng,
    s: &mut MaskScratch,
    plan: &mut MaskPlan,
) {
    let mut all = std::mem::take(&mut s.seeds);
    let seeds = &mut all[..s.n_seeds];
    if seeds.len() <= quota {
        // Seeds and partners are all graph genes of the cell, so the phase can only end with every
        // one of them masked: the same set, without walking the graph.
        for &(p, _) in seeds.iter() {
            s.mask(p, plan);
        }
        s.seeds = all;
        return;
    }
    // Fisher–Yates drawn lazily: the order of the seeds actually used is a uniform shuffle.
    for i in 0..seeds.len() {
        // Partners are present graph genes too: once all of them are masked nothing can change.
        if plan.positions.len() >= quota || plan.positions.len() == seeds.len() {
            break;
        }
        let j = rng.random_range(i..seeds.len());
        seeds.swap(i, j);
        let (seed, local) = seeds[i];
        s.mask(seed, plan);
        let mut present = std::mem::take(&mut s.present);
        present.clear();
        if let Some(row) = graph.adjacency_row(local) {
            let total: usize = row.iter().zip(&s.present_bits).map(|(&a, &p)| (a & p).count_ones() as usize).sum();
            let k = k_max.min(total);
            if total > 2 * k {
                // Many neighbours present, few wanted: draw k distinct ranks among them and
                // look those up, instead of listing them all (an ordered uniform k-sample either way).
                for _ in 0..k {
                    if plan.positions.len() >= quota {
                        break;
                    }
                    let r = loop {
                        let r = rng.random_range(0..total as u32);
                        if !present.contains(&r) {
                            break r;
                        }
                    };
                    present.push(r);
                    let l = nth_common_bit(row, &s.present_bits, r as usize);
                    s.mask(s.pos[l], plan);
                }
                s.present = present;
                continue;
            }
            // The seed's neighbours in the cell, in ascending local id.
            for (w, (&a, &p)) in row.iter().zip(&s.present_bits).enumerate() {
                let mut bits = a & p;
                while bits != 0 {
                    present.push(s.pos[w * 64 + bits.trailing_zeros() as usize]);
                    bits &= bits - 1;
                }
            }
        } else {
            // Branch-free compaction: presence is a coin flip the branch predictor cannot learn.
            let nbrs = graph.local_neighbours(local);
            present.resize(nbrs.len(), 0);
            let mut n = 0;
            for &v in nbrs {
                present[n] = s.pos[v as usize];
                n += ((s.present_bits[v as usize / 64] >> (v % 64)) & 1) as usize;
            }
            present.truncate(n);
        }
        let k = k_max.min(present.len());
        for a in 0..k {
            if plan.positions.len() >= quota {
                break;
            }
            let b = rng.random_range(a..present.len());
            present.swap(a, b);
            s.mask(present[a], plan);
        }
        s.present = present;
    }
    s.seeds = all;
}

/// Index of the `r`-th (from 0) bit set in both `a` and `b`; there are more than `r` of them.
fn nth_common_bit(a: &[u64], b: &[u64], mut r: usize) -> usize {
    for (w, (&x, &y)) in a.iter().zip(b).enumerate() {
        let bits = x & y;
        let c = bits.count_ones() as usize;
        if r < c {
            return w * 64 + select_in_word(bits, r as u32) as usize;
        }
        r -= c;
    }
    unreachable!("fewer common bits than the count computed from the same words")
}

/// Position of the `r`-th (from 0) set bit of `x`, which has more than `r`: a branch-free binary
/// search on popcounts (x86-64-v2 has no `pdep`; clearing `r` low bits one by one cost up to 63
/// dependent steps).
#[inline]
fn select_in_word(mut x: u64, mut r: u32) -> u32 {
    let mut pos = 0;
    for shift in [32u32, 16, 8, 4, 2, 1] {
        let low = (x & ((1u64 << shift) - 1)).count_ones();
        let up = u32::from(r >= low);
        r -= low * up;
        x >>= shift * up;
        pos += shift * up;
    }
    pos
}

/// PMI's structural phase: whole spans in random order, each taken if it fits in `quota`.
fn pmi_spans(genes: &[u32], pmi: &PmiTable, quota: usize, rng: &mut MaskRng, s: &mut MaskScratch, plan: &mut MaskPlan) {
    let mut spans = std::mem::take(&mut s.spans);
    pmi.spans(genes, &mut spans);
    for i in 0..spans.len() {
        let left = quota - plan.positions.len();
        if left == 0 {
            break;
        }
        let j = rng.random_range(i..spans.len());
        spans.swap(i, j);
        let (a, b) = spans[i];
        if (b - a) as usize <= left {
            for p in a..b {
                s.mask(p, plan);
            }
        }
    }
    s.spans = spans;
}

/// Uniformly random unmasked positions until exactly `budget` are masked.
fn top_up(len: usize, budget: usize, rng: &mut MaskRng, s: &mut MaskScratch, plan: &mut MaskPlan) {
    let need = budget.saturating_sub(plan.positions.len());
    if need == 0 {
        return;
    }
    let free = len - plan.positions.len();
    if free >= 2 * need {
        // Rejection: each accepted draw is uniform over the positions still free.
        while plan.positions.len() < budget {
            let i = rng.random_range(0..len as u32);
            s.mask(i, plan);
        }
    } else {
        let mut pool = std::mem::take(&mut s.candidates);
        pool.clear();
        pool.extend((0..len as u32).filter(|&i| !s.is_masked(i)));
        for a in 0..need {
            let b = rng.random_range(a..pool.len());
            pool.swap(a, b);
            s.mask(pool[a], plan);
        }
        s.candidates = pool;
    }
}

#[cfg(test)]
mod select_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn select_in_word_finds_the_rth_set_bit(x in any::<u64>().prop_filter("nonzero", |x| *x != 0), r in 0u32..64) {
            let r = r % x.count_ones();
            let expected = (0..64).filter(|b| x >> b & 1 == 1).nth(r as usize).unwrap();
            prop_assert_eq!(select_in_word(x, r), expected);
        }

        #[test]
        fn nth_common_bit_walks_words(a in proptest::collection::vec(any::<u64>(), 1..6), seed in any::<u64>()) {
            let b: Vec<u64> = a.iter().enumerate().map(|(i, &w)| w.rotate_left(i as u32 + 7) ^ seed).collect();
            let common: Vec<usize> =
                (0..a.len() * 64).filter(|&i| (a[i / 64] & b[i / 64]) >> (i % 64) & 1 == 1).collect();
            for (r, &i) in common.iter().enumerate() {
                prop_assert_eq!(nth_common_bit(&a, &b, r), i);
            }
        }
    }
}
