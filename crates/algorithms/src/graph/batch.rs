//! The dense batch matrices behind the exact pair statistics ([`super::PairSums`],
//! [`super::GeneRowSums`]), and the one way their f64 products become integer sums.

use super::ranks::RankMaps;
use super::scores::ScoredCell;

/// The dense batch matrices of the pair products (`cells × genes` f64: y, y², presence, and the
/// same for some rows) and the products' output. A worker streaming blocks of cells keeps one,
/// so they are not allocated and faulted in again for every block (at 2,000 genes the output is
/// 32 MB, each batch matrix 16 MB).
#[derive(Debug, Default)]
pub struct BatchWork {
    pub(crate) y: Vec<f64>,
    pub(crate) y2: Vec<f64>,
    pub(crate) p: Vec<f64>,
    pub(crate) ye: Vec<f64>,
    pub(crate) y2e: Vec<f64>,
    pub(crate) pe: Vec<f64>,
    pub(crate) panel: Vec<f64>,
    /// The limbs of y and y² when the products are split ([`BatchWork::fill_limbs`]).
    pub(crate) limbs: [Vec<f64>; 4],
}

impl BatchWork {
    /// The batch's mapped scores `y`, their squares and presence over all `g` genes; with
    /// `rows` (each gene's row, `usize::MAX` for none, and the row count), the same over those rows.
    pub(crate) fn fill(&mut self, block: &[ScoredCell], maps: &RankMaps, g: usize, rows: Option<(&[usize], usize)>) {
        let b = block.len();
        let r = rows.map_or(0, |(_, r)| r);
        for (m, width) in [
            (&mut self.y, g),
            (&mut self.y2, g),
            (&mut self.p, g),
            (&mut self.ye, r),
            (&mut self.y2e, r),
            (&mut self.pe, r),
        ] {
            m.clear();
            m.resize(b * width, 0f64);
        }
        for (i, cell) in block.iter().enumerate() {
            for (&u, &s) in cell.genes.iter().zip(&cell.scores) {
                let v = maps.y(u as usize, s as usize) as f64;
                let u = u as usize;
                (self.y[i * g + u], self.y2[i * g + u], self.p[i * g + u]) = (v, v * v, 1.0);
                if let Some((row_of, r)) = rows {
                    if row_of[u] != usize::MAX {
                        let k = i * r + row_of[u];
                        (self.ye[k], self.y2e[k], self.pe[k]) = (v, v * v, 1.0);
                    }
                }
            }
        }
    }
}

impl BatchWork {
    /// The batch's mapped scores split into limbs, so that products of limbs stay small where
    /// products of scores would not: `y = hi·2^k + lo` (`0 ≤ lo < 2^k`) into `limbs[0..2]` and
    /// `y² = hi·2^k2 + lo` into `limbs[2..4]`, with y itself into `y` (its products with
    /// presence stay small) and presence into `p`, over all `g` genes.
    pub(crate) fn fill_limbs(&mut self, block: &[ScoredCell], maps: &RankMaps, g: usize, k: u32, k2: u32) {
        let b = block.len();
        for m in self.limbs.iter_mut().chain([&mut self.y, &mut self.p]) {
            m.clear();
            m.resize(b * g, 0f64);
        }
        let [yh, yl, y2h, y2l] = &mut self.limbs;
        let (mask, mask2) = ((1i64 << k) - 1, (1i128 << k2) - 1);
        for (i, cell) in block.iter().enumerate() {
            for (&u, &s) in cell.genes.iter().zip(&cell.scores) {
                let y = maps.y(u as usize, s as usize);
                let y2 = i128::from(y) * i128::from(y);
                let at = i * g + u as usize;
                (yh[at], yl[at]) = ((y >> k) as f64, (y & mask) as f64);
                (y2h[at], y2l[at]) = ((y2 >> k2) as f64, (y2 & mask2) as f64);
                (self.y[at], self.p[at]) = (y as f64, 1.0);
            }
        }
    }
}

/// Adds `factor` times `from` to `to` (`factor`: the sign, times a limb's power of two when
/// products are split). Every partial sum of a batch product is an exact integer below 2^53
/// ([`super::PairSums::exact_batch`]): through i64 the conversion is one instruction, where
/// f64 → i128 is a library call.
pub(crate) fn add_exact(to: &mut [i128], from: &[f64], factor: i128) {
    to.iter_mut().zip(from).for_each(|(a, &x)| *a += factor * (x as i64 as i128));
}
