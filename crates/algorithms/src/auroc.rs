//! Area under the ROC curve, as the Mann–Whitney statistic with average ranks for ties (so a
//! score that cannot separate two items counts half, as scikit-learn's `roc_auc_score`).

/// AUROC of `scores` for the positives in `positive`; `None` without both classes or with a
/// non-finite score.
pub fn auroc(scores: &[f64], positive: &[bool]) -> Option<f64> {
    assert_eq!(scores.len(), positive.len(), "one label per score");
    if scores.iter().any(|s| !s.is_finite()) {
        return None;
    }
    let n_pos = positive.iter().filter(|&&p| p).count();
    let n_neg = positive.len() - n_pos;
    if n_pos == 0 || n_neg == 0 {
        return None;
    }
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_unstable_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    // Sum of the (1-based, tie-averaged) ranks of the positives.
    let mut rank_sum = 0.0f64;
    let mut i = 0;
    while i < order.len() {
        let mut j = i + 1;
        while j < order.len() && scores[order[j]] == scores[order[i]] {
            j += 1;
        }
        let mid = (i + 1 + j) as f64 / 2.0;
        rank_sum += mid * order[i..j].iter().filter(|&&k| positive[k]).count() as f64;
        i = j;
    }
    let (p, n) = (n_pos as f64, n_neg as f64);
    Some((rank_sum - p * (p + 1.0) / 2.0) / (p * n))
}

/// AUROC of a symmetric `n × n` matrix (row-major) at telling the pairs `u < v` with
/// `same(u, v)` from the others; the diagonal is ignored.
pub fn pair_auroc(matrix: &[f64], n: usize, same: impl Fn(usize, usize) -> bool) -> Option<f64> {
    assert_eq!(matrix.len(), n * n, "an n × n matrix");
    let pairs = n * n.saturating_sub(1) / 2;
    let (mut scores, mut labels) = (Vec::with_capacity(pairs), Vec::with_capacity(pairs));
    for u in 0..n {
        for v in u + 1..n {
            scores.push(matrix[u * n + v]);
            labels.push(same(u, v));
        }
    }
    auroc(&scores, &labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perfect_inverted_and_uninformative_scores() {
        let labels = [false, false, true, true];
        assert_eq!(auroc(&[0.1, 0.2, 0.8, 0.9], &labels), Some(1.0));
        assert_eq!(auroc(&[0.9, 0.8, 0.2, 0.1], &labels), Some(0.0));
        assert_eq!(auroc(&[1.0, 1.0, 1.0, 1.0], &labels), Some(0.5), "all tied: one half");
    }

    #[test]
    fn matches_the_pairwise_definition_with_ties() {
        // scikit-learn: roc_auc_score([0,1,0,1,1,0], [0.3,0.3,0.1,0.7,0.2,0.5]) = 5.5 / 9
        let s = [0.3, 0.3, 0.1, 0.7, 0.2, 0.5];
        let y = [false, true, false, true, true, false];
        let mut wins = 0.0;
        for i in (0..s.len()).filter(|&i| y[i]) {
            for j in (0..s.len()).filter(|&j| !y[j]) {
                wins += if s[i] > s[j] {
                    1.0
                } else if s[i] == s[j] {
                    0.5
                } else {
                    0.0
                };
            }
        }
        let brute = wins / 9.0;
        assert!((auroc(&s, &y).unwrap() - brute).abs() < 1e-12);
        assert!((brute - 5.5 / 9.0).abs() < 1e-12);
    }

    #[test]
    fn undefined_without_both_classes() {
        assert_eq!(auroc(&[1.0, 2.0], &[true, true]), None);
        assert_eq!(auroc(&[1.0, f64::NAN], &[true, false]), None);
    }

    #[test]
    fn pairs_of_a_block_matrix() {
        // Two blocks {0, 1} and {2, 3}: within-block entries high, cross-block low.
        let n = 4;
        let block = |u: usize| u / 2;
        let m: Vec<f64> = (0..n * n).map(|i| if block(i / n) == block(i % n) { 5.0 } else { 1.0 }).collect();
        assert_eq!(pair_auroc(&m, n, |u, v| block(u) == block(v)), Some(1.0));
        let flat = vec![0.0; n * n];
        assert_eq!(pair_auroc(&flat, n, |u, v| block(u) == block(v)), Some(0.5));
    }
}
