//! Score pairs on the cells where two genes are both present, from per-gene postings: what
//! ρ_local (Spearman on the co-present cells) is computed from, in memory or per chunk of a
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
pub struct Overlaps<'a> {
    /// Distinguishes lookups, so a thread's cached array is never reused across builds.
    id: u64,
    postings: &'a [Vec<(u32, u16)>],
    n_cells: usize,
}

impl<'a> Overlaps<'a> {
    pub fn new(postings: &'a [Vec<(u32, u16)>], n_cells: usize) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Self { id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed), postings, n_cells }
    }

    pub fn with<R>(&self, u: usize, v: usize, f: impl FnOnce(&[(u16, u16)]) -> R) -> R {
        DENSE.with(|cell| {
            let (cached, dense, overlap) = &mut *cell.borrow_mut();
            if cached.0 != self.id || dense.len() != self.n_cells {
                *dense = vec![u16::MAX; self.n_cells];
                *cached = (self.id, usize::MAX);
            }
            if cached.1 != u {
                if let Some(old) = self.postings.get(cached.1) {
                    old.iter().for_each(|&(c, _)| dense[c as usize] = u16::MAX);
                }
                self.postings[u].iter().for_each(|&(c, s)| dense[c as usize] = s);
                cached.1 = u;
            }
            overlap_scores(dense, &self.postings[v], overlap);
            f(overlap)
        })
    }
}
