//! NPMI of adjacent token pairs (the PMI-masking baseline, paper Appendix A.2).
//!
//! Pairs are unordered: rank-value encoding swaps two genes of similar expression from cell to
//! cell, and `(u, v)` and `(v, u)` are the same adjacency. `P(u, v)` = adjacent-pair count over
//! all adjacent pairs; `P(u)` = token count over all tokens.

use rustc_hash::{FxHashMap, FxHashSet};

#[inline]
fn pair_key(a: u32, b: u32) -> u64 {
    let (lo, hi) = if a < b { (a, b) } else { (b, a) };
    (u64::from(lo) << 32) | u64::from(hi)
}

/// Unigram and adjacent-pair counts of a corpus; additive, so shards can be counted apart.
#[derive(Clone, Debug, Default)]
pub struct PmiCounts {
    unigrams: Vec<u64>,
    pairs: FxHashMap<u64, u64>,
    tokens: u64,
    adjacent: u64,
}

impl PmiCounts {
    /// Counts one cell's gene tokens (in sequence order).
    pub fn add_sequence(&mut self, genes: &[u32]) {
        for &t in genes {
            let t = t as usize;
            if t >= self.unigrams.len() {
                self.unigrams.resize(t + 1, 0);
            }
            self.unigrams[t] += 1;
        }
        for w in genes.windows(2) {
            *self.pairs.entry(pair_key(w[0], w[1])).or_default() += 1;
        }
        self.tokens += genes.len() as u64;
        self.adjacent += genes.len().saturating_sub(1) as u64;
    }

    pub fn merge(&mut self, other: &Self) {
        if other.unigrams.len() > self.unigrams.len() {
            self.unigrams.resize(other.unigrams.len(), 0);
        }
        for (a, b) in self.unigrams.iter_mut().zip(&other.unigrams) {
            *a += b;
        }
        for (&k, &c) in &other.pairs {
            *self.pairs.entry(k).or_default() += c;
        }
        self.tokens += other.tokens;
        self.adjacent += other.adjacent;
    }

    /// Distinct adjacent pairs seen.
    pub fn distinct_pairs(&self) -> usize {
        self.pairs.len()
    }

    /// NPMI of the unordered pair, `None` if it was never adjacent.
    pub fn npmi(&self, a: u32, b: u32) -> Option<f64> {
        let c = *self.pairs.get(&pair_key(a, b))?;
        let p_uv = c as f64 / self.adjacent as f64;
        let p = |t: u32| self.unigrams[t as usize] as f64 / self.tokens as f64;
        if p_uv >= 1.0 {
            return Some(1.0);
        }
        Some((p_uv / (p(a) * p(b))).ln() / -p_uv.ln())
    }

    /// The pairs with NPMI ≥ `tau` seen at least `min_count` times.
    pub fn table(&self, tau: f64, min_count: u64) -> PmiTable {
        let linked = self
            .pairs
            .iter()
            .filter(|&(&k, &c)| {
                c >= min_count.max(1) && self.npmi((k >> 32) as u32, k as u32).is_some_and(|n| n >= tau)
            })
            .map(|(&k, _)| k)
            .collect();
        PmiTable { linked }
    }
}

/// Which adjacent pairs belong to the same PMI span.
#[derive(Clone, Debug, Default)]
pub struct PmiTable {
    linked: FxHashSet<u64>,
}

impl PmiTable {
    #[inline]
    pub fn linked(&self, a: u32, b: u32) -> bool {
        self.linked.contains(&pair_key(a, b))
    }

    /// Linked pairs.
    pub fn pairs(&self) -> usize {
        self.linked.len()
    }

    /// Maximal spans `[start, end)` of `genes` whose consecutive tokens are all linked.
    pub fn spans(&self, genes: &[u32], out: &mut Vec<(u32, u32)>) {
        out.clear();
        let mut start = 0;
        for i in 1..=genes.len() {
            if i == genes.len() || !self.linked(genes[i - 1], genes[i]) {
                out.push((start as u32, i as u32));
                start = i;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npmi_is_one_for_pairs_that_only_occur_together_and_negative_for_rare_pairs() {
        let mut c = PmiCounts::default();
        for _ in 0..50 {
            c.add_sequence(&[1, 2, 3, 4]);
            c.add_sequence(&[3, 5, 4, 6]);
        }
        c.add_sequence(&[2, 1, 4, 3]);
        // 1 and 2 always adjacent (either order).
        assert!(c.npmi(1, 2).unwrap() > 0.5);
        assert!(c.npmi(1, 2) == c.npmi(2, 1));
        assert!(c.npmi(1, 4).unwrap() < c.npmi(1, 2).unwrap());
        assert_eq!(c.npmi(1, 6), None);
        let t = c.table(0.5, 5);
        assert!(t.linked(1, 2) && t.linked(2, 1));
        assert!(!t.linked(1, 4), "seen once: below the count floor");
        let mut spans = Vec::new();
        t.spans(&[1, 2, 6, 9], &mut spans);
        assert_eq!(spans, vec![(0, 2), (2, 3), (3, 4)]);
        t.spans(&[], &mut spans);
        assert!(spans.is_empty());
    }

    #[test]
    fn counts_merge_like_one_pass() {
        let (mut a, mut b, mut all) = (PmiCounts::default(), PmiCounts::default(), PmiCounts::default());
        a.add_sequence(&[1, 2, 3]);
        b.add_sequence(&[3, 2, 7]);
        all.add_sequence(&[1, 2, 3]);
        all.add_sequence(&[3, 2, 7]);
        a.merge(&b);
        assert_eq!(a.npmi(2, 3), all.npmi(2, 3));
        assert_eq!(a.distinct_pairs(), all.distinct_pairs());
    }
}
