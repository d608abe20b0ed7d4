//! The modularity sweep's data and masks (paper Fig. 3, Appendix B.2).
//!
//! A sample is one value per gene; its tokens are the genes' within-sample ranks, in gene order:
//! position `1 + g` of the model input holds the rank of gene `g` (position 0 is [CLS]). The
//! vocabulary is the `genes` rank tokens, then [CLS] and [MASK]. Masking chooses gene positions:
//! uniformly ([`random_mask`]) or by the ground-truth modules ([`correlation_mask`]).

use corrflow_algorithms::mask::{apply_replacement, MaskPlan, MaskRng, Replacement, IGNORE_INDEX};
use rand::seq::SliceRandom;
use rand::Rng;

use super::{exponential, normal, rng, Background, ModularityParams};

/// A generated data set.
#[derive(Clone, Debug, PartialEq)]
pub struct ModularityData {
    /// Per sample, the rank (0 = lowest value) of each gene, in gene order.
    pub tokens: Vec<Vec<u32>>,
    /// The active module of each sample: its class label.
    pub labels: Vec<u32>,
    /// Whether the signal went to the module's own genes (probability γ).
    pub coherent: Vec<bool>,
    /// The genes that received the signal, per sample (ascending).
    pub activated: Vec<Vec<u32>>,
}

/// Token ids of the special tokens for `genes` rank tokens.
pub fn cls_token(genes: usize) -> u32 {
    genes as u32
}

pub fn mask_token(genes: usize) -> u32 {
    genes as u32 + 1
}

/// Genes of module `m` (contiguous equal blocks).
pub fn module_genes(m: usize, genes: usize, modules: usize) -> std::ops::Range<usize> {
    let size = genes / modules;
    m * size..(m + 1) * size
}

/// Appendix B.2, steps (1)–(4): sample `i` draws from its own stream `(seed, i)`. With
/// probability 1 − γ the signal goes to a fresh uniform set of |m| genes (the paper's "random
/// set of the same size", read literally: per sample).
pub fn generate(p: &ModularityParams, background: Background, gamma: f64, seed: u64) -> ModularityData {
    let (n, k) = (p.genes, p.modules);
    let size = n / k;
    let rate = background.rate(p.background_param);
    let mut out = ModularityData { tokens: vec![], labels: vec![], coherent: vec![], activated: vec![] };
    for i in 0..p.samples {
        let mut r = rng(seed, i as u64);
        let mut x: Vec<f64> = (0..n).map(|_| exponential(&mut r, rate)).collect();
        let m = r.random_range(0..k);
        let coherent = r.random::<f64>() < gamma;
        let mut genes: Vec<usize> = if coherent {
            module_genes(m, n, k).collect()
        } else {
            rand::seq::index::sample(&mut r, n, size).into_vec()
        };
        genes.sort_unstable();
        for &g in &genes {
            x[g] += normal(&mut r, p.signal_mean, p.signal_sd);
        }
        out.tokens.push(ranks(&x));
        out.labels.push(m as u32);
        out.coherent.push(coherent);
        out.activated.push(genes.iter().map(|&g| g as u32).collect());
    }
    out
}

/// Within-sample ranks: 0 for the lowest value (ties by gene index).
pub fn ranks(x: &[f64]) -> Vec<u32> {
    let mut order: Vec<usize> = (0..x.len()).collect();
    order.sort_by(|&a, &b| x[a].total_cmp(&x[b]).then(a.cmp(&b)));
    let mut rank = vec![0u32; x.len()];
    for (r, &g) in order.iter().enumerate() {
        rank[g] = r as u32;
    }
    rank
}

/// `budget` gene positions chosen uniformly, ascending.
pub fn random_mask(genes: usize, budget: usize, rng: &mut impl Rng) -> Vec<u32> {
    let mut picked: Vec<u32> =
        rand::seq::index::sample(rng, genes, budget.min(genes)).iter().map(|g| g as u32).collect();
    picked.sort_unstable();
    picked
}

/// Correlation masking (Appendix B.2) with the ground-truth modules: until `budget` genes are
/// masked, draw a seed gene uniformly, add up to `max_partners` random genes of its module
/// (the seed excluded), then the seed itself with probability `seed_keep`; additions stop at the
/// budget, so exactly `budget` genes are masked (the paper stops *after* reaching it, which can
/// overshoot). After `4 · genes` seeds, or when seeds can add nothing, the rest is drawn
/// uniformly. Returns the positions ascending.
pub fn correlation_mask(
    genes: usize,
    modules: usize,
    budget: usize,
    max_partners: usize,
    seed_keep: f64,
    rng: &mut impl Rng,
) -> Vec<u32> {
    let budget = budget.min(genes);
    let mut masked = vec![false; genes];
    let mut count = 0usize;
    let add = |g: usize, masked: &mut [bool], count: &mut usize| {
        if !masked[g] && *count < budget {
            masked[g] = true;
            *count += 1;
        }
    };
    let mut partners: Vec<usize> = Vec::new();
    let productive = max_partners > 0 || seed_keep > 0.0;
    for _ in 0..4 * genes {
        if count >= budget || !productive {
            break;
        }
        let g = rng.random_range(0..genes);
        let size = genes / modules;
        partners.clear();
        partners.extend(module_genes(g / size, genes, modules).filter(|&v| v != g));
        let take = max_partners.min(partners.len());
        partners.partial_shuffle(rng, take);
        for &v in &partners[..take] {
            add(v, &mut masked, &mut count);
        }
        if count < budget && rng.random::<f64>() < seed_keep {
            add(g, &mut masked, &mut count);
        }
    }
    if count < budget {
        let mut rest: Vec<usize> = (0..genes).filter(|&g| !masked[g]).collect();
        rest.shuffle(rng);
        for &g in &rest[..budget - count] {
            masked[g] = true;
        }
    }
    (0..genes as u32).filter(|&g| masked[g as usize]).collect()
}

/// The model input and MLM labels of one sample: `[CLS]` then the rank tokens, with the masked
/// gene positions replaced 80/10/10 (random replacements are rank tokens) and labelled with
/// their original token; every other label is `IGNORE_INDEX`.
pub fn masked_input(
    tokens: &[u32],
    positions: &[u32],
    rep: &Replacement,
    rng: &mut MaskRng,
    input_ids: &mut Vec<u32>,
    labels: &mut Vec<i64>,
) {
    let n = tokens.len();
    input_ids.clear();
    labels.clear();
    input_ids.push(cls_token(n));
    labels.push(IGNORE_INDEX);
    input_ids.resize(n + 1, 0);
    labels.resize(n + 1, IGNORE_INDEX);
    let plan = MaskPlan { positions: positions.to_vec(), structural: 0 };
    apply_replacement(tokens, &plan, rep, rng, &mut input_ids[1..], &mut labels[1..]);
}

/// The replacement rule of the sweep: [MASK], or a uniformly random rank token.
pub fn replacement(p: &ModularityParams) -> Replacement {
    Replacement {
        mask_token: mask_token(p.genes),
        gene_tokens: (0..p.genes as u32).collect(),
        mask_token_rate: p.mask_token_rate,
        random_token_rate: p.random_token_rate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corrflow_algorithms::mask::cell_rng;

    fn params() -> ModularityParams {
        ModularityParams { samples: 600, ..Default::default() }
    }

    #[test]
    fn tokens_are_ranks_and_labels_are_uniform() {
        let p = params();
        let d = generate(&p, Background::Rate, 0.5, 3);
        assert_eq!(d.tokens.len(), p.samples);
        for t in &d.tokens {
            let mut s = t.clone();
            s.sort_unstable();
            assert_eq!(s, (0..p.genes as u32).collect::<Vec<_>>(), "a permutation of 0..genes");
        }
        let mut seen = [0usize; 3];
        d.labels.iter().for_each(|&m| seen[m as usize] += 1);
        assert!(seen.iter().all(|&c| c > 150), "{seen:?}");
        let frac = d.coherent.iter().filter(|&&c| c).count() as f64 / p.samples as f64;
        assert!((frac - 0.5).abs() < 0.07, "coherent fraction {frac}");
        assert_eq!(ranks(&[0.5, -1.0, 2.0]), vec![1, 0, 2]);
    }

    #[test]
    fn gamma_one_activates_the_module_gamma_zero_scatters() {
        let p = params();
        let size = p.genes / p.modules;
        let d = generate(&p, Background::Mean, 1.0, 0);
        for (i, a) in d.activated.iter().enumerate() {
            let m = d.labels[i] as usize;
            assert_eq!(
                a.iter().map(|&g| g as usize).collect::<Vec<_>>(),
                module_genes(m, p.genes, p.modules).collect::<Vec<_>>()
            );
            // Background mean 0.1 ≪ signal 10: the module's genes hold the top ranks.
            assert!(a.iter().all(|&g| d.tokens[i][g as usize] as usize >= p.genes - size));
        }
        let d = generate(&p, Background::Mean, 0.0, 0);
        assert!(d.coherent.iter().all(|&c| !c));
        assert!(d.activated.iter().all(|a| a.len() == size));
        let inside =
            d.activated.iter().zip(&d.labels).filter(|(a, &m)| {
                a.iter().all(|&g| module_genes(m as usize, p.genes, p.modules).contains(&(g as usize)))
            });
        assert_eq!(inside.count(), 0, "scattered sets are (almost surely) not the module");
    }

    #[test]
    fn generation_repeats_by_seed() {
        let p = params();
        assert_eq!(generate(&p, Background::Rate, 0.5, 1), generate(&p, Background::Rate, 0.5, 1));
        assert_ne!(generate(&p, Background::Rate, 0.5, 1).tokens, generate(&p, Background::Rate, 0.5, 2).tokens);
    }

    #[test]
    fn correlation_masking_masks_exactly_the_budget_from_the_seed_modules() {
        let (genes, modules, budget) = (60, 3, 15);
        let mut module_counts = [0usize; 4];
        for cell in 0..2000 {
            let mut r = cell_rng(5, 0, cell);
            let m = correlation_mask(genes, modules, budget, 8, 0.5, &mut r);
            assert_eq!(m.len(), budget);
            assert!(m.windows(2).all(|w| w[0] < w[1]) && m.iter().all(|&g| (g as usize) < genes));
            let mut touched: Vec<u32> = m.iter().map(|&g| g / 20).collect();
            touched.dedup();
            module_counts[touched.len()] += 1;
        }
        // 8 partners (+ the seed half the time) per seed: 15 genes span 2 modules almost always,
        // where uniform draws span all 3 nearly always.
        assert_eq!(module_counts[3], 0, "{module_counts:?}");
        assert!(module_counts[2] > 1200, "{module_counts:?}");
        let mut spread = 0;
        for cell in 0..2000 {
            let m = random_mask(genes, budget, &mut cell_rng(5, 0, cell));
            assert_eq!(m.len(), budget);
            let mut t: Vec<u32> = m.iter().map(|&g| g / 20).collect();
            t.dedup();
            spread += usize::from(t.len() == 3);
        }
        assert!(spread > 1900, "random masks cover all modules: {spread}");
    }

    #[test]
    fn partners_come_from_the_seed_module() {
        // One seed's worth of budget, seed never kept: all from one module, seed excluded.
        for cell in 0..500 {
            let m = correlation_mask(60, 3, 8, 8, 0.0, &mut cell_rng(1, 2, cell));
            assert_eq!(m.len(), 8);
            assert!(m.iter().all(|&g| g / 20 == m[0] / 20), "{m:?}");
        }
        // No partners and no seeds: a uniform top-up still fills the budget.
        assert_eq!(correlation_mask(60, 3, 15, 0, 0.0, &mut cell_rng(0, 0, 0)).len(), 15);
    }

    #[test]
    fn masked_inputs_follow_80_10_10_and_label_only_masked_positions() {
        let p = ModularityParams::default();
        let rep = replacement(&p);
        let tokens: Vec<u32> = (0..60).rev().collect();
        let (mut ids, mut labels) = (Vec::new(), Vec::new());
        let (mut masked, mut kept, mut other) = (0, 0, 0);
        for cell in 0..400 {
            let mut r = cell_rng(0, 0, cell);
            let pos = random_mask(60, 15, &mut r);
            masked_input(&tokens, &pos, &rep, &mut r, &mut ids, &mut labels);
            assert_eq!((ids.len(), labels.len()), (61, 61));
            assert_eq!((ids[0], labels[0]), (60, IGNORE_INDEX));
            for g in 0..60 {
                if pos.contains(&(g as u32)) {
                    assert_eq!(labels[g + 1], i64::from(tokens[g]));
                    match ids[g + 1] {
                        61 => masked += 1,
                        t if t == tokens[g] => kept += 1,
                        t => {
                            assert!(t < 60, "random replacements are rank tokens");
                            other += 1
                        }
                    }
                } else {
                    assert_eq!((ids[g + 1], labels[g + 1]), (tokens[g], IGNORE_INDEX));
                }
            }
        }
        let total = f64::from(masked + kept + other);
        assert_eq!(total, 400.0 * 15.0);
        assert!((f64::from(masked) / total - 0.8).abs() < 0.02);
        assert!((f64::from(kept + other) / total - 0.2).abs() < 0.02);
    }
}
