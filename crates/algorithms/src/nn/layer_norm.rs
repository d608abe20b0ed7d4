//! LayerNorm of a residual sum, fused: `y = LN(x + r) · γ + β` over rows of width `h`, forward and
//! backward in one pass each over `[rows, h]` (burn's composition makes about ten passes and
//! as many temporaries). Rows are split in fixed chunks of [`CHUNK`]; the backward's `dγ`, `dβ`
//! partials are summed in chunk order, so results do not depend on the thread count.
//!
//! With `x̂ = (z − μ) · rstd`, `z = x + r`: `dγ = Σ dy ∘ x̂`, `dβ = Σ dy`, and
//! `dz = rstd · (g − mean(g) − x̂ · mean(g ∘ x̂))` with `g = dy ∘ γ`; `dx = dr = dz`.

use rayon::prelude::*;

const CHUNK: usize = 64;

/// The output and the per-row statistics the backward pass needs.
pub struct LayerNormStats {
    pub y: Vec<f32>,
    pub mean: Vec<f32>,
    pub rstd: Vec<f32>,
}

/// Gradients: of the sum `z` (= of `x` and of `r`), of `γ` and of `β`.
pub struct LayerNormGrads {
    pub z: Vec<f32>,
    pub gamma: Vec<f32>,
    pub beta: Vec<f32>,
}

fn check(h: usize, x: &[f32], r: &[f32], gamma: &[f32]) {
    assert!(h > 0 && x.len().is_multiple_of(h), "layer norm: input is not rows × width");
    assert_eq!(x.len(), r.len(), "layer norm: residual differs in size");
    assert_eq!(gamma.len(), h, "layer norm: γ is not the width");
}

/// The forward pass over `x + r` (`[rows, h]`).
pub fn add_layer_norm_forward(h: usize, x: &[f32], r: &[f32], gamma: &[f32], beta: &[f32], eps: f32) -> LayerNormStats {
    check(h, x, r, gamma);
    let rows = x.len() / h;
    let mut out = LayerNormStats { y: vec![0f32; rows * h], mean: vec![0f32; rows], rstd: vec![0f32; rows] };
    out.y
        .par_chunks_mut(CHUNK * h)
        .zip(out.mean.par_chunks_mut(CHUNK))
        .zip(out.rstd.par_chunks_mut(CHUNK))
        .enumerate()
        .for_each(|(c, ((y, mean), rstd))| {
            let mut z = vec![0f32; h];
            for (i, yrow) in y.chunks_exact_mut(h).enumerate() {
                let at = (c * CHUNK + i) * h;
                z.iter_mut().zip(&x[at..at + h]).zip(&r[at..at + h]).for_each(|((z, a), b)| *z = a + b);
                let mu = z.iter().sum::<f32>() / h as f32;
                let var = z.iter().map(|v| (v - mu) * (v - mu)).sum::<f32>() / h as f32;
                let rs = 1.0 / (var + eps).sqrt();
                for (j, o) in yrow.iter_mut().enumerate() {
                    *o = (z[j] - mu) * rs * gamma[j] + beta[j];
                }
                mean[i] = mu;
                rstd[i] = rs;
            }
        });
    out
}

/// The backward pass, given the forward's statistics and the output's gradient.
#[allow(clippy::too_many_arguments)]
pub fn add_layer_norm_backward(
    h: usize,
    x: &[f32],
    r: &[f32],
    gamma: &[f32],
    mean: &[f32],
    rstd: &[f32],
    dy: &[f32],
) -> LayerNormGrads {
    check(h, x, r, gamma);
    assert_eq!(dy.len(), x.len(), "layer norm: gradient differs in size");
    let rows = x.len() / h;
    assert!(mean.len() == rows && rstd.len() == rows, "layer norm: one statistic per row");
    let mut dz = vec![0f32; rows * h];
    let partials: Vec<(Vec<f32>, Vec<f32>)> = dz
        .par_chunks_mut(CHUNK * h)
        .enumerate()
        .map(|(c, dz)| {
            let (mut dgamma, mut dbeta) = (vec![0f32; h], vec![0f32; h]);
            let (mut xhat, mut g) = (vec![0f32; h], vec![0f32; h]);
            for (i, dzrow) in dz.chunks_exact_mut(h).enumerate() {
                let row = c * CHUNK + i;
                let at = row * h;
                let (mu, rs) = (mean[row], rstd[row]);
                for j in 0..h {
                    xhat[j] = (x[at + j] + r[at + j] - mu) * rs;
                    g[j] = dy[at + j] * gamma[j];
                    dgamma[j] += dy[at + j] * xhat[j];
                    dbeta[j] += dy[at + j];
                }
                let mg = g.iter().sum::<f32>() / h as f32;
                let mgx = g.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f32>() / h as f32;
                for j in 0..h {
                    dzrow[j] = rs * (g[j] - mg - xhat[j] * mgx);
                }
            }
            (dgamma, dbeta)
        })
        .collect();
    let (mut gamma_grad, mut beta_grad) = (vec![0f32; h], vec![0f32; h]);
    for (dg, db) in partials {
        gamma_grad.iter_mut().zip(&dg).for_each(|(a, b)| *a += b);
        beta_grad.iter_mut().zip(&db).for_each(|(a, b)| *a += b);
    }
    LayerNormGrads { z: dz, gamma: gamma_grad, beta: beta_grad }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        super::super::test_values(n, seed, 97_531, -2.0, 2.0)
    }

    /// f64 LayerNorm of x + r and `Σ y ∘ w`, for finite differences.
    fn loss(h: usize, x: &[f32], r: &[f32], gamma: &[f32], beta: &[f32], w: &[f32]) -> f64 {
        let mut total = 0.0;
        for (row, (xs, rs)) in x.chunks(h).zip(r.chunks(h)).enumerate() {
            let z: Vec<f64> = xs.iter().zip(rs).map(|(a, b)| f64::from(*a) + f64::from(*b)).collect();
            let mu = z.iter().sum::<f64>() / h as f64;
            let var = z.iter().map(|v| (v - mu).powi(2)).sum::<f64>() / h as f64;
            for j in 0..h {
                let y = (z[j] - mu) / (var + 1e-5).sqrt() * f64::from(gamma[j]) + f64::from(beta[j]);
                total += y * f64::from(w[row * h + j]);
            }
        }
        total
    }

    #[test]
    fn gradients_match_finite_differences_across_chunks() {
        let (rows, h) = (CHUNK + 5, 6);
        let (x, r, gamma, beta, w) =
            (values(rows * h, 1), values(rows * h, 2), values(h, 3), values(h, 4), values(rows * h, 5));
        let f = add_layer_norm_forward(h, &x, &r, &gamma, &beta, 1e-5);
        let want = loss(h, &x, &r, &gamma, &beta, &w);
        let got: f64 = f.y.iter().zip(&w).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
        assert!((got - want).abs() < 1e-3 * want.abs().max(1.0));
        let g = add_layer_norm_backward(h, &x, &r, &gamma, &f.mean, &f.rstd, &w);
        let eps = 1e-2f32;
        let fd = |bump: &dyn Fn(&mut [Vec<f32>; 4], f32)| {
            let mut up = [x.clone(), r.clone(), gamma.clone(), beta.clone()];
            bump(&mut up, eps);
            let mut down = [x.clone(), r.clone(), gamma.clone(), beta.clone()];
            bump(&mut down, -eps);
            (loss(h, &up[0], &up[1], &up[2], &up[3], &w) - loss(h, &down[0], &down[1], &down[2], &down[3], &w))
                / (2.0 * f64::from(eps))
        };
        for e in [0, 7, CHUNK * h + 3] {
            let want = fd(&|t: &mut [Vec<f32>; 4], d| t[0][e] += d);
            assert!((want - f64::from(g.z[e])).abs() < 2e-3, "dz[{e}]: {want} vs {}", g.z[e]);
            let want = fd(&|t: &mut [Vec<f32>; 4], d| t[1][e] += d);
            assert!((want - f64::from(g.z[e])).abs() < 2e-3, "dr[{e}]");
        }
        for j in 0..h {
            let want = fd(&|t: &mut [Vec<f32>; 4], d| t[2][j] += d);
            assert!(
                (want - f64::from(g.gamma[j])).abs() < 5e-3 * want.abs().max(1.0),
                "dγ[{j}]: {want} vs {}",
                g.gamma[j]
            );
            let want = fd(&|t: &mut [Vec<f32>; 4], d| t[3][j] += d);
            assert!((want - f64::from(g.beta[j])).abs() < 5e-3 * want.abs().max(1.0), "dβ[{j}]");
        }
    }

    #[test]
    fn same_bits_with_one_or_three_threads() {
        let (rows, h) = (3 * CHUNK + 1, 32);
        let (x, r, gamma, beta, dy) =
            (values(rows * h, 6), values(rows * h, 7), values(h, 8), values(h, 9), values(rows * h, 10));
        let run = |threads| {
            rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap().install(|| {
                let f = add_layer_norm_forward(h, &x, &r, &gamma, &beta, 1e-12);
                let g = add_layer_norm_backward(h, &x, &r, &gamma, &f.mean, &f.rstd, &dy);
                (f.y, g.z, g.gamma, g.beta)
            })
        };
        assert_eq!(run(1), run(3));
    }
}
