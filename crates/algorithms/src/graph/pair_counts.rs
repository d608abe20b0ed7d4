//! Exact counts over all gene pairs: co-presence (from per-gene bitsets of cells, one AND +
//! popcount per 64 cells and pair) and adjacency in the token sequence.

use super::scores::ScoredCell;

/// Exact co-presence counts of all gene pairs (row-major `G × G`), from per-gene bitsets of
/// the cells where each gene is present: one AND + popcount per 64 cells and pair.
pub fn co_presence(cells: &[ScoredCell], n_genes: usize) -> Vec<i64> {
    let mut co = vec![0i64; n_genes * n_genes];
    add_co_presence(cells, n_genes, 1, &mut co);
    co
}

/// Adds `sign` times the co-presence counts of `cells` to `co`, which is symmetric before and
/// after: the upper triangle is counted in place, a row per task, then mirrored, so no `G × G`
/// temporary is made for each block of cells.
pub fn add_co_presence(cells: &[ScoredCell], n_genes: usize, sign: i64, co: &mut [i64]) {
    use rayon::prelude::*;
    let g = n_genes;
    assert_eq!(co.len(), g * g, "co-presence of another vocabulary");
    let words = cells.len().div_ceil(64);
    let mut bits = vec![0u64; g * words];
    for (i, c) in cells.iter().enumerate() {
        for &u in &c.genes {
            bits[u as usize * words + i / 64] |= 1 << (i % 64);
        }
    }
    co.par_chunks_mut(g.max(1)).enumerate().for_each(|(u, row)| {
        let a = &bits[u * words..(u + 1) * words];
        for (v, x) in row.iter_mut().enumerate().skip(u) {
            *x += sign * and_popcount(a, &bits[v * words..(v + 1) * words]) as i64;
        }
    });
    super::products::mirror_upper(co, g);
}

/// Adjacency counts of all gene pairs (row-major `G × G`, symmetric, zero diagonal): how many
/// cells hold the two genes at consecutive positions of their token sequence. Positions are
/// those the scores encode (`s = L_max − pos`), so two genes are adjacent when their scores
/// differ by exactly 1; a position held by a gene outside the graph vocabulary breaks adjacency.
/// The "adjacency-based recovery" of the CorrMask paper (Appendix B.1), the counterpart of
/// [`co_presence`], which counts every pair in a cell regardless of position.
pub fn adjacency_counts(cells: &[ScoredCell], n_genes: usize) -> Vec<i64> {
    let g = n_genes;
    let mut adj = vec![0i64; g * g];
    let mut order: Vec<(u16, u32)> = Vec::new();
    for c in cells {
        order.clear();
        order.extend(c.scores.iter().zip(&c.genes).map(|(&s, &u)| (s, u)));
        order.sort_unstable();
        for w in order.windows(2) {
            let ((s0, u), (s1, v)) = (w[0], w[1]);
            if s1 == s0 + 1 && u != v {
                let (u, v) = (u as usize, v as usize);
                adj[u * g + v] += 1;
                adj[v * g + u] += 1;
            }
        }
    }
    adj
}

pub(crate) fn and_popcount(a: &[u64], b: &[u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512vpopcntdq") && std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports both features, checked just above.
            return unsafe { and_popcount_avx512(a, b) };
        }
        if std::arch::is_x86_feature_detected!("popcnt") {
            // SAFETY: the CPU supports popcnt, checked just above.
            return unsafe { and_popcount_popcnt(a, b) };
        }
    }
    a.iter().zip(b).map(|(x, y)| u64::from((x & y).count_ones())).sum()
}

/// 8 words per instruction with AVX-512 VPOPCNTDQ.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vpopcntdq,popcnt")]
unsafe fn and_popcount_avx512(a: &[u64], b: &[u64]) -> u64 {
    use std::arch::x86_64::{
        _mm512_add_epi64, _mm512_and_si512, _mm512_loadu_si512, _mm512_popcnt_epi64, _mm512_reduce_add_epi64,
        _mm512_setzero_si512,
    };
    let n = a.len().min(b.len());
    let mut acc = _mm512_setzero_si512();
    let mut i = 0;
    while i + 8 <= n {
        let x = _mm512_loadu_si512(a.as_ptr().add(i).cast());
        let y = _mm512_loadu_si512(b.as_ptr().add(i).cast());
        acc = _mm512_add_epi64(acc, _mm512_popcnt_epi64(_mm512_and_si512(x, y)));
        i += 8;
    }
    let mut total = _mm512_reduce_add_epi64(acc) as u64;
    while i < n {
        total += u64::from((a[i] & b[i]).count_ones());
        i += 1;
    }
    total
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
unsafe fn and_popcount_popcnt(a: &[u64], b: &[u64]) -> u64 {
    a.iter().zip(b).map(|(x, y)| u64::from((x & y).count_ones())).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(genes: &[u32], scores: &[u16]) -> ScoredCell {
        ScoredCell { genes: genes.to_vec(), scores: scores.to_vec() }
    }

    #[test]
    fn adjacency_counts_consecutive_positions_only() {
        // Cell 1: sequence (by descending score) 2, 0, 3 → pairs {2,0}, {0,3}.
        // Cell 2: 1 at score 5, 3 at score 3 (a gap: position 4 held by a non-vocabulary gene),
        // 0 at score 2 → only {3,0}.
        let cells = [cell(&[0, 2, 3], &[8, 9, 7]), cell(&[0, 1, 3], &[2, 5, 3])];
        let a = adjacency_counts(&cells, 4);
        let at = |u: usize, v: usize| a[u * 4 + v];
        assert_eq!(at(0, 2), 1);
        assert_eq!(at(0, 3), 2);
        assert_eq!(at(1, 3), 0, "a gap breaks adjacency");
        assert_eq!(at(1, 0), 0);
        for u in 0..4 {
            assert_eq!(at(u, u), 0);
            for v in 0..4 {
                assert_eq!(at(u, v), at(v, u));
            }
        }
        // Each cell of k consecutive genes contributes k − 1 pairs (twice, symmetric).
        assert_eq!(a.iter().sum::<i64>(), 2 * 3);
        // Co-presence counts every pair in a cell, adjacency is a subset of it.
        let co = co_presence(&cells, 4);
        assert!((0..16).filter(|i| i % 5 != 0).all(|i| a[i] <= co[i]));
    }
}
