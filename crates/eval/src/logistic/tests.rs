use linfa::prelude::*;
use linfa_logistic::MultiLogisticRegression;
use ndarray15::Array2;

use super::*;
use crate::fold_rows::{Dense, FoldRows, Standardiser};

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
    let problem = Problem { x: Design::Dense(&rows), target: y, classes: 3, alpha: 0.7, memo: Mutex::new(None) };
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

/// `n × d` features along a sine, classes `i % k`, and parameters along a cosine (× `scale`).
fn smooth(n: usize, d: usize, k: usize, scale: f64) -> (Vec<f64>, Vec<usize>, Vec<f64>) {
    let x = (0..n * d).map(|i| ((i as f64) * 0.013).sin()).collect();
    let p = (0..(d + 1) * k).map(|i| ((i as f64) * 0.7).cos() * scale).collect();
    (x, (0..n).map(|i| i % k).collect(), p)
}

/// Costs equal to 1e-10 and gradients to `tolerance`, relative.
fn assert_same((cost, grad): (f64, Vec<f64>), (want_cost, want_grad): (f64, Vec<f64>), tolerance: f64) {
    assert!((cost - want_cost).abs() < 1e-10 * want_cost.abs(), "{cost} vs {want_cost}");
    for (i, (g, w)) in grad.iter().zip(&want_grad).enumerate() {
        assert!((g - w).abs() < tolerance * (1.0 + w.abs()), "{i}: {g} vs {w}");
    }
}

#[test]
fn the_row_by_row_cost_is_the_blocked_products_cost() {
    // 700 rows span two blocks of 64 features; 3 classes.
    let (x, y, p) = smooth(700, 64, 3, 0.05);
    let rows = Dense { x: &x, dim: 64 };
    let problem = Problem { x: Design::Dense(&rows), target: y, classes: 3, alpha: 0.5, memo: Mutex::new(None) };
    assert_same(problem.small_cost_and_gradient(&rows, &p), problem.blocked_cost_and_gradient(&rows, &p), 1e-9);
}

#[test]
fn blocks_do_not_change_the_cost() {
    // 300 rows of 2,000 features span several blocks; the sum must equal one block's.
    let (n, d) = (300, 2000);
    let (x, y, p) = smooth(n, d, 2, 0.01);
    let rows = Dense { x: &x, dim: d };
    let problem =
        Problem { x: Design::Dense(&rows), target: y.clone(), classes: 2, alpha: 1.0, memo: Mutex::new(None) };
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
    let ours = Logistic::fit(Design::Dense(&Dense { x: &x, dim: 5 }), &y, fit).unwrap();
    let theirs = MultiLogisticRegression::default()
        .alpha(1.0)
        .max_iterations(200)
        .gradient_tolerance(1e-4)
        .fit(&Dataset::new(Array2::from_shape_vec((300, 5), x.clone()).unwrap(), Array1::from(y.clone())))
        .unwrap();
    let want = theirs.predict_probabilities(&Array2::from_shape_vec((300, 5), x.clone()).unwrap());
    let got = ours.probabilities(Design::Dense(&Dense { x: &x, dim: 5 }));
    let worst = want.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(worst < 1e-3, "largest probability difference {worst}");
    assert_eq!(ours.classes, vec![0, 1, 2]);
    let predicted = Logistic::predict(&got, &ours.classes);
    let correct = predicted.iter().zip(&y).filter(|(a, b)| a == b).count();
    assert!(correct > 150, "{correct} of 300 right");
}

/// `sparse_rows::log_count_cells` (200 × 40, ~85% zero) in sparse form, their classes, and
/// their exactly standardised rows.
fn sparse_cells() -> (SparseRows, Vec<usize>, Vec<f64>) {
    let (n, d) = (200, 40);
    let (x, y) = crate::sparse_rows::log_count_cells(n, d, 0.7, 0.12);
    let rows: Vec<usize> = (0..n).collect();
    let by = Standardiser::fit(&x, d, &rows);
    let (mean, inv) = by.columns();
    let exact = x.iter().enumerate().map(|(i, v)| (v - mean[i % d]) * inv[i % d]).collect();
    let sparse = SparseRows::of(&FoldRows { x: &x, dim: d, rows: &rows, by: &by }, 0.25).unwrap();
    (sparse, y, exact)
}

#[test]
fn sparse_rows_give_the_standardised_cost_and_gradient() {
    let (sparse, y, exact) = sparse_cells();
    let dense = Dense { x: &exact, dim: 40 };
    let problem = |x| Problem { x, target: y.clone(), classes: 3, alpha: 0.7, memo: Mutex::new(None) };
    let p: Vec<f64> = (0..41 * 3).map(|i| ((i as f64) * 0.37).sin() * 0.3).collect();
    let want = problem(Design::Dense(&dense)).cost_and_gradient(&p);
    assert_same(problem(Design::Sparse(&sparse)).cost_and_gradient(&p), want, 1e-10);
}

#[test]
fn a_sparse_fit_reaches_the_dense_optimum() {
    let (sparse, y, exact) = sparse_cells();
    let dense = Dense { x: &exact, dim: 40 };
    let fit = Settings { alpha: 1.0, max_iterations: 200, gradient_tolerance: 1e-4 };
    let a = Logistic::fit(Design::Dense(&dense), &y, fit).unwrap().probabilities(Design::Dense(&dense));
    let model = Logistic::fit(Design::Sparse(&sparse), &y, fit).unwrap();
    let b = model.probabilities(Design::Dense(&dense));
    let worst = a.iter().zip(&b).map(|(p, q)| (p - q).abs()).fold(0.0, f64::max);
    assert!(worst < 1e-4, "largest probability difference {worst}");
    // The same model's probabilities of the sparse rows are those of their dense form.
    let c = model.probabilities(Design::Sparse(&sparse));
    let worst = b.iter().zip(&c).map(|(p, q)| (p - q).abs()).fold(0.0, f64::max);
    assert!(worst < 1e-12, "sparse and dense probabilities differ by {worst}");
}

#[test]
fn bad_shapes_are_errors() {
    let fit = Settings { alpha: 1.0, max_iterations: 10, gradient_tolerance: 1e-4 };
    assert!(Logistic::fit(Design::Dense(&Dense { x: &[1.0, 2.0, 3.0, 4.0], dim: 2 }), &[0, 1, 1], fit).is_err());
    assert!(Logistic::fit(Design::Dense(&Dense { x: &[], dim: 0 }), &[], fit).is_err());
}
