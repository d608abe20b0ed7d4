//! Pair sums, gene moments and the global correlations against the definitions: exact and
//! batched sums, the screen's approximation, and the exactness bounds of the integer sums.

use super::*;
use crate::graph::pair_counts::{and_popcount, co_presence};
use crate::graph::screen::approx_correlations;

fn cell(genes: &[(u32, u16)]) -> ScoredCell {
    ScoredCell { genes: genes.iter().map(|g| g.0).collect(), scores: genes.iter().map(|g| g.1).collect() }
}

/// Spearman with average ranks, computed the textbook way.
fn spearman(x: &[f64], y: &[f64]) -> f64 {
    fn ranks(v: &[f64]) -> Vec<f64> {
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by(|&a, &b| v[a].partial_cmp(&v[b]).unwrap());
        let mut r = vec![0.0; v.len()];
        let mut i = 0;
        while i < idx.len() {
            let mut j = i;
            while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
                j += 1;
            }
            for k in i..=j {
                r[idx[k]] = (i + j) as f64 / 2.0 + 1.0;
            }
            i = j + 1;
        }
        r
    }
    let (rx, ry) = (ranks(x), ranks(y));
    let n = x.len() as f64;
    let (mx, my) = (rx.iter().sum::<f64>() / n, ry.iter().sum::<f64>() / n);
    let cov: f64 = rx.iter().zip(&ry).map(|(a, b)| (a - mx) * (b - my)).sum();
    let vx: f64 = rx.iter().map(|a| (a - mx).powi(2)).sum();
    let vy: f64 = ry.iter().map(|b| (b - my).powi(2)).sum();
    cov / (vx * vy).sqrt()
}

fn cells() -> Vec<ScoredCell> {
    vec![
        cell(&[(0, 5), (1, 4), (2, 1)]),
        cell(&[(0, 3), (2, 7)]),
        cell(&[(1, 2)]),
        cell(&[(0, 7), (1, 6), (2, 0)]),
        cell(&[]),
        cell(&[(0, 5), (1, 1), (2, 3)]),
    ]
}

#[test]
fn correlations_equal_spearman_with_average_ranks() {
    let (g, l) = (3, 8);
    let mut h = ScoreHistograms::new(g, l);
    cells().iter().for_each(|c| h.add_cell(c, 1));
    let maps = RankMaps::from_histograms(&h);
    let mut sums = PairSums::new(g);
    sums.add_cells(&cells(), &maps, 1, 1);
    let rho = global_correlations(&h, &maps, &sums);
    let col = |u: u32| -> Vec<f64> {
        cells().iter().map(|c| c.genes.iter().position(|&x| x == u).map_or(0.0, |i| f64::from(c.scores[i]))).collect()
    };
    for u in 0..3 {
        for v in 0..3 {
            let expected = spearman(&col(u), &col(v));
            assert!((rho[u as usize * g + v as usize] - expected).abs() < 1e-12, "{u},{v}");
        }
    }
    let at = |u: usize, v: usize| u * g + v;
    assert_eq!(sums.co[at(0, 1)], 3);
    assert_eq!(sums.co[at(1, 1)], 4);
    // Local: Pearson of the mapped scores on the co-present cells, the textbook way.
    let mapped = |u: usize, c: &ScoredCell| {
        c.genes.iter().position(|&x| x as usize == u).map(|i| maps.t2[u * l + c.scores[i] as usize] as f64)
    };
    for (u, v) in [(0usize, 1usize), (0, 2), (1, 2)] {
        let both: Vec<(f64, f64)> = cells().iter().filter_map(|c| Some((mapped(u, c)?, mapped(v, c)?))).collect();
        let n = both.len() as f64;
        let (mx, my) = (both.iter().map(|p| p.0).sum::<f64>() / n, both.iter().map(|p| p.1).sum::<f64>() / n);
        let cov: f64 = both.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let vx: f64 = both.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let vy: f64 = both.iter().map(|p| (p.1 - my).powi(2)).sum();
        let expected = cov / (vx * vy).sqrt();
        assert!(
            (sums.local_correlation(u, v) - expected).abs() < 1e-12,
            "{u},{v}: {} vs {expected}",
            sums.local_correlation(u, v)
        );
    }
}

#[test]
fn screening_products_and_bitset_counts_agree_with_exact_sums() {
    let (g, l) = (3, 8);
    let mut h = ScoreHistograms::new(g, l);
    cells().iter().for_each(|c| h.add_cell(c, 1));
    let maps = RankMaps::from_histograms(&h);
    let mut sums = PairSums::new(g);
    sums.add_cells(&cells(), &maps, 1, 1);
    let moments = GeneMoments::new(&h, &maps);
    let (approx, bound) = approx_correlations(&cells(), &maps, &moments, 1);
    let exact = global_correlations(&h, &maps, &sums);
    for (a, e) in approx.iter().zip(&exact) {
        assert!((a - e).abs() <= bound, "{a} vs {e}");
    }
    assert_eq!(co_presence(&cells(), g), sums.co);
    // Long bitsets exercise the vectorized path and its tail.
    let a: Vec<u64> = (0..37).map(|i| 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i + 1)).collect();
    let b: Vec<u64> = (0..37).map(|i| 0xC2B2_AE3D_27D4_EB4Fu64.wrapping_mul(i + 3)).collect();
    let plain: u64 = a.iter().zip(&b).map(|(x, y)| u64::from((x & y).count_ones())).sum();
    assert_eq!(and_popcount(&a, &b), plain);
}

#[test]
fn retraction_is_exact() {
    let (g, l) = (3, 8);
    let mut h = ScoreHistograms::new(g, l);
    cells().iter().for_each(|c| h.add_cell(c, 1));
    let maps = RankMaps::from_histograms(&h);
    let mut sums = PairSums::new(g);
    sums.add_cells(&cells()[..3], &maps, 1, 1);
    let before = sums.clone();
    sums.add_cells(&cells()[3..], &maps, 1, 1);
    sums.add_cells(&cells()[3..], &maps, -1, 1);
    assert_eq!(sums, before);
}

/// Cells over more genes than one panel of output rows (600: panels of 256, 256 and 88),
/// in more cells than one batch, added in two calls and one retracted: every sum is what
/// each cell contributes, pair by pair, computed directly.
#[test]
fn panels_and_calls_sum_what_each_cell_contributes() {
    let (g, l) = (600usize, 64usize);
    let cells = random_cells(g, l, 2500, 40, 0x2545_F491_4F6C_DD1D);
    let maps = maps_scaled(&cells, g, l, None);
    assert!(cells.len() > 2 * MAX_BATCH && PairSums::exact_batch(maps.max_abs_y()) == MAX_BATCH);
    assert_added_and_retracted_exactly(&cells, &maps, g, 1700);
}

/// Mapped scores as large as an atlas of ~10^12 cells would have (|y| ~ 2^40): the direct
/// batch would be under one cell, so the products run split into limbs, and every sum is
/// still what each cell contributes, added and retracted.
#[test]
fn split_products_of_huge_ranks_are_exact() {
    let (g, l) = (300usize, 64usize);
    let cells = random_cells(g, l, 1500, 30, 0x9E37_79B9_7F4A_7C15);
    let maps = maps_scaled(&cells, g, l, Some(1 << 40));
    assert!(PairSums::exact_batch(maps.max_abs_y()) < SPLIT_BELOW_BATCH);
    assert_added_and_retracted_exactly(&cells, &maps, g, 1100);
}

/// Mapped scores as large as a ~4M-cell atlas has, where the worst case would cut batches
/// of ~128 cells: the blocks cut by the cells' own scores are longer, every gene's `Σ y²`
/// within each stays at most 2^53, and they cover the cells in order. The sums, taken on
/// centred scores at this size, are exact, added and retracted.
#[test]
fn blocks_cut_by_scores_are_longer_than_the_worst_case_and_exact() {
    let (g, l) = (300usize, 64usize);
    let cells = random_cells(g, l, 3000, 30, 0xD1B5_4A32_D192_ED03);
    let maps = maps_scaled(&cells, g, l, Some(1 << 23));
    let worst = PairSums::exact_batch(maps.max_abs_y());
    assert!((SPLIT_BELOW_BATCH..MAX_BATCH).contains(&worst), "{worst}");
    let shift = maps.present_midpoints();
    assert!(PairSums::exact_batch(maps.max_abs_shifted(&shift, 1)) >= SPLIT_BELOW_BATCH, "centred");
    let blocks = exact_blocks(&cells, &maps, None, MAX_BATCH, &mut Vec::new());
    assert!(blocks.iter().all(|b| !b.is_empty() && b.len() <= MAX_BATCH));
    let mut at = 0;
    for b in &blocks {
        assert!(std::ptr::eq(b.as_ptr(), cells[at..].as_ptr()), "blocks in order");
        at += b.len();
        let mut sq = vec![0u128; g];
        for (&u, &s) in b.iter().flat_map(|c| c.genes.iter().zip(&c.scores)) {
            sq[u as usize] += (maps.y(u as usize, s as usize) as u128).pow(2);
        }
        assert!(sq.iter().all(|&x| x <= 1u128 << 53));
    }
    assert_eq!(at, cells.len());
    assert!(blocks.len() * worst * 2 < cells.len(), "{} blocks, worst case {worst}", blocks.len());
    assert_added_and_retracted_exactly(&cells, &maps, g, 1900);
}

/// Rank maps of `cells`, every mapped score scaled by one integer so the largest is about
/// `max_abs_y` (scaled maps stay exact integers, as a larger atlas's would be).
fn maps_scaled(cells: &[ScoredCell], g: usize, l: usize, max_abs_y: Option<i64>) -> RankMaps {
    let mut h = ScoreHistograms::new(g, l);
    cells.iter().for_each(|c| h.add_cell(c, 1));
    let mut maps = RankMaps::from_histograms(&h);
    if let Some(target) = max_abs_y {
        let f = target / maps.max_abs_y();
        maps.t2.iter_mut().for_each(|x| *x *= f);
    }
    maps
}

/// Adds `cells` in two calls (split at `cut`, on 2 threads then 1), retracts the second
/// part, and checks each time that every sum is what each cell contributes.
fn assert_added_and_retracted_exactly(cells: &[ScoredCell], maps: &RankMaps, g: usize, cut: usize) {
    let mut sums = PairSums::new(g);
    sums.add_cells(&cells[..cut], maps, 1, 2);
    sums.add_cells(&cells[cut..], maps, 1, 1);
    assert_eq!(sums, direct_sums(cells, maps, g));
    sums.add_cells(&cells[cut..], maps, -1, 2);
    assert_eq!(sums, direct_sums(&cells[..cut], maps, g));
}

/// `n` seeded cells of up to `per_cell` distinct genes of `g`, scores below `l`.
fn random_cells(g: usize, l: usize, n: usize, per_cell: usize, seed: u64) -> Vec<ScoredCell> {
    let mut state = seed;
    let mut next = |n: u64| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    (0..n)
        .map(|_| {
            let mut genes: Vec<u32> = (0..per_cell).map(|_| next(g as u64) as u32).collect();
            genes.sort_unstable();
            genes.dedup();
            ScoredCell { scores: genes.iter().map(|_| next(l as u64) as u16).collect(), genes }
        })
        .collect()
}

/// The pair sums of `cells`, pair by pair, in i128.
fn direct_sums(cells: &[ScoredCell], maps: &RankMaps, g: usize) -> PairSums {
    let mut d = PairSums::new(g);
    for c in cells {
        for (&u, &su) in c.genes.iter().zip(&c.scores) {
            let yu = i128::from(maps.y(u as usize, su as usize));
            for (&v, &sv) in c.genes.iter().zip(&c.scores) {
                let k = u as usize * g + v as usize;
                d.yy[k] += yu * i128::from(maps.y(v as usize, sv as usize));
                d.yp[k] += yu;
                d.y2p[k] += yu * yu;
                d.co[k] += 1;
            }
        }
    }
    d.n_cells = cells.len() as i64;
    d
}

#[test]
fn exact_batches_shrink_as_ranks_grow() {
    assert_eq!(PairSums::exact_batch(10), MAX_BATCH);
    assert!(PairSums::exact_batch(2_000_000) * 4_000_000_000_000 <= 1 << 53);
}
