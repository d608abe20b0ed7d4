//! Counter-based dropout: whether element `(row, col)` of a call is kept is a hash of the call's
//! key, the row and the column, so a fused kernel can draw it inside a tile, a composition of
//! tensor operations can draw the same mask whole, and neither depends on the order or the
//! thread in which elements are visited.

/// The dropout of one call: drop probability `p` (quantized to 1/2³²) and the call's key.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DropoutKey {
    pub p: f32,
    pub key: u64,
}

impl DropoutKey {
    /// Elements whose hash is below this are dropped.
    pub fn threshold(&self) -> u32 {
        (f64::from(self.p.clamp(0.0, 1.0)) * 4_294_967_296.0).min(4_294_967_295.0) as u32
    }

    /// The factor kept elements are scaled by: 1 / (1 − the exact drop probability).
    pub fn keep_scale(&self) -> f32 {
        let dropped = f64::from(self.threshold()) / 4_294_967_296.0;
        (1.0 / (1.0 - dropped)) as f32
    }

    /// The seed of row `row` (a flat row index the caller defines).
    pub fn row_seed(&self, row: u64) -> u32 {
        let mixed = splitmix64(self.key ^ splitmix64(row.wrapping_add(0x632b_e59b_d9b4_e019)));
        (mixed >> 32) as u32 ^ mixed as u32
    }

    /// The multiplier of element `(row, col)`: 0 when dropped, [`Self::keep_scale`] when kept.
    pub fn factor(&self, row: u64, col: u32) -> f32 {
        if element_hash(self.row_seed(row), col) < self.threshold() {
            0.0
        } else {
            self.keep_scale()
        }
    }

    /// The multipliers of a `rows × cols` block whose row `r` has flat index `row_base + r`.
    pub fn mask(&self, row_base: u64, rows: usize, cols: usize) -> Vec<f32> {
        let (threshold, scale) = (self.threshold(), self.keep_scale());
        let mut out = vec![0f32; rows * cols];
        for (r, row) in out.chunks_exact_mut(cols.max(1)).enumerate() {
            let seed = self.row_seed(row_base + r as u64);
            for (c, f) in row.iter_mut().enumerate() {
                *f = if element_hash(seed, c as u32) < threshold { 0.0 } else { scale };
            }
        }
        out
    }
}

/// A 32-bit integer hash (lowbias32) of a row seed and a column: only multiplies, shifts and
/// xors, so the loops over a row vectorize.
#[inline(always)]
pub(crate) fn element_hash(seed: u32, col: u32) -> u32 {
    let mut x = seed ^ col.wrapping_mul(0x9e37_79b9);
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^ (x >> 16)
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_rate_matches_p_and_kept_mean_is_one() {
        let d = DropoutKey { p: 0.1, key: 7 };
        let m = d.mask(0, 200, 1000);
        let dropped = m.iter().filter(|&&f| f == 0.0).count() as f64 / m.len() as f64;
        assert!((dropped - 0.1).abs() < 0.005, "dropped {dropped}");
        let mean = m.iter().map(|&f| f64::from(f)).sum::<f64>() / m.len() as f64;
        assert!((mean - 1.0).abs() < 0.01, "mean {mean}");
    }

    #[test]
    fn masks_depend_on_key_and_agree_elementwise() {
        let a = DropoutKey { p: 0.5, key: 1 };
        let b = DropoutKey { p: 0.5, key: 2 };
        assert_ne!(a.mask(0, 4, 64), b.mask(0, 4, 64));
        let block = a.mask(10, 3, 50);
        assert_eq!(block[2 * 50 + 17], a.factor(12, 17));
    }

    #[test]
    fn zero_p_keeps_everything_unscaled() {
        let d = DropoutKey { p: 0.0, key: 3 };
        assert!(d.mask(0, 5, 5).iter().all(|&f| f == 1.0));
    }
}
