//! Fast all-pairs screening for the exact build: single-precision correlations of every pair
//! with a proven error bound.

use super::products::at_b;
use super::ranks::RankMaps;
use super::scores::ScoredCell;
use super::stats::GeneMoments;

/// Relative accumulation error bound of [`approx_correlations`]: products are summed in f32 in
/// batches of this many cells (error ≤ batch × 2⁻²⁴ of Σ|z_u·z_v| ≤ 1 in ρ units), then in f64.
const SCREEN_BATCH: usize = 4096;

/// Approximate ρ of all gene pairs (row-major `G × G`) from single-precision matrix products of
/// the centered rank-mapped scores (about 2.2× the f64 rate here; upper-triangle blocks only).
/// Returns the matrix and a bound on |ρ̃ − ρ|, so callers can screen candidates and compute
/// exact values only near decision boundaries.
pub fn approx_correlations(
    cells: &[ScoredCell],
    maps: &RankMaps,
    moments: &GeneMoments,
    threads: usize,
) -> (Vec<f64>, f64) {
    let g = maps.n_genes;
    let mut acc = vec![0f64; g * g];
    let mut zmat: Vec<f32> = Vec::new();
    let mut block_out: Vec<f32> = Vec::new();
    const BLOCK: usize = 256;
    let mean: Vec<f64> = (0..g).map(|u| moments.sum_w[u] as f64 / moments.n as f64).collect();
    let absent: Vec<f32> = (0..g).map(|u| (maps.c(u) as f64 - mean[u]) as f32).collect();
    for batch in cells.chunks(SCREEN_BATCH) {
        let b = batch.len();
        zmat.clear();
        for cell in batch {
            let row = zmat.len();
            zmat.extend_from_slice(&absent);
            for (&u, &s) in cell.genes.iter().zip(&cell.scores) {
                let u = u as usize;
                zmat[row + u] = (maps.t2[u * maps.l_max + s as usize] as f64 - mean[u]) as f32;
            }
        }
        for b0 in (0..g).step_by(BLOCK) {
            let b1 = (b0 + BLOCK).min(g);
            let (m, n) = (b1 - b0, g - b0);
            block_out.clear();
            block_out.resize(m * n, 0.0);
            at_b(m, n, b, &mut block_out, n, &zmat[b0..], &zmat[b0..], g, threads);
            for i in 0..m {
                let row = &mut acc[(b0 + i) * g + b0..(b0 + i + 1) * g];
                for (a, &x) in row.iter_mut().zip(&block_out[i * n..(i + 1) * n]) {
                    *a += f64::from(x);
                }
            }
        }
    }
    let n = moments.n as f64;
    for u in 0..g {
        for v in u..g {
            let r = if moments.var[u] <= 0 || moments.var[v] <= 0 {
                f64::NAN
            } else {
                n * acc[u * g + v] / ((moments.var[u] as f64).sqrt() * (moments.var[v] as f64).sqrt())
            };
            acc[u * g + v] = r;
            acc[v * g + u] = r;
        }
    }
    // Accumulation within a batch, plus the rounding of each z to f32 (twice 2⁻²⁴).
    let bound = (SCREEN_BATCH as f64 + 4.0) * f64::from(f32::EPSILON) / 2.0;
    (acc, bound)
}
