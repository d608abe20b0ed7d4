//! The metrics of `eval cells`, as plain functions over plain slices, named and defined as
//! scikit-learn, scanpy and scib-metrics define them (each module says which function it
//! follows; `python/tests/test_eval_cells.py` checks them against those packages).

pub mod connectivity;
pub mod distances;
pub mod leiden;
pub mod lisi;
pub mod partition;
pub mod products;
pub mod silhouette;
pub mod umap_graph;

pub use connectivity::graph_connectivity;
pub use distances::{distance_pass, DistanceSums, Groups, Neighbours};
pub use leiden::leiden;
pub use lisi::{clisi, ilisi};
pub use partition::{adjusted_rand_index, normalized_mutual_info};
pub use products::Points;
pub use silhouette::{silhouette_batch, silhouette_label, silhouette_score};
pub use umap_graph::{umap_connectivities, WeightedGraph};

/// The median (the mean of the two middle values for an even count; 0 for none).
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}
