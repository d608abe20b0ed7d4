//! One train/test split of a cell-type probe: a standardised multinomial logistic regression and a
//! cosine k-nearest-neighbour vote (`knn`), scored by accuracy, per-class F1 and one-vs-rest AUROC.

use corrflow_algorithms::auroc::auroc;
use corrflow_algorithms::classes::f1_scores;

use corrflow_io::error::{Error, Result};

use crate::fold_rows::{Fold, FoldRows, Standardiser};
use crate::knn::{knn_predict, knn_vote_sparse};
use crate::logistic::{Design, Logistic, Settings};
use crate::sparse_rows::{self, SparseRows};

/// The largest standardised fold part (training or test cells) copied rather than read through
/// a view: 256 MB, above a 14,000-cell dataset's 2,000-HVG training fold (179 MB).
const FOLD_COPY_BYTES: usize = 256 << 20;

/// Scores of one split; per-class vectors are indexed by class (NaN: class not in the test part).
pub struct SplitScores {
    pub accuracy: f64,
    pub f1: Vec<f64>,
    pub auroc: Vec<f64>,
    pub knn_accuracy: f64,
    pub knn_f1: Vec<f64>,
    /// Test cells per class.
    pub support: Vec<usize>,
    /// The L2 penalty the logistic regression was fitted with (see `fit_logistic`).
    pub alpha: f64,
}

pub struct Classifiers<'a> {
    pub x: &'a [f64],
    pub y: &'a [usize],
    pub dim: usize,
    pub classes: usize,
    pub alpha: f64,
    pub max_iterations: u64,
    pub neighbours: usize,
}

impl Classifiers<'_> {
    /// The multinomial logistic regression and the penalty it was fitted with. L-BFGS's line
    /// search stops with "search direction must be a descent direction" when the gradient is at
    /// the level of rounding noise, which nearly separable classes reach as the weights grow
    /// (seen on 14,000 Kang cells, ctrl vs stim; on pbmc68k_reduced's X_pca every penalty below
    /// 1 fails). The fit is then retried with a looser gradient tolerance, then with the penalty
    /// raised tenfold at a time up to at least 1,000 (which fitted every case seen); the report
    /// says when the penalty was raised. A penalty of 0 could never be raised this way, which is
    /// why `check_alpha` bounds it below.
    fn fit_logistic(&self, x: Design<'_>, y: &[usize]) -> Result<(Logistic, f64)> {
        let mut last = String::new();
        for (alpha, gradient_tolerance) in penalty_ladder(self.alpha) {
            let settings = Settings { alpha, max_iterations: self.max_iterations, gradient_tolerance };
            match Logistic::fit(x, y, settings) {
                Ok(model) => return Ok((model, alpha)),
                Err(e) => last = e,
            }
        }
        Err(Error::internal("eval probe", format!("logistic regression failed at every penalty and tolerance: {last}")))
    }

    /// The logistic probe's predictions, per-class one-vs-rest AUROC (NaN for a class the fold
    /// did not train on) and penalty.
    fn logistic_probe(
        &self,
        xtr: Design<'_>,
        ytr: &[usize],
        xte: Design<'_>,
        yte: &[usize],
    ) -> Result<(Vec<usize>, Vec<f64>, f64)> {
        let (model, alpha) = self.fit_logistic(xtr, ytr)?;
        let probs = model.probabilities(xte);
        let pred = Logistic::predict(&probs, &model.classes);
        let k = model.classes.len();
        let mut aurocs = vec![f64::NAN; self.classes];
        for (col, &c) in model.classes.iter().enumerate() {
            let scores: Vec<f64> = probs.iter().skip(col).step_by(k).copied().collect();
            let positive: Vec<bool> = yte.iter().map(|&t| t == c).collect();
            if let Some(a) = auroc(&scores, &positive) {
                aurocs[c] = a;
            }
        }
        Ok((pred, aurocs, alpha))
    }

    /// Trains on `train`, scores on `test`.
    pub fn score(&self, train: &[usize], test: &[usize]) -> Result<SplitScores> {
        self.score_with(train, test, FOLD_COPY_BYTES, sparse_rows::MAX_DENSITY)
    }

    /// [`Classifiers::score`], reading the fold in sparse form up to `max_density` and copying
    /// its dense standardised parts of up to `copy_bytes`.
    fn score_with(&self, train: &[usize], test: &[usize], copy_bytes: usize, max_density: f64) -> Result<SplitScores> {
        // The probes leave out classes too small for the folds (`probe::probe_classes`), so
        // every fold trains and tests on cells; this guards the invariant without a panic.
        if train.is_empty() || test.is_empty() {
            return Err(Error::internal("eval probe", "a fold with no training or no test cells"));
        }
        let by = Standardiser::fit(self.x, self.dim, train);
        let view = |rows| FoldRows { x: self.x, dim: self.dim, rows, by: &by };
        let ytr: Vec<usize> = train.iter().map(|&i| self.y[i]).collect();
        let yte: Vec<usize> = test.iter().map(|&i| self.y[i]).collect();
        // The two probes of a fold are independent: rayon runs them side by side (and steals
        // across folds), so the slower logistic fit does not leave a thread idle.
        let (logistic, knn) = if let Some(xtr) = SparseRows::of(&view(train), max_density) {
            // Mostly one value per column (the HVG matrix): both probes read the stored entries
            // only, a twenty-fifth of Kang's 2,000 HVGs, and nothing is copied dense.
            let xte = SparseRows::against(&view(test), xtr.background().to_vec());
            rayon::join(
                || self.logistic_probe(Design::Sparse(&xtr), &ytr, Design::Sparse(&xte), &yte),
                || knn_vote_sparse(&xtr, &ytr, &xte, self.neighbours, self.classes),
            )
        } else {
            // Standardised with the training cells' statistics (`fold_rows`). The logistic fit
            // reads its fold ~150 times, and standardising on every read would double its time,
            // so a fold up to `copy_bytes` is standardised once into an f32 copy; a larger one (a
            // 100,000-cell fold of 2,000 dense features is 640 MB even in f32, and two or three
            // folds are in flight) is read through the view, in bounded memory.
            let (xtr, xte) = (Fold::new(view(train), copy_bytes), Fold::new(view(test), copy_bytes));
            rayon::join(
                || self.logistic_probe(Design::Dense(&xtr), &ytr, Design::Dense(&xte), &yte),
                || knn_predict(&xtr, &ytr, &xte, self.neighbours, self.classes),
            )
        };
        let (pred, aurocs, alpha) = logistic?;
        let (f1, support) = f1_scores(&yte, &pred, self.classes);
        let (knn_f1, _) = f1_scores(&yte, &knn, self.classes);
        let acc = |p: &[usize]| yte.iter().zip(p).filter(|(a, b)| a == b).count() as f64 / yte.len().max(1) as f64;
        Ok(SplitScores { accuracy: acc(&pred), f1, auroc: aurocs, knn_accuracy: acc(&knn), knn_f1, support, alpha })
    }
}

/// The (penalty, gradient tolerance) pairs `fit_logistic` tries in turn: `alpha` at two
/// tolerances, then ten times more each step (at least two steps, until ≥ 1,000), the last at the
/// looser tolerance. For the default 1: 1, 1, 10, 100, 1,000.
fn penalty_ladder(alpha: f64) -> Vec<(f64, f64)> {
    let mut tries = vec![(alpha, 1e-4), (alpha, 1e-3)];
    let mut raised = alpha;
    while tries.len() < 4 || (raised < 999.0 && raised > 0.0) {
        raised *= 10.0;
        tries.push((raised, 1e-4));
        if raised == 0.0 {
            break;
        }
    }
    if let Some(last) = tries.last_mut() {
        last.1 = 1e-3;
    }
    tries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fold_read_through_the_view_scores_as_its_copy() {
        let (n, dim) = (120, 7);
        let x: Vec<f64> = (0..n * dim).map(|i| ((i * 13 % 29) as f64 * 0.41).sin() * 3.0 + (i % dim) as f64).collect();
        let y: Vec<usize> = (0..n).map(|i| (i + (i * 7 % 5)) % 3).collect();
        let fit = Classifiers { x: &x, y: &y, dim, classes: 3, alpha: 1.0, max_iterations: 200, neighbours: 5 };
        let (test, train): (Vec<usize>, Vec<usize>) = (0..n).partition(|i| i % 5 == 2);
        let copied = fit.score_with(&train, &test, usize::MAX, 0.25).unwrap();
        let viewed = fit.score_with(&train, &test, 0, 0.25).unwrap();
        assert_eq!(copied.accuracy, viewed.accuracy);
        assert_eq!(copied.knn_accuracy, viewed.knn_accuracy);
        assert_eq!(copied.f1, viewed.f1);
        assert_eq!(copied.auroc, viewed.auroc);
        assert!(copied.accuracy > 0.0);
    }

    #[test]
    fn a_sparse_fold_scores_as_its_dense_copy() {
        let (n, dim) = (150, 12);
        let (x, y) = crate::sparse_rows::log_count_cells(n, dim, 0.6, 0.12);
        let fit = Classifiers { x: &x, y: &y, dim, classes: 3, alpha: 1.0, max_iterations: 200, neighbours: 5 };
        let (test, train): (Vec<usize>, Vec<usize>) = (0..n).partition(|i| i % 5 == 2);
        let dense = fit.score_with(&train, &test, usize::MAX, 0.0).unwrap();
        let sparse = fit.score_with(&train, &test, usize::MAX, 0.5).unwrap();
        assert_eq!(sparse.accuracy, dense.accuracy);
        assert_eq!(sparse.knn_accuracy, dense.knn_accuracy);
        assert_eq!(sparse.f1, dense.f1);
        for (a, b) in sparse.auroc.iter().zip(&dense.auroc) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
        assert!(dense.accuracy > 0.5, "{}", dense.accuracy);
    }

    #[test]
    fn the_penalty_is_raised_tenfold_until_it_fits() {
        assert_eq!(penalty_ladder(1.0), vec![(1.0, 1e-4), (1.0, 1e-3), (10.0, 1e-4), (100.0, 1e-4), (1000.0, 1e-3)]);
        let low = penalty_ladder(1e-4);
        assert_eq!(low.len(), 9, "{low:?}");
        assert!(low.last().unwrap().0 >= 999.0 && low.last().unwrap().1 == 1e-3);
        let high = penalty_ladder(1e6);
        assert_eq!(high.len(), 4);
        assert!(high.iter().all(|(a, _)| a.is_finite()));
    }
}
