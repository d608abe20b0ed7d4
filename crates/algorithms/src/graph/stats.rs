//! Additive, exact statistics of scored cells, and the correlations they give.

use serde::{Deserialize, Serialize};

use super::batch::{add_exact, exact_blocks, BatchWork, EXACT_F64};
use super::products::{at_b_panels, mirror_upper};
use super::ranks::{RankMaps, ScoreHistograms};
use super::scores::ScoredCell;

/// Pair sums under a set of rank maps, all row-major `G × G`, exact (integers), so cells can be
/// added and retracted without drift:
/// `yy[u,v] = Σ y_u·y_v`, `co[u,v]` = cells where both are present,
/// `yp[u,v] = Σ_{both present} y_u`, `y2p[u,v] = Σ_{both present} y_u²`.
/// Global correlations need `yy`; correlations on the co-present cells need all four.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairSums {
    pub n_genes: usize,
    pub n_cells: i64,
    pub yy: Vec<i128>,
    pub co: Vec<i64>,
    pub yp: Vec<i128>,
    pub y2p: Vec<i128>,
}

/// Cells per dense batch at most: its three `cells × genes` f64 matrices are 49 MB at 2,000
/// genes, per worker; longer batches would not make the products faster.
pub(crate) const MAX_BATCH: usize = 1024;
/// Below this worst-case batch of centred scores (atlases of ~12M cells and more) the products
/// are split into limbs ([`PairSums::add_split_products`]): about twice the arithmetic, in
/// batches of [`MAX_BATCH`] whatever the atlas. Measured per cell on one thread
/// (`examples/pair_sums_batch.rs`; BENCHMARKS, sessions 54–55): split ~0.55 ms; direct 0.26 ms
/// at 1,024 cells; batches cut by the scores, centred, 0.26–0.28 ms up to ~12M cells.
const SPLIT_BELOW_BATCH: usize = 64;

impl PairSums {
    /// Bytes the sums of `n_genes` genes hold: three i128 and one i64 per ordered pair.
    pub const fn bytes(n_genes: usize) -> u64 {
        (n_genes * n_genes * (3 * 16 + 8)) as u64
    }

    pub fn new(n_genes: usize) -> Self {
        let gg = n_genes * n_genes;
        Self { n_genes, n_cells: 0, yy: vec![0; gg], co: vec![0; gg], yp: vec![0; gg], y2p: vec![0; gg] }
    }

    /// Cells per dense batch such that every f64 partial sum of the products is an exact
    /// integer whatever the cells' scores (the largest product is y², in `yy` and `y2p`). The
    /// unsplit products cut their batches by the cells' own scores ([`exact_blocks`]), at least
    /// this long; this worst case decides when the products are split.
    pub fn exact_batch(max_abs_y: i64) -> usize {
        let per = (max_abs_y.max(1) as f64).powi(2);
        ((EXACT_F64 as f64 / per) as usize).clamp(1, MAX_BATCH)
    }

    /// Pearson correlation of the rank-mapped scores of `u` and `v` over the cells where both
    /// are present (the rank-map estimate of ρ_local); NaN with fewer than 2 such cells or a
    /// constant side.
    pub fn local_correlation(&self, u: usize, v: usize) -> f64 {
        let g = self.n_genes;
        let n = i128::from(self.co[u * g + v]);
        if n < 2 {
            return f64::NAN;
        }
        // Pearson is shift-invariant, so y (= w − c) stands in for the mapped value w.
        let (su, sv) = (self.yp[u * g + v], self.yp[v * g + u]);
        let cov = n * self.yy[u * g + v] - su * sv;
        let var_u = n * self.y2p[u * g + v] - su * su;
        let var_v = n * self.y2p[v * g + u] - sv * sv;
        if var_u <= 0 || var_v <= 0 {
            return f64::NAN;
        }
        cov as f64 / ((var_u as f64).sqrt() * (var_v as f64).sqrt())
    }

    /// Adds (`sign = 1`) or retracts (`sign = -1`) cells: dense batch matrices and f64 matrix
    /// products (exact, see [`PairSums::exact_batch`]), then integer accumulation, a panel of
    /// output rows at a time. `yy` and `co` are symmetric: their upper triangles are summed, then
    /// mirrored.
    pub fn add_cells(&mut self, cells: &[ScoredCell], maps: &RankMaps, sign: i64, threads: usize) {
        self.add_cells_in(&mut BatchWork::default(), cells, maps, sign, threads);
    }

    /// [`PairSums::add_cells`] with the batch matrices of `work`, kept by a caller that adds
    /// cells block by block. Three ways to the same integers, by how large the mapped scores
    /// are (they grow with the atlas): direct products; products of scores centred on each
    /// gene's present midpoint, when that keeps blocks at [`SPLIT_BELOW_BATCH`] cells or more
    /// where direct ones would fall below [`MAX_BATCH`] (atlases of ~1.5M to ~12M cells); and
    /// products split into limbs beyond.
    pub fn add_cells_in(
        &mut self,
        work: &mut BatchWork,
        cells: &[ScoredCell],
        maps: &RankMaps,
        sign: i64,
        threads: usize,
    ) {
        let g = self.n_genes;
        let max_abs_y = maps.max_abs_y();
        if Self::exact_batch(max_abs_y) >= MAX_BATCH {
            self.add_direct_products(work, cells, maps, (sign, threads), None);
            super::pair_counts::add_co_presence(cells, g, sign, &mut self.co);
        } else {
            // Blocks stay exact by the cells' own scores (`exact_blocks`) as long as one cell's
            // square fits; whether they are long enough to beat the split products is decided
            // by the scores of present cells but the rare last token (score 0).
            let shift = maps.present_midpoints();
            let any = maps.max_abs_shifted(&shift, 0) as f64;
            if any * any <= EXACT_F64 as f64 && Self::exact_batch(maps.max_abs_shifted(&shift, 1)) >= SPLIT_BELOW_BATCH
            {
                self.add_centred_products(work, cells, maps, (sign, threads), &shift);
            } else {
                self.add_split_products(work, cells, maps, (sign, threads), max_abs_y);
                super::pair_counts::add_co_presence(cells, g, sign, &mut self.co);
            }
        }
        mirror_upper(&mut self.yy, g);
        self.n_cells += sign * cells.len() as i64;
    }

    /// The products of [`PairSums::add_cells_in`] in blocks cut by the cells' scores
    /// ([`exact_blocks`]), exact as they are; `yy`'s upper triangle only. With `shift`, of the
    /// centred scores `y' = y − shift[u]`, their `Σ y'_u·p_v` into `work.centred_yp` (unsigned).
    fn add_direct_products(
        &mut self,
        work: &mut BatchWork,
        cells: &[ScoredCell],
        maps: &RankMaps,
        (sign, threads): (i64, usize),
        shift: Option<&[i64]>,
    ) {
        let g = self.n_genes;
        let sign128 = i128::from(sign);
        for block in exact_blocks(cells, maps, shift, MAX_BATCH, &mut work.squares) {
            let b = block.len();
            work.fill(block, maps, g, None, shift);
            let BatchWork { y, y2, p, panel, centred_yp, .. } = &mut *work;
            let yy = &mut self.yy;
            at_b_panels(y, y, b, g, true, threads, panel, |u0, m, n, part| {
                for i in 0..m {
                    let u = u0 + i;
                    add_exact(&mut yy[u * g + u..(u + 1) * g], &part[i * n + i..(i + 1) * n], sign128);
                }
            });
            let (yp, yp_factor) = if shift.is_some() { (centred_yp, 1) } else { (&mut self.yp, sign128) };
            for (x, sums, factor) in [(&*y, yp, yp_factor), (&*y2, &mut self.y2p, sign128)] {
                at_b_panels(x, p, b, g, false, threads, panel, |u0, m, _, part| {
                    add_exact(&mut sums[u0 * g..(u0 + m) * g], part, factor);
                });
            }
        }
    }

    /// The products of [`PairSums::add_cells_in`] on scores centred on each gene's present
    /// midpoint `m_u` (`y = y' + m_u·p_u`), which halves the largest score and so quadruples the
    /// exact block. The centred products give `Σ y'_u y'_v`, `Σ y'_u p_v` and `Σ y'_u² p_v`, and
    /// with the co-presence counts `c` the sums follow exactly:
    /// `Σ y_u y_v = Σ y'_u y'_v + m_v Σ y'_u p_v + m_u Σ y'_v p_u + m_u m_v c`,
    /// `Σ y_u p_v = Σ y'_u p_v + m_u c`, `Σ y_u² p_v = Σ y'_u² p_v + 2 m_u Σ y'_u p_v + m_u² c`.
    fn add_centred_products(
        &mut self,
        work: &mut BatchWork,
        cells: &[ScoredCell],
        maps: &RankMaps,
        (sign, threads): (i64, usize),
        shift: &[i64],
    ) {
        let g = self.n_genes;
        work.centred_yp.clear();
        work.centred_yp.resize(g * g, 0);
        work.centred_co.clear();
        work.centred_co.resize(g * g, 0);
        self.add_direct_products(work, cells, maps, (sign, threads), Some(shift));
        super::pair_counts::add_co_presence(cells, g, 1, &mut work.centred_co);
        let (b, co, s) = (&work.centred_yp, &work.centred_co, i128::from(sign));
        for u in 0..g {
            let mu = i128::from(shift[u]);
            for v in 0..g {
                let k = u * g + v;
                let (buv, c) = (b[k], i128::from(co[k]));
                self.yp[k] += s * (buv + mu * c);
                self.y2p[k] += s * (2 * mu * buv + mu * mu * c);
                if v >= u {
                    let mv = i128::from(shift[v]);
                    self.yy[k] += s * (mv * buv + mu * b[v * g + u] + mu * mv * c);
                }
                self.co[k] += sign * co[k];
            }
        }
    }

    /// The products of [`PairSums::add_cells_in`] for large atlases, whose mapped scores (|y| up to ~2N) make
    /// the exact batch of direct products small (it shrinks as 1/N², and each batch pays a
    /// fixed G × G accumulation, so the cost per cell would grow as N²). With
    /// `y = hi·2^k + lo` and `y² = hi₂·2^k₂ + lo₂`, every product of limbs stays below
    /// `2^(bits+1)` (`|y| < 2^bits`), so batches stay at [`MAX_BATCH`] at any atlas size:
    /// `Σ y_u y_v = 2^2k Σ hi hi + 2^k (Σ hi_u lo_v + Σ lo_u hi_v) + Σ lo lo`, and
    /// `Σ y_u² p_v` from y²'s two limbs the same way (`Σ y_u p_v` needs no split: its products
    /// are below 2^bits). Exact integers throughout, so the sums are the direct path's.
    fn add_split_products(
        &mut self,
        work: &mut BatchWork,
        cells: &[ScoredCell],
        maps: &RankMaps,
        (sign, threads): (i64, usize),
        max_abs_y: i64,
    ) {
        let g = self.n_genes;
        let bits = 64 - (max_abs_y.max(1) as u64).leading_zeros(); // |y| < 2^bits
        let (k, k2) = (bits.div_ceil(2), bits);
        let batch = ((EXACT_F64 as f64 / 2f64.powi(bits as i32 + 1)) as usize).clamp(1, MAX_BATCH);
        let s = i128::from(sign);
        for block in cells.chunks(batch) {
            let b = block.len();
            work.fill_limbs(block, maps, g, k, k2);
            let BatchWork { y, p, panel, limbs, .. } = &mut *work;
            let [yh, yl, y2h, y2l] = &*limbs;
            let yy = &mut self.yy;
            for (x, z, factor) in [(yh, yh, s << (2 * k)), (yh, yl, s << k), (yl, yh, s << k), (yl, yl, s)] {
                at_b_panels(x, z, b, g, true, threads, panel, |u0, m, n, part| {
                    for i in 0..m {
                        let u = u0 + i;
                        add_exact(&mut yy[u * g + u..(u + 1) * g], &part[i * n + i..(i + 1) * n], factor);
                    }
                });
            }
            for (x, sums, factor) in [(&*y, &mut self.yp, s), (y2h, &mut self.y2p, s << k2)] {
                at_b_panels(x, p, b, g, false, threads, panel, |u0, m, _, part| {
                    add_exact(&mut sums[u0 * g..(u0 + m) * g], part, factor);
                });
            }
            at_b_panels(y2l, p, b, g, false, threads, panel, |u0, m, _, part| {
                add_exact(&mut self.y2p[u0 * g..(u0 + m) * g], part, s);
            });
        }
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
        for (a, b) in self.yp.iter_mut().zip(&other.yp).chain(self.y2p.iter_mut().zip(&other.y2p)) {
            *a += i128::from(sign) * b;
        }
    }
}

/// Per-gene moments of the rank-mapped scores over all cells, from which any pair's ρ follows
/// given that pair's `Σ y_u·y_v`.
#[derive(Clone, Debug)]
pub struct GeneMoments {
    pub(crate) n: i128,
    c: Vec<i128>,
    sum_y: Vec<i128>,
    pub(crate) sum_w: Vec<i128>,
    /// `N·Σw² − (Σw)²`; 0 for a constant gene.
    pub(crate) var: Vec<i128>,
}

impl GeneMoments {
    pub fn new(h: &ScoreHistograms, maps: &RankMaps) -> Self {
        let g = h.n_genes;
        let n = i128::from(h.n_cells);
        let mut m = Self { n, c: vec![0; g], sum_y: vec![0; g], sum_w: vec![0; g], var: vec![0; g] };
        for u in 0..g {
            let cu = i128::from(maps.c(u));
            let (mut s1, mut s2) = (0i128, 0i128);
            for (s, &cnt) in h.gene(u).iter().enumerate() {
                if cnt != 0 {
                    let y = i128::from(maps.y(u, s));
                    s1 += i128::from(cnt) * y;
                    s2 += i128::from(cnt) * y * y;
                }
            }
            // w = c + y: Σw = N c + Σy ; Σw² = N c² + 2cΣy + Σy²
            let sum_w = n * cu + s1;
            let sum_w2 = n * cu * cu + 2 * cu * s1 + s2;
            m.c[u] = cu;
            m.sum_y[u] = s1;
            m.sum_w[u] = sum_w;
            m.var[u] = n * sum_w2 - sum_w * sum_w;
        }
        m
    }

    /// ρ of genes `u`, `v` given `Σ_cells y_u·y_v` (exact when `yy` is); NaN for a constant gene.
    pub fn rho(&self, u: usize, v: usize, yy: f64) -> f64 {
        if self.var[u] <= 0 || self.var[v] <= 0 {
            return f64::NAN;
        }
        let base = self.n * self.c[u] * self.c[v] + self.c[u] * self.sum_y[v] + self.c[v] * self.sum_y[u];
        let cov = (self.n * base - self.sum_w[u] * self.sum_w[v]) as f64 + self.n as f64 * yy;
        cov / ((self.var[u] as f64).sqrt() * (self.var[v] as f64).sqrt())
    }

    /// As [`GeneMoments::rho`] with an exact integer `Σ y_u·y_v`.
    pub fn rho_exact(&self, u: usize, v: usize, yy: i128) -> f64 {
        if self.var[u] <= 0 || self.var[v] <= 0 {
            return f64::NAN;
        }
        let sum_ww = self.n * self.c[u] * self.c[v] + self.c[u] * self.sum_y[v] + self.c[v] * self.sum_y[u] + yy;
        let cov = self.n * sum_ww - self.sum_w[u] * self.sum_w[v];
        cov as f64 / ((self.var[u] as f64).sqrt() * (self.var[v] as f64).sqrt())
    }
}

/// ρ between the rank-mapped score columns of every gene pair over all cells (Spearman's ρ
/// with average ranks when the maps come from the same cells). Row-major `G × G`; NaN where a
/// gene is constant.
pub fn global_correlations(h: &ScoreHistograms, maps: &RankMaps, sums: &PairSums) -> Vec<f64> {
    let g = h.n_genes;
    let m = GeneMoments::new(h, maps);
    let mut rho = vec![f64::NAN; g * g];
    for u in 0..g {
        for v in 0..g {
            rho[u * g + v] = m.rho_exact(u, v, sums.yy[u * g + v]);
        }
    }
    rho
}

#[cfg(test)]
#[path = "stats_tests.rs"]
mod tests;
