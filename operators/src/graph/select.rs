//! Candidate selection of Algorithm 1: per gene, the `N_neigh` partners with the largest
//! |ρ_global| (ties by ascending token id), kept when |ρ_global| ≥ ρ_min and co-present in
//! ≥ `M_min` cells; the union over both directions.

use serde::{Deserialize, Serialize};

use super::params::GraphParams;

/// One undirected edge of the dependency graph (`u < v`, token ids).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphEdge {
    pub u: u32,
    pub v: u32,
    /// ρ_local: Spearman on the cells where both genes are present.
    pub rho: f64,
    pub rho_global: f64,
    pub co_count: u64,
}

/// Unordered candidate pairs `(u, v)`, `u < v` (graph-vocabulary indices, which are in
/// ascending token order), sorted. `rho` and `co` are row-major `G × G`.
pub fn candidate_pairs(rho: &[f64], co: &[i64], n_genes: usize, params: &GraphParams) -> Vec<(usize, usize)> {
    let g = n_genes;
    let mut pairs = Vec::new();
    let mut row: Vec<(f64, usize)> = Vec::with_capacity(g);
    for u in 0..g {
        row.clear();
        row.extend((0..g).filter(|&v| v != u).filter_map(|v| {
            let r = rho[u * g + v];
            (!r.is_nan()).then_some((r.abs(), v))
        }));
        let order = |a: &(f64, usize), b: &(f64, usize)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        if row.len() > params.n_neigh {
            row.select_nth_unstable_by(params.n_neigh - 1, order);
            row.truncate(params.n_neigh);
        }
        for &(abs, v) in &row {
            if abs >= params.rho_min && co[u * g + v] >= params.m_min as i64 {
                pairs.push((u.min(v), u.max(v)));
            }
        }
    }
    pairs.sort_unstable();
    pairs.dedup();
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_n_thresholds_and_symmetric_union() {
        // 4 genes; gene 0's strongest partners are 1 then 2; n_neigh = 1.
        let rho = vec![
            1.0, 0.9, 0.5, 0.1, //
            0.9, 1.0, 0.3, 0.25, //
            0.5, 0.3, 1.0, 0.05, //
            0.1, 0.25, 0.05, 1.0,
        ];
        let co = vec![500; 16];
        let p = GraphParams { n_neigh: 1, rho_min: 0.2, m_min: 200, ..GraphParams::default() };
        // 0→1, 1→0, 2→0 (0.5), 3→1 (0.25): union {(0,1), (0,2), (1,3)}.
        assert_eq!(candidate_pairs(&rho, &co, 4, &p), vec![(0, 1), (0, 2), (1, 3)]);
        let p = GraphParams { n_neigh: 1, rho_min: 0.3, m_min: 200, ..GraphParams::default() };
        assert_eq!(candidate_pairs(&rho, &co, 4, &p), vec![(0, 1), (0, 2)]);
        let mut low = co.clone();
        low[0 * 4 + 2] = 10;
        low[2 * 4 + 0] = 10;
        assert_eq!(
            candidate_pairs(&rho, &low, 4, &GraphParams { n_neigh: 1, rho_min: 0.2, ..GraphParams::default() }),
            vec![(0, 1), (1, 3)]
        );
    }

    #[test]
    fn ties_in_abs_rho_prefer_the_lower_token() {
        let rho = vec![1.0, -0.5, 0.5, -0.5, 1.0, 0.0, 0.5, 0.0, 1.0];
        let co = vec![1000; 9];
        let p = GraphParams { n_neigh: 1, rho_min: 0.2, ..GraphParams::default() };
        // Gene 0: |ρ| ties between 1 and 2 → 1.
        assert!(candidate_pairs(&rho, &co, 3, &p).contains(&(0, 1)));
    }
}
