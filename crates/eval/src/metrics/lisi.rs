//! The local inverse Simpson's index (Korsunsky et al., Harmony) as scib-metrics computes it
//! (`ilisi_knn`, `clisi_knn`): each cell's neighbour distances become probabilities at the
//! bandwidth whose entropy is log(perplexity), perplexity = ⌊k/3⌋ with k counting the cell
//! itself (whose own weight is 0); LISI = 1 / Σ_groups (Σ p over the group's neighbours)²; the
//! median over cells, scaled to [0, 1].

use super::distances::{Groups, Neighbours};

const TOLERANCE: f64 = 1e-5;
const TRIES: usize = 50;

/// `(H, P)` at precision `beta` (scib's `_Hbeta`).
fn entropy_at(d: &[f64], beta: f64) -> (f64, Vec<f64>) {
    let mut p: Vec<f64> = d.iter().map(|&x| (-x * beta).exp()).collect();
    let sum: f64 = p.iter().sum();
    if sum == 0.0 {
        return (0.0, p);
    }
    let h = sum.ln() + beta * d.iter().zip(&p).map(|(x, q)| x * q).sum::<f64>() / sum;
    p.iter_mut().for_each(|q| *q /= sum);
    (h, p)
}

/// One cell's Simpson index over `groups` of its neighbours (scib's
/// `_compute_simpson_index_cell`); −1 when the probabilities vanish.
fn simpson(d: &[f64], neighbour_groups: &[usize], groups: usize, perplexity: f64) -> f64 {
    let log_u = perplexity.ln();
    let (mut beta, mut lo, mut hi) = (1.0_f64, f64::NEG_INFINITY, f64::INFINITY);
    let (mut h, mut p) = entropy_at(d, beta);
    let mut diff = h - log_u;
    let mut tries = 0;
    while diff.abs() >= TOLERANCE && tries < TRIES {
        if diff > 0.0 {
            lo = beta;
            beta = if hi.is_infinite() { beta * 2.0 } else { (beta + hi) / 2.0 };
        } else {
            hi = beta;
            beta = if lo.is_infinite() { beta / 2.0 } else { (beta + lo) / 2.0 };
        }
        (h, p) = entropy_at(d, beta);
        diff = h - log_u;
        tries += 1;
    }
    if h == 0.0 {
        return -1.0;
    }
    let mut mass = vec![0.0; groups];
    for (q, &g) in p.iter().zip(neighbour_groups) {
        mass[g] += q;
    }
    mass.iter().map(|m| m * m).sum()
}

/// Each cell's LISI over `groups` from its neighbours (self excluded there).
pub fn lisi(neighbours: &Neighbours, groups: Groups<'_>) -> Vec<f64> {
    let perplexity = ((neighbours.k + 1) / 3) as f64;
    (0..neighbours.len())
        .map(|i| {
            let (idx, d) = neighbours.of(i);
            let g: Vec<usize> = idx.iter().map(|&j| groups.codes[j as usize]).collect();
            1.0 / simpson(d, &g, groups.count, perplexity)
        })
        .collect()
}

/// NumPy's `nanmedian`.
fn nan_median(v: &[f64]) -> f64 {
    let v: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        f64::NAN
    } else {
        super::median(v)
    }
}

/// scib-metrics' `ilisi_knn` (scaled): (median LISI over batches − 1) / (batches − 1); 1 = as
/// mixed as the batches can be.
pub fn ilisi(neighbours: &Neighbours, batches: Groups<'_>) -> f64 {
    (nan_median(&lisi(neighbours, batches)) - 1.0) / (batches.count as f64 - 1.0)
}

/// scib-metrics' `clisi_knn` (scaled): (labels − median LISI over labels) / (labels − 1); 1 =
/// every neighbourhood holds one label.
pub fn clisi(neighbours: &Neighbours, labels: Groups<'_>) -> f64 {
    (labels.count as f64 - nan_median(&lisi(neighbours, labels))) / (labels.count as f64 - 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perplexity_is_met_and_pure_neighbourhoods_have_lisi_one() {
        let d: Vec<f64> = (1..=29).map(|i| i as f64 * 0.1).collect();
        let s = simpson(&d, &vec![0; 29], 2, 10.0);
        assert!((s - 1.0).abs() < 1e-12, "one group: Simpson 1");
        let g: Vec<usize> = (0..29).map(|i| i % 2).collect();
        let s = simpson(&d, &g, 2, 10.0);
        assert!(s > 0.5 && s < 0.52, "two interleaved groups: about 1/2, got {s}");
        // 29 neighbours (perplexity 10) alternating between two batches: LISI about 2.
        let n = 30;
        let indices: Vec<u32> = (0..n).flat_map(|i| (0..n).filter(move |&j| j != i).map(|j| j as u32)).collect();
        let distances: Vec<f64> =
            (0..n).flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i as f64 - j as f64).abs())).collect();
        let nb = Neighbours { k: n - 1, indices, distances };
        let codes: Vec<usize> = (0..n).map(|i| i % 2).collect();
        let l = lisi(&nb, Groups { codes: &codes, count: 2 });
        assert!(l.iter().all(|x| (1.8..=2.0).contains(x)), "{l:?}");
    }
}
