//! Changing the gene set of incremental statistics: genes entering the graph vocabulary get
//! their pair sums against every gene ([`GeneRowSums`]) without recomputing the other pairs, and
//! per-gene tables are rearranged to a new gene set ([`remap_rows`], [`remap_square`]).

use serde::{Deserialize, Serialize};

use super::batch::{add_exact, exact_blocks, BatchWork};
use super::products::at_b_strided;
use super::ranks::RankMaps;
use super::scores::ScoredCell;
use super::stats::{PairSums, MAX_BATCH};

/// Per-gene rows of `width` values rearranged to a new gene set: row `i` of the result is row
/// `from[i]` of `src`, or zeros for a gene that `src` does not have.
pub fn remap_rows<T: Copy + Default>(src: &[T], width: usize, from: &[Option<usize>]) -> Vec<T> {
    let mut out = vec![T::default(); from.len() * width];
    for (i, f) in from.iter().enumerate() {
        if let Some(j) = *f {
            out[i * width..(i + 1) * width].copy_from_slice(&src[j * width..(j + 1) * width]);
        }
    }
    out
}

/// A row-major `g × g` pair table rearranged to a new gene set (see [`remap_rows`]): entry
/// `(i, k)` is entry `(from[i], from[k])` of `src`, or zero where either gene is new.
pub fn remap_square<T: Copy + Default>(src: &[T], g: usize, from: &[Option<usize>]) -> Vec<T> {
    let n = from.len();
    let mut out = vec![T::default(); n * n];
    for (i, fi) in from.iter().enumerate() {
        let Some(a) = *fi else { continue };
        for (k, fk) in from.iter().enumerate() {
            if let Some(b) = *fk {
                out[i * n + k] = src[a * g + b];
            }
        }
    }
    out
}

impl PairSums {
    /// The sums rearranged to a new gene set; pairs with a new gene are zero until
    /// [`PairSums::insert_rows`] fills them.
    pub fn remap(&self, from: &[Option<usize>]) -> Self {
        let g = self.n_genes;
        Self {
            n_genes: from.len(),
            n_cells: self.n_cells,
            yy: remap_square(&self.yy, g, from),
            co: remap_square(&self.co, g, from),
            yp: remap_square(&self.yp, g, from),
            y2p: remap_square(&self.y2p, g, from),
        }
    }

    /// Writes the sums of every pair involving the genes of `rows` (both orientations), as if
    /// those genes had been part of the sums from the start.
    pub fn insert_rows(&mut self, rows: &GeneRowSums) {
        let g = self.n_genes;
        assert_eq!((rows.n_genes, rows.n_cells), (g, self.n_cells), "row sums of other genes or cells");
        let mut is_row = vec![false; g];
        rows.rows.iter().for_each(|&e| is_row[e] = true);
        for (i, &e) in rows.rows.iter().enumerate() {
            let at = |x: usize| i * g + x;
            for (x, &both_new) in is_row.iter().enumerate() {
                self.yy[e * g + x] = rows.yy[at(x)];
                self.co[e * g + x] = rows.co[at(x)];
                self.yp[e * g + x] = rows.yp_row[at(x)];
                self.y2p[e * g + x] = rows.y2p_row[at(x)];
                // A pair of two new genes is written by each one's row.
                if !both_new {
                    self.yy[x * g + e] = rows.yy[at(x)];
                    self.co[x * g + e] = rows.co[at(x)];
                    self.yp[x * g + e] = rows.yp_col[at(x)];
                    self.y2p[x * g + e] = rows.y2p_col[at(x)];
                }
            }
        }
    }
}

/// The pair sums of some genes (`rows`, indices into a vocabulary of `n_genes`) against every
/// gene, row-major `|rows| × n_genes`, exact integers like [`PairSums`]: `yy[e, x] = Σ y_e·y_x`,
/// `co[e, x]` = cells where both are present, and over those cells `yp_row = Σ y_e`,
/// `yp_col = Σ y_x`, `y2p_row = Σ y_e²`, `y2p_col = Σ y_x²`. Costs `|rows| / n_genes` of
/// recomputing all pairs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GeneRowSums {
    pub rows: Vec<usize>,
    pub n_genes: usize,
    pub n_cells: i64,
    pub yy: Vec<i128>,
    pub co: Vec<i64>,
    pub yp_row: Vec<i128>,
    pub yp_col: Vec<i128>,
    pub y2p_row: Vec<i128>,
    pub y2p_col: Vec<i128>,
}

impl GeneRowSums {
    pub fn new(rows: Vec<usize>, n_genes: usize) -> Self {
        let n = rows.len() * n_genes;
        Self {
            rows,
            n_genes,
            n_cells: 0,
            yy: vec![0; n],
            co: vec![0; n],
            yp_row: vec![0; n],
            yp_col: vec![0; n],
            y2p_row: vec![0; n],
            y2p_col: vec![0; n],
        }
    }

    /// Adds cells (scored over all `n_genes`): dense batches and f64 products, exact as in
    /// [`PairSums::add_cells`].
    pub fn add_cells(&mut self, cells: &[ScoredCell], maps: &RankMaps, threads: usize) {
        self.add_cells_in(&mut BatchWork::default(), cells, maps, threads);
    }

    /// [`GeneRowSums::add_cells`] with the batch matrices of `work` (see [`BatchWork`]).
    pub fn add_cells_in(&mut self, work: &mut BatchWork, cells: &[ScoredCell], maps: &RankMaps, threads: usize) {
        let (g, r) = (self.n_genes, self.rows.len());
        if r == 0 {
            self.n_cells += cells.len() as i64;
            return;
        }
        let mut row_of = vec![usize::MAX; g];
        self.rows.iter().enumerate().for_each(|(i, &e)| row_of[e] = i);
        for block in exact_blocks(cells, maps, None, MAX_BATCH, &mut work.squares) {
            let b = block.len();
            work.fill(block, maps, g, Some((&row_of, r)), None);
            let BatchWork { y, y2, p, ye, y2e, pe, panel, .. } = &mut *work;
            panel.resize(r * g, 0.0);
            let products: [(&[f64], &[f64], &mut Vec<i128>); 5] = [
                (ye, y, &mut self.yy),
                (ye, p, &mut self.yp_row),
                (y2e, p, &mut self.y2p_row),
                (pe, y, &mut self.yp_col),
                (pe, y2, &mut self.y2p_col),
            ];
            for (a, bm, acc) in products {
                at_b_strided(r, g, b, panel, g, a, r, bm, g, threads);
                add_exact(acc, panel, 1);
            }
            at_b_strided(r, g, b, panel, g, pe, r, p, g, threads);
            self.co.iter_mut().zip(panel.iter()).for_each(|(s, &x)| *s += x as i64);
        }
        self.n_cells += cells.len() as i64;
    }

    pub fn merge(&mut self, other: &Self) {
        assert_eq!((&self.rows, self.n_genes), (&other.rows, other.n_genes), "row sums of other genes");
        self.n_cells += other.n_cells;
        for (a, b) in [
            (&mut self.yy, &other.yy),
            (&mut self.yp_row, &other.yp_row),
            (&mut self.yp_col, &other.yp_col),
            (&mut self.y2p_row, &other.y2p_row),
            (&mut self.y2p_col, &other.y2p_col),
        ] {
            a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
        }
        self.co.iter_mut().zip(&other.co).for_each(|(x, y)| *x += y);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{GraphVocab, ScoreHistograms};

    /// Cells over `g` genes from a fixed pseudo-random sequence.
    fn cells(n: usize, g: usize, l_max: u16) -> Vec<ScoredCell> {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        (0..n)
            .map(|_| {
                let mut c = ScoredCell::default();
                for u in 0..g as u32 {
                    if next() % 3 != 0 {
                        c.genes.push(u);
                        c.scores.push((next() % u64::from(l_max)) as u16);
                    }
                }
                c
            })
            .collect()
    }

    #[test]
    fn sums_of_entering_genes_equal_sums_computed_with_them_from_the_start() {
        let (g, l) = (7, 16);
        let all = cells(300, g, l as u16);
        let mut h = ScoreHistograms::new(g, l);
        all.iter().for_each(|c| h.add_cell(c, 1));
        let maps = RankMaps::from_histograms(&h);
        let mut expected = PairSums::new(g);
        expected.add_cells(&all, &maps, 1, 1);
        // Old genes 0, 2, 3, 5; genes 1, 4, 6 enter.
        let old = [0usize, 2, 3, 5];
        let from_old: Vec<Option<usize>> = old.iter().map(|&u| Some(u)).collect();
        let old_maps = RankMaps { t2: remap_rows(&maps.t2, l, &from_old), n_genes: old.len(), ..maps.clone() };
        let old_vocab = GraphVocab::from_tokens(old.iter().map(|&u| u as u32).collect(), g);
        // The same cells seen through the old genes (indices into `old`, still ascending).
        let old_cells: Vec<ScoredCell> = all
            .iter()
            .map(|c| {
                let mut o = ScoredCell::default();
                for (&u, &s) in c.genes.iter().zip(&c.scores) {
                    if let Some(k) = old_vocab.index(u) {
                        o.genes.push(k as u32);
                        o.scores.push(s);
                    }
                }
                o
            })
            .collect();
        let mut partial = PairSums::new(old.len());
        partial.add_cells(&old_cells, &old_maps, 1, 1);
        let from: Vec<Option<usize>> = (0..g).map(|u| old.iter().position(|&o| o == u)).collect();
        let mut grown = partial.remap(&from);
        let entering = vec![1usize, 4, 6];
        // Two halves merged, as the workers of a dataflow would.
        let mut rows = GeneRowSums::new(entering.clone(), g);
        rows.add_cells(&all[..120], &maps, 1);
        let mut rest = GeneRowSums::new(entering, g);
        rest.add_cells(&all[120..], &maps, 2);
        rows.merge(&rest);
        grown.insert_rows(&rows);
        assert_eq!(grown, expected);
        // And back: dropping the entered genes restores the old sums.
        assert_eq!(grown.remap(&old.iter().map(|&u| Some(u)).collect::<Vec<_>>()), partial);
    }
}
