//! A probe fold's cells as the classifiers read them: rows of the method's matrix picked by index
//! and standardised with the training cells' column means and standard deviations as they are
//! read. The folds never copy the matrix (at 100,000 cells × 2,000 HVGs a training fold's
//! standardised copy was 1.3 GB, and two or three folds are in flight at once).
//!
//! A standardised value is rounded to f32 (the probes compute in f64). The logistic fit reads its
//! fold ~150 times, so a copy in f32 halves its memory (and its traffic: −8% time on Kang); the view
//! rounds the same way, so a fold scores the same whether it was copied or viewed.

/// Rows of a matrix, read in blocks.
pub trait Rows: Sync {
    fn len(&self) -> usize;
    fn dim(&self) -> usize;
    /// Rows `start..start + out.len() / dim`, row-major, into `out`.
    fn read(&self, start: usize, out: &mut [f64]);
}

/// A whole row-major matrix (the tests' input to the classifiers).
#[cfg(test)]
pub struct Dense<'a> {
    pub x: &'a [f64],
    pub dim: usize,
}

#[cfg(test)]
impl Rows for Dense<'_> {
    fn len(&self) -> usize {
        self.x.len().checked_div(self.dim).unwrap_or(0)
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn read(&self, start: usize, out: &mut [f64]) {
        out.copy_from_slice(&self.x[start * self.dim..start * self.dim + out.len()]);
    }
}

/// Column means and standard deviations (population; 1 where a column is constant) of some rows.
pub struct Standardiser {
    mean: Vec<f64>,
    /// `1 / sd`: a product per value instead of a division, so that reading vectorises.
    inv_sd: Vec<f64>,
}

impl Standardiser {
    /// The statistics of `rows` of `x` (`dim` columns), two passes in row order.
    pub fn fit(x: &[f64], dim: usize, rows: &[usize]) -> Standardiser {
        let n = rows.len().max(1) as f64;
        let row = |i: usize| &x[i * dim..(i + 1) * dim];
        let mut mean = vec![0.0; dim];
        for &i in rows {
            mean.iter_mut().zip(row(i)).for_each(|(m, v)| *m += v);
        }
        mean.iter_mut().for_each(|m| *m /= n);
        let mut var = vec![0.0; dim];
        for &i in rows {
            var.iter_mut().zip(row(i)).zip(&mean).for_each(|((s, v), m)| *s += (v - m) * (v - m));
        }
        let sd = var.into_iter().map(|s| (s / n).sqrt()).map(|s| if s > 1e-12 { s } else { 1.0 });
        Standardiser { mean, inv_sd: sd.map(|s| 1.0 / s).collect() }
    }

    /// The column means and `1 / sd`.
    pub fn columns(&self) -> (&[f64], &[f64]) {
        (&self.mean, &self.inv_sd)
    }
}

/// `rows` of `x`, standardised by `by`.
pub struct FoldRows<'a> {
    pub x: &'a [f64],
    pub dim: usize,
    pub rows: &'a [usize],
    pub by: &'a Standardiser,
}

impl Rows for FoldRows<'_> {
    fn len(&self) -> usize {
        self.rows.len()
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn read(&self, start: usize, out: &mut [f64]) {
        self.standardise_into(&self.rows[start..], out, |v| v as f64);
    }
}

/// One standardised value as the folds hold it.
#[inline]
fn standardised(v: f64, mean: f64, inv_sd: f64) -> f32 {
    ((v - mean) * inv_sd) as f32
}

impl FoldRows<'_> {
    /// Every row, standardised, as one row-major f32 matrix.
    pub fn copy(&self) -> Vec<f32> {
        let mut out = vec![0.0f32; self.rows.len() * self.dim];
        self.standardise_into(self.rows, &mut out, |v| v);
        out
    }

    /// `rows` standardised into `out` (row-major), each value stored as `store` makes it: the
    /// one loop behind both the view's reads and the copy.
    fn standardise_into<T>(&self, rows: &[usize], out: &mut [T], store: impl Fn(f32) -> T) {
        let d = self.dim;
        let (mean, inv) = (&self.by.mean[..d], &self.by.inv_sd[..d]);
        for (dst, &i) in out.chunks_exact_mut(d.max(1)).zip(rows) {
            let src = &self.x[i * d..(i + 1) * d];
            for c in 0..d {
                dst[c] = store(standardised(src[c], mean[c], inv[c]));
            }
        }
    }
}

/// A fold part as the probes read it: standardised once into an f32 copy when that takes at
/// most `copy_bytes`, else read through the view (bounded memory, standardising on every read).
pub enum Fold<'a> {
    Copied { x: Vec<f32>, dim: usize },
    Viewed(FoldRows<'a>),
}

impl<'a> Fold<'a> {
    pub fn new(view: FoldRows<'a>, copy_bytes: usize) -> Self {
        if view.rows.len() * view.dim * std::mem::size_of::<f32>() <= copy_bytes {
            Fold::Copied { x: view.copy(), dim: view.dim }
        } else {
            Fold::Viewed(view)
        }
    }
}

impl Rows for Fold<'_> {
    fn len(&self) -> usize {
        match self {
            Fold::Copied { x, dim } => x.len().checked_div(*dim).unwrap_or(0),
            Fold::Viewed(v) => v.len(),
        }
    }

    fn dim(&self) -> usize {
        match self {
            Fold::Copied { dim, .. } => *dim,
            Fold::Viewed(v) => v.dim,
        }
    }

    fn read(&self, start: usize, out: &mut [f64]) {
        match self {
            Fold::Copied { x, dim } => {
                let src = &x[start * dim..start * dim + out.len()];
                out.iter_mut().zip(src).for_each(|(o, &v)| *o = v as f64);
            }
            Fold::Viewed(v) => v.read(start, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fold_rows_are_the_standardised_picked_rows() {
        let x: Vec<f64> = (0..30).map(|i| ((i * 7) % 11) as f64 + if i % 3 == 2 { 0.0 } else { 0.5 }).collect();
        // Column 2 is constant over the training rows: its sd is taken as 1.
        let x: Vec<f64> = x.iter().enumerate().map(|(i, &v)| if i % 3 == 2 { 4.0 } else { v }).collect();
        let train = [0, 2, 3, 5, 7, 9];
        let by = Standardiser::fit(&x, 3, &train);
        for c in 0..3 {
            let col: Vec<f64> = train.iter().map(|&i| x[i * 3 + c]).collect();
            let mean = col.iter().sum::<f64>() / 6.0;
            let sd = (col.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 6.0).sqrt();
            assert!((by.mean[c] - mean).abs() < 1e-12);
            assert!((1.0 / by.inv_sd[c] - if sd > 1e-12 { sd } else { 1.0 }).abs() < 1e-12);
        }
        let rows = FoldRows { x: &x, dim: 3, rows: &[9, 1, 4], by: &by };
        let mut out = vec![0.0; 6];
        rows.read(1, &mut out);
        for (r, &i) in [1usize, 4].iter().enumerate() {
            for c in 0..3 {
                let exact = (x[i * 3 + c] - by.mean[c]) * by.inv_sd[c];
                assert_eq!(out[r * 3 + c], exact as f32 as f64);
                assert!((out[r * 3 + c] - exact).abs() < 1e-6 * exact.abs().max(1.0));
            }
        }
        assert_eq!(rows.len(), 3);
        let copied: Vec<f64> = rows.copy()[3..].iter().map(|&v| v as f64).collect();
        assert_eq!(copied, out);
        let fold = Fold::new(FoldRows { x: &x, dim: 3, rows: &[9, 1, 4], by: &by }, usize::MAX);
        assert!(matches!(fold, Fold::Copied { .. }));
        let mut through_copy = vec![0.0; 6];
        fold.read(1, &mut through_copy);
        assert_eq!(through_copy, out);
    }
}
