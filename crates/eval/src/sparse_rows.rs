//! A probe fold's training cells in the form the logistic fit reads fastest when most of each
//! column is one value. The 2,000-HVG matrix holds log counts, ~4% of them nonzero on Kang; the
//! PCA baseline centres it in place, which turns each column's zeros into one repeated value, its
//! minimum. Standardised, every value is nonzero, so the dense fit reads the whole fold on each of
//! its ~150 evaluations (90 MB in f32 at 11,200 cells × 2,000 genes). The standardisation is
//! affine, so it folds into the weights instead (`logistic::Problem`), and an evaluation touches
//! only the entries that differ from their column's minimum.

use crate::fold_rows::FoldRows;

/// The largest share of entries apart from their column's minimum for which a fold is read in
/// sparse form: an entry costs 12 bytes there against 4 in the dense f32 copy, plus an indexed
/// read of the weights.
pub const MAX_DENSITY: f64 = 0.25;

/// Rows of a matrix as their entries that differ from their column's minimum (the background),
/// with the fold's standardisation expressed against that background.
pub struct SparseRows {
    dim: usize,
    indptr: Vec<usize>,
    cols: Vec<u32>,
    /// `x − background` of each stored entry.
    vals: Vec<f64>,
    background: Vec<f64>,
    /// The standardiser's column mean minus the background: the standardised value of an entry
    /// is `(v − shift) · inv_sd`, with `v` 0 where nothing is stored.
    pub shift: Vec<f64>,
    pub inv_sd: Vec<f64>,
}

impl SparseRows {
    /// The rows of `view` in sparse form, or `None` when more than `max_density` of their entries
    /// differ from their column's minimum over these rows (an embedding: nearly all of them).
    pub fn of(view: &FoldRows<'_>, max_density: f64) -> Option<SparseRows> {
        let d = view.dim;
        if d == 0 || view.rows.is_empty() {
            return None;
        }
        let mut background = vec![f64::INFINITY; d];
        for &i in view.rows {
            background.iter_mut().zip(row(view, i)).for_each(|(b, &v)| *b = b.min(v));
        }
        let limit = (max_density * (view.rows.len() * d) as f64) as usize;
        let mut stored = 0usize;
        for &i in view.rows {
            stored += row(view, i).iter().zip(&background).filter(|(v, b)| v != b).count();
            if stored > limit {
                return None;
            }
        }
        Some(SparseRows::against(view, background))
    }

    /// The rows of `view` as their entries apart from `background` (the training rows', for a
    /// fold's test rows: a test value below it is stored, negative).
    pub fn against(view: &FoldRows<'_>, background: Vec<f64>) -> SparseRows {
        let mut indptr = Vec::with_capacity(view.rows.len() + 1);
        let (mut cols, mut vals) = (Vec::new(), Vec::new());
        indptr.push(0);
        for &i in view.rows {
            for (j, (&v, &b)) in row(view, i).iter().zip(&background).enumerate() {
                if v != b {
                    cols.push(j as u32);
                    vals.push(v - b);
                }
            }
            indptr.push(cols.len());
        }
        let (mean, inv_sd) = view.by.columns();
        let shift = mean.iter().zip(&background).map(|(m, b)| m - b).collect();
        SparseRows { dim: view.dim, indptr, cols, vals, background, shift, inv_sd: inv_sd.to_vec() }
    }

    /// Each column's background value.
    pub fn background(&self) -> &[f64] {
        &self.background
    }

    pub fn len(&self) -> usize {
        self.indptr.len() - 1
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The stored columns of row `r` and their values.
    pub fn row(&self, r: usize) -> (&[u32], &[f64]) {
        let (a, b) = (self.indptr[r], self.indptr[r + 1]);
        (&self.cols[a..b], &self.vals[a..b])
    }
}

/// Row `i` of the view's matrix, unstandardised.
fn row<'a>(view: &FoldRows<'a>, i: usize) -> &'a [f64] {
    &view.x[i * view.dim..(i + 1) * view.dim]
}

/// Cells for the tests of the sparse paths: `n × d` log counts of three classes, a class's cells
/// detecting its marker gene (0, 1 or 2) at rate `marker` and every gene at rate `other`; every
/// other column centred, as the PCA baseline leaves the HVG matrix.
#[cfg(test)]
pub fn log_count_cells(n: usize, d: usize, marker: f64, other: f64) -> (Vec<f64>, Vec<usize>) {
    let y: Vec<usize> = (0..n).map(|i| i % 3).collect();
    let mut x = vec![0.0; n * d];
    for i in 0..n {
        for j in 0..d {
            let u = ((i * 31 + j * 17) as f64 * 0.6180339).fract();
            if (j == y[i] && u < marker) || u < other {
                x[i * d + j] = (1.0 + 9.0 * u).ln_1p();
            }
        }
    }
    for j in (0..d).step_by(2) {
        let mean = (0..n).map(|i| x[i * d + j]).sum::<f64>() / n as f64;
        (0..n).for_each(|i| x[i * d + j] -= mean);
    }
    (x, y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fold_rows::Standardiser;

    #[test]
    fn entries_at_their_columns_minimum_are_left_out_and_the_mean_shifts_by_it() {
        // Column 0 centred (its zeros at -0.5), column 1 raw counts, column 2 dense.
        let x = [-0.5, 0.0, 1.0, 1.5, 0.0, 2.0, -0.5, 3.0, 3.0, -0.5, 0.0, 4.0];
        let rows = [0, 1, 2, 3];
        let by = Standardiser::fit(&x, 3, &rows);
        let view = FoldRows { x: &x, dim: 3, rows: &rows, by: &by };
        let s = SparseRows::of(&view, 1.0).unwrap();
        assert_eq!((s.len(), s.dim()), (4, 3));
        assert_eq!(s.row(0), (&[][..], &[][..]), "row 0 is the background");
        // Row 1: 1.5 - (-0.5) = 2 in column 0; 2 - 1 = 1 in column 2.
        assert_eq!(s.row(1), (&[0u32, 2][..], &[2.0, 1.0][..]));
        assert_eq!(s.row(2), (&[1u32, 2][..], &[3.0, 2.0][..]));
        assert_eq!(s.row(3), (&[2u32][..], &[3.0][..]));
        let (mean, _) = by.columns();
        assert!((s.shift[0] - (mean[0] + 0.5)).abs() < 1e-15 && (s.shift[2] - (mean[2] - 1.0)).abs() < 1e-15);
        // 5 of the 12 entries are stored: refused at a lower density.
        assert!(SparseRows::of(&view, 0.4).is_none());
        assert!(SparseRows::of(&view, 0.42).is_some());
        // Rows against another background: a value under it is stored, negative.
        let t = SparseRows::against(&FoldRows { x: &x, dim: 3, rows: &[1], by: &by }, vec![0.0, 0.0, 2.5]);
        assert_eq!(t.row(0), (&[0u32, 2][..], &[1.5, -0.5][..]));
        assert_eq!(t.background(), &[0.0, 0.0, 2.5]);
    }
}
