//! The weighted k-NN graph scanpy's `pp.neighbors` builds (method "umap"): umap-learn's
//! `fuzzy_simplicial_set` with `local_connectivity = 1`, `set_op_mix_ratio = 1`. Each cell's
//! neighbour list includes the cell itself first (scanpy's `n_neighbors` counts it).

use super::distances::Neighbours;

const SMOOTH_K_TOLERANCE: f64 = 1e-5;
const MIN_K_DIST_SCALE: f64 = 1e-3;
const N_ITER: usize = 64;

/// A symmetric sparse graph as undirected edges `(i, j, w)` with `i < j`, sorted.
#[derive(Clone, Debug, Default)]
pub struct WeightedGraph {
    pub nodes: usize,
    pub edges: Vec<(u32, u32, f64)>,
}

/// umap-learn's `smooth_knn_dist` for one cell: its `rho` (distance to the nearest other cell)
/// and `sigma` (the bandwidth at which the memberships sum to log2(k)). `dists` includes self
/// (a zero) first.
fn smooth_knn_dist(dists: &[f64], mean_all: f64) -> (f64, f64) {
    let k = dists.len();
    let target = (k as f64).log2();
    let rho = dists.iter().copied().find(|&d| d > 0.0).unwrap_or(0.0);
    let (mut lo, mut hi, mut mid) = (0.0_f64, f64::INFINITY, 1.0_f64);
    for _ in 0..N_ITER {
        let psum: f64 = dists[1..].iter().map(|&d| if d - rho > 0.0 { (-(d - rho) / mid).exp() } else { 1.0 }).sum();
        if (psum - target).abs() < SMOOTH_K_TOLERANCE {
            break;
        }
        if psum > target {
            hi = mid;
            mid = (lo + hi) / 2.0;
        } else {
            lo = mid;
            mid = if hi.is_infinite() { mid * 2.0 } else { (lo + hi) / 2.0 };
        }
    }
    let floor = if rho > 0.0 { dists.iter().sum::<f64>() / k as f64 } else { mean_all } * MIN_K_DIST_SCALE;
    (rho, mid.max(floor))
}

/// The fuzzy union of the cells' membership strengths over `neighbours` (self excluded there;
/// it is put back first, as scanpy passes it): `w = a + aᵀ − a∘aᵀ`.
pub fn umap_connectivities(neighbours: &Neighbours) -> WeightedGraph {
    let n = neighbours.len();
    let with_self: Vec<Vec<f64>> =
        (0..n).map(|i| std::iter::once(0.0).chain(neighbours.of(i).1.iter().copied()).collect()).collect();
    let mean_all = with_self.iter().flatten().sum::<f64>() / (n * (neighbours.k + 1)).max(1) as f64;
    let mut directed: std::collections::BTreeMap<(u32, u32), f64> = std::collections::BTreeMap::new();
    for (i, dists) in with_self.iter().enumerate() {
        let (rho, sigma) = smooth_knn_dist(dists, mean_all);
        let (idx, d) = neighbours.of(i);
        for (&j, &dj) in idx.iter().zip(d) {
            let w = if dj - rho <= 0.0 || sigma == 0.0 { 1.0 } else { (-(dj - rho) / sigma).exp() };
            if w > 0.0 {
                directed.insert((i as u32, j), w);
            }
        }
    }
    let mut edges = Vec::new();
    for (&(i, j), &a) in &directed {
        let b = directed.get(&(j, i)).copied().unwrap_or(0.0);
        if i < j || b == 0.0 {
            let (lo, hi) = (i.min(j), i.max(j));
            edges.push((lo, hi, a + b - a * b));
        }
    }
    edges.sort_by_key(|e| (e.0, e.1));
    WeightedGraph { nodes: n, edges }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memberships_sum_to_log2_k_and_the_graph_is_symmetric() {
        let d = [0.0, 1.0, 1.5, 2.0, 4.0];
        let (rho, sigma) = smooth_knn_dist(&d, 1.0);
        assert_eq!(rho, 1.0);
        let psum: f64 = d[1..].iter().map(|&x| if x - rho > 0.0 { (-(x - rho) / sigma).exp() } else { 1.0 }).sum();
        assert!((psum - 5f64.log2()).abs() < 1e-4, "{psum}");
        // Three cells on a line: 0 — 1 — 2, each with its one nearest neighbour.
        let nb = Neighbours { k: 1, indices: vec![1, 0, 1], distances: vec![1.0, 1.0, 1.0] };
        let g = umap_connectivities(&nb);
        assert_eq!(g.edges.iter().map(|e| (e.0, e.1)).collect::<Vec<_>>(), vec![(0, 1), (1, 2)]);
        assert!(g.edges.iter().all(|e| (e.2 - 1.0).abs() < 1e-12));
    }
}
