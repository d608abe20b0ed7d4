//! The dot products of the distance pass, `x_i · x_j` of shifted cells, for a block of rows
//! against all cells at a time. Distances are unchanged by shifting any column, so each column is
//! shifted the way its products are cheapest and best rounded:
//! - a column that is mostly one value (its minimum: a gene's zeros in the log counts of the
//!   2,000-HVG method, ~96% of its entries on Kang) is shifted by that value, so only its other
//!   entries are stored, and their products are summed through an index of the column's rows;
//! - every other column (all of an embedding's) is centred, and its products are one f32 matrix
//!   product per block of rows.
//!
//! The dense product of all columns multiplies `n² · d` pairs; the indexed one costs a column's
//! stored entries squared, `(density · n)²` each, so at 4% it is ~600× less arithmetic, though an
//! indexed multiply-add (a scattered load and store) costs many times one inside a packed matrix
//! product (~30×, an estimate, not measured alone).

use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, MatRef, Par};

/// Cells as the rows of a dense row-major matrix.
#[derive(Clone, Copy)]
pub struct Points<'a> {
    pub data: &'a [f64],
    pub dim: usize,
}

impl Points<'_> {
    pub fn len(&self) -> usize {
        self.data.len().checked_div(self.dim).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn row(&self, i: usize) -> &[f64] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
}

/// The largest share `p` of a column's entries apart from its minimum for which it takes the
/// indexed path: it costs `(p·n)²` indexed multiply-adds, each ~30× one inside a matrix product
/// (estimated), against `n²` there, so it wins while `30·p² < 1` (`p` < ~0.18); an eighth leaves
/// a margin, and the index costs 8 bytes an entry.
pub const MAX_INDEXED_DENSITY: f64 = 0.125;

/// The cells in the two forms, and each cell's squared norm in that shift.
pub struct Products {
    n: usize,
    /// The centred columns, row-major f32 (`n × dense_dim`).
    dense: Vec<f32>,
    dense_dim: usize,
    /// The indexed columns' stored entries by row (`x − minimum`, column numbered among them).
    rows: Compressed,
    /// The same entries by column: which rows, with what values.
    columns: Compressed,
    /// `|x_i|²` of the shifted cell, in f64 from the f32 values the products use.
    pub norms: Vec<f64>,
}

/// Compressed lists of (index, value).
struct Compressed {
    indptr: Vec<usize>,
    index: Vec<u32>,
    values: Vec<f32>,
}

impl Compressed {
    fn list(&self, i: usize) -> (&[u32], &[f32]) {
        let r = self.indptr[i]..self.indptr[i + 1];
        (&self.index[r.clone()], &self.values[r])
    }
}

impl Products {
    pub fn new(points: Points<'_>) -> Products {
        let (n, dim) = (points.len(), points.dim.max(1));
        let mut minimum = vec![f64::INFINITY; dim];
        let mut mean = vec![0.0f64; dim];
        for row in points.data.chunks(dim) {
            for (c, &v) in row.iter().enumerate() {
                minimum[c] = minimum[c].min(v);
                mean[c] += v;
            }
        }
        mean.iter_mut().for_each(|m| *m /= n.max(1) as f64);
        let mut apart = vec![0usize; dim];
        for row in points.data.chunks(dim) {
            apart.iter_mut().zip(row).zip(&minimum).for_each(|((a, v), m)| *a += usize::from(v != m));
        }
        let limit = MAX_INDEXED_DENSITY * n as f64;
        let indexed: Vec<bool> = apart.iter().map(|&a| (a as f64) <= limit).collect();
        let dense_cols: Vec<usize> = (0..points.dim).filter(|&c| !indexed[c]).collect();
        // Each indexed column's number among the indexed ones.
        let mut local = vec![u32::MAX; dim];
        let mut count = 0u32;
        for c in (0..points.dim).filter(|&c| indexed[c]) {
            local[c] = count;
            count += 1;
        }
        let dense: Vec<f32> =
            points.data.chunks(dim).flat_map(|row| dense_cols.iter().map(|&c| (row[c] - mean[c]) as f32)).collect();
        let mut rows = Compressed { indptr: vec![0], index: Vec::new(), values: Vec::new() };
        for row in points.data.chunks(dim) {
            for (c, &v) in row.iter().enumerate() {
                if indexed[c] && v != minimum[c] {
                    rows.index.push(local[c]);
                    rows.values.push((v - minimum[c]) as f32);
                }
            }
            rows.indptr.push(rows.index.len());
        }
        let columns = transpose(&rows, count as usize);
        let dense_dim = dense_cols.len();
        let norms = (0..n)
            .map(|i| {
                let d: f64 =
                    dense[i * dense_dim..(i + 1) * dense_dim].iter().map(|&v| f64::from(v) * f64::from(v)).sum();
                d + rows.list(i).1.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>()
            })
            .collect();
        Products { n, dense, dense_dim, rows, columns, norms }
    }

    /// The columns that take the indexed path, of `dim`.
    pub fn indexed_columns(&self) -> usize {
        self.columns.indptr.len() - 1
    }

    /// `x_j · x_i` for every cell `j` and the block's cells `i = start..start + rows`: `n × rows`,
    /// column-major, so that one row's products are contiguous.
    pub fn block(&self, start: usize, rows: usize) -> Mat<f32> {
        let mut dots = Mat::<f32>::zeros(self.n, rows);
        if self.dense_dim > 0 {
            let all = MatRef::from_row_major_slice(&self.dense, self.n, self.dense_dim);
            matmul(dots.as_mut(), Accum::Replace, all, all.subrows(start, rows).transpose(), 1.0, Par::Seq);
        }
        for r in 0..rows {
            let col = dots.col_mut(r).try_as_col_major_mut().expect("a column of a column-major Mat").as_slice_mut();
            let (cols, vals) = self.rows.list(start + r);
            for (&c, &v) in cols.iter().zip(vals) {
                let (who, with) = self.columns.list(c as usize);
                for (&j, &w) in who.iter().zip(with) {
                    col[j as usize] += v * w;
                }
            }
        }
        dots
    }
}

/// The same entries listed by their index instead of by their list.
fn transpose(by_row: &Compressed, count: usize) -> Compressed {
    let mut indptr = vec![0usize; count + 1];
    by_row.index.iter().for_each(|&c| indptr[c as usize + 1] += 1);
    (0..count).for_each(|c| indptr[c + 1] += indptr[c]);
    let mut next = indptr.clone();
    let mut index = vec![0u32; by_row.index.len()];
    let mut values = vec![0.0f32; by_row.index.len()];
    for i in 0..by_row.indptr.len() - 1 {
        let (cols, vals) = by_row.list(i);
        for (&c, &v) in cols.iter().zip(vals) {
            let at = &mut next[c as usize];
            index[*at] = i as u32;
            values[*at] = v;
            *at += 1;
        }
    }
    Compressed { indptr, index, values }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Log-count-like cells: most columns mostly 0.5 (a centred zero), two dense columns.
    fn cells(n: usize, dim: usize) -> Vec<f64> {
        (0..n)
            .flat_map(|i| {
                (0..dim).map(move |c| {
                    let h = (i * 31 + c * 17) % 23;
                    if c < 2 {
                        ((i * (c + 3)) as f64 * 0.7).sin()
                    } else if h == 0 {
                        0.5 + 1.0 + (i % 5) as f64
                    } else {
                        0.5
                    }
                })
            })
            .collect()
    }

    #[test]
    fn products_of_shifted_cells_give_the_squared_distances() {
        let (n, dim) = (300, 40);
        let data = cells(n, dim);
        let points = Points { data: &data, dim };
        let p = Products::new(points);
        assert_eq!(p.indexed_columns(), dim - 2, "the two dense columns are centred, the others indexed");
        let dots = p.block(100, 50);
        for r in [0, 7, 49] {
            let i = 100 + r;
            for j in [0, 3, 100, 101, 299] {
                let direct: f64 = (0..dim).map(|c| (data[i * dim + c] - data[j * dim + c]).powi(2)).sum();
                let from = p.norms[i] + p.norms[j] - 2.0 * f64::from(dots[(j, r)]);
                assert!((from - direct).abs() < 1e-4 * direct.max(1.0), "({i}, {j}): {from} vs {direct}");
            }
        }
    }
}
