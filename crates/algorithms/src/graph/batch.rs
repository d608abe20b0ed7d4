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
    /// Each gene's `Σ y²` over the block being cut ([`exact_blocks`]).
    pub(crate) squares: Vec<u64>,
    /// The centred products' `Σ y'_u·p_v` and co-presence over one call's cells (`G × G`),
    /// from which the uncentred sums follow ([`super::PairSums`]).
    pub(crate) centred_yp: Vec<i128>,
    pub(crate) centred_co: Vec<i64>,
}

impl BatchWork {
    /// The batch's mapped scores `y`, their squares and presence over all `g` genes; with
    /// `rows` (each gene's row, `usize::MAX` for none, and the row count), the same over those rows.
    /// With `shift`, present genes hold `y − shift[u]` instead of `y` ([`PairSums`]'s centred
    /// products).
    pub(crate) fn fill(
        &mut self,
        block: &[ScoredCell],
        maps: &RankMaps,
        g: usize,
        rows: Option<(&[usize], usize)>,
        shift: Option<&[i64]>,
    ) {
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
                let u = u as usize;
                let v = (maps.y(u, s as usize) - shift.map_or(0, |m| m[u])) as f64;
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
/// ([`exact_blocks`]): through i64 the conversion is one instruction, where f64 → i128 is a
/// library call. Every batch pays this over G × G sums, so a factor of ±1 (every unsplit
/// product) adds or subtracts without the i128 multiplication.
pub(crate) fn add_exact(to: &mut [i128], from: &[f64], factor: i128) {
    let pairs = to.iter_mut().zip(from);
    match factor {
        1 => pairs.for_each(|(a, &x)| *a += i128::from(x as i64)),
        -1 => pairs.for_each(|(a, &x)| *a -= i128::from(x as i64)),
        _ => pairs.for_each(|(a, &x)| *a += factor * i128::from(x as i64)),
    }
}

/// 2^53: below it every integer is an exact f64.
pub(crate) const EXACT_F64: u64 = 1 << 53;

/// Consecutive blocks of `cells`, each of at most `max_cells`, in which every gene's `Σ y²`
/// (of `y − shift[u]` with a shift) stays at most 2^53. Every partial sum of a block's products
/// is then an exact f64 integer, in whatever order the product adds: `|Σ y_u·y_v| ≤
/// √(Σ y_u² · Σ y_v²)` (Cauchy–Schwarz), `Σ y_u²·p_v ≤ Σ y_u²` and `|Σ y_u·p_v| ≤ Σ y_u²`.
/// Sizing by the worst case (`cells · max y² ≤ 2^53`) assumed every cell at every gene's
/// largest rank; real cells spread over the ranks, so blocks are longer, and each block pays a
/// fixed G × G accumulation ([`add_exact`]). The caller keeps `y² ≤ 2^53` for any one cell.
/// The sums do not depend on where blocks end (exact integers).
pub(crate) fn exact_blocks<'a>(
    cells: &'a [ScoredCell],
    maps: &RankMaps,
    shift: Option<&[i64]>,
    max_cells: usize,
    squares: &mut Vec<u64>,
) -> Vec<&'a [ScoredCell]> {
    squares.clear();
    squares.resize(maps.n_genes, 0);
    let y2 = |u: u32, s: u16| {
        let y = maps.y(u as usize, s as usize) - shift.map_or(0, |m| m[u as usize]);
        y.unsigned_abs().saturating_pow(2)
    };
    let mut blocks = Vec::new();
    let (mut start, max_cells) = (0, max_cells.max(1));
    for (i, cell) in cells.iter().enumerate() {
        let full = i - start == max_cells
            || cell
                .genes
                .iter()
                .zip(&cell.scores)
                .any(|(&u, &s)| squares[u as usize].saturating_add(y2(u, s)) > EXACT_F64);
        if full && i > start {
            blocks.push(&cells[start..i]);
            start = i;
            squares.iter_mut().for_each(|x| *x = 0);
        }
        for (&u, &s) in cell.genes.iter().zip(&cell.scores) {
            squares[u as usize] = squares[u as usize].saturating_add(y2(u, s));
        }
    }
    if start < cells.len() {
        blocks.push(&cells[start..]);
    }
    blocks
}
