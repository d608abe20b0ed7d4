//! Per-gene score histograms and the rank maps derived from them: the first, additive pass of
//! the graph, and what every pair sum is taken under.

use serde::{Deserialize, Serialize};

use super::scores::ScoredCell;

/// Per-gene histograms of scores over present cells, plus the number of cells; adding and
/// subtracting cells is exact.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
        self.max_abs_shifted(&vec![0; self.n_genes], 0)
    }

    /// Largest `|y − shift[u]|` of scores `first_score` and up.
    pub fn max_abs_shifted(&self, shift: &[i64], first_score: usize) -> i64 {
        (0..self.n_genes)
            .flat_map(|u| (first_score..self.l_max).map(move |s| (u, s)))
            .map(|(u, s)| (self.y(u, s) - shift[u]).abs())
            .max()
            .unwrap_or(0)
    }

    /// Each gene's midpoint of the mapped scores of scores 1 to `L_max − 1` (`y` from ~`Z` to
    /// ~`2N − Z` for `Z` absent cells), which is where nearly every present cell scores (0 is
    /// only the `L_max`-th token): centred on it, such a cell's score is at most ~N in size,
    /// where `y` reaches ~2N.
    pub fn present_midpoints(&self) -> Vec<i64> {
        (0..self.n_genes)
            .map(|u| if self.l_max < 2 { 0 } else { (self.y(u, 1) + self.y(u, self.l_max - 1)) / 2 })
            .collect()
    }
}
