//! `corrmask`: CorrMask Algorithm 2's structural phase. A share `lambda` of the budget goes to
//! shuffled seeds (genes of the cell with graph neighbours), each followed by up to `k_max`
//! partners sampled from its neighbours present in the cell.

use rand::Rng;

use super::bits::for_each_bit;
use super::strategies::{MaskScratch, StructuralPhase};
use super::{MaskParams, MaskRng, MaskingStrategy, NeighbourTable};

pub struct CorrMask;

impl MaskingStrategy for CorrMask {
    fn name(&self) -> &'static str {
        "corrmask"
    }

    fn structural_share(&self, params: &MaskParams) -> f64 {
        params.lambda
    }

    fn needs_graph(&self) -> bool {
        true
    }

    fn structural(&self, phase: &mut StructuralPhase<'_>) {
        correlated_seeds(phase.tables.graph, phase.params.k_max, phase.quota, phase.rng, phase.scratch);
    }
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
