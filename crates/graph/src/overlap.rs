//! Score pairs on the cells where two genes are both present, from per-gene postings: what
//! ρ_local (Spearman on the co-present cells) is computed from, in memory or per block of a
//! streamed build.

use corrflow_algorithms::graph::ScoredCell;

/// Per gene, the (cell, score) pairs where it is present, in cell order.
pub fn postings(cells: &[ScoredCell], g: usize) -> Vec<Vec<(u32, u16)>> {
    let mut p = vec![Vec::new(); g];
    for (i, c) in cells.iter().enumerate() {
        for (&u, &s) in c.genes.iter().zip(&c.scores) {
            p[u as usize].push((i as u32, s));
        }
    }
    p
}

/// Per-gene lists of (cell, score) postings in cell order, as [`Overlaps`] reads them.
pub trait PostingLists: Sync {
    /// Gene `u`'s postings; empty for a gene out of range.
    fn list(&self, u: usize) -> &[(u32, u16)];
}

impl PostingLists for [Vec<(u32, u16)>] {
    fn list(&self, u: usize) -> &[(u32, u16)] {
        self.get(u).map_or(&[], Vec::as_slice)
    }
}

/// A block of cells' postings in one buffer, grouped by gene. A vector per gene, cleared
/// between blocks, keeps for each gene the capacity of its largest block and grows by doubling
/// (session 67's profile: 3.5× the postings a block was sized for); here both buffers are
/// reserved once and fixed at 16 bytes a posting.
#[derive(Debug)]
pub struct PostingBlock {
    /// (cell within the block, gene, score) in the order added, which is cell order.
    added: Vec<(u32, u16, u16)>,
    /// The same postings grouped by gene (a stable counting sort, so still in cell order).
    grouped: Vec<(u32, u16)>,
    /// Gene `u`'s postings are `grouped[starts[u]..starts[u + 1]]`.
    starts: Vec<usize>,
    next: Vec<usize>,
    cells: u32,
}

impl PostingBlock {
    /// A block for `genes` genes (at most 65,535, as `graph.max_genes`) holding `postings`
    /// postings without reallocating.
    pub fn with_capacity(genes: usize, postings: usize) -> Self {
        Self {
            added: Vec::with_capacity(postings),
            grouped: Vec::with_capacity(postings),
            starts: vec![0; genes + 1],
            next: vec![0; genes],
            cells: 0,
        }
    }

    /// Adds gene `u`'s posting in the current cell.
    pub fn push(&mut self, u: u32, score: u16) {
        self.added.push((self.cells, u as u16, score));
    }

    /// Closes the current cell: later postings belong to the next.
    pub fn end_cell(&mut self) {
        self.cells += 1;
    }

    /// Postings added since the last [`PostingBlock::clear`].
    pub fn len(&self) -> usize {
        self.added.len()
    }

    /// Cells closed since the last [`PostingBlock::clear`].
    pub fn cells(&self) -> usize {
        self.cells as usize
    }

    /// Groups the added postings by gene, for [`PostingLists::list`].
    pub fn group(&mut self) {
        self.starts.fill(0);
        for &(_, u, _) in &self.added {
            self.starts[usize::from(u) + 1] += 1;
        }
        for u in 1..self.starts.len() {
            self.starts[u] += self.starts[u - 1];
        }
        let genes = self.next.len();
        self.next.copy_from_slice(&self.starts[..genes]);
        self.grouped.clear();
        self.grouped.resize(self.added.len(), (0, 0));
        for &(cell, u, score) in &self.added {
            let at = &mut self.next[usize::from(u)];
            self.grouped[*at] = (cell, score);
            *at += 1;
        }
    }

    /// Empties the block, keeping its buffers.
    pub fn clear(&mut self) {
        self.added.clear();
        self.grouped.clear();
        self.starts.fill(0);
        self.cells = 0;
    }
}

impl PostingLists for PostingBlock {
    fn list(&self, u: usize) -> &[(u32, u16)] {
        // No `u + 1`: Overlaps asks for usize::MAX (no gene cached yet), which would overflow.
        match self.starts.get(u..).and_then(|s| s.get(..2)) {
            Some(&[a, b]) if b <= self.grouped.len() => &self.grouped[a..b],
            _ => &[],
        }
    }
}

/// (score of u, score of v) for the cells of `b` where u is present (`dense[cell]` ≠ MAX);
/// written without a data-dependent branch.
fn overlap_scores(dense: &[u16], b: &[(u32, u16)], out: &mut Vec<(u16, u16)>) {
    out.clear();
    out.resize(b.len(), (0, 0));
    let mut len = 0;
    for &(cell, s) in b {
        let su = dense[cell as usize];
        out[len] = (su, s);
        len += usize::from(su != u16::MAX);
    }
    out.truncate(len);
}

thread_local! {
    /// Per thread: which (lookup, gene) is scattered in the dense per-cell array, the array,
    /// and an overlap buffer. Callers ask for several partners of one gene in a row.
    static DENSE: std::cell::RefCell<((u64, usize), Vec<u16>, Vec<(u16, u16)>)> =
        const { std::cell::RefCell::new(((0, usize::MAX), Vec::new(), Vec::new())) };
}

/// Score pairs of the cells where two genes are both present, found by scattering the first
/// gene's scores into a dense per-cell array (kept per thread while the first gene repeats) and
/// looking the partner's cells up in it, without branchy list merging.
pub struct Overlaps<'a, P: PostingLists + ?Sized = [Vec<(u32, u16)>]> {
    /// Distinguishes lookups, so a thread's cached array is never reused across builds.
    id: u64,
    postings: &'a P,
    n_cells: usize,
}

impl<'a, P: PostingLists + ?Sized> Overlaps<'a, P> {
    pub fn new(postings: &'a P, n_cells: usize) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Self { id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed), postings, n_cells }
    }

    pub fn with<R>(&self, u: usize, v: usize, f: impl FnOnce(&[(u16, u16)]) -> R) -> R {
        DENSE.with(|cell| {
            let (cached, dense, overlap) = &mut *cell.borrow_mut();
            if cached.0 != self.id || dense.len() != self.n_cells {
                dense.clear();
                dense.resize(self.n_cells, u16::MAX);
                *cached = (self.id, usize::MAX);
            }
            if cached.1 != u {
                self.postings.list(cached.1).iter().for_each(|&(c, _)| dense[c as usize] = u16::MAX);
                self.postings.list(u).iter().for_each(|&(c, s)| dense[c as usize] = s);
                cached.1 = u;
            }
            overlap_scores(dense, self.postings.list(v), overlap);
            f(overlap)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_groups_postings_by_gene_in_cell_order_and_is_reused() {
        let mut block = PostingBlock::with_capacity(3, 8);
        for cell in [&[(2, 5), (0, 1)][..], &[(2, 6)], &[], &[(0, 3), (1, 4), (2, 7)]] {
            cell.iter().for_each(|&(u, s)| block.push(u, s));
            block.end_cell();
        }
        block.group();
        assert_eq!((block.len(), block.cells()), (6, 4));
        assert_eq!(block.list(0), &[(0, 1), (3, 3)]);
        assert_eq!(block.list(1), &[(3, 4)]);
        assert_eq!(block.list(2), &[(0, 5), (1, 6), (3, 7)]);
        assert!(block.list(3).is_empty() && block.list(usize::MAX).is_empty());
        let overlaps = Overlaps::new(&block, block.cells());
        assert_eq!(overlaps.with(0, 2, <[_]>::to_vec), vec![(1, 5), (3, 7)]);
        let capacity = (block.added.capacity(), block.grouped.capacity());
        block.clear();
        assert!(block.list(2).is_empty());
        block.push(1, 9);
        block.end_cell();
        block.group();
        assert_eq!((block.list(1), block.list(2)), (&[(0, 9)][..], &[][..]));
        assert_eq!((block.added.capacity(), block.grouped.capacity()), capacity);
    }
}
