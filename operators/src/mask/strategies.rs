//! Choosing the masked positions of one cell (before the 80/10/10 replacement).

use rand::Rng;

use super::bits::{for_each_bit, pack_flags, RankedBits};

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
    present_genes: RankedBits,
    /// Position and presence flag by local id, with the graph's outside slot last (flags are all
    /// 0 between cells).
    pos: Vec<u32>,
    flags: Vec<u8>,
    masked: MaskedPositions,
    /// Graph genes already used as seeds (bit set over local ids), and the unused ones once
    /// listed (see `next_seed`).
    seed_used: Vec<u64>,
    unused_seeds: Vec<u32>,
    /// A seed's neighbours in the cell (adjacency row AND presence).
    common: RankedBits,
    candidates: Vec<u32>,
    present: Vec<u32>,
    spans: Vec<(u32, u32)>,
}

impl MaskScratch {
    fn start(&mut self, genes: &[u32], graph: Option<&NeighbourTable>) {
        self.masked.reset(genes.len());
        let Some(graph) = graph else { return };
        let (g, words) = (graph.genes(), graph.words());
        // Flags cover whole words and the outside slot `g`; growing keeps them all 0. Both
        // tables have a power-of-two length, so that indexing them with `l & mask` (= `l`, which
        // is at most `g`) needs no bounds check.
        let (pos_mask, flag_mask) = ((g + 1).next_power_of_two() - 1, (words * 64 + 1).next_power_of_two() - 1);
        self.pos.resize(self.pos.len().max(pos_mask + 1), 0);
        self.flags.resize(self.flags.len().max(flag_mask + 1), 0);
        let (pos, flags) = (&mut self.pos[..=pos_mask], &mut self.flags[..=flag_mask]);
        // One look-up and two stores per token, no branch: tokens outside the graph all land in
        // the outside slot.
        for (i, &t) in genes.iter().enumerate() {
            let l = graph.slot(t);
            pos[l & pos_mask] = i as u32;
            flags[l & flag_mask] = 1;
        }
        flags[g] = 0;
        self.present_genes.assign(flags[..words * 64].chunks_exact(64).map(pack_flags));
        self.seed_used.clear();
        self.seed_used.resize(words, 0);
        self.unused_seeds.clear();
        // Flags are all zero between cells: a small graph's are cleared whole, a large graph's
        // one present gene at a time.
        if words <= 64 {
            flags[..words * 64].fill(0);
        } else {
            for_each_bit(&self.present_genes.words, |l| flags[l] = 0);
        }
    }

    /// Number of graph genes present in the cell.
    #[inline]
    fn n_present(&self) -> usize {
        self.present_genes.ones() as usize
    }
}

/// The positions masked so far: a bit set over the cell's genes and its size.
#[derive(Debug, Default)]
struct MaskedPositions {
    bits: Vec<u64>,
    len: usize,
}

impl MaskedPositions {
    fn reset(&mut self, positions: usize) {
        self.bits.clear();
        self.bits.resize(positions.div_ceil(64), 0);
        self.len = 0;
    }

    #[inline]
    fn contains(&self, i: u32) -> bool {
        self.bits[i as usize / 64] & (1 << (i % 64)) != 0
    }

    /// Adds position `i` (a no-op if it is already masked). Branch-free: whether a random
    /// position is already taken is a coin flip the branch predictor cannot learn.
    #[inline]
    fn insert(&mut self, i: u32) {
        let (w, b) = (i as usize / 64, 1u64 << (i % 64));
        let word = self.bits[w];
        self.bits[w] = word | b;
        self.len += usize::from(word & b == 0);
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
    let (budget, quota) = params.budgets(genes.len());
    match params.strategy {
        MaskStrategy::Corrmask => {
            scratch.start(genes, (quota > 0).then_some(tables.graph));
            if quota > 0 {
                correlated_seeds(tables.graph, params.k_max, quota, rng, scratch);
            }
        }
        MaskStrategy::Pmi | MaskStrategy::PmiRand => {
            scratch.start(genes, None);
            if let Some(pmi) = tables.pmi.filter(|_| quota > 0) {
                pmi_spans(genes, pmi, quota, rng, scratch);
            }
        }
        MaskStrategy::Random => scratch.start(genes, None),
    }
    plan.structural = scratch.masked.len;
    top_up(genes.len(), budget, rng, scratch);
    // Ascending order straight from the bitmap (cheaper than sorting).
    plan.positions.clear();
    for_each_bit(&scratch.masked.bits, |i| plan.positions.push(i as u32));
}

/// Algorithm 2's structural phase: shuffled seeds (genes with neighbours), each followed by up
/// to `k_max` partners sampled from its neighbours present in the cell, until `quota`.
fn correlated_seeds(graph: &NeighbourTable, k_max: usize, quota: usize, rng: &mut MaskRng, s: &mut MaskScratch) {
    let n = s.n_present();
    if n <= quota {
        // Seeds and partners are all graph genes of the cell, so the phase can only end with every
        // one of them masked: the same set, without walking the graph.
        let (masked, pos) = (&mut s.masked, &s.pos);
        for_each_bit(&s.present_genes.words, |l| masked.insert(pos[l]));
        return;
    }
    for i in 0..n {
        // Partners are present graph genes too: once all of them are masked nothing can change.
        if s.masked.len >= quota || s.masked.len == n {
            break;
        }
        let local = next_seed(i, rng, s);
        s.masked.insert(s.pos[local as usize]);
        let mut present = std::mem::take(&mut s.present);
        present.clear();
        if let Some(row) = graph.adjacency_row(local) {
            s.common.assign(row.iter().zip(&s.present_genes.words).map(|(&a, &p)| a & p));
            let total = s.common.ones();
            let k = k_max.min(total as usize);
            if total as usize > 2 * k {
                // Many neighbours present, few wanted: draw k distinct ranks among them and
                // look those up, instead of listing them all (an ordered uniform k-sample either way).
                for _ in 0..k {
                    if s.masked.len >= quota {
                        break;
                    }
                    let r = loop {
                        let r = rng.random_range(0..total);
                        if !present.contains(&r) {
                            break r;
                        }
                    };
                    present.push(r);
                    s.masked.insert(s.pos[s.common.select(r)]);
                }
                s.present = present;
                continue;
            }
            for_each_bit(&s.common.words, |l| present.push(s.pos[l]));
        } else {
            // Branch-free compaction: presence is a coin flip the branch predictor cannot learn.
            let nbrs = graph.local_neighbours(local);
            present.resize(nbrs.len(), 0);
            let mut n = 0;
            for &v in nbrs {
                present[n] = s.pos[v as usize];
                n += ((s.present_genes.words[v as usize / 64] >> (v % 64)) & 1) as usize;
            }
            present.truncate(n);
        }
        let k = k_max.min(present.len());
        for a in 0..k {
            if s.masked.len >= quota {
                break;
            }
            let b = rng.random_range(a..present.len());
            present.swap(a, b);
            s.masked.insert(present[a]);
        }
        s.present = present;
    }
}

/// The `i`-th seed of the structural phase: uniform over the cell's graph genes not used as seeds
/// yet (the order of a lazily drawn Fisher–Yates shuffle, without listing the genes: a phase
/// usually stops after a few dozen seeds of hundreds). Drawn by rank with rejection of used ones
/// while most are unused; after that from a list of the rest.
fn next_seed(i: usize, rng: &mut MaskRng, s: &mut MaskScratch) -> u32 {
    let n = s.n_present();
    if s.unused_seeds.is_empty() && 2 * i < n {
        loop {
            let l = s.present_genes.select(rng.random_range(0..n as u32));
            let (w, b) = (l / 64, 1u64 << (l % 64));
            if s.seed_used[w] & b == 0 {
                s.seed_used[w] |= b;
                return l as u32;
            }
        }
    }
    if s.unused_seeds.is_empty() {
        let unused = s.present_genes.words.iter().zip(&s.seed_used).map(|(&p, &u)| p & !u);
        for_each_bit(unused, |l| s.unused_seeds.push(l as u32));
    }
    // `unused_seeds` was listed when `i0 = n - len` seeds were used; entry `i - i0` onwards are free.
    let start = i - (n - s.unused_seeds.len());
    let j = rng.random_range(start..s.unused_seeds.len());
    s.unused_seeds.swap(start, j);
    s.unused_seeds[start]
}

/// PMI's structural phase: whole spans in random order, each taken if it fits in `quota`.
fn pmi_spans(genes: &[u32], pmi: &PmiTable, quota: usize, rng: &mut MaskRng, s: &mut MaskScratch) {
    let mut spans = std::mem::take(&mut s.spans);
    pmi.spans(genes, &mut spans);
    for i in 0..spans.len() {
        let left = quota - s.masked.len;
        if left == 0 {
            break;
        }
        let j = rng.random_range(i..spans.len());
        spans.swap(i, j);
        let (a, b) = spans[i];
        if (b - a) as usize <= left {
            for p in a..b {
                s.masked.insert(p);
            }
        }
    }
    s.spans = spans;
}

/// Uniformly random unmasked positions until exactly `budget` are masked.
fn top_up(len: usize, budget: usize, rng: &mut MaskRng, s: &mut MaskScratch) {
    let need = budget.saturating_sub(s.masked.len);
    if need == 0 {
        return;
    }
    let free = len - s.masked.len;
    if free >= 2 * need {
        // Rejection: each accepted draw is uniform over the positions still free.
        while s.masked.len < budget {
            let i = rng.random_range(0..len as u32);
            s.masked.insert(i);
        }
    } else {
        let mut pool = std::mem::take(&mut s.candidates);
        pool.clear();
        pool.extend((0..len as u32).filter(|&i| !s.masked.contains(i)));
        for a in 0..need {
            let b = rng.random_range(a..pool.len());
            pool.swap(a, b);
            s.masked.insert(pool[a]);
        }
        s.candidates = pool;
    }
}

#[cfg(test)]
mod seed_tests {
    use super::*;

    /// Scratch for a cell holding `present` of a 300-gene ring graph's genes (tokens 10..310).
    fn started(present: usize) -> MaskScratch {
        let graph = NeighbourTable::from_edges((0..300).map(|g| (10 + g, 10 + (g + 1) % 300)));
        let genes: Vec<u32> = (0..present as u32).map(|g| 10 + (g * 7) % 300).chain([5_000, 3]).collect();
        let mut s = MaskScratch::default();
        s.start(&genes, Some(&graph));
        s
    }

    #[test]
    fn seeds_are_a_permutation_of_the_present_graph_genes() {
        for present in [1, 2, 3, 64, 65, 250] {
            for seed in 0..20 {
                let mut s = started(present);
                assert_eq!(s.n_present(), present);
                let mut rng = super::super::cell_rng(seed, 0, present as u64);
                let mut seen: Vec<u32> = (0..present).map(|i| next_seed(i, &mut rng, &mut s)).collect();
                seen.sort_unstable();
                let mut expected: Vec<u32> = (0..present as u32).map(|g| (g * 7) % 300).collect();
                expected.sort_unstable();
                assert_eq!(seen, expected, "present {present}, seed {seed}");
            }
        }
    }

    #[test]
    fn each_draw_of_the_seed_order_is_uniform() {
        // First seed (rejection regime) and the 60th of 64 (listed regime): each of the 64 genes
        // ~1/64 of 12,800 draws = 200 (±5 standard deviations ≈ ±70).
        for at in [0, 60] {
            let mut counts = [0u32; 300];
            for cell in 0..12_800 {
                let mut s = started(64);
                let mut rng = super::super::cell_rng(9, at as u64, cell);
                let l = (0..=at).map(|i| next_seed(i, &mut rng, &mut s)).last().unwrap();
                counts[l as usize] += 1;
            }
            let hit: Vec<u32> = counts.iter().copied().filter(|&c| c > 0).collect();
            assert_eq!(hit.len(), 64);
            assert!(hit.iter().all(|&c| (130..=270).contains(&c)), "draw {at}: {hit:?}");
        }
    }
}
