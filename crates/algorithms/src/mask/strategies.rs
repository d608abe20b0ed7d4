//! Choosing the masked positions of one cell (before the 80/10/10 replacement).

use rand::Rng;

use super::bits::{for_each_bit, pack_flags, RankedBits};

use super::{MaskParams, MaskRng, NeighbourTable, PmiTable};

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
    pub(super) present_genes: RankedBits,
    /// Position and presence flag by local id, with the graph's outside slot last (flags are all
    /// 0 between cells).
    pub(super) pos: Vec<u32>,
    pub(super) flags: Vec<u8>,
    pub(super) masked: MaskedPositions,
    /// Graph genes already used as seeds (bit set over local ids), and the unused ones once
    /// listed (see `next_seed`).
    pub(super) seed_used: Vec<u64>,
    pub(super) unused_seeds: Vec<u32>,
    /// A seed's neighbours in the cell (adjacency row AND presence).
    pub(super) common: RankedBits,
    pub(super) candidates: Vec<u32>,
    pub(super) present: Vec<u32>,
    pub(super) spans: Vec<(u32, u32)>,
}

impl MaskScratch {
    pub(super) fn start(&mut self, genes: &[u32], graph: Option<&NeighbourTable>) {
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
    pub(super) fn n_present(&self) -> usize {
        self.present_genes.ones() as usize
    }
}

/// The positions masked so far: a bit set over the cell's genes and its size.
#[derive(Debug, Default)]
pub(super) struct MaskedPositions {
    pub(super) bits: Vec<u64>,
    pub(super) len: usize,
}

impl MaskedPositions {
    fn reset(&mut self, positions: usize) {
        self.bits.clear();
        self.bits.resize(positions.div_ceil(64), 0);
        self.len = 0;
    }

    #[inline]
    pub(super) fn contains(&self, i: u32) -> bool {
        self.bits[i as usize / 64] & (1 << (i % 64)) != 0
    }

    /// Adds position `i` (a no-op if it is already masked). Branch-free: whether a random
    /// position is already taken is a coin flip the branch predictor cannot learn.
    #[inline]
    pub(super) fn insert(&mut self, i: u32) {
        let (w, b) = (i as usize / 64, 1u64 << (i % 64));
        let word = self.bits[w];
        self.bits[w] = word | b;
        self.len += usize::from(word & b == 0);
    }
}

/// The structural phase of one cell, as a strategy sees it: the cell's gene tokens, the quota
/// `B_s` it may fill, the parameters and tables, the cell's RNG, and the positions masked so
/// far. Whatever the strategy leaves unfilled is topped up uniformly.
pub struct StructuralPhase<'a> {
    pub genes: &'a [u32],
    pub quota: usize,
    pub params: &'a MaskParams,
    pub tables: MaskTables<'a>,
    pub rng: &'a mut MaskRng,
    pub(super) scratch: &'a mut MaskScratch,
}

impl StructuralPhase<'_> {
    /// Masks position `i` of the genes (a no-op if it already is).
    pub fn mask(&mut self, i: u32) {
        debug_assert!((i as usize) < self.genes.len());
        self.scratch.masked.insert(i);
    }

    /// Positions masked so far.
    pub fn masked(&self) -> usize {
        self.scratch.masked.len
    }

    pub fn is_masked(&self, i: u32) -> bool {
        self.scratch.masked.contains(i)
    }

    /// Room left in the quota.
    pub fn left(&self) -> usize {
        self.quota.saturating_sub(self.masked())
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
    let strategy = params.strategy.get();
    // The cell's graph genes are indexed once, and only for a strategy that reads the graph.
    scratch.start(genes, (quota > 0 && strategy.needs_graph()).then_some(tables.graph));
    if quota > 0 {
        let mut phase = StructuralPhase { genes, quota, params, tables, rng: &mut *rng, scratch: &mut *scratch };
        strategy.structural(&mut phase);
    }
    plan.structural = scratch.masked.len;
    top_up(genes.len(), budget, rng, scratch);
    // Ascending order straight from the bitmap (cheaper than sorting).
    plan.positions.clear();
    for_each_bit(&scratch.masked.bits, |i| plan.positions.push(i as u32));
}

/// Uniformly random unmasked positions until exactly `budget` are masked.
pub(super) fn top_up(len: usize, budget: usize, rng: &mut MaskRng, s: &mut MaskScratch) {
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
