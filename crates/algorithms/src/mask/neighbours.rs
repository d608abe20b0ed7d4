//! The dependency graph as the masking step reads it: neighbour lists by token id.

/// Most genes a graph may have: local ids and the outside slot (below) are u16, so the token →
/// local id table of a 25,000-token vocabulary is 50 KB.
pub const MAX_GRAPH_GENES: usize = u16::MAX as usize;

/// Neighbour lists of every token (compressed rows): O(1) to find a gene's neighbours, as
/// Appendix A.3 of the paper asks for. Graph genes also get dense *local* ids `0..genes`, with
/// neighbour lists in local ids, so that masking a cell touches only small, cache-resident
/// arrays whatever the vocabulary size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NeighbourTable {
    /// Token id → local id, or the *outside slot* `genes()` for tokens not in the graph; one
    /// entry past the largest graph token.
    local_of: Vec<u16>,
    /// Local id → token id, ascending.
    tokens: Vec<u32>,
    offsets: Vec<u32>,
    /// Neighbours as token ids (ascending per gene) and as local ids (same order).
    neighbours: Vec<u32>,
    local_neighbours: Vec<u32>,
    /// Adjacency bit matrix over local ids (`words` u64 per row), for graphs of at most
    /// `DENSE_MAX` genes: intersecting a gene's neighbours with a cell's genes is then a few
    /// word ANDs instead of a walk over its neighbour list.
    adjacency: Vec<u64>,
    words: usize,
}

/// Largest graph that gets an adjacency bit matrix (4,096² bits = 2 MiB).
const DENSE_MAX: usize = 4096;

impl Default for NeighbourTable {
    /// The empty graph.
    fn default() -> Self {
        Self::from_edges([])
    }
}

impl NeighbourTable {
    /// From undirected edges `(u, v)` (either order; duplicates and self-loops ignored).
    ///
    /// # Panics
    /// With more than [`MAX_GRAPH_GENES`] genes (graph builds are limited by `graph.max_genes`).
    pub fn from_edges(edges: impl IntoIterator<Item = (u32, u32)>) -> Self {
        let mut directed: Vec<(u32, u32)> =
            edges.into_iter().filter(|(u, v)| u != v).flat_map(|(u, v)| [(u, v), (v, u)]).collect();
        directed.sort_unstable();
        directed.dedup();
        let mut tokens: Vec<u32> = directed.iter().map(|e| e.0).collect();
        tokens.dedup();
        let bound = tokens.last().map_or(0, |&t| t as usize + 1);
        assert!(
            tokens.len() <= MAX_GRAPH_GENES,
            "graph has {} genes, at most {MAX_GRAPH_GENES} supported",
            tokens.len()
        );
        // One extra outside entry that every larger token is clamped onto.
        let mut local_of = vec![tokens.len() as u16; bound + 1];
        for (l, &t) in tokens.iter().enumerate() {
            local_of[t as usize] = l as u16;
        }
        let mut offsets = vec![0u32; tokens.len() + 1];
        for &(u, _) in &directed {
            offsets[usize::from(local_of[u as usize]) + 1] += 1;
        }
        for i in 0..tokens.len() {
            offsets[i + 1] += offsets[i];
        }
        let neighbours: Vec<u32> = directed.iter().map(|e| e.1).collect();
        let local_neighbours: Vec<u32> = neighbours.iter().map(|&v| u32::from(local_of[v as usize])).collect();
        let g = tokens.len();
        let (words, adjacency) = if g <= DENSE_MAX {
            let words = g.div_ceil(64);
            let mut adjacency = vec![0u64; g * words];
            for l in 0..g {
                for &v in &local_neighbours[offsets[l] as usize..offsets[l + 1] as usize] {
                    adjacency[l * words + v as usize / 64] |= 1 << (v % 64);
                }
            }
            (words, adjacency)
        } else {
            (g.div_ceil(64), Vec::new())
        };
        Self { local_of, tokens, offsets, neighbours, local_neighbours, adjacency, words }
    }

    /// Local id of `token`, if it has neighbours.
    #[inline]
    pub fn local(&self, token: u32) -> Option<u32> {
        Some(self.slot(token)).filter(|&l| l < self.genes()).map(|l| l as u32)
    }

    /// Local id of `token`, or the outside slot `genes()`: per-cell tables of `genes() + 1`
    /// entries can then be written for every token of a cell without a branch.
    #[inline]
    pub(crate) fn slot(&self, token: u32) -> usize {
        // Clamped onto the table's last entry (outside) instead of bounds-checked: whether a
        // cell's token lies beyond the graph's largest is a coin flip for the branch predictor.
        usize::from(self.local_of[(token as usize).min(self.local_of.len() - 1)])
    }

    /// Neighbours of `token` as token ids, ascending (empty outside the graph).
    #[inline]
    pub fn neighbours(&self, token: u32) -> &[u32] {
        match self.local(token) {
            Some(l) => &self.neighbours[self.range(l)],
            None => &[],
        }
    }

    /// Neighbours of local id `l`, as local ids.
    #[inline]
    pub fn local_neighbours(&self, l: u32) -> &[u32] {
        &self.local_neighbours[self.range(l)]
    }

    /// Neighbours of local id `l` as a bit row over local ids, if the graph is small enough.
    #[inline]
    pub fn adjacency_row(&self, l: u32) -> Option<&[u64]> {
        let w = self.words;
        (!self.adjacency.is_empty()).then(|| &self.adjacency[l as usize * w..(l as usize + 1) * w])
    }

    /// Words of a bit set over local ids.
    pub fn words(&self) -> usize {
        self.words
    }

    #[inline]
    fn range(&self, l: u32) -> std::ops::Range<usize> {
        self.offsets[l as usize] as usize..self.offsets[l as usize + 1] as usize
    }

    #[inline]
    pub fn degree(&self, token: u32) -> usize {
        self.neighbours(token).len()
    }

    /// Undirected edge count.
    pub fn edges(&self) -> usize {
        self.neighbours.len() / 2
    }

    /// Genes with at least one neighbour (the local ids are `0..genes()`).
    pub fn genes(&self) -> usize {
        self.tokens.len()
    }

    /// One past the largest token id with neighbours.
    pub fn token_bound(&self) -> usize {
        self.local_of.len() - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_become_symmetric_neighbour_lists() {
        let t = NeighbourTable::from_edges([(5, 2), (2, 9), (2, 5), (7, 7)]);
        assert_eq!(t.neighbours(2), &[5, 9]);
        assert_eq!(t.neighbours(5), &[2]);
        assert_eq!(t.neighbours(9), &[2]);
        assert!(t.neighbours(7).is_empty(), "self-loops are dropped");
        assert!(t.neighbours(1000).is_empty());
        assert_eq!((t.edges(), t.genes(), t.token_bound()), (2, 3, 10));
        let l2 = t.local(2).unwrap();
        let back: Vec<u32> = t.local_neighbours(l2).iter().map(|&l| t.tokens[l as usize]).collect();
        assert_eq!(back, vec![5, 9]);
        assert_eq!(t.local(7), None);
    }

    #[test]
    fn tokens_beyond_the_largest_graph_token_are_outside_the_graph() {
        let t = NeighbourTable::from_edges([(3, 64), (64, 100)]);
        assert_eq!((t.local(3), t.local(64), t.local(100)), (Some(0), Some(1), Some(2)));
        for token in [0, 99, 101, 5_000, u32::MAX] {
            assert_eq!(t.local(token), None, "token {token}");
        }
        let empty = NeighbourTable::default();
        assert_eq!((empty.local(0), empty.local(u32::MAX), empty.genes(), empty.token_bound()), (None, None, 0, 0));
    }
}
