//! Additive, exact statistics of scored cells, and the correlations they give.

use super::scores::ScoredCell;

/// Per-gene histograms of scores over present cells, plus the number of cells; adding and
/// subtracting cells is exact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScoreHistograms {
    pub l_max: usize,
    pub n_genes: usize,
    pub n_cells: i64,
    /// `counts[u * l_max + s]`: cells where gene `u` is present with score `s`.
    pub counts: Vec<i64>,
}

impl ScoreHistograms {
    pub fn new(n_genes: usize, l_max: usize) -> Self {
        Self { l_max, n_genes, n_cells: 0, counts: vec![0; n_genes * l_max] }
    }

    /// Adds (`sign = 1`) or retracts (`sign = -1`) a cell.
    pub fn add_cell(&mut self, cell: &ScoredCell, sign: i64) {
        self.n_cells += sign;
        for (&g, &s) in cell.genes.iter().zip(&cell.scores) {
            self.counts[g as usize * self.l_max + s as usize] += sign;
        }
    }

    pub fn merge(&mut self, other: &Self, sign: i64) {
        assert_eq!((self.n_genes, self.l_max), (other.n_genes, other.l_max), "histogram shapes differ");
        self.n_cells += sign * other.n_cells;
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += sign * b;
        }
    }

    pub fn gene(&self, u: usize) -> &[i64] {
        &self.counts[u * self.l_max..(u + 1) * self.l_max]
    }

    /// Cells where gene `u` is present.
    pub fn presence(&self, u: usize) -> i64 {
        self.gene(u).iter().sum()
    }
}

/// Per-gene rank maps: `t2[u * l_max + s]` is twice the mid-rank (1-based, ties averaged) of
/// score `s` among all cells' scores of gene `u`, absent cells counting as score 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankMaps {
    pub l_max: usize,
    pub n_genes: usize,
    /// Cells the maps were derived from.
    pub n_cells: i64,
    pub t2: Vec<i64>,
}

impl RankMaps {
    pub fn from_histograms(h: &ScoreHistograms) -> Self {
        let mut t2 = vec![0i64; h.counts.len()];
        for u in 0..h.n_genes {
            let hist = h.gene(u);
            let absent = h.n_cells - hist.iter().sum::<i64>();
            let mut less = 0i64;
            for s in 0..h.l_max {
                let eq = hist[s] + if s == 0 { absent } else { 0 };
                t2[u * h.l_max + s] = 2 * less + eq + 1;
                less += eq;
            }
        }
        Self { l_max: h.l_max, n_genes: h.n_genes, n_cells: h.n_cells, t2 }
    }

    /// `y = t2(s) − t2(0)`: the map shifted so absent cells (and score 0) contribute nothing.
    #[inline]
    pub fn y(&self, u: usize, s: usize) -> i64 {
        self.t2[u * self.l_max + s] - self.t2[u * self.l_max]
    }

    #[inline]
    pub fn c(&self, u: usize) -> i64 {
        self.t2[u * self.l_max]
    }

    /// Largest |y| any cell can have: bounds the batch size of exact products.
    pub fn max_abs_y(&self) -> i64 {
        (0..self.n_genes)
            .flat_map(|u| (0..self.l_max).map(move |s| (u, s)))
            .map(|(u, s)| self.y(u, s).abs())
            .max()
            .unwrap_or(0)
    }
}

/// Pair sums under a set of rank maps: `yy[u*G+v] = Σ_cells y_u·y_v` and
/// `co[u*G+v]` = cells where both are present. Exact (integers); cells can be retracted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairSums {
    pub n_genes: usize,
    pub n_cells: i64,
    pub yy: Vec<i128>,
    pub co: Vec<i64>,
}

const EXACT_F64: f64 = 9_007_199_254_740_992.0; // 2^53

impl PairSums {
    pub fn new(n_genes: usize) -> Self {
        Self { n_genes, n_cells: 0, yy: vec![0; n_genes * n_genes], co: vec![0; n_genes * n_genes] }
    }

    /// Cells per dense batch such that every f64 partial sum of the products is an exact integer.
    pub fn exact_batch(max_abs_y: i64) -> usize {
        let per = (max_abs_y.max(1) as f64).powi(2);
        ((EXACT_F64 / per) as usize).clamp(1, 4096)
    }

    /// Adds (`sign = 1`) or retracts (`sign = -1`) cells: dense batch matrices and f64 matrix
    /// products (exact, see [`PairSums::exact_batch`]), then integer accumulation.
    pub fn add_cells(&mut self, cells: &[ScoredCell], maps: &RankMaps, sign: i64, threads: usize) {
        let g = self.n_genes;
        let batch = Self::exact_batch(maps.max_abs_y());
        let mut ymat = Vec::new();
        let mut pmat = Vec::new();
        let mut out_y = vec![0f64; g * g];
        let mut out_p = vec![0f64; g * g];
        for block in cells.chunks(batch) {
            let b = block.len();
            ymat.clear();
            ymat.resize(b * g, 0f64);
            pmat.clear();
            pmat.resize(b * g, 0f64);
            for (i, cell) in block.iter().enumerate() {
                for (&u, &s) in cell.genes.iter().zip(&cell.scores) {
                    ymat[i * g + u as usize] = maps.y(u as usize, s as usize) as f64;
                    pmat[i * g + u as usize] = 1.0;
                }
            }
            gram(&ymat, b, g, &mut out_y, threads);
            gram(&pmat, b, g, &mut out_p, threads);
            for (acc, &x) in self.yy.iter_mut().zip(&out_y) {
                *acc += i128::from(sign) * x as i128;
            }
            for (acc, &x) in self.co.iter_mut().zip(&out_p) {
                *acc += sign * x as i64;
            }
        }
        self.n_cells += sign * cells.len() as i64;
    }

    pub fn merge(&mut self, other: &Self, sign: i64) {
        assert_eq!(self.n_genes, other.n_genes, "pair sums of different vocabularies");
        self.n_cells += sign * other.n_cells;
        for (a, b) in self.yy.iter_mut().zip(&other.yy) {
            *a += i128::from(sign) * b;
        }
        for (a, b) in self.co.iter_mut().zip(&other.co) {
            *a += sign * b;
        }
    }
}

/// `out = Aᵀ A` for a row-major `rows × cols` matrix `a` (out is `cols × cols`, row-major).
fn gram(a: &[f64], rows: usize, cols: usize, out: &mut [f64], threads: usize) {
    let par = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    // SAFETY: the pointers and strides describe `a` (rows × cols, row-major) and `out`
    // (cols × cols), which are live and sized accordingly for the duration of the call.
    unsafe {
        gemm::gemm(
            cols,
            cols,
            rows,
            out.as_mut_ptr(),
            1,
            cols as isize,
            false,
            a.as_ptr(),
            cols as isize,
            1,
            a.as_ptr(),
            1,
            cols as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
}

/// ρ between the rank-mapped score columns of every gene pair over all cells (Spearman's ρ
/// with average ranks when the maps come from the same cells). Row-major `G × G`; NaN where a
/// gene is constant.
pub fn global_correlations(h: &ScoreHistograms, maps: &RankMaps, sums: &PairSums) -> Vec<f64> {
    let g = h.n_genes;
    let n = i128::from(h.n_cells);
    // Per gene: c (value of absent cells), Σ y and Σ w², w = c + y, over all cells.
    let mut c = vec![0i128; g];
    let mut sy = vec![0i128; g];
    let mut sw = vec![0i128; g];
    let mut var = vec![0i128; g];
    for u in 0..g {
        let hist = h.gene(u);
        let cu = i128::from(maps.c(u));
        let (mut s1, mut s2) = (0i128, 0i128);
        for (s, &cnt) in hist.iter().enumerate() {
            if cnt != 0 {
                let y = i128::from(maps.y(u, s));
                s1 += i128::from(cnt) * y;
                s2 += i128::from(cnt) * y * y;
            }
        }
        // Σw = N c + Σy ; Σw² = N c² + 2cΣy + Σy²
        let sum_w = n * cu + s1;
        let sum_w2 = n * cu * cu + 2 * cu * s1 + s2;
        c[u] = cu;
        sy[u] = s1;
        sw[u] = sum_w;
        var[u] = n * sum_w2 - sum_w * sum_w;
    }
    let mut rho = vec![f64::NAN; g * g];
    for u in 0..g {
        for v in 0..g {
            if var[u] <= 0 || var[v] <= 0 {
                continue;
            }
            let sum_ww = n * c[u] * c[v] + c[u] * sy[v] + c[v] * sy[u] + sums.yy[u * g + v];
            let cov = n * sum_ww - sw[u] * sw[v];
            rho[u * g + v] = cov as f64 / ((var[u] as f64).sqrt() * (var[v] as f64).sqrt());
        }
    }
    rho
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(genes: &[(u32, u16)]) -> ScoredCell {
        ScoredCell { genes: genes.iter().map(|g| g.0).collect(), scores: genes.iter().map(|g| g.1).collect() }
    }

    /// Spearman with average ranks, computed the textbook way.
    fn spearman(x: &[f64], y: &[f64]) -> f64 {
        fn ranks(v: &[f64]) -> Vec<f64> {
            let mut idx: Vec<usize> = (0..v.len()).collect();
            idx.sort_by(|&a, &b| v[a].partial_cmp(&v[b]).unwrap());
            let mut r = vec![0.0; v.len()];
            let mut i = 0;
            while i < idx.len() {
                let mut j = i;
                while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
                    j += 1;
                }
                for k in i..=j {
                    r[idx[k]] = (i + j) as f64 / 2.0 + 1.0;
                }
                i = j + 1;
            }
            r
        }
        let (rx, ry) = (ranks(x), ranks(y));
        let n = x.len() as f64;
        let (mx, my) = (rx.iter().sum::<f64>() / n, ry.iter().sum::<f64>() / n);
        let cov: f64 = rx.iter().zip(&ry).map(|(a, b)| (a - mx) * (b - my)).sum();
        let vx: f64 = rx.iter().map(|a| (a - mx).powi(2)).sum();
        let vy: f64 = ry.iter().map(|b| (b - my).powi(2)).sum();
        cov / (vx * vy).sqrt()
    }

    fn cells() -> Vec<ScoredCell> {
        vec![
            cell(&[(0, 5), (1, 4), (2, 1)]),
            cell(&[(0, 3), (2, 7)]),
            cell(&[(1, 2)]),
            cell(&[(0, 7), (1, 6), (2, 0)]),
            cell(&[]),
            cell(&[(0, 5), (1, 1), (2, 3)]),
        ]
    }

    #[test]
    fn correlations_equal_spearman_with_average_ranks() {
        let (g, l) = (3, 8);
        let mut h = ScoreHistograms::new(g, l);
        cells().iter().for_each(|c| h.add_cell(c, 1));
        let maps = RankMaps::from_histograms(&h);
        let mut sums = PairSums::new(g);
        sums.add_cells(&cells(), &maps, 1, 1);
        let rho = global_correlations(&h, &maps, &sums);
        let col = |u: u32| -> Vec<f64> {
            cells()
                .iter()
                .map(|c| c.genes.iter().position(|&x| x == u).map_or(0.0, |i| f64::from(c.scores[i])))
                .collect()
        };
        for u in 0..3 {
            for v in 0..3 {
                let expected = spearman(&col(u), &col(v));
                assert!((rho[u as usize * g + v as usize] - expected).abs() < 1e-12, "{u},{v}");
            }
        }
        assert_eq!(sums.co[0 * g + 1], 3);
        assert_eq!(sums.co[1 * g + 1], 4);
    }

    #[test]
    fn retraction_is_exact() {
        let (g, l) = (3, 8);
        let mut h = ScoreHistograms::new(g, l);
        cells().iter().for_each(|c| h.add_cell(c, 1));
        let maps = RankMaps::from_histograms(&h);
        let mut sums = PairSums::new(g);
        sums.add_cells(&cells()[..3], &maps, 1, 1);
        let before = sums.clone();
        sums.add_cells(&cells()[3..], &maps, 1, 1);
        sums.add_cells(&cells()[3..], &maps, -1, 1);
        assert_eq!(sums, before);
    }

    #[test]
    fn exact_batches_shrink_as_ranks_grow() {
        assert_eq!(PairSums::exact_batch(10), 4096);
        assert!(PairSums::exact_batch(2_000_000) * 4_000_000_000_000 <= 1 << 53);
    }
}
