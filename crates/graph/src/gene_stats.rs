//! The statistics the incremental state keeps for a set of genes, and the graph they imply.

use corrflow_algorithms::graph::{
    candidate_pairs, global_correlations, remap_rows, GraphEdge, GraphParams, GraphVocab, PairSums, RankMaps,
    ScoreHistograms,
};

use super::changes::{candidates, Candidate};

/// Score histograms (current cells), rank maps (frozen) and exact pair sums under the maps, for
/// the genes of `vocab` (indexed in its order).
#[derive(Clone, Debug)]
pub struct GeneStats {
    pub vocab: GraphVocab,
    pub hist: ScoreHistograms,
    pub maps: RankMaps,
    pub sums: PairSums,
}

impl GeneStats {
    /// The statistics rearranged to the genes `tokens`: a gene these statistics lack gets zero
    /// histograms, maps and sums (to be filled by the caller), a gene not in `tokens` is dropped.
    pub fn remap(&self, tokens: Vec<u32>) -> Self {
        let vocab = GraphVocab::from_tokens(tokens, 0);
        let from: Vec<Option<usize>> = vocab.tokens().iter().map(|&t| self.vocab.index(t)).collect();
        let l = self.hist.l_max;
        let g = from.len();
        Self {
            hist: ScoreHistograms { n_genes: g, counts: remap_rows(&self.hist.counts, l, &from), ..self.hist.clone() },
            maps: RankMaps { n_genes: g, t2: remap_rows(&self.maps.t2, l, &from), ..self.maps.clone() },
            sums: self.sums.remap(&from),
            vocab,
        }
    }

    /// ρ_global of all pairs under the maps (row-major `G × G`).
    pub fn correlations(&self) -> Vec<f64> {
        global_correlations(&self.hist, &self.maps, &self.sums)
    }

    /// Each gene's strongest partners (the records the differential dataflow selects from).
    pub fn candidates(&self, rho: &[f64], p: &GraphParams) -> Vec<Candidate> {
        candidates(rho, &self.sums.co, self.vocab.tokens(), p.rho_min, p.n_neigh)
    }

    /// Algorithm 1's selection on `rho`, weighted by ρ_local estimated on the co-present cells
    /// under the maps.
    pub fn edges(&self, rho: &[f64], p: &GraphParams) -> Vec<GraphEdge> {
        let g = self.vocab.len();
        candidate_pairs(rho, &self.sums.co, g, p)
            .into_iter()
            .filter_map(|(u, v)| {
                let local = self.sums.local_correlation(u, v);
                (!local.is_nan()).then(|| GraphEdge {
                    u: self.vocab.token(u),
                    v: self.vocab.token(v),
                    rho: local,
                    rho_global: rho[u * g + v],
                    co_count: self.sums.co[u * g + v] as u64,
                })
            })
            .collect()
    }

    /// Per gene, the Kolmogorov–Smirnov distance between its current score distribution and
    /// the one its map was made from (recovered from the map: `t2(s) = 2·less(s) + eq(s) + 1`,
    /// and the cells it counted are `less` after the last score).
    pub fn ks_distances(&self) -> Vec<f64> {
        let (g, l) = (self.hist.n_genes, self.hist.l_max);
        let n_now = self.hist.n_cells.max(1) as f64;
        (0..g)
            .map(|u| {
                let hist = self.hist.gene(u);
                let t2 = &self.maps.t2[u * l..(u + 1) * l];
                let mut then_le = Vec::with_capacity(l);
                let mut less = 0i64;
                for &t in t2 {
                    less += t - 1 - 2 * less;
                    then_le.push(less);
                }
                let n_then = less.max(1) as f64;
                let absent = self.hist.n_cells - hist.iter().sum::<i64>();
                let mut now_le = 0i64;
                let mut worst = 0f64;
                for s in 0..l {
                    now_le += hist[s] + if s == 0 { absent } else { 0 };
                    worst = worst.max((now_le as f64 / n_now - then_le[s] as f64 / n_then).abs());
                }
                worst
            })
            .collect()
    }
}
