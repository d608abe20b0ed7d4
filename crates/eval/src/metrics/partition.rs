//! Agreement of two partitions of the same cells, as scikit-learn computes it:
//! `adjusted_rand_score` (from the pair confusion matrix) and `normalized_mutual_info_score`
//! with the arithmetic mean of the two entropies.

use std::collections::HashMap;

/// The contingency table of two labelings as sparse counts, plus each side's class sizes.
struct Contingency {
    cells: Vec<u64>,
    rows: Vec<u64>,
    cols: Vec<u64>,
    n: u64,
}

fn contingency(a: &[usize], b: &[usize]) -> Contingency {
    assert_eq!(a.len(), b.len(), "two labelings of the same cells");
    let mut pairs: HashMap<(usize, usize), u64> = HashMap::new();
    let (mut rows, mut cols): (HashMap<usize, u64>, HashMap<usize, u64>) = (HashMap::new(), HashMap::new());
    for (&x, &y) in a.iter().zip(b) {
        *pairs.entry((x, y)).or_default() += 1;
        *rows.entry(x).or_default() += 1;
        *cols.entry(y).or_default() += 1;
    }
    let sorted = |m: HashMap<usize, u64>| {
        let mut v: Vec<(usize, u64)> = m.into_iter().collect();
        v.sort_unstable();
        v.into_iter().map(|(_, c)| c).collect::<Vec<_>>()
    };
    let mut cells: Vec<((usize, usize), u64)> = pairs.into_iter().collect();
    cells.sort_unstable();
    Contingency {
        cells: cells.into_iter().map(|(_, c)| c).collect(),
        rows: sorted(rows),
        cols: sorted(cols),
        n: a.len() as u64,
    }
}

/// Adjusted Rand index (Hubert & Arabie), scikit-learn's `adjusted_rand_score`: 1 for identical
/// partitions (also when both are one class or all singletons), about 0 for independent ones.
pub fn adjusted_rand_index(truth: &[usize], pred: &[usize]) -> f64 {
    let c = contingency(truth, pred);
    let sq = |v: &[u64]| v.iter().map(|&x| i128::from(x) * i128::from(x)).sum::<i128>();
    let n = i128::from(c.n);
    let sum_squares = sq(&c.cells);
    let tp = sum_squares - n;
    let fp = sq(&c.cols) - sum_squares;
    let fn_ = sq(&c.rows) - sum_squares;
    let tn = n * n - fp - fn_ - sum_squares;
    if fn_ == 0 && fp == 0 {
        return 1.0;
    }
    let (tp, tn, fp, fn_) = (tp as f64, tn as f64, fp as f64, fn_ as f64);
    2.0 * (tp * tn - fn_ * fp) / ((tp + fn_) * (fn_ + tn) + (tp + fp) * (fp + tn))
}

fn entropy(sizes: &[u64], n: f64) -> f64 {
    sizes.iter().filter(|&&s| s > 0).map(|&s| s as f64 / n).map(|p| -p * p.ln()).sum()
}

/// Normalized mutual information with the arithmetic mean of the entropies, scikit-learn's
/// `normalized_mutual_info_score` default: 1 when both labelings are one class.
pub fn normalized_mutual_info(truth: &[usize], pred: &[usize]) -> f64 {
    let c = contingency(truth, pred);
    if c.rows.len() == c.cols.len() && c.rows.len() <= 1 {
        return 1.0;
    }
    let n = c.n as f64;
    // The joint cells in the same order as `contingency` sorted them, with their marginals.
    let mut pairs: Vec<(usize, usize)> = truth.iter().copied().zip(pred.iter().copied()).collect();
    pairs.sort_unstable();
    pairs.dedup();
    let row_index: HashMap<usize, usize> = {
        let mut r: Vec<usize> = truth.to_vec();
        r.sort_unstable();
        r.dedup();
        r.into_iter().enumerate().map(|(i, x)| (x, i)).collect()
    };
    let col_index: HashMap<usize, usize> = {
        let mut r: Vec<usize> = pred.to_vec();
        r.sort_unstable();
        r.dedup();
        r.into_iter().enumerate().map(|(i, x)| (x, i)).collect()
    };
    let mut mi = 0.0;
    for (&(x, y), &nij) in pairs.iter().zip(&c.cells) {
        let (a, b) = (c.rows[row_index[&x]] as f64, c.cols[col_index[&y]] as f64);
        let nij = nij as f64;
        mi += nij / n * (n * nij / (a * b)).ln();
    }
    let mi = mi.max(0.0);
    if mi == 0.0 {
        return 0.0;
    }
    let normalizer = 0.5 * (entropy(&c.rows, n) + entropy(&c.cols, n));
    mi / normalizer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_partitions_score_one_whatever_the_names() {
        let a = [0, 0, 1, 1, 2, 2];
        let b = [5, 5, 3, 3, 9, 9];
        assert_eq!(adjusted_rand_index(&a, &b), 1.0);
        assert!((normalized_mutual_info(&a, &b) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn values_match_scikit_learn() {
        // scikit-learn 1.8: adjusted_rand_score and normalized_mutual_info_score of these.
        let a = [0, 0, 1, 1, 1, 2, 2, 2, 2];
        let b = [0, 0, 0, 1, 1, 1, 2, 2, 1];
        assert!((adjusted_rand_index(&a, &b) - 0.16923076923076924).abs() < 1e-12);
        assert!((normalized_mutual_info(&a, &b) - 0.5096070168485125).abs() < 1e-12);
    }

    #[test]
    fn degenerate_cases_follow_scikit_learn() {
        assert_eq!(adjusted_rand_index(&[0, 0, 0], &[1, 1, 1]), 1.0);
        assert_eq!(normalized_mutual_info(&[0, 0, 0], &[1, 1, 1]), 1.0);
        assert_eq!(normalized_mutual_info(&[0, 0, 1, 1], &[0, 0, 0, 0]), 0.0);
        assert_eq!(adjusted_rand_index(&[0, 1, 2], &[0, 1, 2]), 1.0);
    }
}
