//! Spearman's ρ (average ranks) of two score lists, by counting: scores are small integers
//! (`0..L_max`), so ranks come from histograms in O(n + L_max), no sort.

/// Reusable buffers for [`spearman_average_ranks`].
#[derive(Debug, Default)]
pub struct OverlapScratch {
    rank_a: Vec<u32>,
    rank_b: Vec<u32>,
}

/// Adds each side's scores of the pairs `(a_i, b_i)` to its histogram (`hist_a[a_i] += 1`).
pub fn count_scores(pairs: &[(u16, u16)], hist_a: &mut [u32], hist_b: &mut [u32]) {
    for &(a, b) in pairs {
        hist_a[usize::from(a)] += 1;
        hist_b[usize::from(b)] += 1;
    }
}

/// Doubled mid-ranks (1-based, ties averaged) of the scores counted in `hist`, written over it:
/// a score with `less` smaller values and `count` copies gets `2·less + count + 1`. Returns
/// `Σ R²` over the counted scores (`count · R²` per score).
pub fn doubled_ranks_in_place(hist: &mut [u32]) -> i128 {
    let (mut less, mut sum_sq) = (0u32, 0i128);
    for h in hist.iter_mut() {
        let count = *h;
        *h = 2 * less + count + 1;
        if count > 0 {
            sum_sq += i128::from(count) * i128::from(*h) * i128::from(*h);
        }
        less += count;
    }
    sum_sq
}

/// `Σ R_a·R_b` over score pairs, given each side's doubled ranks (`rank_a[score]`), none above
/// `max_rank`: exact, in u64 while the worst case fits and i128 beyond.
pub fn rank_cross(pairs: &[(u16, u16)], rank_a: &[u32], rank_b: &[u32], max_rank: u64) -> i128 {
    if (pairs.len() as u128) * u128::from(max_rank).pow(2) < u128::from(u64::MAX) {
        pairs
            .iter()
            .map(|&(a, b)| u64::from(rank_a[usize::from(a)]) * u64::from(rank_b[usize::from(b)]))
            .sum::<u64>()
            .into()
    } else {
        pairs.iter().map(|&(a, b)| i128::from(rank_a[usize::from(a)]) * i128::from(rank_b[usize::from(b)])).sum()
    }
}

/// Spearman's ρ from exact integer sums over `n` pairs of doubled mid-ranks: `Σ R_a·R_b`,
/// `Σ R_a²`, `Σ R_b²` (ranks sum to `n(n+1)` on each side). NaN for fewer than 2 pairs or a
/// constant side.
pub fn rho_of_sums(n: u64, cross: i128, sq_a: i128, sq_b: i128) -> f64 {
    if n < 2 {
        return f64::NAN;
    }
    let n = i128::from(n);
    let centre = n * (n + 1) * (n + 1);
    let (cov, var_a, var_b) = (cross - centre, sq_a - centre, sq_b - centre);
    if var_a <= 0 || var_b <= 0 {
        return f64::NAN;
    }
    cov as f64 / ((var_a as f64).sqrt() * (var_b as f64).sqrt())
}

/// Spearman's ρ with average ranks of the pairs `(a_i, b_i)`, scores below `l_max`;
/// NaN when there are fewer than 2 pairs or a side is constant (as `scipy.stats.spearmanr`).
/// Exact integer sums of doubled ranks, so the result does not depend on summation order, and
/// sums gathered in parts through the same functions (histograms first, then the cross sum)
/// give the same ρ.
pub fn spearman_average_ranks(pairs: &[(u16, u16)], l_max: usize, scratch: &mut OverlapScratch) -> f64 {
    let n = pairs.len();
    if n < 2 {
        return f64::NAN;
    }
    let OverlapScratch { rank_a, rank_b } = scratch;
    for rank in [&mut *rank_a, &mut *rank_b] {
        rank.clear();
        rank.resize(l_max, 0);
    }
    count_scores(pairs, rank_a, rank_b);
    let (sq_a, sq_b) = (doubled_ranks_in_place(rank_a), doubled_ranks_in_place(rank_b));
    let cross = rank_cross(pairs, rank_a, rank_b, 2 * n as u64 + 1);
    rho_of_sums(n as u64, cross, sq_a, sq_b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perfect_and_inverse_orders() {
        let mut s = OverlapScratch::default();
        let up: Vec<(u16, u16)> = (0..10).map(|i| (i, i * 2)).collect();
        assert!((spearman_average_ranks(&up, 32, &mut s) - 1.0).abs() < 1e-12);
        let down: Vec<(u16, u16)> = (0..10).map(|i| (i, 20 - i)).collect();
        assert!((spearman_average_ranks(&down, 32, &mut s) + 1.0).abs() < 1e-12);
    }

    #[test]
    fn ties_use_average_ranks() {
        // scipy.stats.spearmanr([1, 1, 2, 3], [1, 2, 3, 3]) = 8/9
        let mut s = OverlapScratch::default();
        let r = spearman_average_ranks(&[(1, 1), (1, 2), (2, 3), (3, 3)], 8, &mut s);
        assert!((r - 8.0 / 9.0).abs() < 1e-12, "{r}");
    }

    #[test]
    fn constant_side_or_too_few_pairs_is_nan() {
        let mut s = OverlapScratch::default();
        assert!(spearman_average_ranks(&[(1, 2), (1, 3)], 8, &mut s).is_nan());
        assert!(spearman_average_ranks(&[(1, 2)], 8, &mut s).is_nan());
    }
}
