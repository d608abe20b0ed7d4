//! `normalize_total` + `log1p` and the Seurat-flavour highly variable genes of scanpy 1.11.

use crate::metrics::median;

/// Cells × genes in compressed sparse rows (explicit zeros allowed).
#[derive(Clone, Debug, Default)]
pub struct CsrMatrix {
    pub genes: usize,
    pub indptr: Vec<usize>,
    pub indices: Vec<u32>,
    pub values: Vec<f64>,
}

impl CsrMatrix {
    pub fn cells(&self) -> usize {
        self.indptr.len().saturating_sub(1)
    }

    pub fn row(&self, i: usize) -> (&[u32], &[f64]) {
        let r = self.indptr[i]..self.indptr[i + 1];
        (&self.indices[r.clone()], &self.values[r])
    }
}

/// scanpy's `normalize_total()` on a sparse matrix (each cell scaled to the median of all
/// cells' totals, zero-total cells left as they are), then `log1p`, in place.
pub fn log_normalize(x: &mut CsrMatrix) {
    let totals: Vec<f64> = (0..x.cells()).map(|i| x.row(i).1.iter().sum()).collect();
    let target = median(totals.clone());
    for (i, &t) in totals.iter().enumerate() {
        let scale = if t > 0.0 { target / t } else { 1.0 };
        for v in &mut x.values[x.indptr[i]..x.indptr[i + 1]] {
            *v = (*v * scale).ln_1p();
        }
    }
}

/// Per-bin mean and standard deviation (ddof 1) of the non-NaN dispersions, pandas' way.
fn bin_stats(disp: &[f64], bins: &[usize], n_bins: usize) -> Vec<(f64, f64)> {
    (0..n_bins)
        .map(|b| {
            let v: Vec<f64> = (0..disp.len()).filter(|&g| bins[g] == b && !disp[g].is_nan()).map(|g| disp[g]).collect();
            let n = v.len() as f64;
            let mean = v.iter().sum::<f64>() / n;
            let sd = if v.len() > 1 {
                (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
            } else {
                f64::NAN
            };
            (mean, sd)
        })
        .collect()
}

/// `pd.cut(means, n_bins)`: equal-width, right-closed bins, the lowest edge moved down by 0.1%
/// of the range.
fn mean_bins(means: &[f64], n_bins: usize) -> Vec<usize> {
    let (lo, hi) = means.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &m| (a.min(m), b.max(m)));
    if !(hi > lo) {
        return vec![0; means.len()];
    }
    let width = (hi - lo) / n_bins as f64;
    let edges: Vec<f64> = (0..=n_bins).map(|b| lo + width * b as f64).collect();
    means.iter().map(|&m| (0..n_bins).find(|&b| m <= edges[b + 1]).unwrap_or(n_bins - 1)).collect()
}

/// scanpy's `highly_variable_genes(flavor="seurat", n_top_genes=n)` of log-normalised cells:
/// the genes whose dispersion of `expm1(x)`, normalised within 20 bins of mean expression, is
/// among the `n` highest (ties at the cut-off all kept, as scanpy does). Sorted gene indices.
pub fn highly_variable_genes(x: &CsrMatrix, n_top: usize) -> Vec<usize> {
    let (cells, genes) = (x.cells() as f64, x.genes);
    let (mut sum, mut sq) = (vec![0.0; genes], vec![0.0; genes]);
    for (&g, &v) in x.indices.iter().zip(&x.values) {
        let e = v.exp_m1();
        sum[g as usize] += e;
        sq[g as usize] += e * e;
    }
    let mut means = Vec::with_capacity(genes);
    let mut disp = Vec::with_capacity(genes);
    for g in 0..genes {
        let mut mean = sum[g] / cells;
        let var = (sq[g] / cells - mean * mean) * cells / (cells - 1.0);
        if mean == 0.0 {
            mean = 1e-12;
        }
        let d = var / mean;
        disp.push(if d == 0.0 { f64::NAN } else { d.ln() });
        means.push(mean.ln_1p());
    }
    let bins = mean_bins(&means, 20);
    let stats = bin_stats(&disp, &bins, 20);
    let norm: Vec<f64> = (0..genes)
        .map(|g| {
            let (avg, sd) = stats[bins[g]];
            // A bin of one gene: scanpy sets its sd to its mean and its mean to 0 (score 1).
            let (avg, sd) = if sd.is_nan() { (0.0, avg) } else { (avg, sd) };
            (disp[g] - avg) / sd
        })
        .collect();
    let mut finite: Vec<f64> = norm.iter().copied().filter(|v| !v.is_nan()).collect();
    if finite.is_empty() || n_top == 0 {
        return Vec::new();
    }
    finite.sort_by(|a, b| b.total_cmp(a));
    let cutoff = finite[n_top.min(finite.len()) - 1];
    (0..genes).filter(|&g| !norm[g].is_nan() && norm[g] >= cutoff).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_scaled_to_the_median_total_then_logged() {
        let mut x =
            CsrMatrix { genes: 2, indptr: vec![0, 2, 3, 3], indices: vec![0, 1, 1], values: vec![1.0, 3.0, 8.0] };
        log_normalize(&mut x);
        // Totals 4, 8, 0 → median 4: cell 0 unchanged, cell 1 halved, cell 2 empty.
        assert_eq!(x.values, vec![1f64.ln_1p(), 3f64.ln_1p(), 4f64.ln_1p()]);
    }

    #[test]
    fn bins_are_right_closed_with_the_lowest_edge_lowered() {
        assert_eq!(mean_bins(&[0.0, 1.0, 2.0, 0.1], 2), vec![0, 0, 1, 0]);
    }
}
