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
//! A fold that is mostly its columns' minima (the HVG matrix) is read in sparse form, with the
//! standardisation folded into the weights (`sparse_rows`).

use std::sync::Mutex;

use argmin::core::{CostFunction, Executor, Gradient};
use argmin::solver::linesearch::MoreThuenteLineSearch;
use argmin::solver::quasinewton::LBFGS;
use faer::linalg::matmul::matmul;
use faer::prelude::{Reborrow, ReborrowMut};
use faer::{Accum, Mat, MatRef, Par};
use ndarray15::Array1;

use crate::fold_rows::Rows;
use crate::sparse_rows::SparseRows;

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

/// A row's loss `log Σ exp(h) − h_t` (returned), and in place of its scores `h` its residuals
/// `softmax(h) − onehot(t)`.
fn softmax_residuals(h: &mut [f64], t: usize) -> f64 {
    let max = h.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lse = max + h.iter().map(|&v| (v - max).exp()).sum::<f64>().ln();
    let loss = lse - h[t];
    for (c, hc) in h.iter_mut().enumerate() {
        *hc = (*hc - lse).exp() - f64::from(u8::from(c == t));
    }
    loss
}

/// The most weights (features × classes) fitted row by row instead of with faer's products:
/// 64 KB of them, and as much of their gradient, stay in cache.
const SMALL_WEIGHTS: usize = 8192;

/// `Σ a·b` with four accumulators, so that the loop vectorises.
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut acc = [0.0; 4];
    let (a4, b4) = (a.chunks_exact(4), b.chunks_exact(4));
    let tail: f64 = a4.remainder().iter().zip(b4.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in a4.zip(b4) {
        for l in 0..4 {
            acc[l] += x[l] * y[l];
        }
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

/// Rows of one block: about 256 KB of the matrix, so a block read by the first product is still
/// in cache for the second.
fn block_rows(dim: usize) -> usize {
    (32_768 / dim.max(1)).clamp(8, 1024)
}

/// The training cells as the fit reads them.
#[derive(Clone, Copy)]
pub enum Design<'a> {
    /// Standardised rows, read in blocks.
    Dense(&'a dyn Rows),
    /// Entries apart from their column's background, the standardisation applied to the weights.
    Sparse(&'a SparseRows),
}

impl Design<'_> {
    fn len(&self) -> usize {
        match self {
            Design::Dense(x) => x.len(),
            Design::Sparse(x) => x.len(),
        }
    }

    fn dim(&self) -> usize {
        match self {
            Design::Dense(x) => x.dim(),
            Design::Sparse(x) => x.dim(),
        }
    }
}

/// The penalised negative log-likelihood of the training cells and its gradient.
struct Problem<'a> {
    x: Design<'a>,
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
        match self.x {
            Design::Dense(x) if x.dim() * self.classes <= SMALL_WEIGHTS => self.small_cost_and_gradient(x, p),
            Design::Dense(x) => self.blocked_cost_and_gradient(x, p),
            Design::Sparse(x) => self.sparse_cost_and_gradient(x, p),
        }
    }

    /// On dense rows, in blocks of rows, each block through two of faer's products.
    fn blocked_cost_and_gradient(&self, x: &dyn Rows, p: &[f64]) -> (f64, Vec<f64>) {
        let (d, k) = (x.dim(), self.classes);
        let n = self.target.len();
        let w = MatRef::from_row_major_slice(&p[..d * k], d, k);
        let b = &p[d * k..];
        let rows = block_rows(d);
        let mut block = vec![0.0; rows * d];
        let mut scores = Mat::<f64>::zeros(rows, k);
        let mut grad_w = Mat::<f64>::zeros(d, k);
        let mut grad_b = vec![0.0; k];
        let mut row = vec![0.0; k];
        let mut loss = 0.0;
        for start in (0..n).step_by(rows) {
            let m = rows.min(n - start);
            x.read(start, &mut block[..m * d]);
            let xb = MatRef::from_row_major_slice(&block[..m * d], m, d);
            let mut h = scores.as_mut().subrows_mut(0, m);
            matmul(h.rb_mut(), Accum::Replace, xb, w, 1.0, Par::Seq);
            for r in 0..m {
                (0..k).for_each(|c| row[c] = h[(r, c)] + b[c]);
                loss += softmax_residuals(&mut row, self.target[start + r]);
                // The residual P − Y replaces the score in place.
                for c in 0..k {
                    h[(r, c)] = row[c];
                    grad_b[c] += row[c];
                }
            }
            matmul(grad_w.as_mut(), Accum::Add, xb.transpose(), h.rb(), 1.0, Par::Seq);
        }
        self.penalised(&p[..d * k], loss, &grad_b, |j, c| grad_w[(j, c)])
    }

    /// [`Problem::blocked_cost_and_gradient`] for weights that fit in cache (an embedding's 64
    /// features × a few classes): row by row, each score a dot product with the class's weights
    /// and each gradient row an update of them. faer's products of a 512-row block by a
    /// `d × k` matrix this thin cost more to set up than to compute: a fit on Kang's 64-d
    /// embeddings took 0.5–2.3 s for 40–90 iterations.
    fn small_cost_and_gradient(&self, x: &dyn Rows, p: &[f64]) -> (f64, Vec<f64>) {
        let (d, k) = (x.dim(), self.classes);
        let (w, b) = p.split_at(d * k);
        // Class-major copies, so that each class's weights and gradient are contiguous.
        let by_class: Vec<f64> = (0..k).flat_map(|c| (0..d).map(move |j| w[j * k + c])).collect();
        let mut grad_by_class = vec![0.0; k * d];
        let mut grad_b = vec![0.0; k];
        let mut h = vec![0.0; k];
        let mut loss = 0.0;
        let rows = block_rows(d);
        let mut block = vec![0.0; rows * d];
        for start in (0..self.target.len()).step_by(rows) {
            let m = rows.min(self.target.len() - start);
            x.read(start, &mut block[..m * d]);
            for (row, &t) in block[..m * d].chunks_exact(d.max(1)).zip(&self.target[start..start + m]) {
                for (c, hc) in h.iter_mut().enumerate() {
                    *hc = dot(row, &by_class[c * d..(c + 1) * d]) + b[c];
                }
                loss += softmax_residuals(&mut h, t);
                for (c, &residual) in h.iter().enumerate() {
                    grad_b[c] += residual;
                    grad_by_class[c * d..(c + 1) * d].iter_mut().zip(row).for_each(|(g, v)| *g += residual * v);
                }
            }
        }
        self.penalised(w, loss, &grad_b, |j, c| grad_by_class[c * d + j])
    }

    /// The same on sparse rows. A standardised entry is `(v − shift)·inv_sd` (`v` 0 where nothing
    /// is stored), so a score is `Σ v·inv_sd·W` over the stored entries plus a constant per class,
    /// and `∂/∂W_jc = inv_sd_j·(Σ_r v_rj R_rc − shift_j·Σ_r R_rc) + αW_jc` with `R = P − Y`.
    fn sparse_cost_and_gradient(&self, x: &SparseRows, p: &[f64]) -> (f64, Vec<f64>) {
        let (d, k) = (x.dim(), self.classes);
        let folded = FoldedWeights::new(x, p, k);
        // Class-major, as the folded weights.
        let mut stored_grad = vec![0.0; k * d];
        let mut grad_b = vec![0.0; k];
        let mut h = vec![0.0; k];
        let mut loss = 0.0;
        for (r, &t) in self.target.iter().enumerate() {
            let (cols, vals) = x.row(r);
            folded.scores(cols, vals, &mut h);
            loss += softmax_residuals(&mut h, t);
            for (c, &rc) in h.iter().enumerate() {
                grad_b[c] += rc;
                let g = &mut stored_grad[c * d..(c + 1) * d];
                cols.iter().zip(vals).for_each(|(&j, &v)| g[j as usize] += v * rc);
            }
        }
        let data = |j: usize, c: usize| x.inv_sd[j] * (stored_grad[c * d + j] - x.shift[j] * grad_b[c]);
        self.penalised(&p[..d * k], loss, &grad_b, data)
    }

    /// The cost `loss + α/2 ‖W‖²` and the gradient `[data(j, c) + αW_jc (row-major); ∂b]`, from
    /// the data term's derivative in `W` and `b`.
    fn penalised(&self, w: &[f64], loss: f64, grad_b: &[f64], data: impl Fn(usize, usize) -> f64) -> (f64, Vec<f64>) {
        let k = grad_b.len();
        let mut grad = Vec::with_capacity(w.len() + k);
        let mut penalty = 0.0;
        for (i, &wjc) in w.iter().enumerate() {
            penalty += wjc * wjc;
            grad.push(data(i / k, i % k) + self.alpha * wjc);
        }
        grad.extend_from_slice(grad_b);
        (loss + 0.5 * self.alpha * penalty, grad)
    }
}

/// The weights with a sparse design's standardisation folded in, class-major: a row's score for
/// class `c` is `base_c + Σ v·scaled[c][j]` over its stored entries (one gather per entry and
/// class; interleaving the classes per entry cost a slice per entry).
struct FoldedWeights {
    d: usize,
    scaled: Vec<f64>,
    base: Vec<f64>,
}

impl FoldedWeights {
    /// From `p` = `[W (d × k, row-major); b]`.
    fn new(x: &SparseRows, p: &[f64], k: usize) -> FoldedWeights {
        let d = x.dim();
        let (w, b) = p.split_at(d * k);
        let mut scaled = vec![0.0; k * d];
        let mut base = b[..k].to_vec();
        for j in 0..d {
            for c in 0..k {
                let v = w[j * k + c] * x.inv_sd[j];
                scaled[c * d + j] = v;
                base[c] -= x.shift[j] * v;
            }
        }
        FoldedWeights { d, scaled, base }
    }

    /// The scores (`XW + b`) of one row, into `h`.
    fn scores(&self, cols: &[u32], vals: &[f64], h: &mut [f64]) {
        for (c, hc) in h.iter_mut().enumerate() {
            let w = &self.scaled[c * self.d..(c + 1) * self.d];
            *hc = self.base[c] + cols.iter().zip(vals).map(|(&j, &v)| v * w[j as usize]).sum::<f64>();
        }
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
    pub fn fit(x: Design<'_>, y: &[usize], settings: Settings) -> Result<Logistic, String> {
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
            sparse = matches!(x, Design::Sparse(_)),
            iterations = result.state.iter,
            seconds = start.elapsed().as_secs_f64(),
            "logistic probe fitted"
        );
        let params = result.state.best_param.unwrap_or(init).to_vec();
        Ok(Logistic { dim, params, classes })
    }

    /// Class probabilities of each row of `x` (`rows × classes.len()`, row-major).
    pub fn probabilities(&self, x: Design<'_>) -> Vec<f64> {
        let (d, k, n) = (self.dim, self.classes.len(), x.len());
        let mut h = vec![0.0; n * k];
        match x {
            Design::Dense(x) => {
                let w = MatRef::from_row_major_slice(&self.params[..d * k], d, k);
                let b = &self.params[d * k..];
                let rows = block_rows(d);
                let mut block = vec![0.0; rows * d];
                let mut scores = Mat::<f64>::zeros(rows, k);
                for start in (0..n).step_by(rows) {
                    let m = rows.min(n - start);
                    x.read(start, &mut block[..m * d]);
                    let xb = MatRef::from_row_major_slice(&block[..m * d], m, d);
                    matmul(scores.as_mut().subrows_mut(0, m), Accum::Replace, xb, w, 1.0, Par::Seq);
                    for r in 0..m {
                        (0..k).for_each(|c| h[(start + r) * k + c] = scores[(r, c)] + b[c]);
                    }
                }
            }
            Design::Sparse(x) => {
                let folded = FoldedWeights::new(x, &self.params, k);
                for (r, row) in h.chunks_exact_mut(k).enumerate() {
                    let (cols, vals) = x.row(r);
                    folded.scores(cols, vals, row);
                }
            }
        }
        let mut out = Vec::with_capacity(n * k);
        for row in h.chunks_exact(k) {
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = row.iter().map(|v| (v - max).exp()).collect();
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
mod tests;
