//! Silhouettes from a [`distance_pass`](super::distances::distance_pass)'s summed distances, as
//! scikit-learn's `silhouette_samples` (Euclidean) and scib-metrics' `silhouette_label` and
//! `silhouette_batch` define them.

use super::distances::Groups;

/// One cell's silhouette from its summed distances to each group (`sums`, own group included),
/// the group sizes and its own group: `(b − a) / max(a, b)`, with `a` the mean distance to the
/// rest of its group and `b` the smallest mean distance to another group present; 0 for a cell
/// alone in its group (scikit-learn).
fn cell_silhouette(sums: &[f64], sizes: &[usize], own: usize) -> f64 {
    if sizes[own] <= 1 {
        return 0.0;
    }
    let a = sums[own] / (sizes[own] - 1) as f64;
    let b = (0..sums.len())
        .filter(|&g| g != own && sizes[g] > 0)
        .map(|g| sums[g] / sizes[g] as f64)
        .fold(f64::INFINITY, f64::min);
    let s = (b - a) / a.max(b);
    if s.is_finite() {
        s
    } else {
        0.0
    }
}

/// scikit-learn's `silhouette_score`: the mean over cells; `label_sums` is `n × labels`.
pub fn silhouette_score(label_sums: &[f64], labels: Groups<'_>) -> f64 {
    let sizes = labels.sizes();
    let n = labels.codes.len();
    let total: f64 = (0..n)
        .map(|i| cell_silhouette(&label_sums[i * labels.count..(i + 1) * labels.count], &sizes, labels.codes[i]))
        .sum();
    total / n as f64
}

/// scib-metrics' `silhouette_label` (rescaled): `(ASW + 1) / 2`.
pub fn silhouette_label(label_sums: &[f64], labels: Groups<'_>) -> f64 {
    (silhouette_score(label_sums, labels) + 1.0) / 2.0
}

/// scib-metrics' `silhouette_batch` (rescaled): within each label of more than one batch (and
/// fewer batches than cells), each cell's silhouette by batch, `1 − |s|`, averaged over the
/// label's cells, then over labels. `batch_sums` is `n × batches`, within each cell's label.
/// `None` when no label qualifies.
pub fn silhouette_batch(batch_sums: &[f64], labels: Groups<'_>, batches: Groups<'_>) -> Option<f64> {
    let n = labels.codes.len();
    let mut per_label = Vec::new();
    for l in 0..labels.count {
        let cells: Vec<usize> = (0..n).filter(|&i| labels.codes[i] == l).collect();
        let mut sizes = vec![0usize; batches.count];
        for &i in &cells {
            sizes[batches.codes[i]] += 1;
        }
        let present = sizes.iter().filter(|&&s| s > 0).count();
        if present <= 1 || present == cells.len() {
            continue;
        }
        let sum: f64 = cells
            .iter()
            .map(|&i| {
                let s =
                    cell_silhouette(&batch_sums[i * batches.count..(i + 1) * batches.count], &sizes, batches.codes[i]);
                1.0 - s.abs()
            })
            .sum();
        per_label.push(sum / cells.len() as f64);
    }
    (!per_label.is_empty()).then(|| per_label.iter().sum::<f64>() / per_label.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::distances::distance_pass;
    use crate::metrics::products::Points;

    #[test]
    fn silhouette_matches_scikit_learn_on_a_small_case() {
        // scikit-learn 1.8: silhouette_score([[0],[1],[5],[6],[6.5]], [0,0,1,1,1])
        let data = [0.0, 1.0, 5.0, 6.0, 6.5];
        let codes = [0, 0, 1, 1, 1];
        let g = Groups { codes: &codes, count: 2 };
        let p = distance_pass(Points { data: &data, dim: 1 }, 2, g, None);
        let s = silhouette_score(&p.label_sums, g);
        // The distance pass's products are f32 (its distances agree to ~1e-7 relative).
        assert!((s - 0.808173359207842).abs() < 1e-6, "{s}");
        assert!((silhouette_label(&p.label_sums, g) - (s + 1.0) / 2.0).abs() < 1e-15);
    }

    #[test]
    fn well_mixed_batches_score_near_one_and_separated_near_zero() {
        // Two labels far apart; batches alternate (mixed) or split each label in two (separated).
        let data: Vec<f64> = (0..40).map(|i| if i < 20 { i as f64 * 0.01 } else { 100.0 + i as f64 * 0.01 }).collect();
        let labels: Vec<usize> = (0..40).map(|i| usize::from(i >= 20)).collect();
        let mixed: Vec<usize> = (0..40).map(|i| i % 2).collect();
        let split: Vec<usize> = (0..40).map(|i| usize::from(i % 20 >= 10)).collect();
        let g = Groups { codes: &labels, count: 2 };
        for (b, hi) in [(&mixed, true), (&split, false)] {
            let bg = Groups { codes: b, count: 2 };
            let p = distance_pass(Points { data: &data, dim: 1 }, 3, g, Some(bg));
            let s = silhouette_batch(p.batch_sums.as_ref().unwrap(), g, bg).unwrap();
            assert_eq!(s > 0.8, hi, "batch silhouette {s}");
        }
    }
}
