//! Per-cell random streams.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The RNG every masking choice of one cell is drawn from.
pub type MaskRng = ChaCha8Rng;

/// A cell's RNG, determined by `(seed, epoch, cell)` alone: ChaCha8 keyed with all three (and a
/// domain tag, so other seeded streams of the same run never coincide with it).
pub fn cell_rng(seed: u64, epoch: u64, cell: u64) -> MaskRng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&epoch.to_le_bytes());
    key[16..24].copy_from_slice(&cell.to_le_bytes());
    key[24..].copy_from_slice(b"corrmask");
    ChaCha8Rng::from_seed(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn streams_differ_by_each_coordinate_and_repeat_for_the_same_one() {
        let draw = |s, e, c| cell_rng(s, e, c).random::<u64>();
        assert_eq!(draw(1, 2, 3), draw(1, 2, 3));
        assert_ne!(draw(1, 2, 3), draw(0, 2, 3));
        assert_ne!(draw(1, 2, 3), draw(1, 0, 3));
        assert_ne!(draw(1, 2, 3), draw(1, 2, 0));
        assert_ne!(draw(1, 2, 3), draw(1, 3, 2), "coordinates are not interchangeable");
    }
}
