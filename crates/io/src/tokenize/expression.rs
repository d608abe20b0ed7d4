//! The expression kept beside a batch of cells' tokens (the shard's expression columns).

/// Each cell's raw counts in rank order (the genes of its tokens, then `tail`), its genes past
/// the tokens' cut, and its total count.
#[derive(Debug, Default)]
pub struct ExpressionBatch {
    pub count_offsets: Vec<usize>,
    pub counts: Vec<f32>,
    pub tail_offsets: Vec<usize>,
    pub tail: Vec<u32>,
    pub totals: Vec<f64>,
}

impl ExpressionBatch {
    /// An empty batch with room for `cells` cells and `counts` counts, so that filling it does
    /// not grow (and copy) its buffers step by step.
    pub fn with_capacity(cells: usize, counts: usize) -> Self {
        // Two buffers of their own: a clone would keep only the length, not the capacity.
        let offsets = || {
            let mut v = Vec::with_capacity(cells + 1);
            v.push(0);
            v
        };
        ExpressionBatch {
            count_offsets: offsets(),
            counts: Vec::with_capacity(counts),
            tail_offsets: offsets(),
            tail: Vec::new(),
            totals: Vec::with_capacity(cells),
        }
    }

    /// Adds one cell (its counts in rank order, the genes past the cut, its total).
    pub fn push(&mut self, counts: &[f32], tail: &[u32], total: f64) {
        self.counts.extend_from_slice(counts);
        self.count_offsets.push(self.counts.len());
        self.tail.extend_from_slice(tail);
        self.tail_offsets.push(self.tail.len());
        self.totals.push(total);
    }

    /// Adds the cells of `other` after these.
    pub fn append(&mut self, other: ExpressionBatch) {
        let (c, t) = (self.counts.len(), self.tail.len());
        self.counts.extend_from_slice(&other.counts);
        self.count_offsets.extend(other.count_offsets[1..].iter().map(|o| o + c));
        self.tail.extend_from_slice(&other.tail);
        self.tail_offsets.extend(other.tail_offsets[1..].iter().map(|o| o + t));
        self.totals.extend_from_slice(&other.totals);
    }

    /// The cells at `indices` (in that order).
    pub fn select(&self, indices: &[usize]) -> ExpressionBatch {
        let counts = indices.iter().map(|&i| self.count_offsets[i + 1] - self.count_offsets[i]).sum();
        let mut out = ExpressionBatch::with_capacity(indices.len(), counts);
        for &i in indices {
            let counts = &self.counts[self.count_offsets[i]..self.count_offsets[i + 1]];
            let tail = &self.tail[self.tail_offsets[i]..self.tail_offsets[i + 1]];
            out.push(counts, tail, self.totals[i]);
        }
        out
    }
}
