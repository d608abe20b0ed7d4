//! Principal components of a dense matrix: centred columns, the covariance's symmetric
//! eigendecomposition (faer), the scores on the leading components. Exact, so equal to scanpy's
//! ARPACK result up to each component's sign, which no distance sees.

use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, MatRef, Par, Side};

/// Scores of the `n_comps` leading components of `x` (`rows × cols`, row-major), row-major
/// `rows × n_comps` (fewer when the matrix has fewer).
pub fn pca(x: &[f64], rows: usize, cols: usize, n_comps: usize) -> Result<(Vec<f64>, usize), String> {
    let n_comps = n_comps.min(rows.min(cols).saturating_sub(1));
    if n_comps == 0 {
        return Ok((Vec::new(), 0));
    }
    let mut centred = MatRef::from_row_major_slice(x, rows, cols).to_owned();
    for j in 0..cols {
        let mean = (0..rows).map(|i| centred[(i, j)]).sum::<f64>() / rows as f64;
        for i in 0..rows {
            centred[(i, j)] -= mean;
        }
    }
    let mut cov = Mat::<f64>::zeros(cols, cols);
    matmul(
        cov.as_mut(),
        Accum::Replace,
        centred.transpose(),
        centred.as_ref(),
        1.0 / (rows as f64 - 1.0).max(1.0),
        Par::Seq,
    );
    let eig = cov.self_adjoint_eigen(Side::Lower).map_err(|e| format!("eigendecomposition failed: {e:?}"))?;
    // Eigenvalues ascend: the leading components are the last columns.
    let u = eig.U();
    let lead = u.subcols(cols - n_comps, n_comps);
    let mut scores = Mat::<f64>::zeros(rows, n_comps);
    matmul(scores.as_mut(), Accum::Replace, centred.as_ref(), lead, 1.0, Par::Seq);
    let mut out = Vec::with_capacity(rows * n_comps);
    for i in 0..rows {
        for c in (0..n_comps).rev() {
            out.push(scores[(i, c)]);
        }
    }
    Ok((out, n_comps))
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
}
