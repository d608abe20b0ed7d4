//! From token sequences to position scores over the graph vocabulary.

/// Adds 1 to `presence[token]` for each token among the first `l_max` of a cell.
pub fn count_presence(tokens: &[u32], l_max: usize, presence: &mut [u64]) {
    for &t in &tokens[..tokens.len().min(l_max)] {
        if let Some(p) = presence.get_mut(t as usize) {
            *p += 1;
        }
    }
}

/// A cell restricted to the graph vocabulary: gene indices (ascending) and their scores.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScoredCell {
    pub genes: Vec<u32>,
    pub scores: Vec<u16>,
}

/// The genes of the graph, indexed `0..len()` in ascending token order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphVocab {
    tokens: Vec<u32>,
    index_of: Vec<u32>,
}

impl GraphVocab {
    /// Genes present in ≥ `min_presence` cells, then the `max_genes` most present (ties by
    /// ascending token id); `presence` is indexed by token id.
    pub fn select(presence: &[u64], min_presence: u64, max_genes: usize, is_gene: impl Fn(u32) -> bool) -> Self {
        let mut eligible: Vec<(u64, u32)> = presence
            .iter()
            .enumerate()
            .filter(|&(t, &p)| p >= min_presence.max(1) && is_gene(t as u32))
            .map(|(t, &p)| (p, t as u32))
            .collect();
        eligible.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        eligible.truncate(max_genes);
        let mut tokens: Vec<u32> = eligible.into_iter().map(|e| e.1).collect();
        tokens.sort_unstable();
        Self::from_tokens(tokens, presence.len())
    }

    /// A vocabulary of exactly these tokens (sorted ascending), for a token space of `n_tokens`.
    pub fn from_tokens(mut tokens: Vec<u32>, n_tokens: usize) -> Self {
        tokens.sort_unstable();
        tokens.dedup();
        let mut index_of = vec![u32::MAX; n_tokens.max(tokens.last().map_or(0, |&t| t as usize + 1))];
        for (i, &t) in tokens.iter().enumerate() {
            index_of[t as usize] = i as u32;
        }
        Self { tokens, index_of }
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    pub fn token(&self, index: usize) -> u32 {
        self.tokens[index]
    }

    pub fn index(&self, token: u32) -> Option<usize> {
        self.index_of.get(token as usize).filter(|&&i| i != u32::MAX).map(|&i| i as usize)
    }

    /// Scores of a cell's gene tokens (special tokens must be removed by the caller): the gene
    /// at 1-based position `pos ≤ l_max` scores `l_max − pos`; a repeated token keeps its first
    /// position. Genes come out ascending without a sort (a per-thread bit per gene): sorting
    /// each cell's genes took 12% of a streamed graph build (session 67's profile).
    pub fn score(&self, tokens: &[u32], l_max: usize, out: &mut ScoredCell) {
        out.genes.clear();
        out.scores.clear();
        let g = self.tokens.len();
        SEEN.with(|seen| {
            let (score_of, bits) = &mut *seen.borrow_mut();
            let words = g.div_ceil(64);
            if score_of.len() < g {
                score_of.resize(g, u16::MAX);
            }
            if bits.len() < words {
                bits.resize(words, 0);
            }
            for (i, &t) in tokens[..tokens.len().min(l_max)].iter().enumerate() {
                // Scores are below l_max ≤ 65,535 (GraphParams::validate): never u16::MAX.
                if let Some(u) = self.index(t).filter(|&u| score_of[u] == u16::MAX) {
                    score_of[u] = (l_max - (i + 1)) as u16;
                    bits[u / 64] |= 1 << (u % 64);
                }
            }
            for (w, word) in bits[..words].iter_mut().enumerate() {
                let mut left = std::mem::take(word);
                while left != 0 {
                    let u = w * 64 + left.trailing_zeros() as usize;
                    left &= left - 1;
                    out.genes.push(u as u32);
                    out.scores.push(std::mem::replace(&mut score_of[u], u16::MAX));
                }
            }
        });
    }
}

thread_local! {
    /// Per thread, for [`GraphVocab::score`]: each gene's score in the cell being scored
    /// (`u16::MAX`: not seen) and a bit per gene seen; both are cleared as the cell is written.
    static SEEN: std::cell::RefCell<(Vec<u16>, Vec<u64>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_takes_the_most_present_genes_with_token_ties() {
        let presence = [0, 0, 90, 50, 90, 10, 70];
        let v = GraphVocab::select(&presence, 50, 3, |t| t >= 2);
        assert_eq!(v.tokens(), &[2, 4, 6]);
        let v = GraphVocab::select(&presence, 50, 2, |t| t >= 2);
        assert_eq!(v.tokens(), &[2, 4], "ties at 90 keep both; 70 drops");
    }

    #[test]
    fn scores_are_l_max_minus_position() {
        let v = GraphVocab::from_tokens(vec![5, 7, 9], 10);
        let mut c = ScoredCell::default();
        v.score(&[9, 3, 5, 7], 3, &mut c);
        // 9 at pos 1 → 2, 5 at pos 3 → 0 (present with score 0), 7 beyond l_max.
        assert_eq!(c.genes, vec![0, 2]);
        assert_eq!(c.scores, vec![0, 2]);
    }

    #[test]
    fn genes_come_out_ascending_and_a_repeat_keeps_its_first_position() {
        let v = GraphVocab::from_tokens((0..200).collect(), 200);
        let mut c = ScoredCell::default();
        v.score(&[150, 3, 70, 3, 64, 199], 10, &mut c);
        assert_eq!(c.genes, vec![3, 64, 70, 150, 199]);
        assert_eq!(c.scores, vec![8, 5, 7, 9, 4]);
        // Nothing carries over to the next cell, nor to a smaller vocabulary.
        v.score(&[70], 10, &mut c);
        assert_eq!((c.genes.as_slice(), c.scores.as_slice()), (&[70][..], &[9][..]));
        GraphVocab::from_tokens(vec![1], 2).score(&[1, 0], 4, &mut c);
        assert_eq!((c.genes.as_slice(), c.scores.as_slice()), (&[0][..], &[3][..]));
    }

    #[test]
    fn presence_counts_only_the_first_l_max_tokens() {
        let mut p = vec![0u64; 6];
        count_presence(&[1, 2, 3, 4], 2, &mut p);
        assert_eq!(p, vec![0, 1, 1, 0, 0, 0]);
    }
}
