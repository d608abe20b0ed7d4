//! The cosine k-nearest-neighbour vote of a probe fold: dense rows through f32 GEMM in blocks of
//! test rows, or sparse rows through an inverted index of the training rows' stored columns.

use faer::prelude::{Reborrow, ReborrowMut};

use crate::fold_rows::Rows;
use crate::sparse_rows::SparseRows;

/// Test rows per block of the k-NN vote: the block's similarities are `train × rows` f32 (about
/// 32 MB), never the whole test × train matrix (12.8 GB at 100,000 cells in f64).
fn knn_block_rows(train: usize) -> usize {
    ((1usize << 23) / train.max(1)).clamp(64, 2048)
}

/// Majority class among the `k` most cosine-similar training rows (ties: the smaller class id).
/// Similarities are f32 dot products of unit rows (faer's GEMM, the test rows in blocks), as
/// scikit-learn computes them on float32 embeddings.
pub fn knn_predict(train: &dyn Rows, y: &[usize], test: &dyn Rows, k: usize, classes: usize) -> Vec<usize> {
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

/// [`knn_vote`] on sparse rows (`sparse_rows`): the same cosine of standardised rows, with the
/// products taken over the stored entries only. With `w = inv_sd²` and `s` the shift, the
/// product of two standardised rows is `Σ w·v·u − a(v) − a(u) + C` (`a(v) = Σ w·s·v` over the
/// stored entries, `C = Σ w·s²` over every column), so a test row's products with every
/// training row come from the training rows that share its stored columns (an inverted index).
pub fn knn_vote_sparse(train: &SparseRows, y: &[usize], test: &SparseRows, k: usize, classes: usize) -> Vec<usize> {
    let (ntr, d) = (train.len(), train.dim());
    let w: Vec<f64> = train.inv_sd.iter().map(|v| v * v).collect();
    let c: f64 = (0..d).map(|j| w[j] * train.shift[j] * train.shift[j]).sum();
    // a(row) and the squared norm `Σ w·(v² − 2s·v) + C` of a row.
    let terms = |(cols, vals): (&[u32], &[f64])| {
        cols.iter().zip(vals).fold((0.0, c), |(a, q), (&j, &v)| {
            let (wj, sj) = (w[j as usize], train.shift[j as usize]);
            (a + wj * sj * v, q + wj * v * (v - 2.0 * sj))
        })
    };
    let (mut a_tr, mut inv_norm_tr) = (Vec::with_capacity(ntr), Vec::with_capacity(ntr));
    let mut by_column = vec![Vec::new(); d];
    for r in 0..ntr {
        let row = train.row(r);
        let (a, q) = terms(row);
        a_tr.push(a);
        inv_norm_tr.push(inv_norm(q));
        for (&j, &v) in row.0.iter().zip(row.1) {
            by_column[j as usize].push((r as u32, w[j as usize] * v));
        }
    }
    let k = k.clamp(1, y.len().max(1));
    let (mut cross, mut sims) = (vec![0.0f64; ntr], vec![0.0f32; ntr]);
    let mut order: Vec<(f32, usize)> = Vec::with_capacity(k + 1);
    (0..test.len())
        .map(|t| {
            let row = test.row(t);
            let (a, q) = terms(row);
            let inv_norm = inv_norm(q);
            cross.iter_mut().for_each(|x| *x = 0.0);
            for (&j, &u) in row.0.iter().zip(row.1) {
                by_column[j as usize].iter().for_each(|&(r, wv)| cross[r as usize] += u * wv);
            }
            for r in 0..ntr {
                sims[r] = ((cross[r] - a_tr[r] - a + c) * inv_norm_tr[r] * inv_norm) as f32;
            }
            nearest(&sims, k, &mut order);
            let mut votes = vec![0usize; classes];
            order.iter().for_each(|&(_, j)| votes[y[j]] += 1);
            (0..classes).max_by_key(|&c| (votes[c], std::cmp::Reverse(c))).unwrap_or(0)
        })
        .collect()
}

/// `1 / ‖row‖` from its squared norm; 0 for a row at the level of rounding noise, which
/// [`unit_rows`] leaves at zero too.
fn inv_norm(squared: f64) -> f64 {
    if squared > 1e-24 {
        1.0 / squared.sqrt()
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fold_rows::{Dense, FoldRows, Standardiser};
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
    fn sparse_rows_vote_as_their_standardised_dense_rows() {
        let (n, d) = (90, 12);
        let (x, y) = crate::sparse_rows::log_count_cells(n, d, 0.8, 0.15);
        let (test, train): (Vec<usize>, Vec<usize>) = (0..n).partition(|i| i % 4 == 1);
        let by = Standardiser::fit(&x, d, &train);
        let view = |rows| FoldRows { x: &x, dim: d, rows, by: &by };
        let ytr: Vec<usize> = train.iter().map(|&i| y[i]).collect();
        let tr = SparseRows::of(&view(&train), 0.5).unwrap();
        let te = SparseRows::against(&view(&test), tr.background().to_vec());
        let sparse = knn_vote_sparse(&tr, &ytr, &te, 5, 3);
        assert_eq!(sparse, knn_predict(&view(&train), &ytr, &view(&test), 5, 3));
        let right = sparse.iter().zip(&test).filter(|(p, &i)| **p == y[i]).count();
        assert!(right * 2 > test.len(), "{right} of {} right", test.len());
    }
}
