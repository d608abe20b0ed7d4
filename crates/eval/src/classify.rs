//! One train/test split of a cell-type probe: a standardised multinomial logistic regression and a
//! cosine k-nearest-neighbour vote, scored by accuracy, per-class F1 and one-vs-rest AUROC.

use corrflow_algorithms::auroc::auroc;
use corrflow_algorithms::classes::f1_scores;
use faer::prelude::{Reborrow, ReborrowMut};

use corrflow_io::error::{Error, Result};

use crate::fold_rows::{Fold, FoldRows, Rows, Standardiser};
use crate::logistic::{Logistic, Settings};

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
    fn fit_logistic(&self, x: &dyn Rows, y: &[usize]) -> Result<(Logistic, f64)> {
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
        xtr: &dyn Rows,
        ytr: &[usize],
        xte: &dyn Rows,
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
        self.score_copying(train, test, FOLD_COPY_BYTES)
    }

    /// [`Classifiers::score`], copying the standardised fold parts of up to `copy_bytes`.
    fn score_copying(&self, train: &[usize], test: &[usize], copy_bytes: usize) -> Result<SplitScores> {
        // The probes leave out classes too small for the folds (`probe::probe_classes`), so
        // every fold trains and tests on cells; this guards the invariant without a panic.
        if train.is_empty() || test.is_empty() {
            return Err(Error::internal("eval probe", "a fold with no training or no test cells"));
        }
        // Standardised with the training cells' statistics (`fold_rows`). The logistic fit reads
        // its fold ~150 times, and standardising on every read would double its time, so a fold
        // up to FOLD_COPY_BYTES is standardised once into an f32 copy; a larger one (a 100,000-cell
        // fold of 2,000 HVGs is 640 MB even in f32, and two or three folds are in flight) is read through
        // the view, in bounded memory.
        let by = Standardiser::fit(self.x, self.dim, train);
        let view = |rows| FoldRows { x: self.x, dim: self.dim, rows, by: &by };
        let (xtr, xte) = (Fold::new(view(train), copy_bytes), Fold::new(view(test), copy_bytes));
        let (xtr, xte): (&dyn Rows, &dyn Rows) = (&xtr, &xte);
        let ytr: Vec<usize> = train.iter().map(|&i| self.y[i]).collect();
        let yte: Vec<usize> = test.iter().map(|&i| self.y[i]).collect();
        // The two probes of a fold are independent: rayon runs them side by side (and steals
        // across folds), so the slower logistic fit does not leave a thread idle.
        let (logistic, knn) = rayon::join(
            || self.logistic_probe(xtr, &ytr, xte, &yte),
            || knn_predict(xtr, &ytr, xte, self.neighbours, self.classes),
        );
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

/// Test rows per block of the k-NN vote: the block's similarities are `train × rows` f32 (about
/// 32 MB), never the whole test × train matrix (12.8 GB at 100,000 cells in f64).
fn knn_block_rows(train: usize) -> usize {
    ((1usize << 23) / train.max(1)).clamp(64, 2048)
}

/// Majority class among the `k` most cosine-similar training rows (ties: the smaller class id).
/// Similarities are f32 dot products of unit rows (faer's GEMM, the test rows in blocks), as
/// scikit-learn computes them on float32 embeddings.
fn knn_predict(train: &dyn Rows, y: &[usize], test: &dyn Rows, k: usize, classes: usize) -> Vec<usize> {
    knn_vote(train, y, test, k, classes, knn_block_rows(train.len()))
}

fn knn_vote(train: &dyn Rows, y: &[usize], test: &dyn Rows, k: usize, classes: usize, block: usize) -> Vec<usize> {
    let (ntr, nte, d) = (train.len(), test.len(), train.dim());
    let tr = unit_rows(train, 0, ntr);
    let tr = faer::MatRef::from_row_major_slice(&tr, ntr, d);
    let k = k.clamp(1, y.len().max(1));
    let mut sims = faer::Mat::<f32>::zeros(ntr, block.min(nte).max(1));
    let mut order: Vec<(f32, usize)> = Vec::with_capacity(k + 1);
    let mut out = Vec::with_capacity(nte);
    for start in (0..nte).step_by(block) {
        let rows = block.min(nte - start);
        let te = unit_rows(test, start, rows);
        let te = faer::MatRef::from_row_major_slice(&te, rows, d);
        let mut s = sims.as_mut().subcols_mut(0, rows);
        faer::linalg::matmul::matmul(s.rb_mut(), faer::Accum::Replace, tr, te.transpose(), 1.0, faer::Par::Seq);
        for r in 0..rows {
            let col = s.rb().col(r).try_as_col_major().expect("a column of a column-major Mat");
            nearest(col.as_slice(), k, &mut order);
            let mut votes = vec![0usize; classes];
            order.iter().for_each(|&(_, j)| votes[y[j]] += 1);
            out.push((0..classes).max_by_key(|&c| (votes[c], std::cmp::Reverse(c))).unwrap_or(0));
        }
    }
    out
}

/// The `k` most similar (largest, ties: the smaller index) of `sims`, into `best`, most similar
/// first. One comparison per entry once `best` is full: k is ~10 among ~10⁴ training cells.
fn nearest(sims: &[f32], k: usize, best: &mut Vec<(f32, usize)>) {
    best.clear();
    let better = |a: &(f32, usize), b: &(f32, usize)| a.0 > b.0 || (a.0 == b.0 && a.1 < b.1);
    for (j, &v) in sims.iter().enumerate() {
        if best.len() == k && v <= best[k - 1].0 {
            continue;
        }
        let c = (v, j);
        let at = best.partition_point(|b| better(b, &c));
        best.insert(at, c);
        best.truncate(k);
    }
}

/// Rows `start..start + count` of `m` scaled to unit length, as f32 (a zero row stays zero),
/// read a thousand at a time.
fn unit_rows(m: &dyn Rows, start: usize, count: usize) -> Vec<f32> {
    let d = m.dim();
    let mut out = Vec::with_capacity(count * d);
    let mut buf = vec![0.0; 1024.min(count) * d];
    for at in (start..start + count).step_by(1024) {
        let rows = 1024.min(start + count - at);
        m.read(at, &mut buf[..rows * d]);
        for row in buf[..rows * d].chunks_exact(d) {
            let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-12);
            out.extend(row.iter().map(|&v| (v / norm) as f32));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fold_rows::Dense;
    use ndarray15::Array2;

    fn dense(m: &Array2<f64>) -> Dense<'_> {
        Dense { x: m.as_slice().unwrap(), dim: m.ncols() }
    }

    #[test]
    fn knn_votes_the_nearest_class_by_cosine() {
        let train = Array2::from_shape_vec((4, 2), vec![1.0, 0.0, 0.9, 0.1, 0.0, 1.0, 0.1, 0.9]).unwrap();
        let test = Array2::from_shape_vec((2, 2), vec![1.0, 0.05, 0.05, 1.0]).unwrap();
        assert_eq!(knn_predict(&dense(&train), &[0, 0, 1, 1], &dense(&test), 2, 2), vec![0, 1]);
    }

    #[test]
    fn knn_blocks_vote_as_one_pass_and_as_a_direct_computation() {
        let train = Array2::from_shape_fn((50, 6), |(i, j)| ((i * 6 + j) as f64 * 0.71).sin() + (i % 3) as f64 * 0.2);
        let test = Array2::from_shape_fn((23, 6), |(i, j)| ((i * 6 + j) as f64 * 0.37).cos());
        let y: Vec<usize> = (0..50).map(|i| i % 3).collect();
        let direct: Vec<usize> = test
            .rows()
            .into_iter()
            .map(|t| {
                let cos = |r: ndarray15::ArrayView1<f64>| r.dot(&t) / (r.dot(&r).sqrt() * t.dot(&t).sqrt());
                let mut all: Vec<(f64, usize)> =
                    train.rows().into_iter().enumerate().map(|(j, r)| (cos(r), j)).collect();
                all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                let mut votes = [0usize; 3];
                all[..5].iter().for_each(|&(_, j)| votes[y[j]] += 1);
                (0..3).max_by_key(|&c| (votes[c], std::cmp::Reverse(c))).unwrap()
            })
            .collect();
        let one = knn_vote(&dense(&train), &y, &dense(&test), 5, 3, 1000);
        assert_eq!(one, direct);
        for block in [1, 4, 7] {
            assert_eq!(knn_vote(&dense(&train), &y, &dense(&test), 5, 3, block), one, "block {block}");
        }
    }

    #[test]
    fn a_fold_read_through_the_view_scores_as_its_copy() {
        let (n, dim) = (120, 7);
        let x: Vec<f64> = (0..n * dim).map(|i| ((i * 13 % 29) as f64 * 0.41).sin() * 3.0 + (i % dim) as f64).collect();
        let y: Vec<usize> = (0..n).map(|i| (i + (i * 7 % 5)) % 3).collect();
        let fit = Classifiers { x: &x, y: &y, dim, classes: 3, alpha: 1.0, max_iterations: 200, neighbours: 5 };
        let (test, train): (Vec<usize>, Vec<usize>) = (0..n).partition(|i| i % 5 == 2);
        let copied = fit.score_copying(&train, &test, usize::MAX).unwrap();
        let viewed = fit.score_copying(&train, &test, 0).unwrap();
        assert_eq!(copied.accuracy, viewed.accuracy);
        assert_eq!(copied.knn_accuracy, viewed.knn_accuracy);
        assert_eq!(copied.f1, viewed.f1);
        assert_eq!(copied.auroc, viewed.auroc);
        assert!(copied.accuracy > 0.0);
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
