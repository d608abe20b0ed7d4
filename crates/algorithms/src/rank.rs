//! Geneformer rank-value encoding of a single cell (docs/DESIGN.md §3).

use serde::{Deserialize, Serialize};

/// Geneformer normalizes each cell to 10,000 total counts before dividing by the gene median.
pub const TARGET_SUM: f64 = 10_000.0;

/// How ranked genes become a token sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SequenceLayout {
    /// Most gene tokens kept (V1: 2,048; V2: 4,094).
    pub max_genes: usize,
    /// Token prepended to every sequence (V2's `<cls>`).
    pub cls: Option<u32>,
    /// Token appended to every sequence (V2's `<eos>`).
    pub eos: Option<u32>,
}

impl SequenceLayout {
    /// Geneformer V1: 2,048 genes, no special tokens.
    pub const fn v1() -> Self {
        Self { max_genes: 2048, cls: None, eos: None }
    }

    /// Geneformer V2: 4,094 genes between `<cls>` and `<eos>`.
    pub const fn v2(cls: u32, eos: u32) -> Self {
        Self { max_genes: 4094, cls: Some(cls), eos: Some(eos) }
    }
}

/// Normalized expression of one gene: `count / n_counts * 10,000 / median`, evaluated in that
/// order in f64 as Geneformer's numpy code does.
#[inline]
pub fn normalized_expression(count: f64, n_counts: f64, median: f64) -> f64 {
    count / n_counts * TARGET_SUM / median
}

/// Reusable buffers of [`rank_value_encode`].
#[derive(Clone, Debug, Default)]
pub struct RankScratch {
    keyed: Vec<(u64, u32)>,
    packed: Vec<u64>,
    spare: Vec<u64>,
}

/// Ranks `genes` (token id, normalized expression) by expression, descending, ties by ascending
/// token id, and writes the first `layout.max_genes` tokens, wrapped in the layout's special
/// tokens, into `out` (cleared first).
///
/// Every expression value must be finite and > 0 (zeros are not part of a cell's sequence);
/// token ids must be distinct. `scratch` is reused between calls to avoid allocation.
pub fn rank_value_encode(genes: &[(u32, f64)], layout: &SequenceLayout, scratch: &mut RankScratch, out: &mut Vec<u32>) {
    out.clear();
    out.reserve(genes.len().min(layout.max_genes) + 2);
    out.extend(layout.cls);
    if genes.len() <= layout.max_genes && genes.len() <= PACKED_MAX {
        sort_packed(genes, &mut scratch.packed, &mut scratch.spare, out);
    } else {
        sort_keyed(genes, layout.max_genes, &mut scratch.keyed, out);
    }
    out.extend(layout.eos);
}

/// Most genes [`sort_packed`] takes (its keys hold a 16-bit index).
const PACKED_MAX: usize = 1 << 16;

/// The whole rank order of `genes` (as [`rank_value_encode`] orders them, nothing cut): indices
/// into `genes`, written into `order` (cleared first). The first `max_genes` of
/// `genes[order[i]].0` are exactly the gene tokens [`rank_value_encode`] writes, so a caller
/// keeps each gene's count beside its token, and the genes past the cut, from one sort.
pub fn rank_order(genes: &[(u32, f64)], scratch: &mut RankScratch, order: &mut Vec<u32>) {
    order.clear();
    order.reserve(genes.len());
    if genes.len() <= PACKED_MAX {
        sort_packed_indices(genes, &mut scratch.packed, &mut scratch.spare, |i| order.push(i as u32));
    } else {
        let keyed = &mut scratch.keyed;
        keyed.clear();
        keyed.extend(genes.iter().enumerate().map(|(i, &(_, x))| (!x.to_bits(), i as u32)));
        keyed.sort_unstable_by_key(|&(bits, i)| (bits, genes[i as usize].0));
        order.extend(keyed.iter().map(|e| e.1));
    }
}

/// The whole cell sorted as single u64 keys: the top 48 bits of the value (all but 15 low
/// mantissa bits), inverted for descending order, above the gene's index. The keys are put in
/// order of a 16-bit digit that orders like the value (two stable radix passes, or a comparison
/// sort for short cells); runs that share a digit (close values, exact ties) are then ordered
/// exactly, by value and token id.
fn sort_packed(genes: &[(u32, f64)], packed: &mut Vec<u64>, spare: &mut Vec<u64>, out: &mut Vec<u32>) {
    sort_packed_indices(genes, packed, spare, |i| out.push(genes[i].0));
}

/// [`sort_packed`]'s order, handed to `emit` as indices into `genes`.
fn sort_packed_indices(genes: &[(u32, f64)], packed: &mut Vec<u64>, spare: &mut Vec<u64>, mut emit: impl FnMut(usize)) {
    // A positive finite f64 orders like its bit pattern; shifting out the (zero) sign bit leaves
    // 63 ordered bits, of which the top 48 are kept.
    let top = |x: f64| !(x.to_bits() << 1) >> 16;
    packed.clear();
    let (mut lo, mut hi) = (u64::MAX, 0);
    packed.extend(genes.iter().enumerate().map(|(i, &(_, x))| {
        debug_assert!(x.is_finite() && x > 0.0, "expression must be finite and positive");
        let key = top(x) << 16 | i as u64;
        (lo, hi) = (lo.min(key), hi.max(key));
        key
    }));
    // Keys minus the smallest, shifted so that the largest fits in 16 bits: an order-preserving
    // digit, whose ties (close values, exact ties) are ordered exactly afterwards.
    let base = lo >> 16;
    let shift = 16 + (64 - ((hi >> 16) - base).leading_zeros()).saturating_sub(RADIX_BITS);
    let digit = |k: u64| ((k >> 16) - base) >> (shift - 16);
    if packed.len() >= RADIX_MIN {
        radix_sort_16(packed, spare, |k| digit(k) as usize);
    } else {
        packed.sort_unstable();
    }
    for run in packed.chunk_by_mut(|&a, &b| digit(a) == digit(b)).filter(|r| r.len() > 1) {
        run.sort_unstable_by_key(|&k| {
            let (token, x) = genes[(k & 0xffff) as usize];
            (!x.to_bits(), token)
        });
    }
    packed.iter().for_each(|&k| emit((k & 0xffff) as usize));
}

/// Bits [`sort_packed`] orders by before its exact pass over runs.
const RADIX_BITS: u32 = 16;

/// Cells at least this long are radix-sorted; below, a comparison sort is faster than clearing
/// and summing the 512 counters.
const RADIX_MIN: usize = 192;

/// Stable LSD radix sort of `keys` by a 16-bit `digit` (two 8-bit passes; `spare` is a buffer).
fn radix_sort_16(keys: &mut Vec<u64>, spare: &mut Vec<u64>, digit: impl Fn(u64) -> usize) {
    let mut counts = [[0u32; 256]; 2];
    for &k in keys.iter() {
        let d = digit(k);
        counts[0][d & 0xff] += 1;
        counts[1][d >> 8 & 0xff] += 1;
    }
    spare.clear();
    spare.resize(keys.len(), 0);
    for (pass, counts) in counts.iter_mut().enumerate() {
        let mut at = 0;
        for c in counts.iter_mut() {
            (*c, at) = (at, at + *c);
        }
        for &k in keys.iter() {
            let d = digit(k) >> (8 * pass) & 0xff;
            spare[counts[d] as usize] = k;
            counts[d] += 1;
        }
        std::mem::swap(keys, spare);
    }
}

/// The general path (cells longer than `keep`, or than [`PACKED_MAX`]): select the first `keep`
/// by value, then sort them as (inverted bits, token) pairs.
fn sort_keyed(genes: &[(u32, f64)], keep: usize, scratch: &mut Vec<(u64, u32)>, out: &mut Vec<u32>) {
    // `!bits` sorts by expression descending with one integer comparison. Exact ties are rare;
    // they are ordered by token id in a linear pass afterwards rather than by widening every
    // comparison.
    scratch.clear();
    scratch.extend(genes.iter().map(|&(token, x)| {
        debug_assert!(x.is_finite() && x > 0.0, "expression must be finite and positive");
        (!x.to_bits(), token)
    }));
    let keep = keep.min(scratch.len());
    if keep < scratch.len() {
        if keep > 0 {
            // Everything tied with the last kept gene must stay to pick the lowest tokens.
            scratch.select_nth_unstable_by_key(keep - 1, |e| e.0);
            let cut = scratch[keep - 1].0;
            let mut end = keep;
            for i in keep..scratch.len() {
                if scratch[i].0 == cut {
                    scratch.swap(i, end);
                    end += 1;
                }
            }
            scratch.truncate(end);
        } else {
            scratch.clear();
        }
    }
    scratch.sort_unstable_by_key(|e| e.0);
    for run in scratch.chunk_by_mut(|a, b| a.0 == b.0).filter(|r| r.len() > 1) {
        run.sort_unstable_by_key(|e| e.1);
    }
    scratch.truncate(keep);
    out.extend(scratch.iter().map(|e| e.1));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rank_order_cut_at_max_genes_is_the_encoding_for_short_long_and_tied_cells() {
        let mut state = 99u64;
        let mut next = move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            state >> 33
        };
        let mut scratch = RankScratch::default();
        for n in [0usize, 1, 5, 191, 192, 700, 2047, 2048, 2049, 5000] {
            for max_genes in [1usize, 3, 2048] {
                // Few distinct values, so that ties (broken by token) are common.
                // Shuffled by a key drawn once per token (a key drawn per comparison is not a
                // total order, which the standard sort detects and panics on).
                let mut keyed: Vec<(u64, u32)> = (0..n as u32).map(|t| (next(), t * 7 + 2)).collect();
                keyed.sort_unstable();
                let tokens: Vec<u32> = keyed.into_iter().map(|(_, t)| t).collect();
                let genes: Vec<(u32, f64)> = tokens.iter().map(|&t| (t, (1 + next() % 9) as f64 * 0.37)).collect();
                let layout = SequenceLayout { max_genes, cls: Some(0), eos: Some(1) };
                let (mut encoded, mut order) = (Vec::new(), Vec::new());
                rank_value_encode(&genes, &layout, &mut scratch, &mut encoded);
                rank_order(&genes, &mut scratch, &mut order);
                assert_eq!(order.len(), n);
                let mut from_order = vec![0];
                from_order.extend(order.iter().take(max_genes).map(|&i| genes[i as usize].0));
                from_order.push(1);
                assert_eq!(from_order, encoded, "n {n}, max_genes {max_genes}");
                // A total order: value descending, then token ascending.
                for w in order.windows(2) {
                    let (a, b) = (genes[w[0] as usize], genes[w[1] as usize]);
                    assert!(a.1 > b.1 || (a.1 == b.1 && a.0 < b.0));
                }
            }
        }
    }
    use proptest::prelude::*;

    fn encode(genes: &[(u32, f64)], layout: &SequenceLayout) -> Vec<u32> {
        let mut out = Vec::new();
        rank_value_encode(genes, layout, &mut RankScratch::default(), &mut out);
        out
    }

    #[test]
    fn ranks_by_expression_descending() {
        let genes = [(10, 1.0), (11, 5.0), (12, 3.0)];
        assert_eq!(encode(&genes, &SequenceLayout::v1()), vec![11, 12, 10]);
    }

    #[test]
    fn ties_break_by_ascending_token_id() {
        let genes = [(30, 2.0), (7, 2.0), (19, 2.0), (5, 1.0)];
        assert_eq!(encode(&genes, &SequenceLayout::v1()), vec![7, 19, 30, 5]);
    }

    #[test]
    fn truncates_to_max_genes_keeping_the_highest() {
        let layout = SequenceLayout { max_genes: 2, cls: None, eos: None };
        let genes = [(1, 0.5), (2, 9.0), (3, 4.0), (4, 9.0)];
        assert_eq!(encode(&genes, &layout), vec![2, 4]);
    }

    #[test]
    fn v2_wraps_in_cls_and_eos() {
        let layout = SequenceLayout { max_genes: 2, ..SequenceLayout::v2(100, 101) };
        assert_eq!(encode(&[(5, 1.0), (6, 2.0), (7, 3.0)], &layout), vec![100, 7, 6, 101]);
    }

    #[test]
    fn empty_cell_gives_only_specials() {
        assert!(encode(&[], &SequenceLayout::v1()).is_empty());
        assert_eq!(encode(&[], &SequenceLayout::v2(2, 3)), vec![2, 3]);
    }

    #[test]
    fn normalization_follows_geneformer_operation_order() {
        // (3 / 1234) * 10000 / 0.7, evaluated left to right in f64.
        let expected = 3.0_f64 / 1234.0 * 10_000.0 / 0.7;
        assert_eq!(normalized_expression(3.0, 1234.0, 0.7).to_bits(), expected.to_bits());
    }

    proptest! {
        #[test]
        fn matches_a_stable_sort_reference(
            values in proptest::collection::vec(1u32..20, 0..300),
            max_genes in 1usize..400,
        ) {
            let genes: Vec<(u32, f64)> =
                values.iter().enumerate().map(|(i, &v)| (i as u32 * 3 + 2, f64::from(v) / 7.0)).collect();
            let mut reference = genes.clone();
            reference.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap().then(a.0.cmp(&b.0)));
            let expected: Vec<u32> = reference.iter().take(max_genes).map(|g| g.0).collect();
            let layout = SequenceLayout { max_genes, cls: None, eos: None };
            prop_assert_eq!(encode(&genes, &layout), expected);
        }

        #[test]
        fn long_cells_radix_sorted_match_the_reference(
            genes in proptest::collection::vec((1u32..40, 0u32..3000, 0u64..4, any::<bool>()), 150..1200),
            spread in 0i32..40,
            max_genes in 100usize..1500,
        ) {
            // Geneformer-like values (count / total · 10⁴ / median) over a range of `spread`
            // binades, with exact ties (shared medians) and values a few ulps apart.
            let total = genes.iter().map(|g| f64::from(g.0)).sum::<f64>();
            let mut cell: Vec<(u32, f64)> = genes
                .iter()
                .enumerate()
                .map(|(i, &(count, m, ulps, wide))| {
                    let median = 0.1 + f64::from(m % 97) * if wide { 2f64.powi(spread) } else { 0.37 };
                    let x = normalized_expression(f64::from(count), total, median);
                    (i as u32 * 7 + 3, f64::from_bits(x.to_bits() + ulps))
                })
                .collect();
            cell.reverse();
            let mut reference = cell.clone();
            reference.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap().then(a.0.cmp(&b.0)));
            let expected: Vec<u32> = reference.iter().take(max_genes.min(2048)).map(|g| g.0).collect();
            let layout = SequenceLayout { max_genes: max_genes.min(2048), cls: None, eos: None };
            prop_assert_eq!(encode(&cell, &layout), expected);
        }

        #[test]
        fn values_equal_in_their_top_bits_are_ordered_exactly(
            cells in proptest::collection::vec((0u32..4, 0u64..40_000, any::<u16>()), 0..300),
            max_genes in 1usize..400,
        ) {
            // Values a few ulps apart (same top 48 bits, different low bits), exact ties, and
            // token ids unrelated to the input order.
            let mut seen = std::collections::HashSet::new();
            let genes: Vec<(u32, f64)> = cells
                .iter()
                .filter(|c| seen.insert(c.2))
                .map(|&(base, ulps, token)| (u32::from(token), f64::from_bits((1.0 + f64::from(base)).to_bits() + ulps)))
                .collect();
            let mut reference = genes.clone();
            reference.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap().then(a.0.cmp(&b.0)));
            let expected: Vec<u32> = reference.iter().take(max_genes).map(|g| g.0).collect();
            let layout = SequenceLayout { max_genes, cls: None, eos: None };
            prop_assert_eq!(encode(&genes, &layout), expected);
        }
    }
}
