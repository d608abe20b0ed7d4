//! Principal components of a dense matrix: centred columns, then the symmetric
//! eigendecomposition (faer) of the smaller of the two cross-products, so that memory and time
//! are bounded by the smaller side: the `cols × cols` covariance when there are more rows, the
//! `rows × rows` Gram matrix when there are more columns (300 cells × 12,000 genes: a 300 × 300
//! problem, not a 12,000 × 12,000 one of 1.2 GB and minutes). Exact either way, so equal to
//! scanpy's ARPACK result up to each component's sign, which no distance sees.

use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, MatRef, Par, Side};

/// Scores of the `n_comps` leading components of `x` (`rows × cols`, row-major), row-major
/// `rows × n_comps` (fewer when the matrix has fewer).
pub fn pca(x: &[f64], rows: usize, cols: usize, n_comps: usize) -> Result<(Vec<f64>, usize), String> {
    pca_centring(&mut x.to_vec(), rows, cols, n_comps)
}

/// [`pca`] that centres `x`'s columns in place instead of working on a copy: `eval cells` hands
/// it the HVG matrix (1.6 GB at 100,000 cells), whose every score is translation invariant.
pub fn pca_centring(x: &mut [f64], rows: usize, cols: usize, n_comps: usize) -> Result<(Vec<f64>, usize), String> {
    let n_comps = n_comps.min(rows.min(cols).saturating_sub(1));
    if n_comps == 0 {
        return Ok((Vec::new(), 0));
    }
    let mut mean = vec![0.0; cols];
    x.chunks(cols).for_each(|row| mean.iter_mut().zip(row).for_each(|(m, v)| *m += v));
    mean.iter_mut().for_each(|m| *m /= rows as f64);
    x.chunks_mut(cols).for_each(|row| row.iter_mut().zip(&mean).for_each(|(v, m)| *v -= m));
    let centred = MatRef::from_row_major_slice(x, rows, cols);
    let scores = if cols <= rows { by_covariance(centred, n_comps)? } else { by_gram(centred, n_comps)? };
    let mut out = Vec::with_capacity(rows * n_comps);
    for i in 0..rows {
        for c in (0..n_comps).rev() {
            out.push(scores[(i, c)]);
        }
    }
    Ok((out, n_comps))
}

/// `X V` for the leading eigenvectors `V` of `XᵀX` (`cols × cols`); leading last.
fn by_covariance(centred: MatRef<'_, f64>, n_comps: usize) -> Result<Mat<f64>, String> {
    let (rows, cols) = (centred.nrows(), centred.ncols());
    let mut cov = Mat::<f64>::zeros(cols, cols);
    // Two column panels on rayon's threads: each entry comes from one sequential product over
    // the same rows, so the result does not depend on the thread count.
    let half = cols / 2;
    let scale = 1.0 / (rows as f64 - 1.0).max(1.0);
    let (left, right) = cov.as_mut().split_at_col_mut(half);
    rayon::join(
        || matmul(left, Accum::Replace, centred.transpose(), centred.subcols(0, half), scale, Par::Seq),
        || matmul(right, Accum::Replace, centred.transpose(), centred.subcols(half, cols - half), scale, Par::Seq),
    );
    let eig = cov.self_adjoint_eigen(Side::Lower).map_err(|e| format!("eigendecomposition failed: {e:?}"))?;
    // Eigenvalues ascend: the leading components are the last columns.
    let lead = eig.U().subcols(cols - n_comps, n_comps);
    let mut scores = Mat::<f64>::zeros(rows, n_comps);
    matmul(scores.as_mut(), Accum::Replace, centred, lead, 1.0, Par::Seq);
    Ok(scores)
}

/// The same scores from `XXᵀ = U S² Uᵀ` (`rows × rows`): with `X = U S Vᵀ`, `X V = U S`.
fn by_gram(centred: MatRef<'_, f64>, n_comps: usize) -> Result<Mat<f64>, String> {
    let rows = centred.nrows();
    let mut gram = Mat::<f64>::zeros(rows, rows);
    matmul(gram.as_mut(), Accum::Replace, centred, centred.transpose(), 1.0, Par::Seq);
    let eig = gram.self_adjoint_eigen(Side::Lower).map_err(|e| format!("eigendecomposition failed: {e:?}"))?;
    let (u, s) = (eig.U(), eig.S().column_vector());
    let first = rows - n_comps;
    // Rounding can leave a zero eigenvalue slightly negative.
    Ok(Mat::from_fn(rows, n_comps, |i, c| u[(i, first + c)] * s[first + c].max(0.0).sqrt()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_component_follows_the_direction_of_largest_spread() {
        // Points along (1, 2) with a little noise across it.
        let x: Vec<f64> = (0..50)
            .flat_map(|i| {
                let t = i as f64 - 25.0;
                let e = if i % 2 == 0 { 0.1 } else { -0.1 };
                [t + 2.0 * e, 2.0 * t - e]
            })
            .collect();
        let (s, k) = pca(&x, 50, 2, 1).unwrap();
        assert_eq!(k, 1);
        for (i, score) in s.iter().enumerate() {
            let t = i as f64 - 25.0;
            // Centred: the mean of t is -0.5; the noise is orthogonal to (1, 2).
            assert!((score.abs() - ((t + 0.5) * 5f64.sqrt()).abs()).abs() < 0.05, "{i}: {score}");
        }
    }

    #[test]
    fn a_wide_matrix_gets_the_covariance_scores_from_its_gram_matrix() {
        let (rows, cols, k) = (12, 40, 4);
        let x: Vec<f64> = (0..rows * cols).map(|i| ((i * 37 % 101) as f64 * 0.13).sin() + (i % 7) as f64).collect();
        let (wide, kw) = pca(&x, rows, cols, k).unwrap();
        let mut centred = MatRef::from_row_major_slice(&x, rows, cols).to_owned();
        for j in 0..cols {
            let mean = (0..rows).map(|i| centred[(i, j)]).sum::<f64>() / rows as f64;
            (0..rows).for_each(|i| centred[(i, j)] -= mean);
        }
        let want = by_covariance(centred.as_ref(), k).unwrap();
        assert_eq!(kw, k);
        for c in 0..k {
            // Column c of the output is the (k-1-c)-th of `want`; each component up to its sign.
            let w: Vec<f64> = (0..rows).map(|i| want[(i, k - 1 - c)]).collect();
            let g: Vec<f64> = (0..rows).map(|i| wide[i * k + c]).collect();
            let sign = if w.iter().zip(&g).map(|(a, b)| a * b).sum::<f64>() < 0.0 { -1.0 } else { 1.0 };
            for (a, b) in w.iter().zip(&g) {
                assert!((a - sign * b).abs() < 1e-8, "component {c}: {a} vs {b}");
            }
        }
    }
}
