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

/// [`candidate_pairs`] from approximate correlations `approx` with |ρ̃ − ρ| ≤ `bound`: a pair
/// whose fate depends on where the exact value falls (near its gene's `N_neigh`-th |ρ̃|, or near
/// `ρ_min`) is decided with `exact(u, v)`; all others are decided by ρ̃ with certainty. Returns
/// the same pairs as [`candidate_pairs`] on exact correlations.
pub fn screened_candidate_pairs(
    approx: &[f64],
    bound: f64,
    co: &[i64],
    n_genes: usize,
    params: &GraphParams,
    exact: impl Fn(usize, usize) -> f64 + Sync,
) -> Vec<(usize, usize)> {
    use rayon::prelude::*;
    let g = n_genes;
    let n = params.n_neigh;
    let per_gene: Vec<Vec<(usize, usize)>> = (0..g)
        .into_par_iter()
        .map(|u| {
            let mut row: Vec<(f64, usize)> = (0..g)
                .filter(|&v| v != u)
                .filter_map(|v| {
                    let r = approx[u * g + v];
                    (!r.is_nan()).then_some((r.abs(), v))
                })
                .collect();
            let desc = |a: &(f64, usize), b: &(f64, usize)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
            // The N-th largest |ρ̃| (none when every partner fits).
            let tau = (row.len() > n).then(|| {
                row.select_nth_unstable_by(n - 1, desc);
                row[n - 1].0
            });
            let mut exact_of: Vec<(usize, f64)> = Vec::new();
            let exact_abs = |v: usize, cache: &mut Vec<(usize, f64)>| -> f64 {
                if let Some(&(_, x)) = cache.iter().find(|c| c.0 == v) {
                    return x;
                }
                let x = exact(u, v).abs();
                cache.push((v, x));
                x
            };
            let mut selected: Vec<(f64, usize)> = Vec::new();
            match tau {
                None => selected.extend(row.iter().copied()),
                Some(tau) => {
                    let margin = 2.0 * bound;
                    let mut ambiguous: Vec<(f64, usize)> = Vec::new();
                    for &(a, v) in &row {
                        if a > tau + margin {
                            selected.push((a, v));
                        } else if a >= tau - margin {
                            ambiguous.push((exact_abs(v, &mut exact_of), v));
                        }
                    }
                    ambiguous.sort_by(desc);
                    let room = n.saturating_sub(selected.len());
                    selected.extend(ambiguous.into_iter().take(room));
                }
            }
            selected
                .into_iter()
                .filter(|&(a, v)| {
                    let keep_rho = if a > params.rho_min + bound {
                        true
                    } else if a < params.rho_min - bound {
                        false
                    } else {
                        exact_abs(v, &mut exact_of) >= params.rho_min
                    };
                    keep_rho && co[u * g + v] >= params.m_min as i64
                })
                .map(|(_, v)| (u.min(v), u.max(v)))
                .collect()
        })
        .collect();
    let mut pairs: Vec<(usize, usize)> = per_gene.into_iter().flatten().collect();
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
        let at = |u: usize, v: usize| u * 4 + v;
        low[at(0, 2)] = 10;
        low[at(2, 0)] = 10;
        assert_eq!(
            candidate_pairs(&rho, &low, 4, &GraphParams { n_neigh: 1, rho_min: 0.2, ..GraphParams::default() }),
            vec![(0, 1), (1, 3)]
        );
    }

    #[test]
    fn screening_with_exact_fallback_equals_exact_selection() {
        // Exact correlations of 30 genes, and an approximation off by up to `bound`.
        let g = 30;
        let mut exact = vec![0.0; g * g];
        let mut approx = vec![0.0; g * g];
        let bound = 0.01;
        for u in 0..g {
            for v in 0..g {
                let x = if u == v { 1.0 } else { (((u * 7 + v * 7) % 23) as f64 / 23.0 - 0.4) * 0.9 };
                exact[u * g + v] = x;
                let wobble = (((u * 13 + v * 29) % 11) as f64 / 10.0 - 0.5) * 2.0 * bound;
                approx[u * g + v] = if u == v { 1.0 } else { x + wobble };
            }
        }
        let co = vec![1000; g * g];
        for n_neigh in [1, 3, 5, 40] {
            let p = GraphParams { n_neigh, rho_min: 0.2, ..GraphParams::default() };
            let want = candidate_pairs(&exact, &co, g, &p);
            let got = screened_candidate_pairs(&approx, bound, &co, g, &p, |u, v| exact[u * g + v]);
            assert_eq!(got, want, "n_neigh {n_neigh}");
        }
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
