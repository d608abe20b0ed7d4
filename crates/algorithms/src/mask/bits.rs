//! Bit-set primitives of the masking step: presence flags to bits, select by rank.

use std::borrow::Borrow;

/// Calls `f` with the index of every set bit of `words` (bit `i` of word `w` is index
/// `64 w + i`), ascending.
#[inline]
pub(super) fn for_each_bit(words: impl IntoIterator<Item = impl Borrow<u64>>, mut f: impl FnMut(usize)) {
    for (w, word) in words.into_iter().enumerate() {
        let mut bits = *word.borrow();
        while bits != 0 {
            f(w * 64 + bits.trailing_zeros() as usize);
            bits &= bits - 1;
        }
    }
}

/// A bit set with the number of set bits before each word, so that the `r`-th set bit is found
/// without walking the words.
#[derive(Debug, Default)]
pub(super) struct RankedBits {
    pub(super) words: Vec<u64>,
    before: Vec<u32>,
    ones: u32,
}

impl RankedBits {
    /// Replaces the words, counting as it goes.
    #[inline]
    pub(super) fn assign(&mut self, words: impl IntoIterator<Item = u64>) {
        self.words.clear();
        self.before.clear();
        let mut n = 0;
        for word in words {
            self.words.push(word);
            self.before.push(n);
            n += word.count_ones();
        }
        self.ones = n;
    }

    /// Number of set bits.
    #[inline]
    pub(super) fn ones(&self) -> u32 {
        self.ones
    }

    /// Index of the `r`-th (from 0) set bit; `r < ones()`.
    #[inline]
    pub(super) fn select(&self, r: u32) -> usize {
        let w = word_of_rank(&self.before, r);
        w * 64 + select_in_word(self.words[w], r - self.before[w]) as usize
    }
}

/// The word holding the `r`-th set bit, from the set bits before each word (ascending): the last
/// word with at most `r` before it. A branch-free count over a few words, a binary search over many.
#[inline]
fn word_of_rank(before: &[u32], r: u32) -> usize {
    if before.len() <= 64 {
        before.iter().map(|&b| usize::from(b <= r)).sum::<usize>() - 1
    } else {
        before.partition_point(|&b| b <= r) - 1
    }
}

/// 64 presence flags (bytes 0 or 1) as the bits of one word, 8 at a time: the multiply moves
/// byte `k`'s low bit to bit `56 + k` without carries.
#[inline]
pub(super) fn pack_flags(flags: &[u8]) -> u64 {
    flags.chunks_exact(8).enumerate().fold(0, |word, (j, b)| {
        let x = u64::from_le_bytes(b.try_into().expect("8 bytes"));
        word | ((x.wrapping_mul(0x0102_0408_1020_4080) >> 56) << (8 * j))
    })
}

/// Position of the `r`-th (from 0) set bit of `x`, which has more than `r`: broadword select
/// (Vigna 2008), branch-free: byte popcounts and their running sums in one multiply, the byte
/// holding the bit by a SWAR comparison, the bit in that byte from a table.
#[inline]
fn select_in_word(x: u64, r: u32) -> u32 {
    const L8: u64 = 0x0101_0101_0101_0101;
    const H8: u64 = 0x8080_8080_8080_8080;
    let mut s = x - ((x >> 1) & 0x5555_5555_5555_5555);
    s = (s & 0x3333_3333_3333_3333) + ((s >> 2) & 0x3333_3333_3333_3333);
    s = (s + (s >> 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    // Byte i: set bits in bytes 0..=i (at most 64, so no byte overflows into the next).
    let sums = s.wrapping_mul(L8);
    // High bit of byte i set where sums_i ≤ r: their count is the index of the byte with the bit.
    let at_most_r = ((u64::from(r) * L8) | H8).wrapping_sub(sums) & H8;
    let byte = at_most_r.count_ones() * 8;
    let before = ((sums << 8) >> byte) & 0xff;
    byte + u32::from(SELECT_IN_BYTE[(((x >> byte) & 0xff) | ((u64::from(r) - before) << 8)) as usize])
}

/// `SELECT_IN_BYTE[b | r << 8]`: position of the `r`-th set bit of byte `b` (8 when it has none).
static SELECT_IN_BYTE: [u8; 2048] = {
    let mut t = [8u8; 2048];
    let mut b = 0;
    while b < 256 {
        let (mut r, mut bit) = (0, 0);
        while bit < 8 {
            if b >> bit & 1 == 1 {
                t[b | r << 8] = bit as u8;
                r += 1;
            }
            bit += 1;
        }
        b += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn ranked_bits_select_every_set_bit(words in proptest::collection::vec(any::<u64>(), 1..150)) {
            let mut bits = RankedBits::default();
            bits.assign(words.iter().copied());
            let mut r = 0;
            for_each_bit(&words, |i| {
                assert_eq!(bits.select(r), i, "rank {r} of {} words", words.len());
                r += 1;
            });
            prop_assert_eq!(r, bits.ones());
            prop_assert_eq!(r, words.iter().map(|w| w.count_ones()).sum::<u32>());
        }

        #[test]
        fn select_in_word_finds_the_rth_set_bit(x in any::<u64>().prop_filter("nonzero", |x| *x != 0), r in 0u32..64) {
            let r = r % x.count_ones();
            let expected = (0..64).filter(|b| x >> b & 1 == 1).nth(r as usize).unwrap();
            prop_assert_eq!(select_in_word(x, r), expected);
        }

        #[test]
        fn pack_flags_sets_the_bit_of_each_flagged_byte(flags in proptest::collection::vec(0u8..=1, 64)) {
            let expected = flags.iter().enumerate().fold(0u64, |w, (i, &f)| w | u64::from(f) << i);
            prop_assert_eq!(pack_flags(&flags), expected);
        }
    }
}
