//! The logistic probe's model: a multinomial logistic regression with an L2 penalty on the
//! weights (not the intercepts), fitted by argmin's L-BFGS with the More–Thuente line search and
//! 10 corrections — the problem and solver linfa-logistic sets up, so the optimum and the
//! convergence behaviour are the ones the probes had before.
//!
//! What differs is the cost and gradient. linfa computes `X·W` once for the cost and again for
//! the gradient, and `Xᵀ·(P − Y)` once more, each an ndarray product that re-packs the whole
//! `n × d` fold matrix (a profile of `eval cells` put ~60% of its time there). Here one
//! evaluation walks the matrix once, in blocks of rows small enough to stay in cache between the
//! two faer products of the block, and returns the cost and gradient together; the line search
//! asks for the gradient at the point whose cost it just took, which is answered from a memo.

use std::sync::Mutex;

use argmin::core::{CostFunction, Executor, Gradient};
use argmin::solver::linesearch::MoreThuenteLineSearch;
use argmin::solver::quasinewton::LBFGS;
use faer::linalg::matmul::matmul;
use faer::prelude::{Reborrow, ReborrowMut};
use faer::{Accum, Mat, MatRef, Par};
use ndarray15::Array1;

use crate::fold_rows::Rows;

/// A fitted model: `classes[c]` is the class of score column `c`.
pub struct Logistic {
    dim: usize,
    /// `(dim + 1) × classes` row-major; the last row holds the intercepts.
    params: Vec<f64>,
    pub classes: Vec<usize>,
}

/// Settings of one fit.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub alpha: f64,
    pub max_iterations: u64,
    pub gradient_tolerance: f64,
}

/// Rows of one block: about 256 KB of the matrix, so a block read by the first product is still
/// in cache for the second.
fn block_rows(dim: usize) -> usize {
    (32_768 / dim.max(1)).clamp(8, 1024)
}

/// The penalised negative log-likelihood of the training cells and its gradient.
struct Problem<'a> {
    x: &'a dyn Rows,
    /// The column (index into `classes`) of each training cell's class.
    target: Vec<usize>,
    classes: usize,
    alpha: f64,
    /// The last point evaluated, its cost and gradient.
    memo: Mutex<Option<(Array1<f64>, f64, Array1<f64>)>>,
}

impl Problem<'_> {
    fn evaluate(&self, p: &Array1<f64>) -> (f64, Array1<f64>) {
        if let Ok(memo) = self.memo.lock() {
            if let Some((at, cost, grad)) = memo.as_ref() {
                if at == p {
                    return (*cost, grad.clone());
                }
            }
        }
        let (cost, grad) = self.cost_and_gradient(p.as_slice().expect("contiguous parameters"));
        let grad = Array1::from(grad);
        if let Ok(mut memo) = self.memo.lock() {
            *memo = Some((p.clone(), cost, grad.clone()));
        }
        (cost, grad)
    }

    /// `−Σ log softmax(XW + b)[y] + α/2 ‖W‖²`, and its gradient `[Xᵀ(P − Y) + αW; Σ(P − Y)]`.
    fn cost_and_gradient(&self, p: &[f64]) -> (f64, Vec<f64>) {
        let (d, k) = (self.x.dim(), self.classes);
        let n = self.target.len();
        let w = MatRef::from_row_major_slice(&p[..d * k], d, k);
        let b = &p[d * k..];
        let rows = block_rows(d);
        let mut block = vec![0.0; rows * d];
        let mut scores = Mat::<f64>::zeros(rows, k);
        let mut grad_w = Mat::<f64>::zeros(d, k);
        let mut grad_b = vec![0.0; k];
        let mut loss = 0.0;
        for start in (0..n).step_by(rows) {
            let m = rows.min(n - start);
            self.x.read(start, &mut block[..m * d]);
            let xb = MatRef::from_row_major_slice(&block[..m * d], m, d);
            let mut h = scores.as_mut().subrows_mut(0, m);
            matmul(h.rb_mut(), Accum::Replace, xb, w, 1.0, Par::Seq);
            for r in 0..m {
                let t = self.target[start + r];
                let max = (0..k).map(|c| h[(r, c)] + b[c]).fold(f64::NEG_INFINITY, f64::max);
                let lse = max + (0..k).map(|c| (h[(r, c)] + b[c] - max).exp()).sum::<f64>().ln();
                loss -= h[(r, t)] + b[t] - lse;
                for c in 0..k {
                    // The residual P − Y replaces the score in place.
                    let residual = (h[(r, c)] + b[c] - lse).exp() - f64::from(u8::from(c == t));
                    h[(r, c)] = residual;
                    grad_b[c] += residual;
                }
            }
            matmul(grad_w.as_mut(), Accum::Add, xb.transpose(), h.rb(), 1.0, Par::Seq);
        }
        let mut grad = Vec::with_capacity(p.len());
        let mut penalty = 0.0;
        for j in 0..d {
            for c in 0..k {
                let wjc = w[(j, c)];
                penalty += wjc * wjc;
                grad.push(grad_w[(j, c)] + self.alpha * wjc);
            }
        }
        grad.extend_from_slice(&grad_b);
        (loss + 0.5 * self.alpha * penalty, grad)
    }
}

impl CostFunction for Problem<'_> {
    type Param = Array1<f64>;
    type Output = f64;

    fn cost(&self, p: &Self::Param) -> Result<f64, argmin::core::Error> {
        Ok(self.evaluate(p).0)
    }
}

impl Gradient for Problem<'_> {
    type Param = Array1<f64>;
    type Gradient = Array1<f64>;

    fn gradient(&self, p: &Self::Param) -> Result<Array1<f64>, argmin::core::Error> {
        Ok(self.evaluate(p).1)
    }
}

impl Logistic {
    /// Fits the rows of `x` (one per entry of `y`; finite, as the probes' inputs are checked to
    /// be) to the classes `y`. The error is the solver's message (e.g. the line search's "search
    /// direction must be a descent direction").
    pub fn fit(x: &dyn Rows, y: &[usize], settings: Settings) -> Result<Logistic, String> {
        let dim = x.dim();
        if dim == 0 || x.len() != y.len() || y.is_empty() {
            return Err(format!("{} rows of {dim} features for {} classes", x.len(), y.len()));
        }
        let mut classes = y.to_vec();
        classes.sort_unstable();
        classes.dedup();
        let target = y.iter().map(|c| classes.binary_search(c).unwrap_or(0)).collect();
        let k = classes.len();
        let problem = Problem { x, target, classes: k, alpha: settings.alpha, memo: Mutex::new(None) };
        let solver = LBFGS::new(MoreThuenteLineSearch::new(), 10)
            .with_tolerance_grad(settings.gradient_tolerance)
            .map_err(|e| e.to_string())?;
        let init = Array1::<f64>::zeros((dim + 1) * k);
        let start = std::time::Instant::now();
        let result = Executor::new(problem, solver)
            .configure(|state| state.param(init.clone()).max_iters(settings.max_iterations))
            .run()
            .map_err(|e| e.to_string())?;
        tracing::debug!(
            cells = y.len(),
            features = dim,
            iterations = result.state.iter,
            seconds = start.elapsed().as_secs_f64(),
            "logistic probe fitted"
        );
        let params = result.state.best_param.unwrap_or(init).to_vec();
        Ok(Logistic { dim, params, classes })
    }

    /// Class probabilities of each row of `x` (`rows × classes.len()`, row-major).
    pub fn probabilities(&self, x: &dyn Rows) -> Vec<f64> {
        let (d, k, n) = (self.dim, self.classes.len(), x.len());
        let w = MatRef::from_row_major_slice(&self.params[..d * k], d, k);
        let b = &self.params[d * k..];
        let rows = block_rows(d);
        let mut block = vec![0.0; rows * d];
        let mut h = Mat::<f64>::zeros(n, k);
        for start in (0..n).step_by(rows) {
            let m = rows.min(n - start);
            x.read(start, &mut block[..m * d]);
            let xb = MatRef::from_row_major_slice(&block[..m * d], m, d);
            matmul(h.as_mut().subrows_mut(start, m), Accum::Replace, xb, w, 1.0, Par::Seq);
        }
        let mut out = Vec::with_capacity(n * k);
        for r in 0..n {
            let max = (0..k).map(|c| h[(r, c)] + b[c]).fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = (0..k).map(|c| (h[(r, c)] + b[c] - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            out.extend(e.iter().map(|v| v / sum));
        }
        out
    }

    /// The most probable class of each row (ties: the first column).
    pub fn predict(probabilities: &[f64], classes: &[usize]) -> Vec<usize> {
        probabilities
            .chunks(classes.len().max(1))
            .map(|row| {
                let best = row.iter().enumerate().fold(0, |b, (c, &v)| if v > row[b] { c } else { b });
                classes[best]
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use linfa::prelude::*;
    use linfa_logistic::MultiLogisticRegression;
    use ndarray15::Array2;

    use super::*;
    use crate::fold_rows::Dense;

    /// Three overlapping Gaussian classes in 5 dimensions (not separable, so the optimum is
    /// finite and well defined).
    fn blobs(n: usize) -> (Vec<f64>, Vec<usize>) {
        let mut x = Vec::new();
        let mut y = Vec::new();
        for i in 0..n {
            let c = i % 3;
            y.push(c);
            for j in 0..5 {
                let noise = ((i * 7 + j * 13) as f64 * 0.731).sin() * 1.5;
                x.push(noise + if j == c { 1.0 } else { 0.0 });
            }
        }
        (x, y)
    }

    #[test]
    fn the_gradient_is_the_cost_derivative() {
        let (x, y) = blobs(60);
        let rows = Dense { x: &x, dim: 5 };
        let problem = Problem { x: &rows, target: y, classes: 3, alpha: 0.7, memo: Mutex::new(None) };
        let p: Vec<f64> = (0..18).map(|i| ((i as f64) * 0.37).sin() * 0.3).collect();
        let (_, grad) = problem.cost_and_gradient(&p);
        for i in 0..p.len() {
            let (mut up, mut down) = (p.clone(), p.clone());
            up[i] += 1e-6;
            down[i] -= 1e-6;
            let numeric = (problem.cost_and_gradient(&up).0 - problem.cost_and_gradient(&down).0) / 2e-6;
            assert!((numeric - grad[i]).abs() < 1e-5 * (1.0 + numeric.abs()), "{i}: {numeric} vs {}", grad[i]);
        }
    }

    #[test]
    fn blocks_do_not_change_the_cost() {
        // 300 rows of 2,000 features span several blocks; the sum must equal one block's.
        let (n, d) = (300, 2000);
        let x: Vec<f64> = (0..n * d).map(|i| ((i as f64) * 0.013).sin()).collect();
        let y: Vec<usize> = (0..n).map(|i| i % 2).collect();
        let p: Vec<f64> = (0..(d + 1) * 2).map(|i| ((i as f64) * 0.7).cos() * 0.01).collect();
        let rows = Dense { x: &x, dim: d };
        let problem = Problem { x: &rows, target: y.clone(), classes: 2, alpha: 1.0, memo: Mutex::new(None) };
        let (cost, grad) = problem.cost_and_gradient(&p);
        let mut want = 0.0;
        for r in 0..n {
            let h: Vec<f64> =
                (0..2).map(|c| (0..d).map(|j| x[r * d + j] * p[j * 2 + c]).sum::<f64>() + p[d * 2 + c]).collect();
            let lse = h.iter().map(|v| v.exp()).sum::<f64>().ln();
            want -= h[y[r]] - lse;
        }
        want += 0.5 * p[..d * 2].iter().map(|v| v * v).sum::<f64>();
        assert!((cost - want).abs() < 1e-8 * want.abs(), "{cost} vs {want}");
        assert_eq!(grad.len(), p.len());
    }

    #[test]
    fn the_fit_reaches_linfas_optimum() {
        let (x, y) = blobs(300);
        let fit = Settings { alpha: 1.0, max_iterations: 200, gradient_tolerance: 1e-4 };
        let ours = Logistic::fit(&Dense { x: &x, dim: 5 }, &y, fit).unwrap();
        let theirs = MultiLogisticRegression::default()
            .alpha(1.0)
            .max_iterations(200)
            .gradient_tolerance(1e-4)
            .fit(&Dataset::new(Array2::from_shape_vec((300, 5), x.clone()).unwrap(), Array1::from(y.clone())))
            .unwrap();
        let want = theirs.predict_probabilities(&Array2::from_shape_vec((300, 5), x.clone()).unwrap());
        let got = ours.probabilities(&Dense { x: &x, dim: 5 });
        let worst = want.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(worst < 1e-3, "largest probability difference {worst}");
        assert_eq!(ours.classes, vec![0, 1, 2]);
        let predicted = Logistic::predict(&got, &ours.classes);
        let correct = predicted.iter().zip(&y).filter(|(a, b)| a == b).count();
        assert!(correct > 150, "{correct} of 300 right");
    }

    #[test]
    fn bad_shapes_are_errors() {
        let fit = Settings { alpha: 1.0, max_iterations: 10, gradient_tolerance: 1e-4 };
        assert!(Logistic::fit(&Dense { x: &[1.0, 2.0, 3.0, 4.0], dim: 2 }, &[0, 1, 1], fit).is_err());
        assert!(Logistic::fit(&Dense { x: &[], dim: 0 }, &[], fit).is_err());
    }
}
