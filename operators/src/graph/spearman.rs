//! Spearman's ρ (average ranks) of two score lists, by counting: scores are small integers
//! (`0..L_max`), so ranks come from histograms in O(n + L_max), no sort.

/// Reusable buffers for [`spearman_average_ranks`].
#[derive(Debug, Default)]
pub struct OverlapScratch {
    hist_a: Vec<u64>,
    hist_b: Vec<u64>,
    rank_a: Vec<f64>,
    rank_b: Vec<f64>,
}

/// Spearman's ρ with average ranks of the pairs `(a_i, b_i)`, scores below `l_max`;
/// NaN when there are fewer than 2 pairs or a side is constant (as `scipy.stats.spearmanr`).
pub fn spearman_average_ranks(pairs: &[(u16, u16)], l_max: usize, scratch: &mut OverlapScratch) -> f64 {
    let n = pairs.len();
    if n < 2 {
        return f64::NAN;
    }
    let OverlapScratch { hist_a, hist_b, rank_a, rank_b } = scratch;
    for (hist, rank, side) in [(&mut *hist_a, &mut *rank_a, 0usize), (&mut *hist_b, &mut *rank_b, 1)] {
        hist.clear();
        hist.resize(l_max, 0);
        for p in pairs {
            hist[usize::from(if side == 0 { p.0 } else { p.1 })] += 1;
        }
        rank.clear();
        rank.resize(l_max, 0.0);
        let mut less = 0u64;
        for s in 0..l_max {
            // Average of ranks less+1 ..= less+count.
            rank[s] = less as f64 + (hist[s] as f64 + 1.0) / 2.0;
            less += hist[s];
        }
    }
    let mean = (n as f64 + 1.0) / 2.0;
    let (mut sab, mut saa, mut sbb) = (0.0f64, 0.0f64, 0.0f64);
    for &(a, b) in pairs {
        let (ra, rb) = (rank_a[usize::from(a)] - mean, rank_b[usize::from(b)] - mean);
        sab += ra * rb;
        saa += ra * ra;
        sbb += rb * rb;
    }
    if saa == 0.0 || sbb == 0.0 {
        return f64::NAN;
    }
    sab / (saa * sbb).sqrt()
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
